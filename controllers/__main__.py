"""``python -m controllers reaper`` (the orphan reaper loop, dry-run unless ``--no-dry-run``) and
``python -m controllers topology-webhook`` (the Kueue topology admission webhook)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class _Source:
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    api_url: str | None = None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["topology-webhook"]:
        # The webhook has its own flags (cert, key, port); hand the rest of the line to it.
        from controllers.topology_webhook import main as webhook_main

        return webhook_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m controllers", epilog="also: python -m controllers topology-webhook --help"
    )
    sub = parser.add_subparsers(dest="controller", required=True)
    reaper = sub.add_parser("reaper", help="delete pods orphaned by crashed agent orchestrators")
    reaper.add_argument("--kubeconfig", type=Path)
    reaper.add_argument("--in-cluster", action="store_true")
    reaper.add_argument("--no-dry-run", action="store_true", help="actually delete (default: audit only)")
    reaper.add_argument("--period", type=float, default=5.0)
    reaper.add_argument("--grace", type=float, default=30.0)
    reaper.add_argument("--cap", type=int, default=200)
    reaper.add_argument("--prefix", default="gpufabric.io")
    reaper.add_argument("--namespace")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from connectors.kube import api_client
    from connectors.warehouse import open_warehouse
    from connectors.warehouse.ledger import envelope_root_states
    from controllers.reaper import Reaper
    from core.orphans import OrphanPolicy

    api = api_client(_Source(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster))
    warehouse = open_warehouse()
    loop = Reaper(
        api,
        warehouse,
        OrphanPolicy(prefix=args.prefix, grace_s=args.grace, max_deletes_per_pass=args.cap),
        roots=envelope_root_states(warehouse),  # roots the budget controller stopped
        dry_run=not args.no_dry_run,
        period_s=args.period,
        namespace=args.namespace,
    )
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    signal.signal(signal.SIGINT, lambda *_: loop.stop())
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
