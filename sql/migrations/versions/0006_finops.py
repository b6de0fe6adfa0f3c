"""FinOps: Kubernetes pod and node snapshots, agent-tree usage, cost anomalies and alert deliveries.

Revision ID: 0006
Revises: 0001
Create Date: 2026-12-02

``raw.k8s_pod_snapshots`` is append-only: one row per pod per observation (a scheduled list or a
watch event), keyed by (run_id, source, uid, collected_at, event). Intervals, node changes and
costs are derived downstream (dbt ``int_finops_*``), so nothing is decided at collection time that
an analyst could not re-derive from the rows. Attribution columns hold the dimensions after
defaulting (``unattributed``); the labels exactly as served stay in ``labels``.

``agents.tree_usage`` is maintained by the snapshot asset in the same transaction as the
snapshots, so the budget controller reads it with the latency of one snapshot run, not of a dbt
build. ``ops.finops_anomalies`` and ``ops.alert_deliveries`` are operational state of the
anomaly detector and the webhook sensor; analysts see anomalies through the dbt view
``finops.cost_anomalies``.
"""

from alembic import op

revision = "0006"
down_revision = "0001"
branch_labels = ("finops",)
depends_on = None


def upgrade() -> None:
    for schema in ("raw", "ops", "agents"):
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    op.execute(
        """
        CREATE TABLE raw.k8s_pod_snapshots (
            run_id          text        NOT NULL,
            source          text        NOT NULL,   -- the configured cluster name (sources.kubernetes[].name)
            collected_at    timestamptz NOT NULL,
            event           text        NOT NULL CHECK (event IN ('list', 'ADDED', 'MODIFIED', 'DELETED')),
            uid             text        NOT NULL,
            namespace       text        NOT NULL,
            name            text        NOT NULL,
            node            text,                   -- spec.nodeName; NULL until scheduled
            phase           text,
            start_time      timestamptz,            -- status.startTime
            end_time        timestamptz,            -- last container finishedAt, or deletion seen
            gpus            integer     NOT NULL DEFAULT 0 CHECK (gpus >= 0),     -- nvidia.com/gpu
            mig             jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- {"1g.10gb": 2}
            gpu_requests    jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- every GPU-like request as served
            unknown_gpu_resources jsonb NOT NULL DEFAULT '{}'::jsonb,  -- GPU-like names we cannot price
            root_id         text        NOT NULL,
            parent_id       text        NOT NULL,
            depth           integer,
            client          text        NOT NULL,
            task            text        NOT NULL,
            agent_type      text        NOT NULL,
            tier            text        NOT NULL,
            labels          jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- every label as served
            issues          text[]      NOT NULL DEFAULT '{}',         -- what was wrong with this pod's input
            PRIMARY KEY (run_id, source, uid, collected_at, event)
        )
        """
    )
    op.execute("CREATE INDEX k8s_pod_snapshots_uid ON raw.k8s_pod_snapshots (source, uid, collected_at)")
    op.execute("CREATE INDEX k8s_pod_snapshots_root ON raw.k8s_pod_snapshots (root_id)")
    op.execute(
        """
        CREATE TABLE raw.k8s_node_snapshots (
            run_id          text        NOT NULL,
            source          text        NOT NULL,
            collected_at    timestamptz NOT NULL,
            node            text        NOT NULL,
            gpu_model       text,                   -- nvidia.com/gpu.product (GPU Feature Discovery)
            gpu_count       integer     NOT NULL DEFAULT 0 CHECK (gpu_count >= 0),
            mig_capable     boolean,
            labels          jsonb       NOT NULL DEFAULT '{}'::jsonb,
            allocatable     jsonb       NOT NULL DEFAULT '{}'::jsonb,
            PRIMARY KEY (run_id, source, node)
        )
        """
    )
    op.execute("CREATE INDEX k8s_node_snapshots_node ON raw.k8s_node_snapshots (source, node, collected_at)")
    op.execute(
        """
        CREATE TABLE agents.tree_usage (
            root_id                 text        PRIMARY KEY,
            client                  text        NOT NULL,
            task                    text        NOT NULL,
            agent_type              text        NOT NULL,   -- of the root pod (else the shallowest seen)
            tier                    text        NOT NULL,
            clusters                text[]      NOT NULL,
            pods_total              integer     NOT NULL,
            live_pods               integer     NOT NULL,
            max_depth               integer,
            max_fan_out             integer     NOT NULL,   -- most children under one parent
            gpus_live               numeric     NOT NULL,   -- GPU units held now (MIG weighted)
            gpu_hours               numeric     NOT NULL,
            cost_usd                numeric,                -- NULL while any pod is unpriced
            burn_rate_usd_per_hour  numeric,
            unpriced_pods           integer     NOT NULL DEFAULT 0,
            first_start             timestamptz,
            as_of                   timestamptz NOT NULL,
            updated_at              timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX tree_usage_client ON agents.tree_usage (client, as_of)")
    op.execute(
        """
        CREATE TABLE ops.finops_anomalies (
            anomaly_id      text        PRIMARY KEY,  -- stable hash of (client, agent_type, tier, hour)
            client          text        NOT NULL,
            agent_type      text        NOT NULL,
            tier            text        NOT NULL,
            hour            timestamptz NOT NULL,
            method          text        NOT NULL,     -- seasonal_hour_of_week | seasonal_hour_of_day | burn_rate
            expected_usd    numeric     NOT NULL,
            actual_usd      numeric     NOT NULL,
            impact_usd      numeric     NOT NULL,
            relative_impact double precision,         -- NULL when expected is 0
            score           double precision NOT NULL,
            baseline_samples integer    NOT NULL,
            detail          jsonb       NOT NULL DEFAULT '{}'::jsonb,
            run_id          text        NOT NULL,
            detected_at     timestamptz NOT NULL DEFAULT now(),
            UNIQUE (client, agent_type, tier, hour)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE ops.alert_deliveries (
            anomaly_id      text        PRIMARY KEY REFERENCES ops.finops_anomalies (anomaly_id) ON DELETE CASCADE,
            status          text        NOT NULL CHECK (status IN ('delivered', 'failed')),
            attempts        integer     NOT NULL,
            http_status     integer,
            last_error      text,
            first_attempt_at timestamptz NOT NULL,
            finished_at     timestamptz NOT NULL
        )
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP TABLE IF EXISTS ops.alert_deliveries, ops.finops_anomalies, agents.tree_usage, "
        "raw.k8s_node_snapshots, raw.k8s_pod_snapshots"
    )
