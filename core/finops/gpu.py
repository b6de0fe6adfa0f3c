"""GPU requests of a pod: whole GPUs, MIG instances, and names we cannot price.

Whole GPUs are ``nvidia.com/gpu``. MIG instances under the device plugin's *mixed* strategy are
``nvidia.com/mig-<C>g.<M>gb`` (optionally ``+me``, the media-extension profile): ``C`` is the
number of compute slices of the instance. MIG instances are weighted as a share of a GPU by a
*named, versioned* policy, so a change of policy is visible in every cost line that used it
(``x_MigWeightPolicy``) instead of silently re-pricing history.

Any other resource that looks like an accelerator (``amd.com/gpu``, ``nvidia.com/gpu.shared``,
``nvidia.com/mig-9g.1tb``, ``gpu.intel.com/i915``...) is *unknown*: kept on the snapshot and
counted, never priced by guess. CPU, memory, storage and hugepages are not GPU requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

WHOLE_GPU = "nvidia.com/gpu"
_MIG_RE = re.compile(r"nvidia\.com/mig-(?P<profile>(?P<slices>[1-7])g\.(?P<mem>\d+)gb(?:\+me)?)\Z")
# Resource names that look like an accelerator; anything matching is either recognised above or
# reported as unknown. Vendors' device-plugin domains, plus any name mentioning gpu or mig.
_GPU_LIKE_RE = re.compile(r"(gpu|mig-|^nvidia\.com/|^amd\.com/|^habana\.ai/|^gpu\.intel\.com/)", re.IGNORECASE)
_INTEGER_RE = re.compile(r"\+?\d+\Z")


@dataclass(frozen=True)
class MigWeightPolicy:
    """How much of a GPU a MIG instance counts as. v1: compute slices / 7 (A100/H100/B200 split
    a GPU into 7 compute slices; memory is not charged separately)."""

    name: str
    version: int
    denominator: int  # weights are numerator/denominator with one denominator per policy

    @property
    def label(self) -> str:
        return f"{self.name}/v{self.version}"

    def weight(self, compute_slices: int) -> Fraction:
        if not 1 <= compute_slices <= self.denominator:
            raise ValueError(f"a MIG instance has 1..{self.denominator} compute slices, not {compute_slices}")
        return Fraction(compute_slices, self.denominator)


MIG_POLICY = MigWeightPolicy("compute-slices-over-7", 1, 7)


def mig_compute_slices(profile: str) -> int:
    """``'3g.40gb'`` → 3."""
    m = _MIG_RE.fullmatch(f"nvidia.com/mig-{profile}")
    if m is None:
        raise ValueError(f"not a MIG profile: {profile!r}")
    return int(m.group("slices"))


@dataclass
class GpuRequests:
    """What a pod asked for, per resource name, after the pod-level effective-request rule."""

    gpus: int = 0
    mig: dict[str, int] = field(default_factory=dict)  # profile → count
    raw: dict[str, str] = field(default_factory=dict)  # every GPU-like request as served
    unknown: dict[str, str] = field(default_factory=dict)  # GPU-like names (or values) we cannot price
    issues: list[str] = field(default_factory=list)

    def units(self, policy: MigWeightPolicy = MIG_POLICY) -> Fraction:
        """GPUs held, MIG instances weighted by ``policy``."""
        total = Fraction(self.gpus)
        for profile, count in self.mig.items():
            total += count * policy.weight(mig_compute_slices(profile))
        return total

    def slice_units(self, policy: MigWeightPolicy = MIG_POLICY) -> int:
        """:meth:`units` x the policy's denominator: an exact integer for SQL and sums."""
        units = self.units(policy) * policy.denominator
        assert units.denominator == 1
        return int(units)


def _container_requests(container: Mapping[str, object]) -> dict[str, str]:
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return {}
    requests = dict(resources.get("requests") or {})
    # Extended resources cannot be overcommitted: a limit alone sets the request (Kubernetes
    # defaults requests to limits), so read limits where no request is given.
    for name, value in dict(resources.get("limits") or {}).items():
        requests.setdefault(name, value)
    return {str(k): str(v) for k, v in requests.items()}


def effective_requests(
    containers: Iterable[Mapping[str, object]], init_containers: Iterable[Mapping[str, object]] = ()
) -> dict[str, str]:
    """The pod's effective request per GPU-like resource: max(sum over containers, max over init
    containers), the scheduler's rule. Values that are not integers are returned as served so the
    caller can report them."""
    totals: dict[str, int | str] = {}

    def add(name: str, value: str, combine: str) -> None:
        if not _GPU_LIKE_RE.search(name):
            return
        if not _INTEGER_RE.fullmatch(value.strip()):
            totals[name] = value  # reported, never guessed (e.g. "500m" or "1.5")
            return
        number = int(value.strip())
        previous = totals.get(name, 0)
        if isinstance(previous, str):
            return
        totals[name] = previous + number if combine == "sum" else max(previous, number)

    for c in containers:
        for name, value in _container_requests(c).items():
            add(name, value, "sum")
    init: dict[str, int | str] = {}
    for c in init_containers:
        for name, value in _container_requests(c).items():
            if _GPU_LIKE_RE.search(name):
                v = value.strip()
                if _INTEGER_RE.fullmatch(v):
                    prev = init.get(name, 0)
                    init[name] = max(prev, int(v)) if isinstance(prev, int) else prev
                else:
                    init[name] = value
    for name, init_value in init.items():
        current = totals.get(name, 0)
        if isinstance(init_value, str) or isinstance(current, str):
            totals[name] = init_value if isinstance(init_value, str) else current
        else:
            totals[name] = max(current, init_value)
    return {k: str(v) for k, v in totals.items()}


def parse_gpu_requests(requests: Mapping[str, str]) -> GpuRequests:
    """Classify effective requests into whole GPUs, MIG profiles and unknown names."""
    out = GpuRequests()
    for name, value in sorted(requests.items()):
        if not _GPU_LIKE_RE.search(name):
            continue
        out.raw[name] = value
        if not _INTEGER_RE.fullmatch(value.strip()):
            out.unknown[name] = value
            out.issues.append(f"gpu request {name}={value!r}: not a whole number")
            continue
        count = int(value.strip())
        if name == WHOLE_GPU:
            out.gpus += count
            continue
        m = _MIG_RE.fullmatch(name)
        if m is not None:
            if count:
                out.mig[m.group("profile")] = out.mig.get(m.group("profile"), 0) + count
            continue
        out.unknown[name] = value
        out.issues.append(f"gpu request {name}: unknown resource name")
    return out
