"""Topology admission policy (pure): can a workload's topology request be met at all?

Kueue's TAS would leave such a workload pending for ever; rejecting it at submission, with the
largest domain's capacity in the message, tells the user what to ask for instead. Capacity is
counted in pods: per node ``floor(node GPUs / GPUs per pod)``, summed over a domain's nodes, so
a pod never counts as fitting across two nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
GPU = "nvidia.com/gpu"
MAX_PODSETS = 64


class BadWorkload(ValueError):
    """The object cannot be read as a workload; the message says which field."""


@dataclass(frozen=True)
class Domain:
    value: str
    node_gpus: tuple[int, ...]

    def pods(self, gpus_per_pod: int) -> int:
        if gpus_per_pod <= 0:
            return len(self.node_gpus)
        return sum(g // gpus_per_pod for g in self.node_gpus)


@dataclass
class TopologyIndex:
    """Domains of every level (label key -> domains), from the nodes as the cluster shows them."""

    levels: tuple[str, ...]
    domains: dict[str, list[Domain]] = field(default_factory=dict)
    max_node_gpus: int = 0

    @staticmethod
    def from_nodes(levels: Sequence[str], nodes: Iterable[tuple[Mapping[str, str], int]]) -> TopologyIndex:
        """``nodes``: (labels, allocatable GPUs). A node missing a level is in no domain of it."""
        groups: dict[str, dict[str, list[int]]] = {lv: defaultdict(list) for lv in levels}
        top = 0
        for labels, gpus in nodes:
            top = max(top, gpus)
            for lv in levels:
                if lv in labels:
                    groups[lv][labels[lv]].append(gpus)
        domains = {lv: [Domain(v, tuple(g)) for v, g in sorted(groups[lv].items())] for lv in levels}
        return TopologyIndex(tuple(levels), domains, top)


@dataclass(frozen=True)
class PodSet:
    name: str
    pods: int
    gpus_per_pod: int
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()


def _int(value: Any, where: str, default: int = 1) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadWorkload(f"{where} must be a non-negative integer")
    return value


def _gpus(pod_spec: Any, where: str) -> int:
    if not isinstance(pod_spec, Mapping):
        raise BadWorkload(f"{where} must be an object")

    def per(containers: Any, what: str) -> list[int]:
        if containers is None:
            return []
        if not isinstance(containers, list):
            raise BadWorkload(f"{where}.{what} must be a list")
        out = []
        for i, c in enumerate(containers):
            res = (c or {}).get("resources") or {} if isinstance(c, Mapping) else None
            if not isinstance(res, Mapping):
                raise BadWorkload(f"{where}.{what}[{i}].resources must be an object")
            requests = res.get("requests") or {}
            limits = res.get("limits") or {}
            raw = requests.get(GPU, limits.get(GPU, 0)) if isinstance(requests, Mapping) else 0
            try:
                out.append(int(str(raw)))
            except ValueError:
                raise BadWorkload(f"{where}.{what}[{i}]: {GPU} must be a whole number, got {raw!r}") from None
        return out

    main, init = per(pod_spec.get("containers"), "containers"), per(pod_spec.get("initContainers"), "initContainers")
    return max(sum(main), max(init, default=0))


def _template(obj: Mapping[str, Any], where: str) -> tuple[Mapping[str, str], int]:
    if not isinstance(obj, Mapping):
        raise BadWorkload(f"{where} must be an object")
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {} if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or not all(isinstance(v, str) for v in annotations.values()):
        raise BadWorkload(f"{where}.metadata.annotations must map strings to strings")
    return annotations, _gpus(obj.get("spec") or {}, f"{where}.spec")


def pod_sets(obj: Mapping[str, Any]) -> list[PodSet]:
    """The pod sets of a Pod, batch/v1 Job or JobSet; other kinds have none we check."""
    kind = obj.get("kind")
    spec = obj.get("spec")
    spec = {} if spec is None else spec
    if not isinstance(spec, Mapping):
        raise BadWorkload("spec must be an object")
    if kind == "Pod":
        annotations, gpus = _template(obj, "")
        return [PodSet("main", 1, gpus, annotations)]
    if kind == "Job":
        annotations, gpus = _template(spec.get("template") or {}, "spec.template")
        return [PodSet("main", _int(spec.get("parallelism"), "spec.parallelism"), gpus, annotations)]
    if kind == "JobSet":
        jobs = spec.get("replicatedJobs") or []
        if not isinstance(jobs, list) or len(jobs) > MAX_PODSETS:
            raise BadWorkload(f"spec.replicatedJobs must be a list of at most {MAX_PODSETS}")
        out = []
        for i, rj in enumerate(jobs):
            where = f"spec.replicatedJobs[{i}]"
            if not isinstance(rj, Mapping):
                raise BadWorkload(f"{where} must be an object")
            job = ((rj.get("template") or {}).get("spec") or {}) if isinstance(rj.get("template"), Mapping) else {}
            annotations, gpus = _template(job.get("template") or {}, f"{where}.template.spec.template")
            pods = _int(rj.get("replicas"), f"{where}.replicas") * _int(job.get("parallelism"), f"{where}.parallelism")
            out.append(PodSet(str(rj.get("name") or i), pods, gpus, annotations))
        return out
    return []


def _largest(index: TopologyIndex, level: str, gpp: int) -> tuple[Domain | None, int]:
    best, best_pods = None, -1
    for d in index.domains.get(level, []):
        pods = d.pods(gpp)
        if pods > best_pods:
            best, best_pods = d, pods
    return best, max(best_pods, 0)


def _describe(d: Domain | None, level: str, gpp: int, pods: int) -> str:
    if d is None:
        return f"no node carries {level}"
    unit = f"pods of {gpp} GPUs" if gpp else "pods"
    return (f"the largest {level} domain ({d.value}) has {sum(d.node_gpus)} GPUs on {len(d.node_gpus)} nodes "
            f"and holds {pods} {unit}")  # fmt: skip


def evaluate(obj: Mapping[str, Any], index: TopologyIndex) -> Verdict:
    """Deny a required topology (or slice) no domain can meet; warn on a preferred one, and on a
    multi-node GPU job with no topology annotation at all."""
    sets = pod_sets(obj)
    warnings: list[str] = []
    for ps in sets:
        a = ps.annotations
        label = f"pod set {ps.name}" if len(sets) > 1 else "the workload"
        for key in (REQUIRED, PREFERRED, SLICE_REQUIRED):
            if key in a and a[key] not in index.levels:
                return Verdict(False, f"{key}={a[key]!r} is not a level of the fabric Topology "
                                      f"(levels: {', '.join(index.levels)})")  # fmt: skip
        need = f"{ps.pods} pods x {ps.gpus_per_pod} GPUs"
        if REQUIRED in a:
            best, pods = _largest(index, a[REQUIRED], ps.gpus_per_pod)
            if pods < ps.pods:
                return Verdict(False, f"{label} requires {need} in one {a[REQUIRED]} domain, but "
                                      f"{_describe(best, a[REQUIRED], ps.gpus_per_pod, pods)}")  # fmt: skip
        if SLICE_REQUIRED in a:
            try:
                size = int(a.get(SLICE_SIZE, ""))
            except ValueError:
                return Verdict(False, f"{SLICE_SIZE} must be a whole number when {SLICE_REQUIRED} is set")
            if size <= 0 or ps.pods % size:
                return Verdict(False, f"{SLICE_SIZE}={size} must be positive and divide the {ps.pods} pods of {label}")
            best, pods = _largest(index, a[SLICE_REQUIRED], ps.gpus_per_pod)
            if pods < size:
                return Verdict(False, f"{label} requires slices of {size} pods x {ps.gpus_per_pod} GPUs in one "
                                      f"{a[SLICE_REQUIRED]} domain, but "
                                      f"{_describe(best, a[SLICE_REQUIRED], ps.gpus_per_pod, pods)}")  # fmt: skip
        if PREFERRED in a:
            best, pods = _largest(index, a[PREFERRED], ps.gpus_per_pod)
            if pods < ps.pods:
                why = _describe(best, a[PREFERRED], ps.gpus_per_pod, pods)
                warnings.append(f"{label} prefers {need} in one {a[PREFERRED]} domain, but {why}; it will be spread")
        elif REQUIRED not in a and SLICE_REQUIRED not in a and UNCONSTRAINED not in a:
            total = ps.pods * ps.gpus_per_pod
            if ps.gpus_per_pod and ps.pods > 1 and index.max_node_gpus and total > index.max_node_gpus:
                warnings.append(f"{label} needs {total} GPUs (more than one node) but has no topology annotation; "
                                f"set {REQUIRED} or {PREFERRED} to one of: {', '.join(index.levels)}")  # fmt: skip
    return Verdict(True, "", tuple(warnings))
