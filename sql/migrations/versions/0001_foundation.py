"""Foundation: the schemas of the brief, ops status and quarantine, DCIM inventory, finops_reader.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# dbt owns staging, finops and efficiency; we create them empty so grants can be set up front.
PYTHON_SCHEMAS = ("raw", "ops", "topology", "telemetry", "agents")
DBT_SCHEMAS = ("staging", "finops", "efficiency")


def upgrade() -> None:
    for schema in PYTHON_SCHEMAS + DBT_SCHEMAS:
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")

    op.execute(
        """
        CREATE TABLE ops.collection_status (
            run_id          text        NOT NULL,
            source          text        NOT NULL,   -- 'dcim', 'snmp', 'cli', 'ufm', ...
            device          text        NOT NULL,   -- the target as configured (switch name, file, URL)
            status          text        NOT NULL CHECK (status IN
                ('ok','partial','timeout','auth_failure','unreachable','no_data','invalid','error')),
            detail          text,
            rows_landed     integer     NOT NULL DEFAULT 0,
            rows_quarantined integer    NOT NULL DEFAULT 0,
            started_at      timestamptz NOT NULL,
            finished_at     timestamptz NOT NULL,
            PRIMARY KEY (run_id, source, device)
        )
        """
    )
    op.execute("CREATE INDEX collection_status_device ON ops.collection_status (source, device, finished_at)")
    op.execute(
        """
        CREATE TABLE ops.quarantine (
            id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run_id          text        NOT NULL,
            source          text        NOT NULL,
            device          text,
            location        text,                   -- line number, OID, JSON path ...
            reason          text        NOT NULL,
            payload         text        NOT NULL,   -- as received (clipped), invalid UTF-8 escaped
            payload_bytes   bytea,                  -- the raw bytes when they were not UTF-8
            context         jsonb       NOT NULL DEFAULT '{}'::jsonb,
            quarantined_at  timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX quarantine_run ON ops.quarantine (run_id, source)")

    # Append-only: one row per node per collection; natural key (run_id, source, node).
    op.execute(
        """
        CREATE TABLE raw.dcim_inventory (
            run_id          text        NOT NULL,
            source          text        NOT NULL,   -- the configured DCIM export name
            collected_at    timestamptz NOT NULL,
            node            text        NOT NULL,
            rack            text,
            role            text,
            su              text,
            gpu_model       text,
            gpu_count       integer     CHECK (gpu_count >= 0),
            hca_count       integer     CHECK (hca_count >= 0),
            hcas            jsonb       NOT NULL DEFAULT '[]'::jsonb,  -- [{name, rail, guid}]
            bmc_address     inet,
            serial          text,
            extra           jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- columns we do not model, kept
            PRIMARY KEY (run_id, source, node)
        )
        """
    )
    op.execute("CREATE INDEX dcim_inventory_latest ON raw.dcim_inventory (source, collected_at DESC)")

    # Analysts log in with their own role and are granted this one: finops, nothing else.
    op.execute(
        """
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'finops_reader') THEN
                CREATE ROLE finops_reader NOLOGIN;
            END IF;
        END $$
        """
    )
    op.execute("GRANT USAGE ON SCHEMA finops TO finops_reader")
    op.execute("GRANT SELECT ON ALL TABLES IN SCHEMA finops TO finops_reader")
    # Tables dbt creates later (as this same owner) become readable without another grant.
    op.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA finops GRANT SELECT ON TABLES TO finops_reader")
    op.execute("REVOKE ALL ON SCHEMA public FROM finops_reader")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS raw.dcim_inventory, ops.quarantine, ops.collection_status")
