"""Orphan reaping on the 847-pod crash replay: our reaper against a naive list-and-delete loop.

Both contenders face the same incident (simulator/agents_crash.py: 847 pods, three crashes
orphaning 279 pods with 200 GPU workers, healthy trees renewing their Leases beside them) on the
bench's own real control plane (``simulator.controlplane.up`` in a temporary directory: etcd,
kube-apiserver, kube-scheduler, kube-controller-manager, Kueue and the node agent), emptied before
each run and given fresh namespaces and fake GPU nodes, with the same Lease duration and the same
period:

* ours: ``controllers.reaper.Reaper`` (``core.orphans`` policy: grace after expiry, a per-pass
  delete cap, a blast-radius share, re-verification before each delete, one audit row each);
* peer: the loop a platform team writes first, and the simplest real alternative measurable
  here: every period, list every pod and every Lease through the same API and delete, one
  DELETE after another, each agent pod whose own, parent's or root's Lease has expired or is
  missing. No grace, no cap, no audit. (Kubernetes' ownerReference garbage collection is not a
  peer: ownerReferences cannot span a tree spawned through in-cluster API calls, and it cannot
  see the "hung" crash, where the orchestrator's pod stays Running and only its Lease goes stale.)

One observer measures both the same way: a reflector on agent pods (list, then watch from its
resourceVersion) records when each orphan's deletion arrives; a crash's figure is crash -> its
last orphan gone. Rounds alternate which contender goes first. Each run is also judged: orphans
left and healthy pods lost (the naive loop is expected to be quicker by the grace it skips; a
loss of healthy pods would be its price).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import Spread, ratio_line, rotation
from connectors.kube import ClusterTarget

P = "gpufabric.io"
GPUS_PER_NODE = 8


@dataclass
class Outcome:
    """One contender's run: seconds from each crash to its last orphan's DELETED event."""

    per_crash: dict[str, float] = field(default_factory=dict)
    overall: float = 0.0
    left: int = 0
    healthy_lost: int = 0


class DeletionWatch:
    """When each agent pod went: a reflector (``connectors.kube.watch.ListWatch``) on agent pods;
    a pod that leaves its copy (a DELETED event, or missing from a re-list) is stamped then."""

    def __init__(self, api: Any) -> None:
        from kubernetes import client

        from connectors.kube.watch import ListWatch

        self.gone: dict[str, datetime] = {}
        self._known: set[str] = set()
        core = client.CoreV1Api(api)
        self._watch = ListWatch(partial(core.list_pod_for_all_namespaces, label_selector=f"{P}/agent-id"),
                                name="bench-deletions", on_change=self._changed, transform=_uid_only)  # fmt: skip
        self._watch.start()
        if not self._watch.synced.wait(120):
            raise RuntimeError(f"the deletion watch never listed: {self._watch.stats.last_error}")

    def _changed(self) -> None:
        now = datetime.now(UTC)
        uids = {str(o["metadata"]["uid"]) for o in self._watch.snapshot()}
        for uid in self._known - uids:
            self.gone.setdefault(uid, now)
        self._known = uids

    def stop(self) -> None:
        self._watch.stop(timeout_s=10)


def _uid_only(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    return {"metadata": {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}}


def naive_loop(api: Any, period_s: float, stop: threading.Event, deleted: list[str]) -> None:
    """The peer: list everything, delete every agent pod with an expired or missing Lease above it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from connectors.kube.agents import read_agents
    from core.orphans import lease_name

    core = client.CoreV1Api(api)

    def dead(expiry: dict[tuple[str, str], datetime | None], now: datetime, namespace: str, agent: str | None,
             must_exist: bool) -> bool:  # fmt: skip
        if agent is None:
            return False
        key = (namespace, lease_name(agent))
        if key not in expiry:
            return must_exist
        at = expiry[key]
        return at is None or at < now

    while not stop.wait(period_s):
        pods, leases = read_agents(api)
        now = datetime.now(UTC)
        expiry = {(lease.namespace, lease.name): lease.expires_at() for lease in leases}
        for pod in pods:
            labels, ns = pod.labels, pod.namespace
            if f"{P}/agent-id" not in labels or pod.deleting:
                continue
            if (dead(expiry, now, ns, labels.get(f"{P}/root-id"), True)
                    or dead(expiry, now, ns, labels.get(f"{P}/parent-id"), True)
                    or dead(expiry, now, ns, labels[f"{P}/agent-id"], False)):  # fmt: skip
                try:
                    core.delete_namespaced_pod(pod.name, ns, grace_period_seconds=0, _preload_content=False)
                    deleted.append(pod.uid)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


