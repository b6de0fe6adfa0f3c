"""Publish: every publish of the fabric to a cluster, what it changed, and from which topology.

Revision ID: 0008
Revises: 0001
Create Date: 2026-12-03

One ``publish.runs`` row per publish attempt (applied, dry run, GitOps write, refused by the
blast-radius guard, failed), naming the topology version it rendered and, for a rollback, the
run it restored. ``desired`` holds the whole rendered state (labels and extended resources per
node, Kueue objects), so a rollback re-applies exactly what was published then, even after the
tenants or the scheme changed. ``label_changes`` and ``object_changes`` are the diff in rows;
``label_values`` keeps the readable domain name behind every label value (a value may be a
hash when the name is over 63 characters). No foreign key to ``topology.versions``: branches
migrate in any order.
"""

from alembic import op

revision = "0008"
down_revision = "0001"
branch_labels = ("publish",)
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS publish")
    op.execute(
        """
        CREATE TABLE publish.runs (
            id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            started_at        timestamptz NOT NULL,
            cluster           text        NOT NULL,
            topology_version  integer     NOT NULL,
            mode              text        NOT NULL CHECK (mode IN ('apply', 'dry_run', 'gitops', 'rollback')),
            status            text        NOT NULL CHECK (status IN ('applied', 'planned', 'written', 'refused',
                                                                     'failed')),
            forced            boolean     NOT NULL DEFAULT false,
            field_manager     text        NOT NULL,
            rollback_of       bigint      REFERENCES publish.runs (id),
            counts            jsonb       NOT NULL DEFAULT '{}'::jsonb,
            message           text,
            desired           jsonb       NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX runs_topology_version ON publish.runs (topology_version, id)")
    op.execute(
        """
        CREATE TABLE publish.label_changes (
            run_id   bigint NOT NULL REFERENCES publish.runs (id) ON DELETE CASCADE,
            node     text   NOT NULL,
            kind     text   NOT NULL CHECK (kind IN ('label', 'resource')),
            key      text   NOT NULL,
            change   text   NOT NULL CHECK (change IN ('added', 'changed', 'removed')),
            before   text,
            after    text,
            PRIMARY KEY (run_id, node, kind, key)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE publish.object_changes (
            run_id     bigint NOT NULL REFERENCES publish.runs (id) ON DELETE CASCADE,
            kind       text   NOT NULL,
            namespace  text   NOT NULL DEFAULT '',
            name       text   NOT NULL,
            change     text   NOT NULL CHECK (change IN ('created', 'changed', 'deleted')),
            before     jsonb,
            after      jsonb,
            PRIMARY KEY (run_id, kind, namespace, name)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE publish.label_values (
            run_id     bigint NOT NULL REFERENCES publish.runs (id) ON DELETE CASCADE,
            key        text   NOT NULL,
            value      text   NOT NULL,
            level      text   NOT NULL,
            domain_id  text   NOT NULL,
            readable   text   NOT NULL,   -- the domain's human name when the value had to be hashed
            PRIMARY KEY (run_id, key, value)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP SCHEMA IF EXISTS publish CASCADE")
