"""The warehouse against a real PostgreSQL: migrations, external-URL mode, COPY, roles, restarts."""

from __future__ import annotations

import datetime as dt
import ipaddress
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from connectors.warehouse import WarehouseError, copy_rows, open_warehouse, replace_rows, write_quarantine
from connectors.warehouse.embedded import ensure_server, stop_server
from connectors.warehouse.migrate import current_revision, head_revision
from core.quality import MAX_QUARANTINE_PAYLOAD, Quarantined

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

BRIEF_SCHEMAS = {"raw", "ops", "topology", "telemetry", "agents", "staging", "finops", "efficiency"}


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables "
            "WHERE table_schema IN ('raw','ops','topology','telemetry','agents')"
        )
        return {r[0] for r in rows}


def test_migrations_create_the_brief_schemas_from_empty(fresh_database_url: str) -> None:
    assert not BRIEF_SCHEMAS & _schemas(fresh_database_url)
    wh = open_warehouse(fresh_database_url)
    assert wh.embedded is None  # an explicit URL is external mode, whatever server it names
    assert BRIEF_SCHEMAS <= _schemas(fresh_database_url)
    assert {"ops.collection_status", "ops.quarantine", "raw.dcim_inventory", "ops.alembic_version"} <= _tables(
        fresh_database_url
    )
    assert current_revision(wh.engine) == head_revision()
    wh.dispose()


def test_migrations_rerun_is_idempotent_and_keeps_data(fresh_database_url: str) -> None:
    wh = open_warehouse(fresh_database_url)
    with wh.connect() as conn:
        conn.execute(
            "INSERT INTO ops.collection_status (run_id, source, device, status, started_at, finished_at) "
            "VALUES ('r', 's', 'd', 'ok', now(), now())"
        )
        conn.commit()
    before = _tables(fresh_database_url)
    wh.dispose()
    again = open_warehouse(fresh_database_url)
    assert _tables(fresh_database_url) == before
    with again.connect() as conn:
        assert conn.execute("SELECT count(*) FROM ops.collection_status").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM ops.alembic_version").fetchone() == (len(head_revision().split(",")),)
    again.dispose()


def test_concurrent_start_ups_migrate_once(fresh_database_url: str) -> None:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            open_warehouse(fresh_database_url).dispose()
        except BaseException as err:  # collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(fresh_database_url) as conn:
        assert sorted(
            r[0] for r in conn.execute("SELECT version_num FROM ops.alembic_version")
        ) == head_revision().split(",")


