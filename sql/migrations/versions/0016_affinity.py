"""GPU-NIC affinity per node, derived: the ``topology/gpu_affinity`` asset's output (issue 23).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-12

One derivation (a run of the asset) is one ``topology.gpu_affinity_runs`` row: when, from which
topology version (the fabric whose cabling gave each NIC its rail; NULL when none was stored), and
counts. Per run:

- ``topology.gpu_affinity``: one row per (host, GPU): its best compute NIC(s) (RDMA device names,
  ``NIC<n>`` where the capture names none), the PCIe class of that path (PIX/PXB/PHB/NODE/SYS,
  NULL when the node has no compute NIC), the GPU's NUMA node, CPU list and rail (NULL unless its
  best NICs agree on one), with the rails of all its best NICs;
- ``topology.gpu_affinity_findings``: one row per ``core.affinity.AffinityFinding`` (kind,
  severity, host, the GPUs and NICs concerned, one line for people, the evidence).

Readers take the latest run (``derived_at``); a re-run of the same Dagster run replaces its rows.
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS topology")
    op.execute(
        """
        CREATE TABLE topology.gpu_affinity_runs (
            run_id            text        PRIMARY KEY,
            derived_at        timestamptz NOT NULL,
            topology_version  integer,               -- topology.versions.version whose cabling was used
            hosts             integer     NOT NULL CHECK (hosts >= 0),
            gpus              integer     NOT NULL CHECK (gpus >= 0),
            findings          integer     NOT NULL CHECK (findings >= 0)
        )
        """
    )
    op.execute("CREATE INDEX gpu_affinity_runs_latest ON topology.gpu_affinity_runs (derived_at DESC)")
    op.execute(
        """
        CREATE TABLE topology.gpu_affinity (
            run_id            text     NOT NULL REFERENCES topology.gpu_affinity_runs ON DELETE CASCADE,
            host              text     NOT NULL,
            gpu               integer  NOT NULL CHECK (gpu >= 0),
            best_nics         text[]   NOT NULL,
            path_class        text     CHECK (path_class IN ('PSB', 'PIX', 'PXB', 'PHB', 'NODE', 'SYS')),
            numa_node         integer,
            cpu_affinity      text,
            rail              text,
            rails             text[]   NOT NULL,
            topology_version  integer,
            PRIMARY KEY (run_id, host, gpu)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE topology.gpu_affinity_findings (
            run_id    text     NOT NULL REFERENCES topology.gpu_affinity_runs ON DELETE CASCADE,
            host      text     NOT NULL,
            kind      text     NOT NULL,
            severity  text     NOT NULL,
            gpus      integer[] NOT NULL,
            nics      text[]   NOT NULL,
            detail    text     NOT NULL,
            evidence  jsonb    NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX gpu_affinity_findings_run ON topology.gpu_affinity_findings (run_id, host)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS topology.gpu_affinity_findings")
    op.execute("DROP TABLE IF EXISTS topology.gpu_affinity")
    op.execute("DROP TABLE IF EXISTS topology.gpu_affinity_runs")
