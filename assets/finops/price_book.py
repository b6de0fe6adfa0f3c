"""``finops/price_book``: the site file's rate_cards as the table dbt prices the cost fact from.

Upstream of the cost fact (the dbt source ``finops.price_book`` maps to this key), and part of the
``finops_cost`` job, so every build prices with the site file as it is now. A bad rate card
(overlap, unknown currency, negative price) fails this asset and so the build, with every problem
named; the book in the warehouse stays as it was. No ``from __future__ import annotations``:
Dagster reads annotations at runtime.
"""

import dagster as dg

from connectors.warehouse import Warehouse
from services.price_book import load_price_book
from settings import Settings

PRICE_BOOK = dg.AssetKey(["finops", "price_book"])


@dg.asset(key=PRICE_BOOK, group_name="finops", kinds={"postgres"},
          description="Prices per GPU model, tier and effective dates, from the site file's rate_cards.")
def price_book(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> dg.MaterializeResult:
    source = str(site.source_path or "<site settings>")
    with warehouse.connect() as conn:
        load = load_price_book(conn, site.rate_cards, source)
    if not site.rate_cards:
        context.log.warning("no rate_cards in %s: every cost line is unpriced", source)
    if load.changed:
        context.log.info("price book replaced (%d rows); prices differ from %s on", load.rows, load.changes_from)
    return dg.MaterializeResult(metadata={
        "rows": dg.MetadataValue.int(load.rows),
        "changed": dg.MetadataValue.bool(load.changed),
        "changes_from": dg.MetadataValue.text(str(load.changes_from) if load.changes_from else "-"),
        "loaded_at": dg.MetadataValue.text(load.loaded_at.isoformat() if load.loaded_at else "-"),
    })


__all__ = ["PRICE_BOOK", "price_book"]
