"""Orphans: the reaper's audit table, one row per decision on a pod.

Revision ID: 0007
Revises: 0001
Create Date: 2026-12-03

Every decision the orphan reaper (controller, Dagster sensor or CLI) takes is a row: which pod
(namespace, name, uid), its ancestry as labelled, whether it held a GPU (``state``), which rule
made it an orphan and the evidence (Lease renewTime and duration, TTL, root state) as jsonb, the
moment the evidence made it deletable (``eligible_at``) and what was done (``action``). Healthy
pods are not written each pass (850 rows a second says nothing); skipped, deferred, failed,
refused, would-delete and deleted pods are. ``decided_at - eligible_at`` of a ``deleted`` row is
the reaping latency the replay test asserts (<= 60 s).
"""

from alembic import op

revision = "0007"
down_revision = "0001"
branch_labels = ("orphans",)
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS agents")
    op.execute(
        """
        CREATE TABLE agents.reaper_audit (
            id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            pass_id      text        NOT NULL,
            controller   text        NOT NULL,   -- 'reaper', 'sensor', 'cli'
            decided_at   timestamptz NOT NULL,
            namespace    text        NOT NULL,
            pod          text        NOT NULL,
            pod_uid      text        NOT NULL,
            agent_id     text,
            root_id      text,
            parent_id    text,
            depth        integer,
            state        text        NOT NULL CHECK (state IN ('running','gated','suspended','pending','finished')),
            gpus         integer     NOT NULL DEFAULT 0,
            rule         text,                   -- core.orphans.Rule; NULL for invalid ancestry
            orphan_root  text,                   -- '<namespace>/<agent id>' of the orphaned subtree's root
            eligible_at  timestamptz,
            evidence     jsonb       NOT NULL DEFAULT '{}'::jsonb,
            action       text        NOT NULL CHECK (action IN
                ('deleted','would_delete','skipped','deferred','failed','refused')),
            reason       text        NOT NULL DEFAULT '',
            dry_run      boolean     NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX reaper_audit_pod ON agents.reaper_audit (pod_uid)")
    op.execute("CREATE INDEX reaper_audit_time ON agents.reaper_audit (decided_at)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agents.reaper_audit")
