"""``topology/fabric_model``: the latest observations -> a new topology version when changed.

Thin: ``store.load_observations`` (warehouse) -> ``core.topology.derive`` (pure) ->
``store.write_snapshot`` (warehouse) -> metadata and asset check results. The checks are part of
the asset (``check_specs``) because they judge exactly the model this materialization derived:
every compute host has a domain at every level, no domain is over its design size, and no
finding reaches the configured severity (default ``error``), each with its evidence in metadata.
The metadata also carries what the UI shows best: the diagram (``core.topology.diagram`` laid out,
``services.diagrams`` painted, a PNG in markdown), plain ints it plots across materializations
(switches per tier, hosts, findings per kind, 0 for a kind absent) and the findings as a table.
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from assets.metadata import table
from connectors.warehouse import Warehouse
from core.models import Severity
from core.topology import LEVELS, TopologyConfig, TopologyModel, derive
from core.topology.diagram import layout, summary
from core.topology.model import finding_json
from services.diagrams import markdown_image, topology_png
from services.topology import load_observations, write_snapshot

KEY = dg.AssetKey(["topology", "fabric_model"])
CHECK_DOMAINS = "every_host_has_every_domain"
CHECK_SIZES = "domains_within_design_size"
CHECK_FINDINGS = "no_findings_at_threshold"
MAX_EVIDENCE = 50  # items of evidence per check result: metadata must stay readable in the UI
# Every kind derivation reports gets an entry each run (0 when absent), so the UI's plot of a kind
# is a continuous line; a kind not listed here still gets its entry when it occurs.
FINDING_KINDS = (
    "miscabled_port", "degraded_leaf", "one_sided_link", "speed_width_mismatch", "host_missing_from_fabric",
    "host_not_in_dcim", "dcim_host_not_in_fabric", "duplicate_name", "unclassified_switch", "invalid_domain",
    "nvlink_conflict", "no_switches", "unnamed_hca", "default_hostname", "unknown_ca",
)
FINDING_COLUMNS = {"severity": "string", "kind": "string", "message": "string", "devices": "string"}


class TopologyRunConfig(dg.Config):
    """Site knobs for the derivation (see core.topology.inputs.TopologyConfig)."""

    hostname_rewrites: list[list[str]] = []
    similarity: float = 0.5
    design_leaf_uplinks: int | None = None
    design_sizes: dict[str, int] = {}
    check_severity: str = "error"
    block_sizes: list[int] = []
    host_roles: dict[str, Any] = {}  # core.topology.roles.HostRoleRules: thresholds and name hints

    def to_config(self) -> TopologyConfig:
        return TopologyConfig.from_mapping(
            {
                "hostnames": {"rewrites": [tuple(r) for r in self.hostname_rewrites]},
                "similarity": self.similarity,
                "design_leaf_uplinks": self.design_leaf_uplinks,
                "design_sizes": self.design_sizes,
                "check_severity": self.check_severity,
                "block_sizes": self.block_sizes or None,
                "host_roles": self.host_roles or None,
            }
        )


def check_results(model: TopologyModel, threshold: Severity) -> list[dg.AssetCheckResult]:
    """The three checks over one model (pure apart from building Dagster result objects)."""
    compute = model.compute_hosts()
    missing = [
        {"host": h.name, "missing": [lvl for lvl in (*LEVELS, "nvlink_domain") if getattr(h, lvl) is None]}
        for h in compute
        if any(getattr(h, lvl) is None for lvl in (*LEVELS, "nvlink_domain"))
    ]
    oversize = [
        {"level": d.level, "domain": d.id, "name": d.name, "hosts": d.hosts, "design_size": d.design_size}
        for d in model.domains
        if d.design_size is not None and d.hosts > d.design_size
    ]
    severe = model.findings_at_least(threshold)
    return [
        dg.AssetCheckResult(
            check_name=CHECK_DOMAINS, passed=not missing, asset_key=KEY,
            metadata={"compute_hosts": len(compute), "hosts_missing_a_domain": len(missing),
                      "evidence": dg.MetadataValue.json(missing[:MAX_EVIDENCE])},
        ),
        dg.AssetCheckResult(
            check_name=CHECK_SIZES, passed=not oversize, asset_key=KEY,
            metadata={"domains": len(model.domains), "over_design": len(oversize),
                      "evidence": dg.MetadataValue.json(oversize[:MAX_EVIDENCE])},
        ),
        dg.AssetCheckResult(
            check_name=CHECK_FINDINGS, passed=not severe, asset_key=KEY,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"threshold": threshold.value, "findings_at_threshold": len(severe),
                      "evidence": dg.MetadataValue.json([finding_json(f) for f in severe[:MAX_EVIDENCE]])},
        ),
    ]  # fmt: skip


@dg.asset(
    key=KEY,
    group_name="topology",
    kinds={"postgres"},
    deps=[
        dg.AssetKey(["raw", "ib_nodes"]), dg.AssetKey(["raw", "ib_links"]), dg.AssetKey(["raw", "dcim_inventory"]),
        dg.AssetKey(["raw", "nvlink_domains"]), dg.AssetKey(["raw", "lldp_neighbor_observations"]),
    ],
    check_specs=[
        dg.AssetCheckSpec(CHECK_DOMAINS, asset=KEY, description="Every compute host has a domain at every level."),
        dg.AssetCheckSpec(CHECK_SIZES, asset=KEY, description="No domain is over its design size."),
        dg.AssetCheckSpec(CHECK_FINDINGS, asset=KEY, description="No finding at or above the severity threshold."),
    ],
    description="The derived fabric model (tiers, domains, links, findings), versioned in topology.*.",
)  # fmt: skip
def fabric_model(
    context: dg.AssetExecutionContext, config: TopologyRunConfig, warehouse: dg.ResourceParam[Warehouse]
) -> Iterator[Any]:
    cfg = config.to_config()
    with warehouse.connect() as conn:
        loaded = load_observations(conn)
        model = derive(loaded.observations, cfg)
        written = write_snapshot(
            conn, model, run_id=context.run.run_id, created_at=datetime.now(UTC),
            inputs={"runs": loaded.runs, "unresolved": len(model.inputs.get("unresolved", ()))},
            rejected=loaded.rejected,
        )  # fmt: skip
    context.log.info(
        "topology version %d (%s): %d switches, %d compute hosts, %d findings",
        written.version, "new" if written.created else "unchanged", len(model.switches), len(model.compute_hosts()),
        len(model.findings),
    )  # fmt: skip
    yield dg.MaterializeResult(
        asset_key=KEY,
        metadata={
            "version": written.version,
            "new_version": written.created,
            "content_hash": model.content_hash(),
            "switches_by_tier": dg.MetadataValue.json(dict(Counter(f"{s.fabric}:{s.tier}" for s in model.switches))),
            "compute_hosts": len(model.compute_hosts()),
            "non_compute_nodes": dg.MetadataValue.json(
                dict(Counter(h.role for h in model.hosts if h.role != "compute"))
            ),
            "domains_by_level": dg.MetadataValue.json(dict(Counter(d.level for d in model.domains))),
            "invalid_domains": sum(not d.valid for d in model.domains),
            "links": len(model.links),
            "findings_by_kind": dg.MetadataValue.json(dict(Counter(f.kind for f in model.findings))),
            "changes": dg.MetadataValue.json(_summary(written.changes)),
            "rows_quarantined": len(loaded.rejected),
            "unresolved_observations": len(model.inputs.get("unresolved", ())),
            **picture_metadata(model, f"topology version {written.version}"),
        },
        check_results=check_results(model, cfg.check_severity),
    )  # fmt: skip


def picture_metadata(model: TopologyModel, title: str) -> dict[str, Any]:
    """The diagram, the counts Dagster plots across materializations, and the findings as a table."""
    kinds = Counter(f.kind for f in model.findings)
    out: dict[str, Any] = {
        "diagram": dg.MetadataValue.md(markdown_image(topology_png(layout(model, title=title)), title)),
        **summary(model),
        **{f"findings_{k}": kinds.get(k, 0) for k in sorted({*FINDING_KINDS, *kinds})},
        "findings_table": table(
            [{"severity": f.severity.value, "kind": f.kind, "message": f.message,
              "devices": ", ".join(f.devices[:8]) + (" ..." if len(f.devices) > 8 else "")} for f in model.findings],
            FINDING_COLUMNS, limit=MAX_EVIDENCE,
        ),
    }  # fmt: skip
    return out


def _summary(changes: list[Any]) -> dict[str, int]:
    out: Counter[str] = Counter(f"{c.section}:{c.change}" for c in changes)
    return dict(out)


defs = dg.Definitions(assets=[fabric_model])
