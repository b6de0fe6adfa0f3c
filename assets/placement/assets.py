"""``placement/what_if``: a simulated week of training jobs on the latest derived fabric, placed by
a topology-unaware scheduler, by Kueue TAS and by gpufabric's advisor (issue 22, part 4).

Thin: the latest topology version from the warehouse, ``core.placement.what_if`` (the three
placers' choices computed on the same schedule, priced by the cost model with every finding),
``services.placement_chart`` for the slowdown chart (``core.placement.seed_claim_sweep``). The
real schedulers' version of the same figures is ``python -m bench --only placement``.
No ``from __future__ import annotations`` here: Dagster reads the annotations at runtime.
"""

from datetime import UTC, datetime
from decimal import Decimal

import dagster as dg

from assets.metadata import table
from connectors.warehouse import Warehouse
from core.finops.money import DEFAULT_TIER, find_rate
from core.finops.price_book import as_rate_cards, build_price_book
from core.placement import seed_claim_sweep
from core.placement.what_if import what_if
from core.topology.model import model_from_json
from services.diagrams import markdown_image
from services.placement_chart import slowdown_png
from services.topology import load_model
from settings import Settings

KEY = dg.AssetKey(["placement", "what_if"])
COLUMNS = {"placer": "string", "nodes": "string", "jobs": "int", "median_ratio": "float", "p90_ratio": "float",
           "crossed_leaves_pct": "float", "crossed_spine_groups_pct": "float", "gpu_hours_lost_per_week": "float",
           "usd_lost_per_week": "float"}  # fmt: skip


class WhatIfConfig(dg.Config):
    gpu_model: str = "H100-SXM5-80GB"  # the topology does not carry GPU models; the fabric's NVLink and peak FLOP/s
    rate_card_gpu_model: str = "NVIDIA-H100-80GB-HBM3"  # the site's rate card the dollars come from (tier "*")
    days: float = 7.0
    seed: int = 22


def _price(site: Settings, gpu_model: str) -> Decimal | None:
    """Today's price of a GPU-hour of ``gpu_model`` on the site's rate card for every tier."""
    cards = as_rate_cards(build_price_book(site.rate_cards))
    card = find_rate(cards, gpu_model, DEFAULT_TIER, datetime.now(UTC).date())
    return None if card is None else card.usd_per_gpu_hour


@dg.asset(
    key=KEY,
    group_name="placement",
    kinds={"python"},
    deps=[dg.AssetKey(["topology", "fabric_model"])],
    description="Step-time slowdown, leaf and spine crossings and GPU-hours lost per week by placer "
    "(topology-unaware, Kueue TAS, gpufabric advisor) on the latest fabric, with the slowdown chart.",
)
def placement_what_if(
    context: dg.AssetExecutionContext,
    config: WhatIfConfig,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
) -> dg.MaterializeResult:
    with warehouse.connect() as conn:
        doc = load_model(conn)
    if doc is None:
        raise dg.Failure(description="no topology version yet: materialize topology/fabric_model first")
    try:
        result = what_if(model_from_json(doc), config.gpu_model, days=config.days, seed=config.seed)
    except ValueError as exc:
        raise dg.Failure(description=f"topology version {doc.get('version')}: {exc}") from None
    price = _price(site, config.rate_card_gpu_model)
    rows = [
        {"placer": r.placer, "nodes": str(r.nodes or "all"), "jobs": r.jobs, "median_ratio": round(r.median_ratio, 4),
         "p90_ratio": round(r.p90_ratio, 4), "crossed_leaves_pct": round(100 * r.crossed_leaves, 1),
         "crossed_spine_groups_pct": round(100 * r.crossed_spine_groups, 1),
         "gpu_hours_lost_per_week": round(r.lost_gpu_hours, 1),
         "usd_lost_per_week": None if price is None else round(float(price) * r.lost_gpu_hours, 0)}
        for r in result.rows
    ]  # fmt: skip
    totals = {r.placer: r.lost_gpu_hours for r in result.rows if r.nodes == 0}
    context.log.info("topology version %s: GPU-hours lost per week %s", doc.get("version"), totals)
    chart = slowdown_png(seed_claim_sweep())
    return dg.MaterializeResult(
        metadata={
            "topology_version": doc.get("version"),
            "jobs": result.jobs,
            "hosts": result.hosts,
            "background_hosts": result.background,
            "degraded_leaf_blocks": result.degraded_blocks,
            "miscabled_hosts": result.miscabled_hosts,
            "by_job_size": table(rows, COLUMNS, limit=100),
            **{f"gpu_hours_lost_per_week_{p.replace('-', '_')}": round(v, 2) for p, v in totals.items()},
            "slowdown_chart": dg.MetadataValue.md(markdown_image(chart, "slowdown vs leaf blocks crossed")),
        }
    )


defs = dg.Definitions(assets=[placement_what_if])
