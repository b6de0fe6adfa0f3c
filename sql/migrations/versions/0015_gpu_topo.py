"""GPU topology captures: one node's ``nvidia-smi topo -m`` per row (issue 23).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-11

``raw.gpu_topo_captures`` holds one row per node per run, keyed by (run_id, source) where
``source`` is the host (the ``land_collection`` convention: the device is the source): when the
node printed it (``captured_at``), when we collected it, how it reached us (``origin``: ``ssh``,
``agent``, ``file:<name>``), the text exactly as printed, and the parsed matrix
(``core.affinity.TopoMatrix.to_json``: devices, every cell, GPUs with CPU/NUMA affinity, NICs with
device names). Derived affinity is not stored here: it is recomputed from ``matrix``. A capture
that does not parse lands no row here; it goes to ``ops.quarantine`` (source ``gpu_topo``) with
the reason, and ``ops.collection_status`` says ``invalid``.
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS raw")
    op.execute(
        """
        CREATE TABLE raw.gpu_topo_captures (
            run_id        text        NOT NULL,
            source        text        NOT NULL,   -- the host (node name) the capture is from
            captured_at   timestamptz NOT NULL,   -- when the node printed it (file: its mtime unless given)
            collected_at  timestamptz NOT NULL,   -- when we landed it
            origin        text        NOT NULL,   -- ssh | agent | file:<name>
            raw_text      text        NOT NULL,   -- as printed (a parsed capture is UTF-8 without NUL)
            gpu_count     integer     NOT NULL CHECK (gpu_count >= 0),
            nic_count     integer     NOT NULL CHECK (nic_count >= 0),
            matrix        jsonb       NOT NULL,   -- TopoMatrix.to_json()
            PRIMARY KEY (run_id, source)
        )
        """
    )
    op.execute("CREATE INDEX gpu_topo_captures_host ON raw.gpu_topo_captures (source, captured_at)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS raw.gpu_topo_captures")
