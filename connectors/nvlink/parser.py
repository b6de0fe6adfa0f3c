"""NVLink domains from the three places a cluster states them.

* GPU Feature Discovery's node label ``nvidia.com/gpu.clique`` = ``<ClusterUUID>.<CliqueID>``
  (multi-node NVLink, e.g. GB200 NVL72: every tray of a rack shares the cluster UUID);
* ``nvidia-smi --query-gpu=fabric.clusterUuid,fabric.cliqueId --format=csv,noheader`` on a node,
  one line per GPU;
* NVIDIA NetQ / NMX ``computeNodes`` JSON: one object per compute tray with ``DomainUUID``.

A node whose GPUs report no fabric (HGX H100/B200 without MNNVL: ``N/A``, an all-zero cluster
UUID, or no clique label) is its own NVLink domain, ``nvl-<node>``, so every node still carries
a domain label. Bad input is quarantined with the reason, never guessed at.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.quality import Parsed, Quarantined

SOURCE = "nvlink"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
NO_FABRIC = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]", "none"})
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class NvlinkDomain:
    node: str
    method: str  # gfd_label | nvidia_smi | nmx | hgx_single_node
    domain: str
    cluster_uuid: str | None = None
    clique_id: str | None = None
    gpus: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def single_node_domain(node: str, *, gpus: int | None = None, why: str) -> NvlinkDomain:
    return NvlinkDomain(node=node, method="hgx_single_node", domain=f"nvl-{node}", gpus=gpus, detail={"why": why})


def _cluster_uuid(text: str) -> str | None:
    """A canonical UUID, None for "no fabric"; ValueError when it is neither."""
    t = text.strip()
    if t.lower() in NO_FABRIC:
        return None
    value = str(uuid.UUID(t))
    return None if value == ZERO_UUID else value


def _clique(text: str) -> str:
    t = text.strip()
    if not t.isdigit():
        raise ValueError(f"clique id {t!r} is not a non-negative integer")
    return str(int(t))


def parse_clique_label(node: str, value: str | None) -> NvlinkDomain:
    """One node's ``nvidia.com/gpu.clique`` value (None = no label) -> its domain; ValueError if bad."""
    if value is None or value.strip().lower() in NO_FABRIC:
        return single_node_domain(node, why=f"no {CLIQUE_LABEL} label (no multi-node NVLink)")
    cluster, sep, clique = value.strip().rpartition(".")
    if not sep:
        raise ValueError(f"{CLIQUE_LABEL}={value!r} is not <ClusterUUID>.<CliqueID>")
    cu = _cluster_uuid(cluster)
    cid = _clique(clique)
    if cu is None:
        return single_node_domain(node, why=f"{CLIQUE_LABEL} names no cluster ({value!r})")
    return NvlinkDomain(node=node, method="gfd_label", domain=f"{cu}.{cid}", cluster_uuid=cu, clique_id=cid)


def from_node_labels(nodes: Mapping[str, Mapping[str, str]], source: str = SOURCE) -> Parsed[NvlinkDomain]:
    """``{node: {label: value}}`` (as read from the Kubernetes API) -> domains."""
    out: Parsed[NvlinkDomain] = Parsed()
    for node, labels in nodes.items():
        try:
            out.records.append(parse_clique_label(node, labels.get(CLIQUE_LABEL)))
        except ValueError as exc:
            out.quarantined.append(
                Quarantined(
                    source=SOURCE, device=source, reason=str(exc), payload=str(labels.get(CLIQUE_LABEL)), location=node
                )
            )
    return out


