"""Ingest every configured DCIM export into ``raw.dcim_inventory``.

Thin by design: parse (connector) → COPY (warehouse) → status and quarantine → metadata. A
missing or unreadable export marks that source's status and the run goes on (fail soft).
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from ipaddress import ip_address
from typing import Any

import dagster as dg

from connectors.dcim.parser import SOURCE, DcimFormatError, DcimRecord, parse_file
from connectors.warehouse import Warehouse, land_collection
from core.quality import CollectionStatus, Parsed, Quarantined
from settings import Settings

DCIM_COLUMNS = (
    "run_id",
    "source",
    "collected_at",
    "node",
    "rack",
    "role",
    "su",
    "gpu_model",
    "gpu_count",
    "hca_count",
    "hcas",
    "bmc_address",
    "serial",
    "extra",
)


def dcim_rows(
    run_id: str, source: str, collected_at: datetime, records: Sequence[DcimRecord]
) -> Iterator[tuple[Any, ...]]:
    for r in records:
        hcas = [{"name": h.name, "rail": h.rail, "guid": h.guid} for h in r.hcas]
        yield (
            run_id,
            source,
            collected_at,
            r.node,
            r.rack,
            r.role,
            r.su,
            r.gpu_model,
            r.gpu_count,
            r.hca_count,
            hcas,
            ip_address(r.bmc_address) if r.bmc_address else None,
            r.serial,
            r.extra,
        )


@dg.asset(
    key_prefix=["raw"],
    group_name="inventory",
    kinds={"postgres"},
    description="DCIM inventory exports landed untouched (one row per node per collection).",
)
def dcim_inventory(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> dg.MaterializeResult:
    settings = site
    run_id = context.run.run_id
    wh = warehouse
    statuses: Counter[str] = Counter()
    landed = quarantined = 0
    if not settings.sources.dcim:
        context.log.warning("no DCIM sources configured (sources.dcim in %s)", settings.source_path)
    with wh.connect() as conn:
        for src in settings.sources.dcim:
            started = datetime.now(UTC)
            detail = None
            try:
                parsed = parse_file(src.path, src.format, device=src.name)
            except (OSError, DcimFormatError) as err:
                # The whole export is unusable: say so for this source, keep going with the others.
                parsed = Parsed()
                detail = f"{type(err).__name__}: {err}" if isinstance(err, OSError) else str(err)
                if not isinstance(err, OSError):
                    parsed.quarantined.append(
                        Quarantined(source=SOURCE, device=src.name, reason=str(err), payload=str(src.path))
                    )
            status = parsed.status if detail is None or parsed.quarantined else CollectionStatus.UNREACHABLE
            n, q = land_collection(
                conn,
                run_id=run_id,
                source=SOURCE,
                device=src.name,
                table="raw.dcim_inventory",
                columns=DCIM_COLUMNS,
                rows=dcim_rows(run_id, src.name, started, parsed.records),
                quarantined=parsed.quarantined,
                status=status,
                started_at=started,
                detail=detail,
            )
            context.log.info("%s: %s, %d nodes landed, %d rows quarantined", src.name, status, n, q)
            statuses[str(status)] += 1
            landed += n
            quarantined += q
    return dg.MaterializeResult(
        metadata={
            "nodes_landed": dg.MetadataValue.int(landed),
            "rows_quarantined": dg.MetadataValue.int(quarantined),
            "sources_by_status": dg.MetadataValue.json(dict(statuses)),
            "sources": dg.MetadataValue.int(len(settings.sources.dcim)),
        }
    )


defs = dg.Definitions(assets=[dcim_inventory])
