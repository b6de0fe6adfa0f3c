"""LLDP over SNMP: raw neighbour observations, interfaces and polled systems.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03

Append-only raw tables keyed by (run_id, source = the switch's configured name); a retried run
replaces its own rows (``land_collection``). Ids keep their raw bytes beside the normalised text.
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = ("lldp",)
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE raw.lldp_neighbor_observations (
            run_id              text        NOT NULL,
            source              text        NOT NULL,   -- the polled switch, as configured
            collected_at        timestamptz NOT NULL,
            collector           text        NOT NULL,   -- 'snmp' (later 'ssh')
            mib                 text        NOT NULL,   -- 'lldp' (LLDP-MIB) or 'lldp-v2' (LLDP-V2-MIB)
            local_chassis_id    text,                   -- the polled switch's own LLDP chassis id
            local_sys_name      text,
            platform            text,                   -- quirk-registry key applied
            local_port_num      bigint      NOT NULL,   -- lldpRemLocalPortNum / lldpV2RemLocalIfIndex
            rem_index           bigint      NOT NULL,
            time_mark           bigint      NOT NULL,   -- kept for forensics; not part of the key
            local_if_index      bigint,
            local_port          text,                   -- normalised local interface name
            local_port_vendor   text,                   -- as the switch names it
            chassis_id_subtype  smallint    NOT NULL,
            chassis_id_raw      bytea       NOT NULL,
            chassis_id          text        NOT NULL,   -- normalised (MAC aa:bb:.., IP, text or hex)
            port_id_subtype     smallint    NOT NULL,
            port_id_raw         bytea       NOT NULL,
            port_id             text        NOT NULL,
            port_desc           text,
            sys_name            text,                   -- invalid UTF-8 escaped ...
            sys_name_raw        bytea,                  -- ... and the bytes kept when it was not UTF-8
            sys_desc            text,
            remote_port         text,                   -- normalised remote port name when advertised
            remote_platform     text,                   -- guessed from sys_desc
            man_addrs           text[]      NOT NULL DEFAULT '{}'
        )
        """
    )
    op.execute(
        "CREATE INDEX lldp_neighbor_observations_run ON raw.lldp_neighbor_observations (run_id, source)"
    )
    op.execute(
        "CREATE INDEX lldp_neighbor_observations_chassis ON raw.lldp_neighbor_observations (chassis_id, collected_at)"
    )
    op.execute(
        """
        CREATE TABLE raw.snmp_interfaces (
            run_id              text        NOT NULL,
            source              text        NOT NULL,
            collected_at        timestamptz NOT NULL,
            if_index            bigint      NOT NULL,
            name                text,                   -- normalised
            if_name             text,
            if_descr            text,
            if_alias            text,
            if_high_speed_mbps  bigint,
            mac                 text,
            base_port           bigint
        )
        """
    )
    op.execute("CREATE INDEX snmp_interfaces_run ON raw.snmp_interfaces (run_id, source)")
    op.execute(
        """
        CREATE TABLE raw.snmp_systems (
            run_id              text        NOT NULL,
            source              text        NOT NULL,
            collected_at        timestamptz NOT NULL,
            address             text        NOT NULL,
            sys_name            text,
            sys_name_raw        bytea,
            sys_descr           text,
            sys_object_id       text,
            platform            text,
            platform_source     text        NOT NULL,
            mib                 text,
            chassis_id_subtype  smallint,
            chassis_id_raw      bytea,
            chassis_id          text,
            lldp_sys_name       text,
            requests            integer     NOT NULL,
            varbinds            integer     NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX snmp_systems_run ON raw.snmp_systems (run_id, source)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS raw.snmp_systems, raw.snmp_interfaces, raw.lldp_neighbor_observations")
