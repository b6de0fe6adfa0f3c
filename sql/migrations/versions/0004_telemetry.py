"""Telemetry: DCGM series and samples (range-partitioned by day).

Revision ID: 0004
Revises: 0001
Create Date: 2026-12-02

Two tables, the way Prometheus-in-Postgres designs split them: ``dcgm_series`` holds each series'
labels once (metric, host, GPU UUID, MIG instance, pod, job, the rest as jsonb) and
``dcgm_samples`` only (series_id, ts, value), 24 bytes of payload a row, so a million samples a
minute stay cheap to COPY, index and scan. ``series_id`` is a 63-bit hash of the series' canonical
identity computed by the collector (core/telemetry.py), so collectors never wait for the database
to hand out ids. Samples are unique per (series, timestamp): re-loading a window cannot duplicate.
No separate index on ``ts``: day partitions already prune time ranges, and every index is paid on
every COPY.

Partitions (``dcgm_samples_pYYYYMMDD``, UTC days) are created ahead by the loader
(connectors/prometheus/storage.py) and detached by retention; there is no default partition, so
a sample for a day without a partition is an error at load time, never a row parked where
retention cannot reach it.
"""

from alembic import op

revision = "0004"
down_revision = "0001"
branch_labels = ("telemetry",)
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS telemetry")
    op.execute(
        """
        CREATE TABLE telemetry.dcgm_series (
            series_id            bigint      PRIMARY KEY,
            metric               text        NOT NULL,
            hostname             text,
            gpu_uuid             text,
            gpu                  integer,
            device               text,
            model_name           text,
            pci_bus_id           text,
            gpu_instance_profile text,
            gpu_instance_id      integer,
            namespace            text,
            pod                  text,
            container            text,
            job                  text,
            labels               jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- every other label
            source               text,                                       -- first source that saw it
            first_seen           timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    # One secondary index only: a fleet's first scrape inserts tens of thousands of series, and
    # every index is paid there; the marts join on series_id and filter on metric.
    op.execute("CREATE INDEX dcgm_series_metric ON telemetry.dcgm_series (metric)")
    op.execute(
        """
        CREATE TABLE telemetry.dcgm_samples (
            series_id bigint           NOT NULL,
            ts        timestamptz      NOT NULL,
            value     double precision,           -- NULL: NaN or a DCGM blank sentinel
            PRIMARY KEY (series_id, ts)
        ) PARTITION BY RANGE (ts)
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS telemetry.dcgm_samples, telemetry.dcgm_series")
