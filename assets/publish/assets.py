"""``publish/cluster_state``: the latest topology version published to every configured cluster.

Thin: ``service.publish_fabric`` per ``sources.kubernetes`` cluster, honouring the site's
``publish`` guards (``dry_run`` records the plan and writes nothing; the blast-radius guard
fails the materialization with the refusal, since a run has nobody to add ``--force``).
No ``from __future__ import annotations`` here: Dagster reads the annotations at runtime.
"""

from typing import Any

import dagster as dg

from connectors.kube import api_client
from connectors.warehouse import Warehouse
from services.publish import PublishRefused, config_from_settings, publish_fabric
from settings import Settings

KEY = dg.AssetKey(["publish", "cluster_state"])


@dg.asset(
    key=KEY,
    group_name="publish",
    kinds={"kubernetes", "postgres"},
    # After the GPU affinity too: publish carries its label and annotation per node, and a publish
    # that ran first would leave them all to the next one (which the blast guard then refuses).
    deps=[dg.AssetKey(["topology", "fabric_model"]), dg.AssetKey(["topology", "gpu_affinity"])],
    description="Node labels, annotations, extended resources and Kueue objects from the latest topology "
    "version and GPU affinity.",
)
def cluster_state(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> dg.MaterializeResult:
    settings = site
    results: dict[str, Any] = {}
    for source in settings.sources.kubernetes:
        cfg = config_from_settings(settings, source.name)
        with api_client(source) as api, warehouse.connect() as conn:
            try:
                outcome = publish_fabric(conn, api, cfg, dry_run=settings.publish.dry_run)
            except PublishRefused as exc:
                raise dg.Failure(description=f"{source.name}: {exc}") from None
        counts = outcome.plan.counts() if outcome.plan else {}
        context.log.info("%s: %s (run %d): %s", source.name, outcome.status, outcome.run_id, outcome.diff[-1:])
        results[source.name] = {"run_id": outcome.run_id, "status": outcome.status,
                                "topology_version": outcome.topology_version, **counts}  # fmt: skip
    return dg.MaterializeResult(metadata={"clusters": dg.MetadataValue.json(results), "count": len(results)})


defs = dg.Definitions(assets=[cluster_state])