def test_external_url_from_environment(fresh_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFABRIC_DATABASE_URL", fresh_database_url)
    wh = open_warehouse()
    assert wh.embedded is None
    assert make_url(wh.libpq_url).database == make_url(fresh_database_url).database
    assert wh.dagster_url.startswith("postgresql+psycopg2://")
    assert wh.sqlalchemy_url.startswith("postgresql+psycopg://")
    wh.dispose()


def test_external_url_errors_never_show_the_password() -> None:
    with pytest.raises(WarehouseError, match="only PostgreSQL") as not_pg:
        open_warehouse("mysql://admin:hunter2@db.example/x")
    assert "hunter2" not in str(not_pg.value)
    with pytest.raises(WarehouseError, match="not a database URL") as garbage:
        open_warehouse("::not a url hunter2::")
    assert "hunter2" not in str(garbage.value)
    # A closed port on loopback: refused at once, reported without the password.
    with pytest.raises(WarehouseError) as refused:
        open_warehouse("postgresql://admin:hunter2@127.0.0.1:9/x")
    assert "hunter2" not in str(refused.value) and "***" in str(refused.value)


def test_finops_reader_sees_finops_and_nothing_else(warehouse) -> None:  # type: ignore[no-untyped-def]
    with warehouse.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS finops.t_role_probe (x int)")
        conn.execute("INSERT INTO finops.t_role_probe VALUES (1)")
        conn.execute("SET ROLE finops_reader")
        assert conn.execute("SELECT x FROM finops.t_role_probe").fetchall() == [(1,)]
        for forbidden in ("raw.dcim_inventory", "ops.quarantine", "ops.collection_status"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(f"SELECT 1 FROM {forbidden}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("INSERT INTO finops.t_role_probe VALUES (2)")
        conn.rollback()


ODD_TEXTS = [
    None,
    "",
    "plain",
    "tab\there",
    "new\nline",
    "carriage\r\nreturn",
    "back\\slash",
    "\\N",  # the text-COPY NULL marker, as a real string
    'quote " and , comma',
    "ünïcødé ✓ 漢字 🚀",
    "x" * 200_000,
]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_copy_round_trip_of_odd_values(warehouse, binary: bool) -> None:  # type: ignore[no-untyped-def]
    table = f"raw.t_copy_{uuid.uuid4().hex[:8]}"
    when = dt.datetime(2026, 12, 2, 13, 0, 0, 123456, tzinfo=dt.UTC)
    rows = [
        (
            i,
            text,
            {"k": text, "n": [1, None]} if text is not None else None,
            when,
            b"\x00\xff" if i % 2 else None,
            ipaddress.ip_address("10.0.0.1") if binary else "10.0.0.1",
            1.5 if i % 3 else None,
        )
        for i, text in enumerate(ODD_TEXTS)
    ]
    with warehouse.connect() as conn:
        conn.execute(
            f"CREATE TABLE {table} (i int, t text, j jsonb, ts timestamptz, b bytea, ip inet, f double precision)"
        )
        n = copy_rows(conn, table, ["i", "t", "j", "ts", "b", "ip", "f"], rows, binary=binary)
        back = conn.execute(f"SELECT i, t, j, ts, b, ip, f FROM {table} ORDER BY i").fetchall()
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    assert n == len(ODD_TEXTS)
    assert [r[1] for r in back] == ODD_TEXTS
    assert [r[2] for r in back] == [r[2] for r in rows]
    assert all(r[3] == when for r in back)
    assert [r[4] for r in back] == [r[4] for r in rows]
    assert {str(r[5]) for r in back} == {"10.0.0.1"}
    assert [r[6] for r in back] == [r[6] for r in rows]


def test_copy_names_a_missing_column(warehouse) -> None:  # type: ignore[no-untyped-def]
    with warehouse.connect() as conn, pytest.raises(ValueError, match=r"no column.*nope"):
        copy_rows(conn, "ops.quarantine", ["run_id", "nope"], [("a", "b")])


def test_replace_rows_makes_reloads_idempotent(warehouse, run_id: str) -> None:  # type: ignore[no-untyped-def]
    cols = ("run_id", "source", "collected_at", "node")
    now = dt.datetime.now(dt.UTC)
    first = [(run_id, "s", now, f"n{i}") for i in range(5)]
    with warehouse.connect() as conn:
        replace_rows(conn, "raw.dcim_inventory", {"run_id": run_id, "source": "s"}, cols, first)
        deleted, inserted = replace_rows(conn, "raw.dcim_inventory", {"run_id": run_id, "source": "s"}, cols, first[:3])
        replace_rows(
            conn, "raw.dcim_inventory", {"run_id": run_id, "source": "other"}, cols, [(run_id, "other", now, "n0")]
        )
        got = conn.execute(
            "SELECT source, count(*) FROM raw.dcim_inventory WHERE run_id = %s GROUP BY 1 ORDER BY 1", (run_id,)
        ).fetchall()
        conn.commit()
    assert (deleted, inserted) == (5, 3)
    assert got == [("other", 1), ("s", 3)]


def test_quarantine_keeps_raw_bytes_and_clips_huge_payloads(warehouse, run_id: str) -> None:  # type: ignore[no-untyped-def]
    items = [
        Quarantined(source="t", reason="not utf-8", payload=b"ok \xff\xfe bad", device="d1", location="line 3"),
        Quarantined(source="t", reason="nul", payload="a\x00b"),
        Quarantined(source="t", reason="huge", payload="y" * (MAX_QUARANTINE_PAYLOAD * 3)),
    ]
    with warehouse.connect() as conn:
        assert write_quarantine(conn, run_id, items) == 3
        rows = conn.execute(
            "SELECT reason, payload, payload_bytes, context, location FROM ops.quarantine "
            "WHERE run_id = %s ORDER BY id",
            (run_id,),
        ).fetchall()
        conn.commit()
    by_reason = {r[0]: r for r in rows}
    assert by_reason["not utf-8"][2] == b"ok \xff\xfe bad"
    assert by_reason["not utf-8"][1] == "ok \\xff\\xfe bad"
    assert by_reason["not utf-8"][4] == "line 3"
    assert by_reason["nul"][1] == "a\\x00b" and by_reason["nul"][2] is None
    assert len(by_reason["huge"][1]) == MAX_QUARANTINE_PAYLOAD
    assert by_reason["huge"][3] == {"original_length": MAX_QUARANTINE_PAYLOAD * 3}


def test_embedded_server_survives_restarts(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    server = ensure_server(data, port=0, database="probe")
    try:
        with psycopg.connect(server.url(driver="postgresql"), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('still here')")
        # A second start-up while it runs reuses the same server and port.
        assert ensure_server(data, database="probe").port == server.port
        assert stop_server(data) is True
        assert stop_server(data) is False
        again = ensure_server(data, port=0, database="probe")
        with psycopg.connect(again.url(driver="postgresql")) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [("still here",)]
    finally:
        stop_server(data)


def test_jsonb_nan_fails_loudly_instead_of_becoming_null(warehouse) -> None:  # type: ignore[no-untyped-def]
    # The fast jsonb encoder must never turn NaN into null silently: Postgres rejects NaN in JSON.
    table = f"raw.t_nan_{uuid.uuid4().hex[:8]}"
    with warehouse.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (j jsonb)")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            copy_rows(conn, table, ["j"], [({"x": float("nan")},)])
        conn.rollback()
        conn.execute(f"CREATE TABLE {table} (j jsonb)")
        copy_rows(conn, table, ["j"], [({"big": 2**70, 1: "int key", "u": "\u2603"},)])
        assert conn.execute(f"SELECT j FROM {table}").fetchone() == ({"big": 2**70, "1": "int key", "u": "\u2603"},)
        conn.rollback()
