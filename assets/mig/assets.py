"""``mig/plan``: MIG layouts for every GPU of the first configured cluster, from the site's demand.

Thin: ``services.mig.plan_cluster`` reads the nodes (GFD product and count, the current
``nvidia.com/mig.config`` and mig-manager's state, the mig-parted ConfigMap) and plans with
``core.mig``; the metadata holds the plan, stranded capacity and the diff from the current layout.
A plan that leaves demand unmet FAILS the materialization with the list: a partial plan is never
a success. Planning writes nothing; ``gpufabric mig apply`` applies.
No ``from __future__ import annotations`` here: Dagster reads the annotations at runtime.
"""

from datetime import UTC, datetime

import dagster as dg

from connectors.kube import api_client
from connectors.warehouse import Warehouse
from core.mig.apply import plan_summary
from services.mig import MigRefused, config_from_settings, plan_cluster, with_history
from settings import Settings

KEY = dg.AssetKey(["mig", "plan"])


@dg.asset(
    key=KEY,
    group_name="mig",
    kinds={"kubernetes"},
    description="Per-GPU MIG layouts serving the site's tenant demand, with windows and stranded slices.",
)
def mig_plan(
    context: dg.AssetExecutionContext, site: dg.ResourceParam[Settings], warehouse: dg.ResourceParam[Warehouse]
) -> dg.MaterializeResult:
    sources = site.sources.kubernetes
    if not sources:  # as publish/cluster_state: a site without a cluster has nothing to partition
        return dg.MaterializeResult(metadata={"cluster": "(none: sources.kubernetes is empty)"})
    cfg = config_from_settings(site)
    history = None
    if site.mig.history_hours is not None:  # the site's demand completed by the warehouse's history
        with warehouse.connect() as conn:
            cfg, history = with_history(cfg, conn, hours=site.mig.history_hours, now=datetime.now(UTC),
                                        cluster=sources[0].name)  # fmt: skip
    with api_client(sources[0]) as api:
        try:
            result, view = plan_cluster(api, cfg)
        except MigRefused as exc:
            raise dg.Failure(description=f"{sources[0].name}: {exc}") from None
    summary = plan_summary(result)
    summary["notes"] = view.notes + summary["notes"]
    if not result.complete:
        lines = "\n".join(summary["unmet"])
        raise dg.Failure(description=f"the MIG plan leaves {len(result.unmet)} demand line(s) unmet:\n{lines}",
                         metadata={"unmet": dg.MetadataValue.json(summary["unmet"])})  # fmt: skip
    context.log.info("%s: %d GPUs used, %d to reconfigure in %d window(s)", sources[0].name, result.gpus_used,
                     result.reconfigured, len(result.windows))  # fmt: skip
    return dg.MaterializeResult(
        metadata={
            "cluster": sources[0].name,
            "gpus_used": result.gpus_used,
            "reconfigured": result.reconfigured,
            "windows": len(result.windows),
            "stranded_compute_slices": summary["stranded"]["compute_slices"],
            "stranded_memory_slices": summary["stranded"]["memory_slices"],
            "diff": dg.MetadataValue.json(summary["diff"]),
            "plan": dg.MetadataValue.json(summary),
            **({} if history is None else {
                "history_hours": site.mig.history_hours,
                "history_sized": dg.MetadataValue.json([str(x) for x in history.sized]),
                "history_skipped": dg.MetadataValue.json(history.skipped),
            }),
        }
    )


defs = dg.Definitions(assets=[mig_plan])
