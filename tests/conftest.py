"""Shared test fixtures. Every test session starts from a known, empty state.

Each pytest session gets a data directory of its own, ``.data/test/session-<pid>``: its own
embedded Postgres (a fresh cluster, migrated once), Dagster home and simulated site, and a
registry of the twins it starts. Nothing an earlier run left (rows, published labels, twins)
can leak into this one, whatever was run before and in whatever order; parallel sessions in one
checkout do not see each other. At the end the session stops its twins and its server and
removes the directory; a session that was killed before that is cleaned up by the next one.
Tests that need an empty database within the session get a fresh one on the same server
(``fresh_database_url``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"
TEST_DATA = ROOT / ".data" / "test"
SESSION_DIR = TEST_DATA / f"session-{os.getpid()}"
OWNER_FILE = "owner.json"

# Before any of our modules compute paths: every test (and every CLI subprocess a test starts)
# works in this session's data dir, against its embedded server, whatever the shell says.
os.environ["GPUFABRIC_DATA_DIR"] = str(SESSION_DIR)
os.environ["GPUFABRIC_TWIN_OWNER"] = str(os.getpid())
os.environ.pop("GPUFABRIC_DATABASE_URL", None)
os.environ.pop("GPUFABRIC_CONFIG", None)
os.environ.pop("DAGSTER_HOME", None)
os.environ.setdefault("GPUFABRIC_PG_PORT", "54339")
# pytest-xdist gives its workers the controller's terminal size (COLUMNS=80, LINES=24); rich's
# consoles, made when our CLI modules are imported, would then keep 80 columns for good and ignore
# the width a test asks for. Without them a worker renders as a plain pytest run does.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


def _discard_data_dir(directory: Path) -> None:
    """Stop everything a session's data dir holds (twins, the embedded server) and remove it."""
    from connectors.warehouse.embedded import stop_server
    from simulator import twin
    from simulator.up import sim_down

    sim_down(directory / "sim")  # first: a demo's control plane gets its ordered stop
    twin.reap(directory, only_orphaned=False)
    stop_server(directory / "postgres")
    shutil.rmtree(directory, ignore_errors=True)


def _session_is_alive(directory: Path) -> bool:
    from simulator.twin import start_ticks

    try:
        owner = json.loads((directory / OWNER_FILE).read_text())
        recorded = owner["start_ticks"]
        return recorded is not None and start_ticks(int(owner["pid"])) == recorded
    except (OSError, ValueError, KeyError, TypeError):
        return False


def pytest_sessionstart(session: pytest.Session) -> None:
    """Clean up after sessions that were killed, then claim this session's directory."""
    from simulator.twin import start_ticks

    TEST_DATA.mkdir(parents=True, exist_ok=True)
    for directory in sorted(TEST_DATA.glob("session-*")):
        if directory != SESSION_DIR and not _session_is_alive(directory):
            _discard_data_dir(directory)
    # The layout before per-session directories: one shared server and sim under .data/test.
    if (TEST_DATA / "postgres").exists() or (TEST_DATA / "sim").exists():
        from connectors.warehouse.embedded import stop_server
        from simulator.up import sim_down

        sim_down(TEST_DATA / "sim")
        stop_server(TEST_DATA / "postgres")
        for legacy in ("postgres", "sim", "dagster"):
            shutil.rmtree(TEST_DATA / legacy, ignore_errors=True)
    if SESSION_DIR.exists():  # a PID reused from a killed session
        _discard_data_dir(SESSION_DIR)
    # Claimed whole, owner file included, by one rename: a session starting at the same moment
    # never sees this directory without its owner and takes it for a dead one.
    claim = TEST_DATA / f".claim-{os.getpid()}"
    shutil.rmtree(claim, ignore_errors=True)
    claim.mkdir()
    (claim / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}))
    claim.rename(SESSION_DIR)


