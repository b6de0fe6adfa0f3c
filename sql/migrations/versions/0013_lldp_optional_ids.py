"""LLDP: a neighbour's chassis id and port id may be absent.

Revision ID: 0013
Revises: 0002 (the lldp branch)
Create Date: 2026-12-03

Real devices and agents leave them out (issue 19): Junos brief replies carry no remote port id,
NX-OS ``show lldp neighbors`` no chassis id, LibreNMS-style walks omit lldpRemChassisId /
lldpRemPortId columns. The neighbour is still there and lands; the missing side is NULL
(its subtype may still be known).
"""

from alembic import op

revision = "0013"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = ("chassis_id_subtype", "chassis_id_raw", "chassis_id", "port_id_subtype", "port_id_raw", "port_id")


def upgrade() -> None:
    for column in COLUMNS:  # constants above, not input
        op.alter_column("lldp_neighbor_observations", column, schema="raw", nullable=True)


def downgrade() -> None:
    op.execute(
        "DELETE FROM raw.lldp_neighbor_observations WHERE chassis_id_subtype IS NULL OR chassis_id_raw IS NULL"
        " OR chassis_id IS NULL OR port_id_subtype IS NULL OR port_id_raw IS NULL OR port_id IS NULL"
    )
    for column in COLUMNS:
        op.alter_column("lldp_neighbor_observations", column, schema="raw", nullable=False)
