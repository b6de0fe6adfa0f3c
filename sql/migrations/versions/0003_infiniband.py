"""InfiniBand and NVLink: raw nodes, ports and links from ibnetdiscover/UFM, NVLink domains.

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-02

Append-only like every raw table: one row per observation per collection, keyed by
(run_id, source, ...), where source is the configured fabric manager / file name.
"""

from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = ("infiniband",)
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE raw.ib_nodes (
            run_id          text        NOT NULL,
            source          text        NOT NULL,   -- the configured fabric manager or file
            collected_at    timestamptz NOT NULL,
            guid            text        NOT NULL,   -- node GUID, 0x + 16 hex: the identity
            node_type       text        NOT NULL CHECK (node_type IN ('switch', 'ca', 'router')),
            port_count      integer     NOT NULL CHECK (port_count >= 0),
            description     text        NOT NULL,   -- NodeDescription exactly as reported
            system_guid     text,                   -- groups the ASICs of one multi-ASIC system
            vendor_id       text,
            device_id       text,
            lid             integer,
            node_class      text        NOT NULL,   -- core.infiniband.NodeClass
            class_reason    text        NOT NULL,
            hostname        text,                   -- read from the description by the rules
            hca             text,                   -- mlx5_N / HCA-N
            switch_name     text,
            switch_model    text,
            PRIMARY KEY (run_id, source, guid)
        )
        """
    )
    op.execute("CREATE INDEX ib_nodes_latest ON raw.ib_nodes (source, collected_at DESC)")
    op.execute("CREATE INDEX ib_nodes_host ON raw.ib_nodes (hostname) WHERE hostname IS NOT NULL")
    op.execute(
        """
        CREATE TABLE raw.ib_ports (
            run_id          text        NOT NULL,
            source          text        NOT NULL,
            collected_at    timestamptz NOT NULL,
            node_guid       text        NOT NULL,
            port            integer     NOT NULL CHECK (port >= 0),
            port_guid       text,
            ext_port        integer,
            peer_guid       text        NOT NULL,
            peer_port       integer     NOT NULL,
            peer_port_guid  text,
            peer_description text,
            lid             integer,
            lmc             integer,
            peer_lid        integer,
            width           text,                   -- 4x
            speed           text,                   -- HDR, NDR, ...
            speed_gbps      double precision,
            PRIMARY KEY (run_id, source, node_guid, port)
        )
        """
    )
    op.execute("CREATE INDEX ib_ports_latest ON raw.ib_ports (source, collected_at DESC)")
    op.execute(
        """
        CREATE TABLE raw.ib_links (
            run_id          text        NOT NULL,
            source          text        NOT NULL,
            collected_at    timestamptz NOT NULL,
            a_guid          text        NOT NULL,   -- ends ordered: (a_guid, a_port) < (b_guid, b_port)
            a_port          integer     NOT NULL,
            b_guid          text        NOT NULL,
            b_port          integer     NOT NULL,
            width           text,
            speed           text,
            speed_gbps      double precision,
            both_sides      boolean     NOT NULL,   -- false: only one end reported it
            internal        boolean     NOT NULL DEFAULT false,  -- switch-internal port (Quantum-2 port 65)
            PRIMARY KEY (run_id, source, a_guid, a_port, b_guid, b_port),
            CHECK ((a_guid, a_port) < (b_guid, b_port))
        )
        """
    )
    op.execute("CREATE INDEX ib_links_latest ON raw.ib_links (source, collected_at DESC)")
    op.execute(
        """
        CREATE TABLE raw.nvlink_domains (
            run_id          text        NOT NULL,
            source          text        NOT NULL,   -- the configured input (labels file, csv, NMX)
            collected_at    timestamptz NOT NULL,
            node            text        NOT NULL,   -- Kubernetes node name / host
            method          text        NOT NULL
                CHECK (method IN ('gfd_label', 'nvidia_smi', 'nmx', 'hgx_single_node')),
            domain          text        NOT NULL,   -- <ClusterUUID>.<CliqueID>, NMX DomainUUID, or nvl-<host>
            cluster_uuid    text,
            clique_id       text,
            gpus            integer,
            detail          jsonb       NOT NULL DEFAULT '{}'::jsonb,
            PRIMARY KEY (run_id, source, node)
        )
        """
    )
    op.execute("CREATE INDEX nvlink_domains_latest ON raw.nvlink_domains (source, collected_at DESC)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS raw.nvlink_domains, raw.ib_links, raw.ib_ports, raw.ib_nodes")
