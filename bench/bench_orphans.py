"""Orphan reaping on the 847-pod crash replay: time from crash to the last orphan deleted.

Starts the Kubernetes twin, builds the incident workload (simulator/agents_crash.py: 847 pods,
three crashes orphaning 279 pods with 200 GPU workers), runs the reaper loop at real speed and
reads the result back from ``agents.reaper_audit``. The peer is the floor the rule itself sets:
a crashed orchestrator's last renewal + Lease duration + grace. The ratio says how much the loop
(period, cap, API round trips) adds on top of the policy's own wait. Also times one ``classify``
of the whole workload, the pure part of every pass.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass
class _Source:
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    api_url: str | None = None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_orphans")
    parser.add_argument("--quick", action="store_true", help="accepted for `make bench --quick`; same size")
    parser.add_argument("--lease", type=int, default=3)
    parser.add_argument("--grace", type=float, default=2.0)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--cap", type=int, default=150)
    args = parser.parse_args(argv)

    from connectors.kube import api_client
    from connectors.kube.agents import read_agents
    from connectors.warehouse import open_warehouse
    from controllers.reaper import Reaper
    from core.orphans import OrphanPolicy, classify
    from simulator.agents_crash import CrashReplay
    from simulator.generator import generate
    from simulator.kube import start
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path

    warehouse = open_warehouse()
    workdir = Path(tempfile.mkdtemp(prefix="bench-orphans-"))
    run = start(generate(load_spec(resolve_spec_path("h100-1su"))), workdir)
    api = api_client(_Source(kubeconfig=Path(run.extra["kubeconfig"])))
    controller = f"bench-{int(time.time())}"
    policy = OrphanPolicy(grace_s=args.grace, delete_grace_s=0, max_deletes_per_pass=args.cap, max_orphan_share=0.6)
    replay = CrashReplay(api, lease_duration_s=args.lease, renew_period_s=1.0)
    try:
        workload = replay.build()
        pods, leases = read_agents(api)
        t = time.perf_counter()
        classify(pods, leases, {}, datetime.now(UTC), policy)
        classify_ms = (time.perf_counter() - t) * 1000
        reaper = Reaper(api, warehouse, policy, dry_run=False, period_s=args.period, controller=controller)
        thread = threading.Thread(target=reaper.run, daemon=True)
        thread.start()
        first_crash = datetime.now(UTC)
        for tree in ("c1", "c2", "c3"):
            replay.crash(tree)
            time.sleep(1.0)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and replay.live_uids() & workload.expected_orphans:
            time.sleep(0.2)
        reaper.stop()
        thread.join(timeout=10)
        left = replay.live_uids() & workload.expected_orphans
        lost = workload.healthy - replay.live_uids()
        with warehouse.connect() as conn:
            rows = conn.execute(
                "SELECT pod_uid, decided_at, eligible_at FROM agents.reaper_audit "
                "WHERE controller = %s AND action = 'deleted'", (controller,)).fetchall()
        last = {uid: decided for uid, decided, _ in rows}
        print(f"workload: {len(workload.pods) + 1} pods created, {len(workload.expected_orphans)} orphaned "
              f"({workload.orphan_gpu_workers} GPU workers) by 3 crashes; lease {args.lease}s, grace {args.grace}s, "
              f"period {args.period}s, cap {args.cap}/pass")
        print(f"classify() of {len(pods)} pods: {classify_ms:.1f} ms")
        worst = 0.0
        for crash in workload.crashes:
            done = max(last[u] for u in crash.orphans if u in last)
            floor = args.lease + args.grace
            took = (done - crash.at).total_seconds()
            worst = max(worst, took)
            print(f"  crash {crash.tree} ({crash.kind}, {len(crash.orphans)} orphans): crash -> last orphan deleted "
                  f"{took:.1f}s; floor (lease + grace) <= {floor:.1f}s; ratio {took / floor:.2f}x")
        overall = (max(last.values()) - first_crash).total_seconds()
        lag = max((d - e).total_seconds() for _, d, e in rows)
        print(f"847-pod replay: first crash -> last orphan deleted {overall:.1f}s; worst crash {worst:.1f}s; "
              f"max eligible -> deleted {lag:.1f}s (bound 60s); orphans left {len(left)}; healthy lost {len(lost)}")
        return 0 if not left and not lost and lag <= 60 else 1
    finally:
        replay.stop()
        api.close()
        os.kill(run.pids[0], signal.SIGTERM)
        warehouse.dispose()


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
