"""A simulated week of GPU workloads, rendered the way the Kubernetes API and DCGM would show it.

Why simulated time: a week of snapshots must land in seconds, so every pod has explicit start and
end times and the snapshots a collector would have taken (at start, at a node change, at the end)
are rendered as pod manifests stamped with those times; tests push them through the production
parser and loader. Telemetry is rendered as a Prometheus ``query_range`` matrix for the production
telemetry loader.

The accounting here is the simulator's own (it knows what it planned; it does not parse labels or
resource names), so reconciling the dbt cost fact against it checks the whole chain. Rounding
follows the published per-line rule (``core.finops.money.round_line``).
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from core.finops.money import HOUR, RateCard, find_rate, hour_floor, round_line, split_hours

UNATTRIBUTED = "unattributed"
DENOMINATOR = 7  # MIG policy compute-slices-over-7/v1: a whole GPU is 7 slices
WEEK_START = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday, 00:00 UTC
H100 = "NVIDIA-H100-80GB-HBM3"
B200 = "NVIDIA-B200"
MODEL_NAMES = {H100: "NVIDIA H100 80GB HBM3", B200: "NVIDIA B200"}
LONG_TASK = "t" * 70  # a label value over 63 characters


@dataclass(frozen=True)
class SimNode:
    name: str
    gpu_model: str  # nvidia.com/gpu.product
    gpu_count: int
    mig: bool = False


@dataclass
class SimPod:
    """A planned pod. ``placements`` are (from, node, gpu indices or [(gpu, slices, instance id)])."""

    uid: str
    namespace: str
    name: str
    labels: dict[str, str]
    requests: dict[str, str]
    start: datetime | None
    end: datetime
    slice_units: int  # priced GPU units x 7 (what the simulator knows it asked for)
    dims: tuple[str, str, str, str]  # expected (client, task, agent_type, tier) after defaulting
    root_id: str = UNATTRIBUTED
    placements: list[tuple[datetime, str, list[Any]]] = field(default_factory=list)
    mig_profile: str | None = None
    telemetry: str = "normal"  # normal | none | skewed
    end_event: str = "finished"  # finished (phase Succeeded) | deleted (watch DELETED)
    activity_seed: int = 0

    def node_at(self, t: datetime) -> tuple[str, list[Any]]:
        current = self.placements[0]
        for p in self.placements:
            if p[0] <= t:
                current = p
        return current[1], current[2]

    def activity(self, hour: datetime) -> Fraction:
        """SM activity of this pod in ``hour``: k/16 (exact in binary floating point)."""
        if self.telemetry == "skewed":
            return Fraction(9, 16)
        digest = hashlib.blake2b(f"{self.uid}{hour.isoformat()}{self.activity_seed}".encode(), digest_size=2).digest()
        return Fraction(1 + digest[0] % 15, 16)


_Sample = tuple[SimPod, str, str, int | None, str | None, int, datetime, Fraction]


@dataclass
class Accounting:
    """The simulator's own totals: (basis, client, task, agent_type, tier) → [GPU-hours, list, effective],
    idle per (basis, gpu_model), and capacity per (node, hour)."""

    tenants: dict[tuple[str, str, str, str, str], list[Decimal]]
    idle: dict[tuple[str, str], list[Decimal]]
    capacity_gpu_hours: Decimal
    pod_hours: int
    measured_pod_hours: int


def _uid(seed: int, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufabric-sim-agents:{seed}:{name}"))


def _gpu_uuid(node: str, gpu: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{node}/{gpu}"))


class _Scheduler:
    """First fit of whole GPUs and MIG slices onto nodes, so no GPU is ever double-booked
    (two pods on one GPU would also collide in DCGM's per-GPU series)."""

    def __init__(self, nodes: list[SimNode]) -> None:
        self.nodes = nodes
        self.busy: dict[tuple[str, int], list[tuple[datetime, datetime, int]]] = defaultdict(list)
        self.next_instance: dict[tuple[str, int], int] = defaultdict(lambda: 1)

    def _used(self, key: tuple[str, int], start: datetime, end: datetime) -> int:
        return sum(s for a, b, s in self.busy[key] if a < end and start < b)

    def whole(self, gpus: int, start: datetime, end: datetime, pool: Iterable[str]) -> tuple[str, list[int]]:
        for node in self.nodes:
            if node.name not in pool or node.mig:
                continue
            free = [g for g in range(node.gpu_count) if self._used((node.name, g), start, end) == 0]
            if len(free) >= gpus:
                chosen = free[:gpus]
                for g in chosen:
                    self.busy[(node.name, g)].append((start, end, DENOMINATOR))
                return node.name, chosen
        raise RuntimeError(f"no capacity for {gpus} GPUs {start}..{end} in {sorted(pool)}")

    def mig(self, slices: int, start: datetime, end: datetime) -> tuple[str, list[Any]]:
        for node in self.nodes:
            if not node.mig:
                continue
            for g in range(node.gpu_count):
                if self._used((node.name, g), start, end) + slices <= DENOMINATOR:
                    self.busy[(node.name, g)].append((start, end, slices))
                    instance = self.next_instance[(node.name, g)]
                    self.next_instance[(node.name, g)] += 1
                    return node.name, [(g, slices, instance)]
        raise RuntimeError(f"no MIG capacity for {slices} slices {start}..{end}")


@dataclass
class SimWeek:
    cluster: str
    namespace_suffix: str
    start: datetime
    end: datetime
    nodes: list[SimNode]
    pods: list[SimPod]
    prefix: str = "gpufabric.io"
    seed: int = 7
    scheduler: _Scheduler | None = field(default=None, repr=False)

    # -- what the API would have shown ----------------------------------------------------------

    def node_manifests(self) -> list[dict[str, Any]]:
        out = []
        for n in self.nodes:
            labels = {"kubernetes.io/hostname": n.name, "nvidia.com/gpu.product": n.gpu_model,
                      "nvidia.com/gpu.count": str(n.gpu_count), "nvidia.com/mig.capable": "true"}
            allocatable = {"cpu": "224", "nvidia.com/gpu": "0" if n.mig else str(n.gpu_count)}
            if n.mig:
                labels["nvidia.com/mig.strategy"] = "mixed"
            out.append({"metadata": {"name": n.name, "labels": labels}, "status": {"allocatable": allocatable}})
        return out

    def node_observation_times(self) -> list[datetime]:
        """When the collector saw the nodes: at the start and just before the end of the week."""
        return [self.start, self.end - timedelta(seconds=1)]

    def manifest(self, pod: SimPod, at: datetime, *, finished: bool = False) -> dict[str, Any]:
        node, _ = pod.node_at(at) if pod.placements else (None, [])
        status: dict[str, Any] = {"phase": "Pending"}
        if pod.start is not None and at >= pod.start:
            status = {"phase": "Running", "startTime": _rfc3339(pod.start)}
        if finished:
            status = {"phase": "Succeeded", "startTime": _rfc3339(pod.start) if pod.start else None,
                      "containerStatuses": [{"name": "main", "state": {"terminated": {
                          "exitCode": 0, "finishedAt": _rfc3339(pod.end)}}}]}
        return {
            "metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name, "labels": dict(pod.labels)},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "sim",
                                                        "resources": {"requests": dict(pod.requests),
                                                                      "limits": dict(pod.requests)}}]},
            "status": status,
        }

    def snapshot_events(self, pods: Iterable[SimPod] | None = None) -> list[tuple[str, dict[str, Any], datetime]]:
        """(event, manifest, seen at) as a collector would have recorded them."""
        out: list[tuple[str, dict[str, Any], datetime]] = []
        for pod in self.pods if pods is None else pods:
            if pod.start is None:  # never scheduled: seen pending once
                out.append(("list", self.manifest(pod, pod.end), pod.end))
                continue
            out.append(("list", self.manifest(pod, pod.start), pod.start))
            for when, _, _ in pod.placements[1:]:
                out.append(("list", self.manifest(pod, when), when))
            if pod.end_event == "deleted":
                out.append(("DELETED", self.manifest(pod, pod.end), pod.end))
            else:
                out.append(("list", self.manifest(pod, pod.end, finished=True), pod.end))
        return out

    # -- telemetry ------------------------------------------------------------------------------

    def _samples(self, pods: Iterable[SimPod]) -> Iterable[_Sample]:
        """(pod, node, gpu uuid, instance id, profile, gpu index, ts, activity), two per GPU per pod-hour."""
        for pod in pods:
            if pod.telemetry == "none" or pod.start is None:
                continue
            skew = timedelta(seconds=-120) if pod.telemetry == "skewed" else timedelta(0)
            for hour, _ in split_hours(pod.start, pod.end):
                t0 = max(pod.start, hour)
                node, gpus = pod.node_at(t0)
                value = pod.activity(hour)
                for t in (t0, t0 + timedelta(seconds=1)):
                    for g in gpus:
                        if isinstance(g, tuple):
                            index, _, instance = g
                            yield (pod, node, _gpu_uuid(node, index), instance, pod.mig_profile, index, t + skew,
                                   value)
                        else:
                            yield pod, node, _gpu_uuid(node, g), None, None, g, t + skew, value

    def telemetry_matrix(self, pods: Iterable[SimPod] | None = None) -> list[dict[str, Any]]:
        """A Prometheus ``query_range`` matrix (dcgm-exporter labels) for ``core.telemetry.parse_matrix``."""
        models = {n.name: MODEL_NAMES.get(n.gpu_model, n.gpu_model) for n in self.nodes}
        series: dict[tuple[Any, ...], dict[str, Any]] = {}
        for pod, node, gpu_uuid, instance, profile, index, ts, value in self._samples(self.pods if pods is None
                                                                                       else pods):
            for metric in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"):
                key = (metric, gpu_uuid, instance, pod.namespace, pod.name)
                if key not in series:
                    labels = {"__name__": metric, "gpu": str(index), "UUID": gpu_uuid, "modelName": models[node],
                              "Hostname": node, "namespace": pod.namespace, "pod": pod.name, "container": "main"}
                    if instance is not None:
                        labels["GPU_I_ID"] = str(instance)
                        labels["GPU_I_PROFILE"] = profile or ""
                    series[key] = {"metric": labels, "values": []}
                v = value if metric == "DCGM_FI_PROF_SM_ACTIVE" else value / 2
                series[key]["values"].append([ts.timestamp(), repr(float(v))])
        return list(series.values())

    def pod_hour_activity(self, pods: Iterable[SimPod]) -> dict[tuple[str, str, datetime], Fraction | None]:
        """What the efficiency mart will say per (namespace, pod, hour): the mean SM activity when
        every GPU with samples has at least two in the hour, else None (unmeasured)."""
        counts: dict[tuple[str, str, datetime], dict[tuple[str, int | None], int]] = defaultdict(
            lambda: defaultdict(int))
        sums: dict[tuple[str, str, datetime], list[Fraction]] = defaultdict(list)
        for pod, _, gpu_uuid, instance, _, _, ts, value in self._samples(pods):
            key = (pod.namespace, pod.name, hour_floor(ts))
            counts[key][(gpu_uuid, instance)] += 1
            sums[key].append(value)
        out: dict[tuple[str, str, datetime], Fraction | None] = {}
        for key, per_gpu in counts.items():
            out[key] = sum(sums[key], Fraction(0)) / len(sums[key]) if min(per_gpu.values()) >= 2 else None
        return out

    # -- the simulator's own accounting ---------------------------------------------------------

    def accounting(self, rates: list[RateCard], pods: Iterable[SimPod] | None = None) -> Accounting:
        pods = list(self.pods if pods is None else pods)
        activity = self.pod_hour_activity(pods)
        models = {n.name: n.gpu_model for n in self.nodes}
        counts = {n.name: n.gpu_count for n in self.nodes}
        tenants: dict[tuple[str, str, str, str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
        used: dict[tuple[str, str, datetime], Decimal] = defaultdict(Decimal)
        node_hours: set[tuple[str, datetime]] = set()
        hour = self.start
        while hour < self.end:
            node_hours.update((n.name, hour) for n in self.nodes)
            hour += HOUR
        pod_hours = measured = 0
        for pod in pods:
            if pod.start is None or pod.slice_units == 0:
                continue
            bounds = [p[0] for p in pod.placements[1:]] + [pod.end]
            segments = [(max(pod.start, p[0]), b, p[1]) for p, b in zip(pod.placements, bounds, strict=True)]
            per_hour: dict[tuple[datetime, str], Fraction] = defaultdict(Fraction)
            for seg_start, seg_end, node in segments:
                for h, seconds in split_hours(seg_start, seg_end):
                    per_hour[(h, node)] += seconds
            for (h, node), seconds in per_hour.items():
                pod_hours += 1
                node_hours.add((node, h))
                act = activity.get((pod.namespace, pod.name, h))
                if act is not None:
                    measured += 1
                rate = find_rate(rates, models[node], pod.dims[3], h.date())
                assert rate is not None, (models[node], pod.dims)
                for basis, factor in (("allocation", Fraction(1)),
                                      ("usage", Fraction(1) if act is None else
                                       Fraction(round_line(act, 4)))):
                    exact = seconds * pod.slice_units * factor / (DENOMINATOR * 3600)
                    q = round_line(exact)
                    line = tenants[(basis, *pod.dims)]
                    line[0] += q
                    line[1] += round_line(exact * Fraction(rate.list_usd_per_gpu_hour))
                    line[2] += round_line(exact * Fraction(rate.usd_per_gpu_hour))
                    used[(basis, node, h)] += q
        idle: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 2)
        capacity = Decimal(0)
        for node, h in node_hours:
            capacity += counts[node]
            rate = find_rate(rates, models[node], "*", h.date())
            assert rate is not None
            for basis in ("allocation", "usage"):
                q = counts[node] - used[(basis, node, h)]
                line = idle[(basis, models[node])]
                line[0] += q
                line[1] += round_line(Fraction(q) * Fraction(rate.list_usd_per_gpu_hour))
        return Accounting(dict(tenants), dict(idle), capacity, pod_hours, measured)


def _rfc3339(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _labels(prefix: str, **values: str | int | None) -> dict[str, str]:
    return {f"{prefix}/{k.replace('_', '-')}": str(v) for k, v in values.items() if v is not None}


def simulate_week(cluster: str, *, seed: int = 7, start: datetime = WEEK_START, prefix: str = "gpufabric.io",
                  namespace_suffix: str = "") -> SimWeek:
    """Plan the week. Namespaces get ``namespace_suffix`` so parallel runs never share pod names
    in telemetry (DCGM series carry namespace and pod, not the cluster)."""
    rng = random.Random(seed)
    end = start + timedelta(days=7)
    nodes = [SimNode(f"gpu-a{i:02d}", H100, 8) for i in range(1, 7)]
    nodes += [SimNode("gpu-m01", H100, 8, mig=True), SimNode("gpu-b01", B200, 8)]
    sched = _Scheduler(nodes)
    pods: list[SimPod] = []
    ns = {k: f"{k}{namespace_suffix}" for k in ("training", "agents", "inference", "default", "eval")}

    def add(name: str, namespace: str, labels: dict[str, str], requests: dict[str, str], t0: datetime | None,
            t1: datetime, units: int, dims: tuple[str, str, str, str],
            placements: list[tuple[datetime, str, list[Any]]], **kw: Any) -> SimPod:
        pod = SimPod(_uid(seed, f"{cluster}/{namespace}/{name}"), namespace, name, labels, requests, t0, t1, units,
                     dims, placements=placements, **kw)
        pods.append(pod)
        return pod

    # Training (acme): whole nodes, batch tier, no agent labels (agent type defaults to unattributed).
    for i, (t0, duration_h, task, pool) in enumerate([
        (start + timedelta(hours=2, minutes=7), 148, "pretrain-llm", ("gpu-a01",)),
        (start + timedelta(hours=2, minutes=7), 148, "pretrain-llm", ("gpu-a02",)),
        (start + timedelta(days=1, hours=10, minutes=17), 30, "finetune", ("gpu-a03",)),
    ]):
        t1 = t0 + timedelta(hours=duration_h, minutes=13)
        node, gpus = sched.whole(8, t0, t1, pool)
        add(f"train-{task}-{i}", ns["training"], _labels(prefix, client="acme", task=task, tier="batch"),
            {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi"}, t0, t1, 8 * DENOMINATOR,
            ("acme", task, UNATTRIBUTED, "batch"), [(t0, node, gpus)])

    # Agent trees (globex): office hours on weekdays, a few on weekends; never after 18:00 Sunday.
    agent_pool = ("gpu-a04", "gpu-a05", "gpu-a06", "gpu-b01")
    tree_no = 0
    for day in range(7):
        hours = range(9, 18) if day < 5 else range(10, 17, 3)
        for h in hours:
            for _ in range(2 if day < 5 else 1):
                tree_no += 1
                t0 = start + timedelta(days=day, hours=h, minutes=rng.randrange(0, 50))
                root_name = f"tree{tree_no:03d}-planner"
                root_uid = _uid(seed, f"{cluster}/{ns['agents']}/{root_name}")
                t1 = t0 + timedelta(minutes=rng.randrange(30, 55))
                node, gpus = sched.whole(1, t0, t1, agent_pool)
                common = {"client": "globex", "task": f"support-{tree_no % 4}", "tier": "interactive",
                          "root_id": root_uid}
                add(root_name, ns["agents"], _labels(prefix, **common, depth=0, agent_type="planner"),
                    {"nvidia.com/gpu": "1"}, t0, t1, DENOMINATOR,
                    ("globex", common["task"], "planner", "interactive"), [(t0, node, gpus)], root_id=root_uid,
                    end_event="deleted")
                for c in range(rng.randrange(3, 7)):
                    kind = "coder" if c % 2 == 0 else "browser"
                    c0 = t0 + timedelta(minutes=2 + 3 * c)
                    c1 = c0 + timedelta(minutes=rng.randrange(10, 25))
                    child = f"tree{tree_no:03d}-{kind}-{c}"
                    child_uid = _uid(seed, f"{cluster}/{ns['agents']}/{child}")
                    labels = _labels(prefix, **common, depth=1, parent_id=root_uid, agent_type=kind)
                    if kind == "browser":  # browsers run on a MIG slice and report no DCGM profiling
                        mnode, inst = sched.mig(1, c0, c1)
                        add(child, ns["agents"], labels, {"nvidia.com/mig-1g.10gb": "1"}, c0, c1, 1,
                            ("globex", common["task"], kind, "interactive"), [(c0, mnode, inst)], root_id=root_uid,
                            mig_profile="1g.10gb", telemetry="none", end_event="deleted")
                    else:
                        cnode, cg = sched.whole(1, c0, c1, agent_pool)
                        add(child, ns["agents"], labels, {"nvidia.com/gpu": "1"}, c0, c1, DENOMINATOR,
                            ("globex", common["task"], kind, "interactive"), [(c0, cnode, cg)], root_id=root_uid,
                            end_event="deleted")
                        if c == 0:  # a tool runner under the first coder: depth 2
                            g0, g1 = c0 + timedelta(minutes=1), c0 + timedelta(minutes=9)
                            gnode, gg = sched.whole(1, g0, g1, agent_pool)
                            add(f"{child}-tool", ns["agents"],
                                _labels(prefix, **common, depth=2, parent_id=child_uid, agent_type="tool-runner"),
                                {"nvidia.com/gpu": "1"}, g0, g1, DENOMINATOR,
                                ("globex", common["task"], "tool-runner", "interactive"), [(g0, gnode, gg)],
                                root_id=root_uid)

    # MIG tenants (initech): inference servers on 3g + 2g + 2g slices all week.
    for i, (profile, slices) in enumerate([("3g.40gb", 3), ("2g.20gb", 2), ("2g.20gb", 2)]):
        t0, t1 = start + timedelta(minutes=5 + i), end - timedelta(minutes=30)
        mnode, inst = sched.mig(slices, t0, t1)
        add(f"llm-serve-{i}", ns["inference"],
            _labels(prefix, client="initech", task="inference", tier="standard", agent_type="inference-server"),
            {f"nvidia.com/mig-{profile}": "1"}, t0, t1, slices, ("initech", "inference", "inference-server",
                                                                 "standard"),
            [(t0, mnode, inst)], mig_profile=profile)

    # Bad input, each kept and attributed as far as it can be.
    t0 = start + timedelta(days=2, hours=3)
    node, gpus = sched.whole(2, t0, t0 + timedelta(hours=4), ("gpu-b01",))
    add("no-labels", ns["default"], {}, {"nvidia.com/gpu": "2"}, t0, t0 + timedelta(hours=4), 2 * DENOMINATOR,
        (UNATTRIBUTED,) * 4, [(t0, node, gpus)])
    t0 = start + timedelta(days=3, hours=1, minutes=1)
    node, gpus = sched.whole(1, t0, t0 + timedelta(hours=3), ("gpu-b01",))
    add("long-label", ns["eval"], _labels(prefix, client="umbrella", task=LONG_TASK, tier="batch"),
        {"nvidia.com/gpu": "1"}, t0, t0 + timedelta(hours=3), DENOMINATOR,
        ("umbrella", UNATTRIBUTED, UNATTRIBUTED, "batch"), [(t0, node, gpus)], telemetry="skewed")
    t0 = start + timedelta(days=3, hours=5)
    add("shared-gpu", ns["eval"], _labels(prefix, client="umbrella", task="eval", tier="batch"),
        {"nvidia.com/gpu.shared": "1"}, t0, t0 + timedelta(hours=2), 0,
        ("umbrella", "eval", UNATTRIBUTED, "batch"), [(t0, "gpu-b01", [])], telemetry="none")
    node, gpus = sched.whole(1, t0, t0 + timedelta(hours=2), ("gpu-b01",))
    add("gpu-and-fpga", ns["eval"], _labels(prefix, client="umbrella", task="eval", tier="batch"),
        {"nvidia.com/gpu": "1", "amd.com/gpu": "1"}, t0, t0 + timedelta(hours=2), DENOMINATOR,
        ("umbrella", "eval", UNATTRIBUTED, "batch"), [(t0, node, gpus)])
    # A pod seen on gpu-a05 and then on gpu-a06 two hours later (pods never move: bad input).
    t0 = start + timedelta(days=4, hours=20, minutes=30)
    t_move, t1 = t0 + timedelta(hours=2), t0 + timedelta(hours=5)
    node_a, gpus_a = sched.whole(1, t0, t_move, ("gpu-a05",))
    node_b, gpus_b = sched.whole(1, t_move, t1, ("gpu-a06",))
    add("moved", ns["eval"], _labels(prefix, client="umbrella", task="eval", tier="batch"),
        {"nvidia.com/gpu": "1"}, t0, t1, DENOMINATOR, ("umbrella", "eval", UNATTRIBUTED, "batch"),
        [(t0, node_a, list(gpus_a)), (t_move, node_b, list(gpus_b))])
    # Never scheduled: pending, no node, no start; costs nothing.
    add("pending", ns["eval"], _labels(prefix, client="umbrella", task="eval", tier="batch"),
        {"nvidia.com/gpu": "4"}, None, start + timedelta(days=5), 4 * DENOMINATOR,
        ("umbrella", "eval", UNATTRIBUTED, "batch"), [], telemetry="none")

    return SimWeek(cluster, namespace_suffix, start, end, nodes, pods, prefix, seed, sched)


def runaway_tree(week: SimWeek, *, children: int = 300, hour: int = 167) -> list[SimPod]:
    """A runaway agent tree in one hour: a planner that spawns ``children`` coders, six a minute,
    five minutes each (about 30 GPUs at once). Added to ``week.pods`` and returned."""
    assert week.scheduler is not None
    t0 = week.start + timedelta(hours=hour)
    prefix, ns = week.prefix, f"agents{week.namespace_suffix}"
    root = "runaway-planner"
    root_uid = _uid(week.seed, f"{week.cluster}/{ns}/{root}")
    pool = ("gpu-a03", "gpu-a04", "gpu-a05", "gpu-a06", "gpu-b01")
    common = {"client": "globex", "task": "support-runaway", "tier": "interactive", "root_id": root_uid}
    t_end = t0 + timedelta(minutes=59)
    node, gpus = week.scheduler.whole(1, t0, t_end, pool)
    out = [SimPod(root_uid, ns, root, _labels(prefix, **common, depth=0, agent_type="planner"),
                  {"nvidia.com/gpu": "1"}, t0, t_end, DENOMINATOR, ("globex", "support-runaway", "planner",
                                                                       "interactive"),
                  root_id=root_uid, placements=[(t0, node, gpus)], end_event="deleted")]
    for i in range(children):
        c0 = t0 + timedelta(minutes=i // 6)
        c1 = c0 + timedelta(minutes=5)
        name = f"runaway-coder-{i:03d}"
        cnode, cg = week.scheduler.whole(1, c0, c1, pool)
        out.append(SimPod(_uid(week.seed, f"{week.cluster}/{ns}/{name}"), ns, name,
                          _labels(prefix, **common, depth=1, parent_id=root_uid, agent_type="coder"),
                          {"nvidia.com/gpu": "1"}, c0, c1, DENOMINATOR,
                          ("globex", "support-runaway", "coder", "interactive"), root_id=root_uid,
                          placements=[(c0, cnode, cg)], end_event="deleted"))
    week.pods.extend(out)
    return out
