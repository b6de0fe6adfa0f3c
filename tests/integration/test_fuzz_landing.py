"""What the fuzz tests' "storable" checks stand for, on a real Postgres: hostile exposition text
that the parser accepts (a raw NUL inside a label value, explicit sample timestamps from 1970 and
from beyond year 9999) lands as far as it can, and the rest is quarantined with its reason.

Before ``connectors.prometheus.storage.storable_samples`` (each tried beside one good sample):
the NUL failed the target's whole load (CharacterNotInRepertoire), the 1970 timestamp made
``ensure_partitions`` create a day partition for every day since 1970 until Postgres ran out of
shared memory (about a minute), and the year-10000 one failed the partition arithmetic
(ValueError); each took the target's good samples down with it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connectors.prometheus import land_samples, list_partitions
from connectors.warehouse import open_warehouse
from core.telemetry import ExpositionParser

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)
SCRAPE = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SCRAPE_MS = int(SCRAPE.timestamp() * 1000)
HOSTILE = (
    b'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="n1"} 1410\n'
    b'DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-2",Hostname="n\x001"} 1410\n'
    b'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1",Hostname="n1"} 300 1\n'
    b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="n1"} 40 253402300800000\n'
)


def test_hostile_exposition_lands_what_it_can_and_quarantines_the_rest(fresh_database_url: str, run_id: str) -> None:
    parsed = ExpositionParser().parse(HOSTILE, SCRAPE_MS, device="n1")
    assert len(parsed) == 4 and parsed.quarantined == []  # the parser took every line
    wh = open_warehouse(fresh_database_url)
    with wh.connect() as conn:
        result = land_samples(conn, parsed, run_id=run_id, device="n1", started_at=SCRAPE, around_ms=SCRAPE_MS)
        assert (result.samples, result.partitions_created) == (1, ("dcgm_samples_p20261201",))
        assert list(list_partitions(conn).values()) == ["dcgm_samples_p20261201"]
        landed = conn.execute(
            "SELECT s.metric, s.hostname, d.value FROM telemetry.dcgm_samples d JOIN telemetry.dcgm_series s "
            "USING (series_id)"
        ).fetchall()
        assert landed == [("DCGM_FI_DEV_SM_CLOCK", "n1", 1410.0)]
        reasons = conn.execute(
            "SELECT reason FROM ops.quarantine WHERE run_id = %s ORDER BY reason", (run_id,)
        ).fetchall()
        assert [r for (r,) in reasons] == [
            f"sample timestamp 1 ms is more than 86400000 ms from the scrape at {SCRAPE_MS} ms",
            f"sample timestamp 253402300800000 ms is more than 86400000 ms from the scrape at {SCRAPE_MS} ms",
            "series label holds a NUL character, which Postgres text and jsonb cannot hold",
        ]
        status = conn.execute(
            "SELECT status, rows_landed, rows_quarantined FROM ops.collection_status WHERE run_id = %s", (run_id,)
        ).fetchone()
        assert status == ("partial", 1, 3)
