"""FinOps price book and restatement audit (issue 25, part 2).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03

``finops.price_book`` is the only price list the cost fact is priced from: the site file's
``rate_cards``, checked by ``core.finops.price_book`` and loaded by ``services.price_book``
(the ``finops/price_book`` asset before dbt, and ``gpufabric finops prices|restate``). A load
replaces the whole book in one transaction and only when it differs, so ``loaded_at`` says when
the prices in force last changed. It lives in ``finops`` so analysts (``finops_reader``) can see
the prices behind every line. Overlaps are refused by the loader (core), not by an exclusion
constraint: that would need btree_gist, which a managed Postgres may not offer.

``ops.finops_restatements`` is the audit of ``gpufabric finops restate``: who, when, the range
repriced, why, how many lines changed and the totals before and after. Lines of the cost fact
outside a restatement are never repriced (the fact is incremental, docs/architecture.md).
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE finops.price_book (
            gpu_model        text          NOT NULL,   -- nvidia.com/gpu.product
            tier             text          NOT NULL,   -- execution tier, '*' for every other tier and idle
            effective_from   date          NOT NULL,   -- UTC date, inclusive
            effective_to     date,                     -- UTC date, exclusive; NULL: open
            currency         text          NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
            unit_price       numeric(12,4) NOT NULL CHECK (unit_price > 0),  -- per GPU-hour, what the tier pays
            list_unit_price  numeric(12,4) NOT NULL CHECK (list_unit_price >= unit_price),
            source           text          NOT NULL,   -- the site file it came from
            loaded_at        timestamptz   NOT NULL,
            PRIMARY KEY (gpu_model, tier, effective_from),
            CHECK (effective_to IS NULL OR effective_to > effective_from)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE ops.finops_restatements (
            restatement_id     bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            requested_by       text         NOT NULL,   -- the database role and OS user who asked
            requested_at       timestamptz  NOT NULL,
            finished_at        timestamptz  NOT NULL,
            range_from         timestamptz  NOT NULL,   -- ChargePeriodStart >= range_from
            range_to           timestamptz  NOT NULL,   -- ChargePeriodStart <  range_to
            reason             text         NOT NULL CHECK (length(btrim(reason)) > 0),
            price_book_loaded_at timestamptz,           -- the book the range was repriced with
            lines_before       bigint       NOT NULL,
            lines_after        bigint       NOT NULL,
            lines_changed      bigint       NOT NULL,   -- added, removed or with a different cost
            old_list_cost      numeric      NOT NULL,
            new_list_cost      numeric      NOT NULL,
            old_effective_cost numeric      NOT NULL,
            new_effective_cost numeric      NOT NULL,
            CHECK (range_to > range_from)
        )
        """
    )
    op.execute("CREATE INDEX finops_restatements_range ON ops.finops_restatements (range_from, range_to)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS ops.finops_restatements")
    op.execute("DROP TABLE IF EXISTS finops.price_book")