# The fixtures that reach the session's shared site: its Postgres, its control plane, its twins.
SITE_FIXTURES = frozenset(
    {"warehouse", "fresh_database_url", "simulated", "control_plane", "kube_cluster", "kube_namespace",
     "fault_proxy", "faults"}
)  # fmt: skip
STANDALONE = "standalone"  # a module-level `pytestmark = pytest.mark.standalone` (see the scheduler)
# A module-level `pytest.mark.warehouse_only`: it reaches the site only through its Postgres
# (`warehouse`, `fresh_database_url`) and leaves nothing there another module reads, so any worker
# may run it; a worker without the site starts a server of its own in its own session dir.
WAREHOUSE_ONLY = "warehouse_only"
WAREHOUSE_FIXTURES = frozenset({"warehouse", "fresh_database_url"})
# What a module with each marker may reach of the session's site.
ALLOWED = {STANDALONE: frozenset(), WAREHOUSE_ONLY: WAREHOUSE_FIXTURES}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{STANDALONE}: an integration module that starts what it needs itself and uses none of the "
        "session's site fixtures, so `make test` may run it beside them (tests/conftest.py)",
    )
    config.addinivalue_line(
        "markers",
        f"{WAREHOUSE_ONLY}: an integration module that uses only the session's Postgres "
        "(warehouse, fresh_database_url), so either `make test` worker may run it (tests/conftest.py)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A module that says it is standalone (or warehouse-only) and yet reaches (more of) the site is
    a collection error: the scheduler would run it on a worker that has no site, beside the tests
    that use it."""
    wrong = []
    for item in items:
        for marker, allowed in ALLOWED.items():
            reached = (SITE_FIXTURES - allowed) & set(item.fixturenames)  # type: ignore[attr-defined]
            if item.get_closest_marker(marker) and reached:
                wrong.append(f"{item.nodeid} is marked {marker} and uses {', '.join(sorted(reached))}")
    if wrong:
        raise pytest.UsageError("a module reaches more of the session's site than its marker says: " + "; ".join(wrong))


def _module_markers(module: str) -> frozenset[str]:
    """The marker names in ``tests/...py``'s module-level ``pytestmark`` (read from its source: the
    xdist controller that asks has collected nothing)."""
    import ast

    try:
        tree = ast.parse((ROOT / module).read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return frozenset(n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute))
    return frozenset()


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs without the plugin that defines the hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """How ``pytest -n 2`` (what ``make test`` runs) splits the suite between its two workers.

    Every test that may touch the session's site (Postgres, the control plane, the twins: all of
    ``tests/integration`` and ``tests/e2e`` but the modules marked ``standalone`` or
    ``warehouse_only``) is one unit of work, so one worker runs them in order on one server, one
    plane and one set of twins, exactly as a plain ``pytest`` would. Unit modules, integration
    modules that start what they need themselves, and those that need only a Postgres (the dbt
    and FinOps modules, ~3 minutes) are units of their own that either worker takes: the site
    worker picks them up once the site's unit is done, the other one all along, starting its own
    embedded server the first time one asks. (Our own scheduler, not ``--dist loadgroup``: xdist
    3.8 renames ``Item._nodeid``, which pytest 9.2 no longer reads, so its groups are silently
    ignored.)
    """
    from functools import cache

    from xdist.scheduler import LoadScopeScheduling

    markers = cache(_module_markers)

    class SiteAndUnitModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            own = module.startswith("tests/unit/") or bool(markers(module) & {STANDALONE, WAREHOUSE_ONLY})
            return module if own else "site"

    return SiteAndUnitModules(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("GPUFABRIC_KEEP_TEST_DATA"):
        return
    _discard_data_dir(SESSION_DIR)


@pytest.fixture(scope="session")
def warehouse():  # type: ignore[no-untyped-def]
    """This session's migrated warehouse (its own embedded server)."""
    from connectors.warehouse import open_warehouse

    wh = open_warehouse()
    yield wh
    wh.dispose()


@pytest.fixture
def fresh_database_url(warehouse) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """An empty database on the test server, dropped afterwards; URL in libpq form."""
    with warehouse.scratch_database("t") as url:
        yield url


@pytest.fixture
def run_id() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.fixture(scope="session")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """``simulated("h100-1su")`` → the running twins (``simulator.up.SimUp``) for a shipped spec.

    Twins start once per spec per session (they are slow to start and cheap to share) and are
    stopped at the end of the session. Tests must not change a twin's state without restoring it.
    No Kubernetes here: the site file has no ``sources.kubernetes`` (nor the GFD ``nvlink``
    source); a control plane per spec would cost seconds each, and Kubernetes tests share the
    session's one (``kube_cluster``), registering ``nodes_from_spec(...)`` themselves.
    """
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path
    from simulator.up import SimUp, sim_down, sim_up

    started: dict[str, tuple[Path, SimUp]] = {}

    def get(spec_name: str) -> SimUp:
        if spec_name not in started:
            root = tmp_path_factory.mktemp(f"sim-{spec_name}")
            started[spec_name] = (root, sim_up(load_spec(resolve_spec_path(spec_name)), root, kubernetes=False))
        return started[spec_name][1]

    yield get
    for root, _ in started.values():
        sim_down(root, plane=False)


@pytest.fixture(scope="session")
def kube_binaries():  # type: ignore[no-untyped-def]
    """The pinned Kubernetes and Kueue binaries (built once per machine, then from the cache;
    `make test` builds them before pytest starts, with progress)."""
    from simulator.controlplane import build

    return build()


@pytest.fixture(scope="session")
def control_plane(kube_binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """One real control plane for the session: etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler and Kueue on loopback, and the node agent. Starts with no nodes: a test
    registers the fake nodes it needs (``control_plane.register_nodes``) under names of its own."""
    from simulator.controlplane import down, up

    workdir = tmp_path_factory.mktemp("controlplane")
    plane = up(workdir, binaries=kube_binaries)
    try:
        yield plane
    finally:
        down(workdir)


@pytest.fixture
def kube_cluster(control_plane):  # type: ignore[no-untyped-def]
    """The session's control plane, emptied of what earlier tests left at cluster scope (Nodes,
    Kueue's cluster objects, webhook configurations other than Kueue's; old test namespaces are
    being deleted). Register the nodes the test needs; use ``kube_namespace`` for namespaced work."""
    from simulator.controlplane.reset import reset

    reset(control_plane)
    return control_plane


@pytest.fixture
def kube_namespace(kube_cluster) -> str:  # type: ignore[no-untyped-def]
    """A namespace of this test's own on the emptied plane, with its default ServiceAccount
    (pods cannot be created before it exists: the ServiceAccount admission plugin is on)."""
    from simulator.controlplane import wait_for_default_service_account
    from simulator.controlplane.reset import unique_namespace

    name = unique_namespace(kube_cluster)
    wait_for_default_service_account(kube_cluster, name)
    return name


@pytest.fixture(scope="session")
def fault_proxy(control_plane) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """A fault-injecting proxy in front of the session's API server (``simulator.kube.proxy``):
    what only a fake can do (5xx, 409, slow answers, dropped watches). Point a client at
    ``fault_proxy.kubeconfig``; faults are cleared before each use by ``faults``."""
    from simulator.kube.proxy import start_proxy

    proxy = start_proxy(control_plane)
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def faults(fault_proxy) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The session's fault proxy with no faults set, cleared again after the test."""
    fault_proxy.clear_faults()
    yield fault_proxy
    fault_proxy.clear_faults()
