"""telemetry.dcgm_samples on a real Postgres: day partitions, retention, idempotent loads, quarantine."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from connectors.prometheus import apply_retention, copy_samples, ensure_partitions, land_samples, list_partitions
from connectors.warehouse import open_warehouse
from core.telemetry import ExpositionParser

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

DAY1 = datetime(2026, 12, 1, 23, 59, 30, tzinfo=UTC)
TEXT = (
    'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="n1"} 1410\n'
    'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-1",Hostname="n1",pod="p",namespace="ns"} 0.5\n'
    'DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-1",Hostname="n1"} 9223372036854775794\n'
    "garbage line\n"
)


def test_partitions_idempotence_and_retention(fresh_database_url: str, run_id: str) -> None:
    wh = open_warehouse(fresh_database_url)
    parser = ExpositionParser()
    # two scrapes either side of midnight: two day partitions, created on demand
    batch = parser.parse(TEXT, DAY1, device="n1")
    batch.extend(parser.parse(TEXT, int(DAY1.timestamp() * 1000) + 60_000, device="n1"))
    with wh.connect() as conn:
        first = land_samples(conn, batch, run_id=run_id, device="n1", started_at=DAY1)
        assert sorted(first.partitions_created) == ["dcgm_samples_p20261201", "dcgm_samples_p20261202"]
        assert (first.samples, first.new_series, first.replaced_window) == (6, 3, False)
        # the same window again (a retried run): one row per (series, ts), values refreshed
        again = land_samples(conn, batch, run_id=run_id, device="n1", started_at=DAY1)
        assert (again.samples, again.new_series, again.replaced_window) == (6, 0, True)
        rows = conn.execute(
            "SELECT count(*), count(value), count(DISTINCT series_id) FROM telemetry.dcgm_samples"
        ).fetchone()
        assert rows == (6, 4, 3)
        per_partition = conn.execute(
            "SELECT tableoid::regclass::text, count(*) FROM telemetry.dcgm_samples GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert per_partition == [("telemetry.dcgm_samples_p20261201", 3), ("telemetry.dcgm_samples_p20261202", 3)]
        quarantine = conn.execute(
            "SELECT reason, location, device FROM ops.quarantine WHERE run_id = %s", (run_id,)
        ).fetchall()
        # the retry replaced the first attempt's quarantine rows: one per scrape, not two
        assert quarantine == [("'line' is not 'value [timestamp]'", "line 4", "n1")] * 2
        status = conn.execute(
            "SELECT status, rows_landed, rows_quarantined FROM ops.collection_status WHERE run_id = %s", (run_id,)
        ).fetchone()
        assert status == ("partial", 6, 2)
        labels = conn.execute(
            "SELECT hostname, namespace, pod FROM telemetry.dcgm_series "
            "WHERE metric = 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE'"
        ).fetchone()
        assert labels == ("n1", "ns", "p")

        # partitions ahead, then retention: detach days before today - keep_days
        created = ensure_partitions(conn, date(2026, 12, 3), date(2026, 12, 5))
        assert created == ["dcgm_samples_p20261203", "dcgm_samples_p20261204", "dcgm_samples_p20261205"]
        assert ensure_partitions(conn, date(2026, 12, 3), date(2026, 12, 5)) == []
        detached = apply_retention(conn, keep_days=2, today=date(2026, 12, 4))
        assert detached == ["dcgm_samples_p20261201"]
        assert date(2026, 12, 1) not in list_partitions(conn)
        remaining = conn.execute("SELECT count(*) FROM telemetry.dcgm_samples").fetchone()
        assert remaining == (3,)
        kept = conn.execute("SELECT count(*) FROM telemetry.dcgm_samples_p20261201").fetchone()
        assert kept == (3,)  # detached, not dropped: still there for archiving
        dropped = apply_retention(conn, keep_days=1, today=date(2026, 12, 4), drop=True)
        assert dropped == ["dcgm_samples_p20261202"]
        assert conn.execute("SELECT to_regclass('telemetry.dcgm_samples_p20261202')").fetchone() == (None,)
        with pytest.raises(ValueError):
            apply_retention(conn, keep_days=0)
        conn.commit()
    wh.dispose()


def test_empty_batch_lands_nothing(fresh_database_url: str) -> None:
    wh = open_warehouse(fresh_database_url)
    with wh.connect() as conn:
        result = copy_samples(conn, ExpositionParser().parse("", DAY1))
        assert result.samples == 0 and result.partitions_created == ()
    wh.dispose()
