"""The cost fact's idle lines say why they are idle (issue 21, part 5).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03

``finops.gpu_cost_hourly`` is dbt's table (incremental, ``on_schema_change='fail'``), so a
warehouse built before ``x_IdleReason`` existed would stop the next dbt build. This adds the
column to a fact that is already there (a fresh warehouse has none yet: dbt creates it with the
column and its contract) and says what the old idle lines were: everything idle then was
``unallocated`` (stranded MIG slices were not split out). Old lines are not repriced or re-split;
``gpufabric finops restate`` does that, audited.
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        DO $$
        BEGIN
            IF to_regclass('finops.gpu_cost_hourly') IS NOT NULL THEN
                ALTER TABLE finops.gpu_cost_hourly ADD COLUMN IF NOT EXISTS "x_IdleReason" text;
                UPDATE finops.gpu_cost_hourly SET "x_IdleReason" = 'unallocated'
                 WHERE "x_LineType" = 'idle' AND "x_IdleReason" IS NULL;
            END IF;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute('ALTER TABLE IF EXISTS finops.gpu_cost_hourly DROP COLUMN IF EXISTS "x_IdleReason"')
