"""Pod and node snapshots from every configured cluster, and agent-tree usage.

Thin by design: list + watch (connector) → snapshot records (connector, core) → one transaction
per cluster: pod rows, quarantined pods and status (``land_collection``), node rows, and the
``agents.tree_usage`` rows of every tree touched, so the budget controller never sees usage that
disagrees with the snapshots (the loader is ``services.pod_snapshots``, which the demo's simulated
agent history and the tests' simulated week go through too). No ``from __future__ import
annotations``: Dagster reads annotations at runtime.
"""

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from assets.finops.resources import FinOpsResource
from connectors.kube import api_client
from connectors.kube.pods import SOURCE, list_nodes_raw, list_pods_raw, node_snapshot, parse_pods, watch_pods
from connectors.warehouse import Warehouse, record_status
from core.quality import CollectionStatus
from services.pod_snapshots import Landed, land_pod_snapshots, refresh_tree_usage
from settings import Settings

POD_SNAPSHOTS = dg.AssetKey(["raw", "k8s_pod_snapshots"])
NODE_SNAPSHOTS = dg.AssetKey(["raw", "k8s_node_snapshots"])
TREE_USAGE = dg.AssetKey(["agents", "tree_usage"])


@dg.multi_asset(
    specs=[
        dg.AssetSpec(POD_SNAPSHOTS, group_name="finops", kinds={"kubernetes", "postgres"},
                     description="Every pod of every configured cluster per run, plus watch events between lists."),
        dg.AssetSpec(NODE_SNAPSHOTS, group_name="finops", kinds={"kubernetes", "postgres"},
                     description="Every node's GPU model and GPU count per run (capacity for idle lines)."),
        dg.AssetSpec(TREE_USAGE, group_name="finops", kinds={"postgres"}, deps=[POD_SNAPSHOTS, NODE_SNAPSHOTS],
                     description="Per agent-tree root: GPU-hours and cost so far, live pods, depth, fan-out, burn."),
    ],
)
def k8s_pod_snapshots(
    context: dg.AssetExecutionContext,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
    finops: FinOpsResource,
) -> Iterator[dg.MaterializeResult]:
    settings = site
    run_id = context.run.run_id
    wh = warehouse
    total = Landed()
    statuses: Counter[str] = Counter()
    if not settings.sources.kubernetes:
        context.log.warning("no Kubernetes clusters configured (sources.kubernetes in %s)", settings.source_path)
    with wh.connect() as conn:
        for src in settings.sources.kubernetes:
            started = datetime.now(UTC)
            try:
                api = api_client(src)
                try:
                    collected = datetime.now(UTC)
                    nodes = [node_snapshot(n, cluster=src.name, collected_at=collected) for n in list_nodes_raw(api)]
                    listed = list_pods_raw(api)
                    collected = datetime.now(UTC)
                    watched = watch_pods(api, listed.resource_version, finops.effective_watch_seconds())
                finally:
                    api.close()
            except (ApiException, Urllib3HTTPError, OSError, ValueError) as err:
                detail = f"{type(err).__name__}: {getattr(err, 'status', '') or ''} {getattr(err, 'reason', '') or ''}"
                record_status(conn, run_id=run_id, source=SOURCE, device=src.name,
                              status=CollectionStatus.UNREACHABLE, started_at=started,
                              finished_at=datetime.now(UTC), detail=detail.strip())
                conn.commit()
                statuses["unreachable"] += 1
                context.log.warning("%s: unreachable (%s)", src.name, detail.strip())
                continue
            parsed = parse_pods(listed.pods, cluster=src.name, collected_at=collected, prefix=settings.label_prefix)
            events = parse_pods(watched.events, cluster=src.name, prefix=settings.label_prefix)
            parsed.records.extend(events.records)
            parsed.quarantined.extend(events.quarantined)
            landed = land_pod_snapshots(
                conn, run_id=run_id, cluster=src.name, pods=parsed, nodes=nodes, started_at=started,
                detail="watch expired: the next run relists" if watched.expired else None,
            )
            conn.commit()
            statuses[str(parsed.status)] += 1
            total.pods += landed.pods
            total.quarantined += landed.quarantined
            total.nodes += landed.nodes
            total.trees += landed.trees
            total.node_changes += landed.node_changes
            total.issues.update(landed.issues)
            total.pods_with_issues += landed.pods_with_issues
            context.log.info("%s: %d pod rows (%d watch events), %d nodes, %d trees", src.name, landed.pods,
                             len(watched.events), landed.nodes, landed.trees)
    yield dg.MaterializeResult(asset_key=POD_SNAPSHOTS, metadata={
        "pod_rows_landed": dg.MetadataValue.int(total.pods),
        "pods_quarantined": dg.MetadataValue.int(total.quarantined),
        "pods_with_issues": dg.MetadataValue.int(total.pods_with_issues),
        "pods_by_issue": dg.MetadataValue.json(dict(total.issues)),
        "pods_changed_node": dg.MetadataValue.int(total.node_changes),
        "clusters_by_status": dg.MetadataValue.json(dict(statuses)),
    })
    yield dg.MaterializeResult(asset_key=NODE_SNAPSHOTS, metadata={"nodes_landed": dg.MetadataValue.int(total.nodes)})
    yield dg.MaterializeResult(asset_key=TREE_USAGE, metadata={"trees_updated": dg.MetadataValue.int(total.trees)})


__all__ = ["Landed", "k8s_pod_snapshots", "land_pod_snapshots", "refresh_tree_usage"]
