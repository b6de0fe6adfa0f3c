"""``python -m simulator.kube serve --workdir DIR``: the twin's server process (started by ``start``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.kube.twin import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator.kube")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="serve the Kubernetes API twin for a workdir prepared by start()")
    run.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    serve(args.workdir)


if __name__ == "__main__":
    main()
