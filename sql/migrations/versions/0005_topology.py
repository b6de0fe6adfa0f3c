"""Topology: versioned snapshots of the derived fabric model, with findings and diffs.

Revision ID: 0005
Revises: 0001
Create Date: 2026-12-03

A version is written only when the derived content changed (``content_hash``), so the version
list is the fabric's change history. ``versions.model`` holds the whole JSON contract
(docs/topology-json.md) for ``topology show`` and ``diff``; the tables beside it hold the same
facts in rows for SQL and dbt. Rows of one version are immutable.
"""

from alembic import op

revision = "0005"
down_revision = "0001"
branch_labels = ("topology",)
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS topology")
    op.execute(
        """
        CREATE TABLE topology.versions (
            version         integer     PRIMARY KEY,
            created_at      timestamptz NOT NULL,
            run_id          text        NOT NULL,
            content_hash    text        NOT NULL,   -- equal to the previous version's: nothing written
            parent_version  integer     REFERENCES topology.versions (version),
            inputs          jsonb       NOT NULL DEFAULT '{}'::jsonb,   -- source runs and row counts read
            counts          jsonb       NOT NULL DEFAULT '{}'::jsonb,   -- switches, hosts, links, findings
            model           jsonb       NOT NULL                         -- the JSON contract, whole
        )
        """
    )
    op.execute(
        """
        CREATE TABLE topology.switches (
            version         integer     NOT NULL REFERENCES topology.versions (version) ON DELETE CASCADE,
            id              text        NOT NULL,   -- node GUID or chassis MAC
            name            text        NOT NULL,
            fabric          text        NOT NULL CHECK (fabric IN ('ib', 'eth')),
            identity_kind   text        NOT NULL,
            tier            text        CHECK (tier IN ('leaf', 'spine', 'core')),
            tier_reason     text        NOT NULL,
            model           text,
            uplinks         integer     NOT NULL,
            downlinks       integer     NOT NULL,
            rail            text,
            PRIMARY KEY (version, id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE topology.hosts (
            version             integer NOT NULL REFERENCES topology.versions (version) ON DELETE CASCADE,
            host                text    NOT NULL,
            role                text    NOT NULL,   -- compute, or why not (ufm_server, not_on_fabric ...)
            role_reason         text    NOT NULL,
            block               text,
            spine_group         text,
            pod                 text,
            nvlink_domain       text,
            nvlink_sub_domain   text,
            rack                text,
            valid               boolean NOT NULL,
            invalid_reason      text,
            hcas                jsonb   NOT NULL DEFAULT '[]'::jsonb,
            sources             text[]  NOT NULL DEFAULT '{}',
            PRIMARY KEY (version, host)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE topology.domains (
            version         integer NOT NULL REFERENCES topology.versions (version) ON DELETE CASCADE,
            level           text    NOT NULL CHECK (level IN ('block', 'spine_group', 'pod')),
            id              text    NOT NULL,
            name            text    NOT NULL,
            members         text[]  NOT NULL,
            hosts           integer NOT NULL,
            design_size     integer,
            valid           boolean NOT NULL,
            reason          text,
            PRIMARY KEY (version, id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE topology.links (
            version         integer NOT NULL REFERENCES topology.versions (version) ON DELETE CASCADE,
            a_device        text    NOT NULL,
            a_port          text    NOT NULL,
            b_device        text    NOT NULL,
            b_port          text    NOT NULL,
            kind            text    NOT NULL CHECK (kind IN ('eth', 'ib', 'nvlink')),
            speed_gbps      double precision,
            width           text,
            both_sides      boolean NOT NULL,
            evidence        jsonb   NOT NULL,
            PRIMARY KEY (version, a_device, a_port, b_device, b_port),
            CHECK ((a_device, a_port) < (b_device, b_port))
        )
        """
    )
    op.execute(
        """
        CREATE TABLE topology.findings (
            version         integer NOT NULL REFERENCES topology.versions (version) ON DELETE CASCADE,
            seq             integer NOT NULL,
            kind            text    NOT NULL,
            severity        text    NOT NULL CHECK (severity IN ('info', 'warning', 'error', 'critical')),
            message         text    NOT NULL,
            devices         text[]  NOT NULL,
            ports           text[]  NOT NULL,
            evidence        jsonb   NOT NULL,
            PRIMARY KEY (version, seq)
        )
        """
    )
    op.execute("CREATE INDEX findings_kind ON topology.findings (kind, severity)")
    op.execute(
        """
        CREATE TABLE topology.diffs (
            version         integer NOT NULL REFERENCES topology.versions (version) ON DELETE CASCADE,
            from_version    integer REFERENCES topology.versions (version),
            section         text    NOT NULL,   -- switches, hosts, domains, links, findings
            change          text    NOT NULL CHECK (change IN ('added', 'removed', 'changed')),
            key             text    NOT NULL,
            before          jsonb,
            after           jsonb,
            PRIMARY KEY (version, section, key)
        )
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP TABLE IF EXISTS topology.diffs, topology.findings, topology.links, topology.domains, "
        "topology.hosts, topology.switches, topology.versions"
    )
