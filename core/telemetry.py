"""DCGM telemetry as data: Prometheus exposition text and API results into series and samples.

Why our own parser and not ``prometheus_client.parser``: that parser builds a ``Metric`` and a
``Sample`` object per line and re-parses every label block, about 20k samples/s on this machine.
dcgm-exporter repeats one label block (host, UUID, pod, driver version ...) for every field of a
GPU, and the same blocks again on every scrape, so a parser that parses each block once and keeps
it across scrapes spends its time on the value only. The cache key is the line up to the closing
``}``; a hit costs one dict lookup.

A *series* is one metric of one entity (GPU, MIG instance, NVSwitch ...) with its workload labels,
identified by a 63-bit hash of its canonical identity so that every process (scraper, Prometheus
reader, benchmark) computes the same id without asking the database. Label spellings differ across
dcgm-exporter versions and deployments; the aliases below are data, not branches:

* ``Hostname`` (up to 2026) and ``hostname`` (dcgm-exporter #655);
* ``UUID`` / ``gpu_uuid``, ``modelName`` / ``model_name``, optional ``pci_bus_id``;
* MIG: ``GPU_I_PROFILE`` / ``GPU_I_ID``;
* pod labels: ``pod``/``namespace``/``container`` (current), ``pod_name``/``pod_namespace``/
  ``container_name`` (dcgm-exporter before 2.x), and ``exported_pod`` ... which Prometheus writes when
  the scrape target already had a ``pod`` label (then ``pod`` names the exporter's own pod).

Values: ``NaN`` and ``±Inf`` become NULL, and so do DCGM's *blank* sentinels, which dcgm-exporter
prints as plain numbers (dcgm_structs.h: ``DCGM_INT64_BLANK 0x7ffffffffffffff0`` and the
not-found / not-supported / not-permissioned codes just above it, ``DCGM_INT32_BLANK 0x7ffffff0``
and its three codes, ``DCGM_FP64_BLANK 140737488355328.0`` and above for double fields). The
exporter prints int64 fields with ``%d`` and doubles with ``%f``, so a literal without a decimal
point is an integer field and only the integer sentinels apply to it: a large, legitimate counter
(NVLink bytes, energy in mJ) is never mistaken for the double sentinel.

Device-level fields (clocks, power, temperatures, PCIe, ECC ...) are repeated by dcgm-exporter on
every MIG instance line of a GPU. They are one measurement, so their MIG and pod labels are not part
of the identity: the repeats collapse onto one device series. A repeat with the *same* value is
counted (``mig_repeats``); one with a different value is quarantined with the reason.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.quality import CollectionStatus, Quarantined

SOURCE = "dcgm"

# --- label aliases (first present wins) --------------------------------------------------------

HOSTNAME_LABELS = ("Hostname", "hostname")
UUID_LABELS = ("UUID", "gpu_uuid", "uuid")
GPU_LABELS = ("gpu",)
DEVICE_LABELS = ("device",)
MODEL_LABELS = ("modelName", "model_name")
PCI_LABELS = ("pci_bus_id",)
MIG_PROFILE_LABELS = ("GPU_I_PROFILE",)
MIG_ID_LABELS = ("GPU_I_ID",)
# exported_* first: when present, the plain label is the exporter's own pod (Prometheus renames the
# scraped label when the target carries the same one, unless honor_labels is set).
NAMESPACE_LABELS = ("exported_namespace", "namespace", "pod_namespace")
POD_LABELS = ("exported_pod", "pod", "pod_name")
CONTAINER_LABELS = ("exported_container", "container", "container_name")
# Which workload a GPU serves: Slurm job ids added by HPC job exporters (Princeton's ``jobid``), the
# Kubernetes Job / Kubeflow / JobSet name when dcgm-exporter copies pod labels onto metrics
# (``--kubernetes-enable-pod-labels``, label names sanitised), and our own workload metrics.
JOB_LABELS = (
    "job_name",
    "jobid",
    "batch_kubernetes_io_job_name",
    "training_kubeflow_org_job_name",
    "jobset_sigs_k8s_io_jobset_name",
    "gpufabric_io_root_id",
)

_CANONICAL_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hostname", HOSTNAME_LABELS),
    ("gpu_uuid", UUID_LABELS),
    ("gpu", GPU_LABELS),
    ("device", DEVICE_LABELS),
    ("model_name", MODEL_LABELS),
    ("pci_bus_id", PCI_LABELS),
    ("gpu_instance_profile", MIG_PROFILE_LABELS),
    ("gpu_instance_id", MIG_ID_LABELS),
    ("namespace", NAMESPACE_LABELS),
    ("pod", POD_LABELS),
    ("container", CONTAINER_LABELS),
    ("job", JOB_LABELS),
)
# Labels that describe an entity rather than tell two series apart: a driver upgrade or an exporter
# pod restart must not split a GPU's history. ``job``/``instance`` name the scrape target
# (Prometheus adds them); the same GPU read directly or through Prometheus is one series.
ATTRIBUTE_LABELS = frozenset(
    {
        "device",
        "modelName",
        "model_name",
        "pci_bus_id",
        "GPU_I_PROFILE",
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_PROCESS_NAME",
        "DCGM_FI_DEV_BRAND",
        "DCGM_FI_DEV_SERIAL",
        "DCGM_FI_DEV_VBIOS_VERSION",
        "job",
        "instance",
        "pod_uid",
        "err_msg",
        "endpoint",
        "service",
    }
)
# Labels that mean "which workload": on a device-level field of a MIG GPU they are dropped from
# the identity along with the MIG labels (the clock is not one pod's).
WORKLOAD_LABELS = frozenset(NAMESPACE_LABELS + POD_LABELS + CONTAINER_LABELS + JOB_LABELS)

# dcgm-exporter 1.x metric names (etc/1.x-compatibility-metrics.csv) for the fields the marts use.
# The 1.x ``dcgm_fi_prof_*`` fields are left under their own names: their help text says "in %",
# and we could not confirm whether 1.x scaled them, so we do not mix them with the 0-1 ratios.
METRIC_ALIASES: dict[str, str] = {
    "dcgm_sm_clock": "DCGM_FI_DEV_SM_CLOCK",
    "dcgm_memory_clock": "DCGM_FI_DEV_MEM_CLOCK",
    "dcgm_memory_temp": "DCGM_FI_DEV_MEMORY_TEMP",
    "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "dcgm_pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "dcgm_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",
    "dcgm_mem_copy_utilization": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "dcgm_enc_utilization": "DCGM_FI_DEV_ENC_UTIL",
    "dcgm_dec_utilization": "DCGM_FI_DEV_DEC_UTIL",
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_nvlink_bandwidth_total": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
}

# Fields DCGM measures per MIG instance (GPU_I entity): the profiling activity ratios and the
# instance's framebuffer. PCIe and NVLink traffic are device-level even under DCGM_FI_PROF_.
_PER_INSTANCE_PREFIXES = ("DCGM_FI_PROF_", "DCGM_FI_DEV_FB_")
_DEVICE_LEVEL_PROF = ("DCGM_FI_PROF_PCIE_", "DCGM_FI_PROF_NVLINK_", "DCGM_FI_PROF_C2C_")


def is_device_level(metric: str) -> bool:
    """True for DCGM fields that describe the whole GPU even when they are printed per MIG instance."""
    if not metric.startswith("DCGM_"):
        return False
    if metric.startswith(_DEVICE_LEVEL_PROF):
        return True
    return not metric.startswith(_PER_INSTANCE_PREFIXES)


# --- values ------------------------------------------------------------------------------------

INT64_BLANK = 0x7FFFFFFFFFFFFFF0
INT32_BLANK = 0x7FFFFFF0
FP64_BLANK = 140737488355328.0  # 2**47
_BLANK_CODES = ("blank", "not_found", "not_supported", "not_permissioned")


def blank_code(text: str, value: float) -> str | None:
    """The DCGM sentinel ``text`` encodes ('blank', 'not_supported' ...), or None for a real value.

    Only called for values >= INT32_BLANK, so the common path costs one float comparison.
    """
    literal = text.strip()
    if "." in literal or "e" in literal or "E" in literal:
        return "blank" if value >= FP64_BLANK else None  # DCGM_FP64_IS_BLANK: val >= DCGM_FP64_BLANK
    try:
        number = int(literal.lstrip("+"))
    except ValueError:
        return None
    if number >= INT64_BLANK:  # DCGM_INT64_IS_BLANK
        return _BLANK_CODES[min(number - INT64_BLANK, 3)]
    if INT32_BLANK <= number <= INT32_BLANK + 3:
        return _BLANK_CODES[number - INT32_BLANK]
    return None


def parse_value(text: str) -> tuple[float | None, str | None]:
    """(value, why it is NULL) for one sample value; raises ValueError on text that is no number."""
    value = float(text)
    if value != value:
        return None, "nan"
    if value >= INT32_BLANK:
        if value == math.inf:
            return None, "non_finite"
        if INT32_BLANK + 3 < value < FP64_BLANK:
            return value, None  # between the int32 and the double sentinels: a real value
        if FP64_BLANK <= value < 9.2e18 and "." not in text and "e" not in text and "E" not in text:
            return value, None  # a large integer counter (energy in mJ, NVLink bytes)
        code = blank_code(text, value)
        if code is not None:
            return None, code
    elif value == -math.inf:
        return None, "non_finite"
    return value, None


# --- series ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Series:
    """One time series: a metric of one entity, with its canonical labels and everything else."""

    series_id: int
    metric: str
    hostname: str | None = None
    gpu_uuid: str | None = None
    gpu: int | None = None
    device: str | None = None
    model_name: str | None = None
    pci_bus_id: str | None = None
    gpu_instance_profile: str | None = None
    gpu_instance_id: int | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    job: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # all labels not in a column above


class LabelError(ValueError):
    """A label block or label set that cannot describe a series; the message is the reason."""


def _int_label(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise LabelError(f"label {name}={value!r} is not an integer") from None


@dataclass(frozen=True, slots=True)
class LabelTemplate:
    """A label set normalised once; the series of every metric printed with it are stamped from it.

    ``device`` is the variant for device-level fields on a MIG instance line (MIG and workload
    labels dropped); None when the label set has no MIG labels.
    """

    full: tuple[str, dict[str, Any]]  # (identity tail, Series fields)
    device: tuple[str, dict[str, Any]] | None


def _variant(
    canonical: dict[str, str | None],
    gpu: int | None,
    mig_id: int | None,
    mig_profile: str | None,
    workload: tuple[str | None, ...],
    extras: dict[str, str],
    shadowed: set[str],
) -> tuple[str, dict[str, Any]]:
    namespace, pod, container, job = workload
    identity = [
        canonical["hostname"] or "",
        canonical["gpu_uuid"] or "",
        "" if gpu is None else str(gpu),
        "" if mig_id is None else str(mig_id),
        namespace or "",
        pod or "",
        container or "",
        job or "",
    ]
    identity += [f"{k}={v}" for k, v in sorted(extras.items()) if k not in ATTRIBUTE_LABELS and k not in shadowed]
    fields = {
        "hostname": canonical["hostname"],
        "gpu_uuid": canonical["gpu_uuid"],
        "gpu": gpu,
        "device": canonical["device"],
        "model_name": canonical["model_name"],
        "pci_bus_id": canonical["pci_bus_id"],
        "gpu_instance_profile": mig_profile,
        "gpu_instance_id": mig_id,
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "job": job,
        "labels": extras,
    }
    return "\x1f" + "\x1f".join(identity), fields


def normalise_labels(labels: Mapping[str, str]) -> LabelTemplate:
    """Normalise one label set (any exporter version, direct or through Prometheus).

    Empty label values mean "absent", as in Prometheus. Raises LabelError when a label that must be
    numeric is not.
    """
    present = {k: v for k, v in labels.items() if v != "" and k != "__name__"}
    canonical: dict[str, str | None] = {}
    used: set[str] = set()
    for column, aliases in _CANONICAL_GROUPS:
        canonical[column] = None
        for alias in aliases:
            if alias in present:
                canonical[column] = present[alias]
                break
        used.update(a for a in aliases if a in present)
    gpu = _int_label("gpu", canonical["gpu"])
    mig_id = _int_label("GPU_I_ID", canonical["gpu_instance_id"])
    mig_profile = canonical["gpu_instance_profile"]
    workload = (canonical["namespace"], canonical["pod"], canonical["container"], canonical["job"])
    extras = {k: v for k, v in present.items() if k not in used}
    # A second spelling of a canonical label is kept as an attribute, never as identity: when
    # exported_pod is there, the plain pod/namespace/container name the exporter's own pod.
    shadowed: set[str] = set()
    for _, group in _CANONICAL_GROUPS:
        first = next((a for a in group if a in present), None)
        for alias in group:
            if alias in present and alias != first:
                extras[alias] = present[alias]
                shadowed.add(alias)
    full = _variant(canonical, gpu, mig_id, mig_profile, workload, extras, shadowed)
    device = None
    if mig_id is not None or mig_profile is not None:
        # dcgm-exporter repeats device-level fields on every MIG instance line: one GPU measurement,
        # whose identity is the GPU's, not the instance's nor the pod's on that instance.
        device_extras = {k: v for k, v in extras.items() if k not in WORKLOAD_LABELS}
        device = _variant(canonical, gpu, None, None, (None, None, None, None), device_extras, shadowed)
    return LabelTemplate(full, device)


def series_from(metric: str, template: LabelTemplate) -> Series:
    """The series of ``metric`` printed with a normalised label set."""
    metric = METRIC_ALIASES.get(metric, metric)
    tail, fields = template.device if template.device is not None and is_device_level(metric) else template.full
    digest = hashlib.blake2b((metric + tail).encode(), digest_size=8).digest()
    return Series(int.from_bytes(digest, "big") >> 1, metric, **fields)


def make_series(metric: str, labels: Mapping[str, str]) -> Series:
    """Normalise ``labels`` and stamp the series of ``metric`` (see :func:`normalise_labels`)."""
    return series_from(metric, normalise_labels(labels))


# --- exposition text ---------------------------------------------------------------------------

_METRIC_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_.\-]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|\Z)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE_RE = re.compile(r'\\[\\"n]')


def parse_label_block(block: str) -> dict[str, str]:
    """``a="1",b="x\\"y"`` → dict; raises LabelError naming what is wrong. Tolerates spaces after
    commas (dcgm-exporter's README output has them) and a trailing comma (allowed by the format)."""
    labels: dict[str, str] = {}
    pos, end = 0, len(block)
    while pos < end:
        if block[pos:].strip() == "":
            break
        m = _LABEL_RE.match(block, pos)
        if m is None:
            raise LabelError(f"malformed label block near {block[pos : pos + 40]!r}")
        name, raw = m.group(1), m.group(2)
        if name in labels:
            raise LabelError(f"label {name} given twice")
        labels[name] = _ESCAPE_RE.sub(lambda e: _ESCAPES[e.group(0)], raw) if "\\" in raw else raw
        pos = m.end()
    return labels


def to_ms(when: datetime | int | float) -> int:
    """Milliseconds since the epoch, the resolution of Prometheus timestamps."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return round(when.timestamp() * 1000)
    return int(when)


@dataclass
class ParsedSamples:
    """Samples as three parallel columns (cheap to build and to COPY) plus the series they use."""

    series: dict[int, Series] = field(default_factory=dict)
    series_ids: list[int] = field(default_factory=list)
    ts_ms: list[int] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.series_ids)

    @property
    def status(self) -> CollectionStatus:
        if self.series_ids and self.quarantined:
            return CollectionStatus.PARTIAL
        if self.series_ids:
            return CollectionStatus.OK
        return CollectionStatus.INVALID if self.quarantined else CollectionStatus.NO_DATA

    def extend(self, other: ParsedSamples) -> None:
        """Append another batch (e.g. one scrape) to this one."""
        self.series.update(other.series)
        self.series_ids.extend(other.series_ids)
        self.ts_ms.extend(other.ts_ms)
        self.values.extend(other.values)
        self.quarantined.extend(other.quarantined)
        self.stats.update(other.stats)

    def time_range_ms(self) -> tuple[int, int] | None:
        return (min(self.ts_ms), max(self.ts_ms)) if self.ts_ms else None

    def rows(self) -> Iterable[tuple[int, datetime, float | None]]:
        """(series_id, ts, value) tuples, for tests and small loads."""
        for sid, ms, value in zip(self.series_ids, self.ts_ms, self.values, strict=True):
            yield sid, datetime.fromtimestamp(ms / 1000, UTC), value


class ExpositionParser:
    """Parses Prometheus text exposition (format 0.0.4, as dcgm-exporter serves it).

    Keep one parser per source and reuse it: its caches (series per ``name{labels}`` prefix, label
    dicts per label block) carry over from scrape to scrape, which is where the speed comes from.
    """

    def __init__(self, source: str = SOURCE, *, max_cache: int = 1_000_000) -> None:
        self.source = source
        self._sid_by_prefix: dict[str, int | LabelError] = {}
        self._layouts: dict[str | None, list[tuple[str, int]]] = {}
        self._layout_series: dict[str | None, dict[int, Series]] = {}
        self._max_layouts = 100_000
        self._series_by_id: dict[int, Series] = {}
        self._templates_by_block: dict[str, LabelTemplate | LabelError] = {}
        self._max_cache = max_cache

    def _series_for(self, prefix: str, brace: int) -> Series:
        """Series of ``name{labels}`` (brace = index of '{' or -1); raises LabelError."""
        if brace < 0:
            if "{" in prefix:
                raise LabelError("label block not closed ('{' without '}')")
            name, block = prefix.strip(), ""
        else:
            name, block = prefix[:brace].strip(), prefix[brace + 1 : -1]
        if not _METRIC_RE.match(name):
            raise LabelError(f"invalid metric name {name[:80]!r}")
        template = self._templates_by_block.get(block)
        if template is None:
            try:
                template = normalise_labels(parse_label_block(block))
            except LabelError as err:
                template = err
            if len(self._templates_by_block) < self._max_cache:
                self._templates_by_block[block] = template
        if isinstance(template, LabelError):
            raise template
        return series_from(name, template)

    def parse(
        self, text: str | bytes, scraped_at: datetime | int, *, device: str | None = None
    ) -> ParsedSamples:
        """Parse one exposition. ``scraped_at`` (aware datetime or epoch ms) stamps samples without
        an explicit timestamp. Bad lines are quarantined with their line number and reason."""
        out = ParsedSamples()
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as err:
                out.quarantined.append(
                    Quarantined(self.source, f"exposition is not UTF-8: {err}", text, device=device)
                )
                return out
        default_ts = to_ms(scraped_at)
        fast = self._parse_fast(text, default_ts, device)
        if fast is not None:
            return fast
        return self._parse_careful(text, default_ts, device)

    def _parse_fast(self, text: str, default_ts: int, device: str | None) -> ParsedSamples | None:
        """The common case, a well-formed scrape, without splitting the text into lines.

        An exporter prints the same series in the same order on every scrape, so the parser keeps
        each target's previous *layout* (the ``name{labels}`` prefix and series id of every line)
        and checks each new line against it in place (``str.startswith`` at an offset: a memcmp,
        no copy, no hashing). Only the value is sliced out. A line that differs goes through the
        prefix cache; anything unexpected (a bad line, a timestamp, a series twice) returns None and
        the careful parser starts over. MIG exporters take that path because of their repeated
        device fields.
        """
        layout = self._layouts.get(device)
        cache = self._sid_by_prefix
        resolve = self._resolve
        new_layout: list[tuple[str, int]] = []
        layout_append = new_layout.append
        ids: list[int] = []
        vals: list[float | None] = []
        ids_append, vals_append = ids.append, vals.append
        flags: Counter[str] | None = None
        matched = 0
        expected = len(layout) if layout is not None else 0
        find, startswith = text.find, text.startswith
        pos, end, i = 0, len(text), 0
        while pos < end:
            nl = find("\n", pos)
            if nl < 0:
                nl = end
            if nl == pos or startswith("#", pos):
                pos = nl + 1
                continue
            if i < expected and startswith(layout[i][0], pos, nl):  # type: ignore[index]
                prefix, sid = layout[i]  # type: ignore[index]
                rest = text[pos + len(prefix) : nl]
                matched += 1
            else:
                line = text[pos:nl]
                close = line.rfind("}")
                if close < 0:
                    return None
                prefix, rest = line[: close + 1], line[close + 1 :]
                found = cache.get(prefix)
                if found is None:
                    found = resolve(prefix, True)
                if type(found) is not int:
                    return None
                sid = found
            value: float | None
            try:
                value = float(rest)
            except ValueError:
                return None
            if value != value or value >= INT32_BLANK or value == -math.inf:
                value, why = parse_value(rest)
                if why is not None:
                    flags = flags or Counter()
                    flags[why] += 1
                    flags["null_values"] += 1
            ids_append(sid)
            vals_append(value)
            layout_append((prefix, sid))
            i += 1
            pos = nl + 1
        series_map: dict[int, Series]
        if layout is not None and matched == expected == len(ids):
            series_map = dict(self._layout_series[device])  # same series as last time: no duplicates
        else:
            if len(set(ids)) != len(ids):
                return None
            known = self._series_by_id
            series_map = {sid: known[sid] for sid in ids}
            if len(self._layouts) < self._max_layouts:
                self._layouts[device] = new_layout
                self._layout_series[device] = dict(series_map)
        out = ParsedSamples(series=series_map, series_ids=ids, ts_ms=[default_ts] * len(ids), values=vals)
        if flags:
            out.stats.update(flags)
        out.stats["lines"] += len(ids)
        out.stats["samples"] += len(ids)
        return out

    def _parse_careful(self, text: str, default_ts: int, device: str | None) -> ParsedSamples:
        """Line by line with line numbers: quarantines bad lines, collapses repeats, honours timestamps."""
        out = ParsedSamples()
        cache = self._sid_by_prefix
        known = self._series_by_id
        ids, vals = out.series_ids, out.values
        ids_append, vals_append = ids.append, vals.append
        batch_series = out.series
        seen: dict[int, float | None] = {}  # series id -> value, samples at default_ts
        explicit: list[tuple[int, int, float | None, int, str]] = []  # samples with their own timestamp
        stats = out.stats
        lines = nulls = 0
        for number, line in enumerate(text.split("\n"), 1):
            if not line or line[0] == "#":
                continue
            close = line.rfind("}")
            if close >= 0:
                prefix, rest = line[: close + 1], line[close + 1 :]
            else:
                cut = line.find(" ")
                if cut < 0:
                    if line.strip():
                        self._reject(out, device, number, line, "line has a metric name but no value")
                    continue
                prefix, rest = line[:cut], line[cut:]
            lines += 1
            sid = cache.get(prefix)
            if sid is None:
                sid = self._resolve(prefix, close >= 0)
            if type(sid) is not int:
                self._reject(out, device, number, line, str(sid))
                continue
            value: float | None
            try:
                value = float(rest)  # float() ignores surrounding whitespace
                ts = default_ts
            except ValueError:
                parts = rest.split()
                try:
                    value = float(parts[0])
                    if len(parts) != 2:
                        raise ValueError
                    ts = int(parts[1])
                except (IndexError, ValueError):
                    self._reject(out, device, number, line, f"{rest.strip()[:40]!r} is not 'value [timestamp]'")
                    continue
                rest = parts[0]
            if value != value or value >= INT32_BLANK or value == -math.inf:
                value, why = parse_value(rest)
                if why is not None:
                    stats[why] += 1
                    nulls += 1
            if ts != default_ts:
                explicit.append((sid, ts, value, number, line))
                continue
            if sid in seen:
                self._repeat(out, device, number, line, known[sid], seen[sid], value)
                continue
            seen[sid] = value
            batch_series[sid] = known[sid]
            ids_append(sid)
            vals_append(value)
        out.ts_ms.extend([default_ts] * len(ids))
        if explicit:
            self._add_explicit(out, device, explicit, default_ts, seen)
        stats["lines"] += lines
        stats["samples"] += len(ids)
        stats["null_values"] += nulls
        return out

    def _resolve(self, prefix: str, has_labels: bool) -> int | LabelError:
        """Cache miss: parse ``name{labels}`` once; bad prefixes are cached as their error too."""
        brace = prefix.find("{") if has_labels else -1
        result: int | LabelError
        if has_labels and brace < 0:
            result = LabelError("'}' without '{'")
        else:
            try:
                series = self._series_for(prefix, brace)
                self._series_by_id.setdefault(series.series_id, series)
                result = series.series_id
            except LabelError as err:
                result = err
        if len(self._sid_by_prefix) < self._max_cache:
            self._sid_by_prefix[prefix] = result
        return result

    def _add_explicit(
        self,
        out: ParsedSamples,
        device: str | None,
        samples: list[tuple[int, int, float | None, int, str]],
        default_ts: int,
        seen: dict[int, float | None],
    ) -> None:
        """Samples that carried their own timestamp (rare for dcgm-exporter; federation does it)."""
        seen_at: dict[tuple[int, int], float | None] = {(sid, default_ts): v for sid, v in seen.items()}
        for sid, ts, value, number, line in samples:
            key = (sid, ts)
            if key in seen_at:
                self._repeat(out, device, number, line, self._series_by_id[sid], seen_at[key], value)
                continue
            seen_at[key] = value
            out.series[sid] = self._series_by_id[sid]
            out.series_ids.append(sid)
            out.ts_ms.append(ts)
            out.values.append(value)

    def _reject(self, out: ParsedSamples, device: str | None, number: int, line: str, reason: str) -> None:
        out.quarantined.append(Quarantined(self.source, reason, line, device=device, location=f"line {number}"))
        out.stats["quarantined"] += 1

    def _repeat(
        self,
        out: ParsedSamples,
        device: str | None,
        number: int,
        line: str,
        series: Series,
        first: float | None,
        value: float | None,
    ) -> None:
        """A second sample for a series already seen at this timestamp."""
        same = first == value or (first is None and value is None)
        mig = series.gpu_instance_id is None and ("GPU_I_ID" in line)
        if same:
            out.stats["mig_repeats" if mig else "duplicates"] += 1
            return
        reason = (
            "device-level field repeated on a MIG instance line with a different value"
            if mig
            else "series repeated in one exposition with a different value"
        )
        self._reject(out, device, number, line, f"{reason} (kept {first!r}, got {value!r})")


# --- Prometheus HTTP API results ---------------------------------------------------------------


def parse_matrix(
    result: Iterable[Mapping[str, Any]], *, source: str = SOURCE, device: str | None = None
) -> ParsedSamples:
    """A ``query_range`` ``matrix`` result (``[{metric: {...}, values: [[t, "v"], ...]}]``).

    The same normalisation as scraped text; device-level MIG repeats collapse the same way.
    """
    out = ParsedSamples()
    seen: dict[tuple[int, int], float | None] = {}
    for index, item in enumerate(result):
        labels = dict(item.get("metric") or {})
        name = labels.pop("__name__", None)
        where = f"result[{index}]"
        if not name:
            out.quarantined.append(Quarantined(source, "series without __name__", repr(item)[:2000], device, where))
            out.stats["quarantined"] += 1
            continue
        try:
            series = make_series(name, labels)
        except LabelError as err:
            out.quarantined.append(Quarantined(source, str(err), repr(labels), device, where))
            out.stats["quarantined"] += 1
            continue
        sid = series.series_id
        for pair in item.get("values") or ():
            try:
                t, text = pair
                ts = round(float(t) * 1000)
                value, why = parse_value(str(text))
            except (TypeError, ValueError):
                out.quarantined.append(Quarantined(source, "sample is not [time, value]", repr(pair), device, where))
                out.stats["quarantined"] += 1
                continue
            if why is not None:
                out.stats[why] += 1
                out.stats["null_values"] += 1
            key = (sid, ts)
            if key in seen:
                first = seen[key]
                if first == value or (first is None and value is None):
                    out.stats["mig_repeats" if "GPU_I_ID" in labels else "duplicates"] += 1
                else:
                    out.quarantined.append(
                        Quarantined(
                            source,
                            f"series repeated at one timestamp with a different value (kept {first!r}, got {value!r})",
                            repr({"metric": name, **labels, "value": text}),
                            device,
                            where,
                        )
                    )
                    out.stats["quarantined"] += 1
                continue
            seen[key] = value
            out.series.setdefault(sid, series)
            out.series_ids.append(sid)
            out.ts_ms.append(ts)
            out.values.append(value)
    out.stats["samples"] += len(out.series_ids)
    return out
