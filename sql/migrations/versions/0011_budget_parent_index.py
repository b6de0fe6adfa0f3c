"""Budget: index ledger rows by parent, so admission reads a bounded part of a tree.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

Admission used to read every ledger row of the tree (847 rows in the incident's tree), so its
cost grew with the tree. It now reads the parent, the parent's live children (fan-out) and, only
when an ancestor carries a subtree cap, that ancestor's descendants: lookups by
``(root_id, parent_id)``.
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ledger_parent ON agents.ledger (root_id, parent_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS agents.ledger_parent")
