"""Budget: settlements that are not plain measurement are audited (``action = 'settled'``).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

Settle-on-finish (``connectors/warehouse/settlement.py``) replaces a reservation with the pod's
measured usage from the cost fact. When it has to do something else — release a reservation
whose pod was never created, or settle from the pod snapshots because the cost fact stayed
behind — it says so in ``agents.budget_audit``; the CHECK on ``action`` gains ``'settled'``.
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_OLD = "('denied', 'gate', 'deadline', 'delete', 'alert', 'failed')"
_NEW = "('denied', 'gate', 'deadline', 'delete', 'alert', 'failed', 'settled')"


def upgrade() -> None:
    op.execute(
        "ALTER TABLE agents.budget_audit DROP CONSTRAINT budget_audit_action_check, "
        f"ADD CONSTRAINT budget_audit_action_check CHECK (action IN {_NEW})"
    )


def downgrade() -> None:
    op.execute("DELETE FROM agents.budget_audit WHERE action = 'settled'")
    op.execute(
        "ALTER TABLE agents.budget_audit DROP CONSTRAINT budget_audit_action_check, "
        f"ADD CONSTRAINT budget_audit_action_check CHECK (action IN {_OLD})"
    )