def parse_kubectl_nodes(text: str, source: str = SOURCE) -> Parsed[NvlinkDomain]:
    """``kubectl get nodes -o json`` output -> domains of the nodes that have GPUs labelled."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        return Parsed(quarantined=[_whole(source, f"not JSON: {exc}", text)])
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return Parsed(quarantined=[_whole(source, "not a Kubernetes NodeList (no items list)", text)])
    labels: dict[str, Mapping[str, str]] = {}
    for item in items:
        meta = item.get("metadata", {}) if isinstance(item, dict) else {}
        name = meta.get("name")
        if isinstance(name, str):
            labels[name] = meta.get("labels") or {}
    return from_node_labels(labels, source)


def parse_nvidia_smi(node: str, text: str, source: str = SOURCE) -> Parsed[NvlinkDomain]:
    """One node's ``nvidia-smi --query-gpu=fabric.clusterUuid,fabric.cliqueId --format=csv,noheader``."""
    out: Parsed[NvlinkDomain] = Parsed()
    pairs: list[tuple[str | None, str | None]] = []
    for i, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        if row[0].strip().lower().startswith("fabric."):
            continue  # a header, when --format=csv was used without noheader
        if len(row) != 2:
            out.quarantined.append(
                Quarantined(SOURCE, f"expected 2 columns, got {len(row)}", ",".join(row), node, f"line {i}")
            )
            continue
        try:
            cu = _cluster_uuid(row[0])
            cid = None if row[1].strip().lower() in NO_FABRIC else _clique(row[1])
        except ValueError as exc:
            out.quarantined.append(Quarantined(SOURCE, str(exc), ",".join(row), node, f"line {i}"))
            continue
        pairs.append((cu, cid))
    if not pairs:
        if not out.quarantined:
            out.quarantined.append(Quarantined(SOURCE, "no GPU lines in nvidia-smi output", text, node))
        return out
    distinct = set(pairs)
    if len(distinct) > 1:
        out.quarantined.append(
            Quarantined(
                SOURCE,
                f"GPUs of {node} disagree on their NVLink fabric: {sorted(map(str, distinct))}",
                text,
                node,
                context={"source": source},
            )
        )
        return out
    cu, cid = pairs[0]
    if cu is None:
        out.records.append(single_node_domain(node, gpus=len(pairs), why="nvidia-smi reports no NVLink fabric"))
    else:
        out.records.append(
            NvlinkDomain(
                node=node,
                method="nvidia_smi",
                domain=f"{cu}.{cid if cid is not None else 0}",
                cluster_uuid=cu,
                clique_id=cid,
                gpus=len(pairs),
            )
        )
    return out


def parse_nmx_compute_nodes(text: str, source: str = SOURCE) -> Parsed[NvlinkDomain]:
    """NetQ NMX ``computeNodes`` JSON -> one domain per compute node (``DomainUUID``)."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        return Parsed(quarantined=[_whole(source, f"not JSON: {exc}", text)])
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        body = body["data"]
    if not isinstance(body, list):
        return Parsed(quarantined=[_whole(source, "expected a JSON list of compute nodes", text)])
    out: Parsed[NvlinkDomain] = Parsed()
    seen: set[str] = set()
    for i, row in enumerate(body):
        where = f"[{i}]"
        payload = json.dumps(row, sort_keys=True, default=str)
        if not isinstance(row, dict):
            out.quarantined.append(Quarantined(SOURCE, "compute node is not an object", payload, source, where))
            continue
        name, domain = row.get("Name"), row.get("DomainUUID")
        if not isinstance(name, str) or not name.strip():
            out.quarantined.append(Quarantined(SOURCE, "compute node without a Name", payload, source, where))
            continue
        try:
            cu = _cluster_uuid(str(domain or ""))
        except ValueError:
            out.quarantined.append(Quarantined(SOURCE, f"DomainUUID {domain!r} is not a UUID", payload, source, where))
            continue
        if name in seen:
            out.quarantined.append(Quarantined(SOURCE, f"compute node {name!r} listed twice", payload, source, where))
            continue
        seen.add(name)
        gpus = row.get("GpuIDList")
        n_gpus = len(gpus) if isinstance(gpus, list) else None
        if cu is None:
            out.records.append(single_node_domain(name, gpus=n_gpus, why="NMX reports no NVLink domain"))
            continue
        out.records.append(
            NvlinkDomain(
                node=name,
                method="nmx",
                domain=cu,
                cluster_uuid=cu,
                gpus=n_gpus,
                detail={k: row[k] for k in ("ID", "Health", "LocationInfo", "GpuIDList", "Description") if k in row},
            )
        )
    return out


def _whole(source: str, reason: str, text: str) -> Quarantined:
    return Quarantined(source=SOURCE, device=source, reason=reason, payload=text)


def domains_by_node(records: Iterable[NvlinkDomain]) -> dict[str, str]:
    return {r.node: r.domain for r in records}
