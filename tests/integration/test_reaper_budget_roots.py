"""The orphan reaper learns which roots are over budget or closed from the budget ledger."""

from __future__ import annotations

import pytest

from connectors.warehouse import open_warehouse
from connectors.warehouse.ledger import envelope_root_states
from core.orphans import RootState

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)


def test_stopped_roots_come_from_agents_envelopes(fresh_database_url: str) -> None:
    wh = open_warehouse(fresh_database_url)
    with wh.connect() as conn:
        for root, state in (("r-open", "open"), ("r-over", "over_budget"), ("r-closed", "closed")):
            conn.execute(
                "INSERT INTO agents.envelopes (root_id, namespace, client, tier, source, gpu_hours, cost_usd, "
                "max_live_pods, max_depth, max_fan_out, state, created_at, updated_at) "
                "VALUES (%s, 'ns', 'acme', 'prod', 'config', 10, 30, 10, 3, 5, %s, now(), now())",
                (root, state),
            )
        conn.commit()
    assert envelope_root_states(wh)() == {"r-over": RootState.OVER_BUDGET, "r-closed": RootState.FINISHED}
    wh.dispose()
