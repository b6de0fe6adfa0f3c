"""Shared test fixtures: one embedded Postgres per test session, under ``.data/test``.

The test server is separate from the demo's (``.data/postgres``), so ``make test`` never touches
demo data and the two can run at once. Tests that need an empty database get a fresh one on the
same server (``fresh_database_url``) instead of a second server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"

# Before any of our modules compute paths: every test (and every CLI subprocess a test starts)
# works in the test data dir, against the embedded server, whatever the developer's shell says.
os.environ["GPUFABRIC_DATA_DIR"] = str(ROOT / ".data" / "test")
os.environ.pop("GPUFABRIC_DATABASE_URL", None)
os.environ.pop("GPUFABRIC_CONFIG", None)
os.environ.pop("DAGSTER_HOME", None)
os.environ.setdefault("GPUFABRIC_PG_PORT", "54339")


@pytest.fixture(scope="session")
def warehouse():  # type: ignore[no-untyped-def]
    """The migrated test warehouse, shared by the whole session."""
    from connectors.warehouse import open_warehouse

    wh = open_warehouse()
    yield wh
    wh.dispose()
    # The server is left running, like the demo's: parallel pytest sessions in one checkout share
    # it, and the next session reuses it. `GPUFABRIC_DATA_DIR=.data/test gpufabric db stop` stops it.


@pytest.fixture
def fresh_database_url(warehouse) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """An empty database on the test server, dropped afterwards; URL in libpq form."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin_url = warehouse.base_url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield warehouse.base_url.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def run_id() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.fixture(scope="session")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """``simulated("h100-1su")`` → the running twins (``simulator.up.SimUp``) for a shipped spec.

    Twins start once per spec per session (they are slow to start and cheap to share) and are
    stopped at the end of the session. Tests must not change a twin's state without restoring it.
    """
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path
    from simulator.up import SimUp, sim_down, sim_up

    started: dict[str, tuple[Path, SimUp]] = {}

    def get(spec_name: str) -> SimUp:
        if spec_name not in started:
            root = tmp_path_factory.mktemp(f"sim-{spec_name}")
            started[spec_name] = (root, sim_up(load_spec(resolve_spec_path(spec_name)), root))
        return started[spec_name][1]

    yield get
    for root, _ in started.values():
        sim_down(root)
