"""Burst lag: each agent pod's creation, scheduling, running and Kueue admission times per run.

Revision ID: 0014
Revises: 0006 (the finops branch: pod observations live there)
Create Date: 2026-12-10

``raw.k8s_pod_lag`` holds one row per pod per run of the lag watch (``assets/agents/burst_lag.py``,
``connectors/kube/lag.py``), keyed by (run_id, source, uid): its labels as served and the
attribution dimensions after defaulting (``unattributed``), what it asked for, and the API
server's own times (whole seconds): ``created_at`` (creationTimestamp), ``scheduled_at``
(PodScheduled True), ``running_at`` (first container start), ``quota_reserved_at`` and
``admitted_at`` (its Kueue Workload's conditions). NULL means not reached by the end of the
window (``window_end``): the dbt mart ``efficiency.pod_scheduling_lag_5m`` counts those pods as
still waiting instead of dropping them. No ordering constraint on the times: clocks of different
components can disagree, and such a row is kept with an issue, not refused.
"""

from alembic import op

revision = "0014"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS raw")
    op.execute(
        """
        CREATE TABLE raw.k8s_pod_lag (
            run_id            text        NOT NULL,
            source            text        NOT NULL,   -- the configured cluster name
            window_start      timestamptz NOT NULL,   -- when the watch started
            window_end        timestamptz NOT NULL,   -- when it ended: times after it are not known yet
            uid               text        NOT NULL,
            namespace         text        NOT NULL,
            name              text        NOT NULL,
            node              text,
            phase             text,                   -- as last seen
            deleted           boolean     NOT NULL DEFAULT false,  -- deleted during the window
            queue_name        text,                   -- kueue.x-k8s.io/queue-name
            workload          text,                   -- the Kueue Workload that admitted it
            agent_id          text,
            root_id           text        NOT NULL,
            parent_id         text        NOT NULL,
            depth             integer,
            client            text        NOT NULL,   -- the tenant
            task              text        NOT NULL,
            agent_type        text        NOT NULL,
            tier              text        NOT NULL,
            gpus              integer     NOT NULL DEFAULT 0 CHECK (gpus >= 0),
            mig               jsonb       NOT NULL DEFAULT '{}'::jsonb,
            labels            jsonb       NOT NULL DEFAULT '{}'::jsonb,
            created_at        timestamptz NOT NULL,
            scheduled_at      timestamptz,
            running_at        timestamptz,
            quota_reserved_at timestamptz,
            admitted_at       timestamptz,
            issues            text[]      NOT NULL DEFAULT '{}',
            PRIMARY KEY (run_id, source, uid),
            CHECK (window_end >= window_start)
        )
        """
    )
    op.execute("CREATE INDEX k8s_pod_lag_created ON raw.k8s_pod_lag (source, created_at)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS raw.k8s_pod_lag")
