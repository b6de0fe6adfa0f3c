"""Budget: admission in two round trips (functions for the locked read and the reservation).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02

The webhook sends ``BEGIN; SELECT * FROM agents.admission_view(...)`` and
``SELECT agents.reserve(...); COMMIT``: two round trips instead of five, which on 2 shared cores
was a large part of the CPU per admission. The decision between them stays in Python
(``core.budget.decide``).

``admission_view`` locks the root's envelope row first and only then reads: a PL/pgSQL statement
takes a fresh snapshot under READ COMMITTED, so it sees every reservation committed by the
admissions it waited for. (One ``SELECT ... FOR UPDATE`` re-reads the locked row after waiting but
evaluates its subqueries with the snapshot it started with: live-pod and fan-out counts came out
short under concurrency.) Each part is an index lookup by ``(root_id, agent_id)`` or
``(root_id, parent_id)`` (0011); the walks follow parent links strictly up or down in depth
(admission makes depth = parent + 1), so stored cycles cannot loop them; descendants are summed
only under ancestors that carry a subtree cap.
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

ADMISSION_VIEW = """
CREATE FUNCTION agents.admission_view(p_root text, p_parent text, p_agent text)
RETURNS TABLE (
    root_id text, namespace text, client text, tier text, gpu_hours numeric, cost_usd numeric,
    max_live_pods integer, max_depth integer, max_fan_out integer, deadline timestamptz,
    reserved_gpu_hours numeric, reserved_cost_usd numeric, spent_gpu_hours numeric, spent_cost_usd numeric,
    observed_gpu_hours numeric, observed_cost_usd numeric, state text,
    live_pods bigint, agent_exists boolean, parent json, parent_live_children bigint, tightest_cap json
)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM agents.envelopes e WHERE e.root_id = p_root FOR UPDATE;
    RETURN QUERY
    WITH RECURSIVE up AS (
        SELECT l.agent_id, l.parent_id, l.depth, l.subtree_cap_gpu_hours AS cap
          FROM agents.ledger l WHERE l.root_id = p_root AND l.agent_id = p_parent
        UNION ALL
        SELECT l.agent_id, l.parent_id, l.depth, l.subtree_cap_gpu_hours
          FROM up JOIN agents.ledger l ON l.root_id = p_root AND l.agent_id = up.parent_id AND l.depth < up.depth
    ), down AS (
        SELECT up.agent_id AS ancestor, l.agent_id, l.depth,
               CASE WHEN l.state = 'reserved' THEN l.reserved_gpu_hours ELSE l.settled_gpu_hours END AS hours
          FROM up JOIN agents.ledger l ON l.root_id = p_root AND l.parent_id = up.agent_id AND l.depth > up.depth
         WHERE up.cap IS NOT NULL
        UNION ALL
        SELECT down.ancestor, l.agent_id, l.depth,
               CASE WHEN l.state = 'reserved' THEN l.reserved_gpu_hours ELSE l.settled_gpu_hours END
          FROM down JOIN agents.ledger l
            ON l.root_id = p_root AND l.parent_id = down.agent_id AND l.depth > down.depth
    ), capped AS (
        SELECT up.agent_id, up.depth,
               up.cap - coalesce((SELECT sum(down.hours) FROM down WHERE down.ancestor = up.agent_id), 0) AS left_h
          FROM up WHERE up.cap IS NOT NULL
    )
    SELECT e.root_id, e.namespace, e.client, e.tier, e.gpu_hours, e.cost_usd, e.max_live_pods, e.max_depth,
           e.max_fan_out, e.deadline, e.reserved_gpu_hours, e.reserved_cost_usd, e.spent_gpu_hours, e.spent_cost_usd,
           e.observed_gpu_hours, e.observed_cost_usd, e.state,
           (SELECT count(*) FROM agents.ledger l WHERE l.root_id = e.root_id AND l.state = 'reserved'),
           EXISTS (SELECT 1 FROM agents.ledger l WHERE l.root_id = e.root_id AND l.agent_id = p_agent),
           (SELECT json_build_array(l.agent_id, l.parent_id, l.depth, l.state, l.reserved_gpu_hours::text,
                   l.settled_gpu_hours::text, l.subtree_cap_gpu_hours::text)
              FROM agents.ledger l WHERE l.root_id = e.root_id AND l.agent_id = p_parent),
           (SELECT count(*) FROM agents.ledger l
             WHERE l.root_id = e.root_id AND l.parent_id = p_parent AND l.state = 'reserved'),
           (SELECT json_build_array(c.agent_id, c.left_h::text) FROM capped c ORDER BY c.left_h, c.depth DESC LIMIT 1)
      FROM agents.envelopes e WHERE e.root_id = p_root;
END
$fn$
"""

RESERVE = """
CREATE FUNCTION agents.reserve(
    p_root text, p_agent text, p_parent text, p_depth integer, p_namespace text, p_pod text, p_agent_type text,
    p_gpu_units numeric, p_subtree_cap numeric, p_gpu_hours numeric, p_cost_usd numeric, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    INSERT INTO agents.ledger (root_id, agent_id, parent_id, depth, namespace, pod, agent_type, gpu_units,
                               subtree_cap_gpu_hours, reserved_gpu_hours, reserved_cost_usd, state, reserved_at)
    VALUES (p_root, p_agent, p_parent, p_depth, p_namespace, p_pod, p_agent_type, p_gpu_units,
            p_subtree_cap, p_gpu_hours, p_cost_usd, 'reserved', p_now);
    UPDATE agents.envelopes SET reserved_gpu_hours = reserved_gpu_hours + p_gpu_hours,
           reserved_cost_usd = reserved_cost_usd + p_cost_usd, updated_at = p_now
     WHERE root_id = p_root;
END
$fn$
"""


def upgrade() -> None:
    op.execute(ADMISSION_VIEW)
    op.execute(RESERVE)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS agents.reserve")
    op.execute("DROP FUNCTION IF EXISTS agents.admission_view")
