"""A BRIN index on when pod snapshots were collected (issue 25, part 3).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05

The incremental ``int_finops_pod_intervals`` asks raw for the pods touched since its last build
(``collected_at >= watermark``). Snapshots land in collection order, so a BRIN index (a few pages
for a year of rows) keeps that to the newest blocks; a B-tree would cost as much as the table's
other index. Raw tables are the migrations' to shape, not dbt's (it once came from a pre-hook).
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS k8s_pod_snapshots_collected_brin ON raw.k8s_pod_snapshots USING brin (collected_at)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS raw.k8s_pod_snapshots_collected_brin")
