"""``topology/gpu_affinity``: every compute node's GPU-NIC-NUMA affinity, its findings, and what
kubelet and DRA should be told (issue 23, parts 4 and 6).

Thin: each ``sources.gpu_topo`` drop directory -> ``services.gpu_topo.collect_drop_directory``
(one ``raw.gpu_topo_captures`` row per node, or a quarantined capture) -> the current fabric model
(``services.topology.load_model``; each host's HCAs give its NICs their rails and leaves) ->
``core.affinity.fleet.derive_fleet`` (pure) -> ``services.gpu_topo.write_affinity``
(``topology.gpu_affinity*``) -> metadata and one asset check per finding kind. The node label and
annotation, the kubelet snippets per pool and a DRA ResourceClaimTemplate are rendered
(``core.affinity.render``) into the metadata; publishing them to the cluster is left to the
publish area. No ``from __future__ import annotations`` here: Dagster reads the context annotation.
"""

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from connectors.warehouse import Warehouse
from core.affinity import FINDING_KINDS, AffinityFinding, NodeAffinity, TopoMatrix
from core.affinity.derive import SEVERITY
from core.affinity.fleet import FleetAffinity, derive_fleet
from core.affinity.render import kubelet_config, node_patch, resource_claim_template
from core.models import Severity
from core.topology.model import model_from_json
from services.gpu_topo import collect_drop_directory, write_affinity
from services.topology import load_model
from settings import Settings

KEY = dg.AssetKey(["topology", "gpu_affinity"])
MAX_EVIDENCE = 50
MAX_MATRICES = 4  # nodes whose matrix the metadata shows: the ones with findings first
DRA_EXAMPLE = ("gpu-nic-pair", "default")


def check_name(kind: str) -> str:
    return f"no_{kind}"


def _check_severity(kind: str) -> dg.AssetCheckSeverity:
    return (
        dg.AssetCheckSeverity.ERROR
        if SEVERITY[kind] in (Severity.ERROR, Severity.CRITICAL)
        else dg.AssetCheckSeverity.WARN
    )


def _finding_json(f: AffinityFinding) -> dict[str, Any]:
    nics = list(f.nics or ((f.nic,) if f.nic else ()))
    return {"kind": f.kind, "host": f.host, "gpu": f.gpu, "gpus": list(f.gpus), "nics": nics, "detail": f.detail}


def check_results(fleet: FleetAffinity) -> list[dg.AssetCheckResult]:
    """One check per finding kind: passes when the derivation raised none of that kind."""
    by_kind: dict[str, list[AffinityFinding]] = {k: [] for k in FINDING_KINDS}
    for f in fleet.findings:
        by_kind[f.kind].append(f)
    return [
        dg.AssetCheckResult(
            check_name=check_name(kind), asset_key=KEY, passed=not found, severity=_check_severity(kind),
            metadata={"findings": len(found), "hosts": dg.MetadataValue.json(sorted({f.host for f in found})),
                      "evidence": dg.MetadataValue.json([_finding_json(f) for f in found[:MAX_EVIDENCE]])},
        )
        for kind, found in by_kind.items()
    ]  # fmt: skip


