"""``python -m simulator.controlplane build|up|down|kubeconfig|status|agent``.

The lead's ``gpufabric sim`` commands call the same functions (see ``__init__``); this CLI is what
scripts, ``make`` and a person debugging the control plane use directly.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from simulator.controlplane.build import Versions, build, cached, cert_manager_crds
from simulator.controlplane.cluster import ControlPlaneError, down, kubeconfig_path, status, up


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulator.controlplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or find in the cache) the pinned binaries")
    b.add_argument("--force", action="store_true", help="rebuild even if the cache entry exists")
    b.add_argument("--check", action="store_true", help="only say whether the cache entry exists (exit 1 if not)")
    u = sub.add_parser("up", help="start the control plane in WORKDIR (or reuse the one running there)")
    u.add_argument("--workdir", required=True, type=Path)
    u.add_argument("--nodes-from-spec", metavar="SPEC", help="register one fake Node per host of a spec (name or path)")
    u.add_argument("--nodes-file", type=Path, help="register the Nodes of a YAML/JSON list of node descriptions")
    d = sub.add_parser("down", help="stop every process of the control plane in WORKDIR")
    d.add_argument("--workdir", required=True, type=Path)
    k = sub.add_parser("kubeconfig", help="print the admin kubeconfig path of WORKDIR")
    k.add_argument("--workdir", required=True, type=Path)
    s = sub.add_parser("status", help="print the running control plane of WORKDIR as JSON (exit 1 if none)")
    s.add_argument("--workdir", required=True, type=Path)
    a = sub.add_parser("agent", help="run the node agent in the foreground (up starts it detached)")
    a.add_argument("--workdir", required=True, type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            if args.check:
                hit = cached()
                print(hit.bin_dir if hit else f"not built: {Versions.load().cache_key}")
                return 0 if hit else 1
            binaries = build(force=args.force)
            cert_manager_crds()  # deploy/'s dry run needs them; a few MB, no compile
            print(binaries.bin_dir)
            return 0
        if args.command == "up":
            nodes: list[dict[str, object]] = []
            if args.nodes_from_spec:
                from simulator.controlplane.nodes import nodes_from_spec

                nodes += nodes_from_spec(args.nodes_from_spec)
            if args.nodes_file:
                import yaml

                nodes += list(yaml.safe_load(args.nodes_file.read_text()) or [])
            plane = up(args.workdir, nodes=nodes)
            print(plane.kubeconfig)
            return 0
        if args.command == "down":
            down(args.workdir)
            return 0
        if args.command == "kubeconfig":
            print(kubeconfig_path(args.workdir))
            return 0
        if args.command == "status":
            running = status(args.workdir)
            if running is None:
                print(f"no running control plane in {args.workdir}", file=sys.stderr)
                return 1
            print(json.dumps({**running.to_state(), "pids": running.pids}, indent=2))
            return 0
        if args.command == "agent":
            return _agent(args.workdir)
    except ControlPlaneError as exc:
        print(f"controlplane: {exc}", file=sys.stderr)
        return 1
    return 2


def _agent(workdir: Path) -> int:
    from simulator.controlplane.cluster import _plane_from_state, _read_state
    from simulator.controlplane.nodes import NodeAgent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    workdir = workdir.resolve()
    plane = _plane_from_state(workdir, _read_state(workdir), reused=True)
    # mig-manager's instances, for the dcgm-exporter twin (simulator.dcgm.exposition.load_mig_layouts)
    # 32 workers: at a 10,000-pod burst the agent writes ~100 pod statuses a second beside ~40 Lease
    # renewals; with 8 it fell 40 s behind kube-scheduler (a real site has a kubelet per node)
    agent = NodeAgent(plane.api(pool=48), workers=32, mig_layout_file=workdir / "mig-layouts.json")
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    agent.start()
    logging.info("node agent started against %s", plane.server)
    while not done.wait(60):
        logging.info("node agent: %s", agent.counters)
    agent.shutdown()
    return 0