def run_once(contender: str, args: argparse.Namespace, warehouse: Any, plane: Any) -> Outcome:
    """Empty the plane, build the workload, start the contender, crash three trees, wait, judge."""
    from kubernetes import client

    from connectors.kube import api_client
    from connectors.kube.agents import Orchestrator, Spawn
    from controllers.reaper import Reaper
    from core.orphans import OrphanPolicy
    from simulator.agents.plane import delete_pods_now, gpu_nodes, namespaces, wait_for_no_foreign_pods
    from simulator.agents_crash import AgentSdk, CrashReplay, gpus_requested
    from simulator.controlplane.reset import reset

    reset(plane)
    mine = namespaces(plane, 3, f"bench-{contender}")
    plane.register_nodes(gpu_nodes(f"bench-{contender}", -(-gpus_requested() // GPUS_PER_NODE) + 4))
    # The agents and the contender are separate programs, each with its own client; the agents'
    # keeps a connection for each heartbeat thread and spawner.
    base = api_client(ClusterTarget(kubeconfig=plane.kubeconfig))
    base.close()
    base.configuration.connection_pool_maxsize = 32
    agents = client.ApiClient(base.configuration)
    api = api_client(ClusterTarget(kubeconfig=plane.kubeconfig))
    replay = CrashReplay(agents, AgentSdk(Orchestrator, Spawn), lease_duration_s=args.lease, renew_period_s=1.0,
                         namespaces=dict(zip(("agents-a", "agents-b", "agents-c"), mine, strict=True)))  # fmt: skip
    stop = threading.Event()
    deleted: list[str] = []
    stopper: Callable[[], None]
    watcher: DeletionWatch | None = None
    try:
        workload = replay.build()
        wait_for_no_foreign_pods(plane, mine)  # the last run's namespaces are gone: only this workload
        watcher = DeletionWatch(api)
        if contender == "ours":
            policy = OrphanPolicy(grace_s=args.grace, delete_grace_s=0, max_deletes_per_pass=args.cap,
                                  max_orphan_share=0.6)  # fmt: skip
            reaper = Reaper(api, warehouse, policy, dry_run=False, period_s=args.period,
                            controller=f"bench-{os.getpid()}-{time.time_ns()}")  # fmt: skip
            thread = threading.Thread(target=reaper.run, daemon=True)
            stopper = reaper.stop
        else:
            thread = threading.Thread(target=naive_loop, args=(api, args.period, stop, deleted), daemon=True)
            stopper = stop.set
        thread.start()
        for tree in ("c1", "c2", "c3"):
            replay.crash(tree)
            time.sleep(1.0)
        deadline = time.monotonic() + 300  # a hang guard: a loaded machine is slow, not broken
        while time.monotonic() < deadline and not workload.expected_orphans <= watcher.gone.keys():
            time.sleep(0.2)
        time.sleep(2 * args.period)  # two more passes: whatever else either loop would delete, it does now
        stopper()
        thread.join(timeout=10)
        live = replay.live_uids()
        outcome = Outcome(left=len(live & workload.expected_orphans), healthy_lost=len(workload.healthy - live))
        for crash in workload.crashes:
            times = [watcher.gone[u] for u in crash.orphans if u in watcher.gone]
            if times:
                outcome.per_crash[f"{crash.tree} ({crash.kind})"] = (max(times) - crash.at).total_seconds()
        gone = [watcher.gone[u] for u in workload.expected_orphans if u in watcher.gone]
        if gone:
            outcome.overall = (max(gone) - workload.crashes[0].at).total_seconds()
        return outcome
    finally:
        stop.set()
        if watcher is not None:
            watcher.stop()
        replay.stop()
        api.close()
        agents.close()
        delete_pods_now(plane, mine)  # the next run's reset need not wait for ~570 graceful deletions


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_orphans")
    parser.add_argument("--quick", action="store_true", help="2 rounds (one each way round) instead of 4")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--lease", type=int, default=3)
    parser.add_argument("--grace", type=float, default=2.0)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--cap", type=int, default=150)
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 4)

    from connectors.warehouse import open_warehouse
    from simulator.controlplane import down, up

    warehouse = open_warehouse()
    workdir = Path(tempfile.mkdtemp(prefix="bench-orphans-"))
    plane = up(workdir)
    print(f"847-pod crash replay (279 orphans, 200 GPU workers, 3 crashes) on kube-apiserver "
          f"{plane.kubernetes_version}; lease {args.lease}s, period {args.period}s; ours: grace {args.grace}s, "
          f"cap {args.cap}/pass; {rounds} rounds, order alternating")  # fmt: skip
    results: dict[str, list[Outcome]] = {"ours": [], "peer": []}
    failed = False
    try:
        for k in range(rounds):
            for contender in rotation(["ours", "peer"], k):
                o = run_once(contender, args, warehouse, plane)
                results[contender].append(o)
                crashes = ", ".join(f"{name} {s:.1f}s" for name, s in o.per_crash.items())
                print(f"  round {k + 1} {contender:4s}: first crash -> last orphan gone {o.overall:5.1f}s; "
                      f"per crash: {crashes}; orphans left {o.left}; healthy lost {o.healthy_lost}",
                      flush=True)  # fmt: skip
                failed |= contender == "ours" and (o.left > 0 or o.healthy_lost > 0)
    finally:
        warehouse.dispose()
        down(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    ours, peer = ([o.overall for o in results[c]] for c in ("ours", "peer"))
    print(f"  ours: {Spread.of(ours).fmt('.1f', ' s')}")
    print(f"  peer (naive list-and-delete loop): {Spread.of(peer).fmt('.1f', ' s')}")
    for name in results["ours"][0].per_crash:
        a = [o.per_crash.get(name, float('nan')) for o in results["ours"]]
        b = [o.per_crash.get(name, float('nan')) for o in results["peer"]]
        print(f"  crash {name}: ours {statistics.median(a):.1f}s, peer {statistics.median(b):.1f}s (medians); "
              f"floor: lease + grace {args.lease + args.grace:.1f}s for ours, "
              f"lease {args.lease:.1f}s for the peer")  # fmt: skip
    print(f"  {ratio_line('ours / naive loop, first crash -> last orphan gone', ours, peer)}")
    peer_lost = [o.healthy_lost for o in results["peer"]]
    peer_left = [o.left for o in results["peer"]]
    print(f"  peer correctness: healthy pods lost per round {peer_lost}, orphans left per round {peer_left}")
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