def matrix_markdown(host: str, matrix: TopoMatrix, node: NodeAffinity, findings: Sequence[AffinityFinding]) -> str:
    """One node's matrix as the UI shows it: GPU rows against the NIC columns (classes as
    ``nvidia-smi`` prints them), then each GPU's NUMA node, best NIC, class and rail."""
    nics = [n.name for n in matrix.nics]
    head = ["GPU", *nics, "NUMA", "best NIC", "class", "rail"]
    lines = [f"#### {host}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in matrix.gpus:
        a = node.gpu(g.index)
        cells = [matrix.gpu_nic(g, n).label for n in matrix.nics]
        best = ", ".join(a.best_nics) or "-"
        lines.append(
            "| " + " | ".join([g.label, *cells, str(a.numa_node), best, a.path_class or "-", a.rail or "-"]) + " |"
        )
    lines += [""] + [f"- **{f.kind}**: {f.detail}" for f in findings]
    return "\n".join(lines) + "\n"


def _shown(fleet: FleetAffinity) -> list[str]:
    """Hosts whose matrix goes into the metadata: those with findings, then one without."""
    faulted = sorted({f.host for f in fleet.findings})
    clean = [n.host for n in fleet.nodes if n.host not in faulted][:1]
    return (faulted[: MAX_MATRICES - len(clean)] + clean) if faulted else clean


def publish_outputs(fleet: FleetAffinity, prefix: str) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
    """(node patches, kubelet snippets per pool, a DRA claim template example)."""
    patches = [node_patch(n, prefix, fleet.findings_of(n.host)) for n in fleet.nodes]
    nodes = {n.host: n for n in fleet.nodes}
    snippets = [kubelet_config(pool, [nodes[h] for h in hosts]) for pool, hosts in fleet.pools.items()]
    return patches, snippets, resource_claim_template(*DRA_EXAMPLE)


@dg.asset(
    key=KEY,
    group_name="topology",
    kinds={"postgres"},
    deps=[dg.AssetKey(["topology", "fabric_model"])],
    check_specs=[
        dg.AssetCheckSpec(check_name(kind), asset=KEY, description=f"No {kind.replace('_', ' ')} finding.")
        for kind in FINDING_KINDS
    ],
    description="Each compute node's GPU -> best NIC -> rail and NUMA node from nvidia-smi topo -m, with findings.",
)  # fmt: skip
def gpu_affinity(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> Iterator[Any]:
    run_id = context.run.run_id
    sources = site.sources.gpu_topo
    if not sources:
        context.log.warning("no gpu_topo sources configured (sources.gpu_topo in %s)", site.source_path)
    statuses: Counter[str] = Counter()
    matrices: dict[str, TopoMatrix] = {}
    unreadable: list[str] = []
    with warehouse.connect() as conn:
        for src in sources:
            got = collect_drop_directory(conn, run_id, src.name, src.path, src.suffix)
            if got.error:
                unreadable.append(f"{src.name}: {got.error}")
            for landing in got.landings:
                statuses[str(landing.status)] += 1
                if landing.matrix is not None:
                    matrices[landing.host] = landing.matrix
        doc = load_model(conn)
        model = model_from_json(doc) if doc else None
        version = int(doc["version"]) if doc else None
        fleet = derive_fleet(matrices, model)
        gpu_rows, finding_rows = write_affinity(conn, run_id, fleet, version, datetime.now(UTC))
    if model is None:
        context.log.warning("no topology version stored yet: NICs get no rails (materialize topology/fabric_model)")
    patches, snippets, claim = publish_outputs(fleet, site.label_prefix)
    classes = Counter(p["metadata"]["labels"][next(iter(p["metadata"]["labels"]))] for p in patches)
    context.log.info("%d nodes, %d GPU rows, %d findings (%s)", len(fleet.nodes), gpu_rows, finding_rows,
                     dict(Counter(f.kind for f in fleet.findings)))  # fmt: skip
    shown = _shown(fleet)
    md = "\n".join(matrix_markdown(h, matrices[h], fleet.node(h), fleet.findings_of(h)) for h in shown)
    kubelet_md = "\n".join(f"```yaml\n{s.to_yaml()}```" for s in snippets)
    yield dg.MaterializeResult(
        asset_key=KEY,
        metadata={
            "nodes": len(fleet.nodes),
            "gpus": gpu_rows,
            "captures_by_status": dg.MetadataValue.json(dict(statuses)),
            "unreadable_sources": dg.MetadataValue.json(unreadable),
            "topology_version": version if version is not None else "none",
            "nodes_with_fabric_rails": len(fleet.cabled),
            "findings_by_kind": dg.MetadataValue.json(dict(Counter(f.kind for f in fleet.findings))),
            "affinity_by_class": dg.MetadataValue.json(dict(classes)),
            "matrices": dg.MetadataValue.md(md or "no node matrices collected"),
            "node_patch_example": dg.MetadataValue.json(_example(patches, shown)),
            "kubelet_config": dg.MetadataValue.md(kubelet_md or "no pools"),
            "resource_claim_template": dg.MetadataValue.json(claim),
        },
        check_results=check_results(fleet),
    )


def _example(patches: Sequence[Mapping[str, Any]], shown: Sequence[str]) -> list[Any]:
    return [p for p in patches if p["metadata"]["name"] in shown][:MAX_MATRICES]


defs = dg.Definitions(assets=[gpu_affinity])
