"""Budget: per-root envelopes, the reservation/settlement ledger and the enforcement audit.

Revision ID: 0009
Revises: 0001
Create Date: 2026-12-02

``agents.envelopes`` has one row per root task; admission locks that row (SELECT ... FOR UPDATE)
so all reservations of one tree are serialised while different trees admit in parallel. The
running totals (reserved, spent, observed) live on the row so a decision needs no aggregate over
history. ``agents.ledger`` is one row per admitted agent: its reservation and, once finished,
its settlement (measured usage replaces the reservation). ``agents.budget_audit`` records every
denial, enforcement step and alert with the reason.
"""

from alembic import op

revision = "0009"
down_revision = "0001"
branch_labels = ("budget",)
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS agents")
    op.execute(
        """
        CREATE TABLE agents.envelopes (
            root_id             text        PRIMARY KEY,
            namespace           text        NOT NULL,
            client              text        NOT NULL,
            tier                text        NOT NULL,
            source              text        NOT NULL CHECK (source IN ('annotation', 'config')),
            gpu_hours           numeric     NOT NULL CHECK (gpu_hours >= 0),
            cost_usd            numeric     NOT NULL CHECK (cost_usd >= 0),
            max_live_pods       integer     NOT NULL,
            max_depth           integer     NOT NULL,
            max_fan_out         integer     NOT NULL,
            deadline            timestamptz,
            reserved_gpu_hours  numeric     NOT NULL DEFAULT 0,
            reserved_cost_usd   numeric     NOT NULL DEFAULT 0,
            spent_gpu_hours     numeric     NOT NULL DEFAULT 0,
            spent_cost_usd      numeric     NOT NULL DEFAULT 0,
            observed_gpu_hours  numeric     NOT NULL DEFAULT 0,   -- from agents.tree_usage
            observed_cost_usd   numeric     NOT NULL DEFAULT 0,
            state               text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'over_budget', 'closed')),
            created_at          timestamptz NOT NULL,
            updated_at          timestamptz NOT NULL
        )
        """
    )
    op.execute(
        """
        CREATE TABLE agents.ledger (
            root_id             text        NOT NULL REFERENCES agents.envelopes (root_id) ON DELETE CASCADE,
            agent_id            text        NOT NULL,
            parent_id           text,
            depth               integer     NOT NULL,
            namespace           text        NOT NULL,
            pod                 text        NOT NULL,
            agent_type          text        NOT NULL,
            gpu_units           numeric     NOT NULL,
            subtree_cap_gpu_hours numeric,
            reserved_gpu_hours  numeric     NOT NULL,
            reserved_cost_usd   numeric     NOT NULL,
            settled_gpu_hours   numeric,
            settled_cost_usd    numeric,
            state               text        NOT NULL CHECK (state IN ('reserved', 'settled')),
            reserved_at         timestamptz NOT NULL,
            settled_at          timestamptz,
            PRIMARY KEY (root_id, agent_id)
        )
        """
    )
    op.execute("CREATE INDEX ledger_live ON agents.ledger (root_id) WHERE state = 'reserved'")
    op.execute(
        """
        CREATE TABLE agents.budget_audit (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            at          timestamptz NOT NULL,
            controller  text        NOT NULL,   -- 'webhook', 'reconciler', 'cli', or a test's name
            root_id     text,
            namespace   text,
            pod         text,
            action      text        NOT NULL CHECK (action IN
                ('denied', 'gate', 'deadline', 'delete', 'alert', 'failed')),
            lim         text        NOT NULL DEFAULT '',
            reason      text        NOT NULL,
            alert_only  boolean     NOT NULL DEFAULT false
        )
        """
    )
    op.execute("CREATE INDEX budget_audit_root ON agents.budget_audit (root_id, at)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agents.budget_audit")
    op.execute("DROP TABLE IF EXISTS agents.ledger")
    op.execute("DROP TABLE IF EXISTS agents.envelopes")
