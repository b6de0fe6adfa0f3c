"""Where the warehouse is: the embedded server by default, any Postgres by URL.

``GPUFABRIC_DATABASE_URL`` (or an explicit URL) names an external server; nothing else changes.
Otherwise the embedded server under ``<data dir>/postgres`` is started (once) and reused.
Migrations run on first use in every process, guarded by an advisory lock.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import psycopg
import psycopg.sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url

from connectors.warehouse import migrate
from connectors.warehouse.embedded import EmbeddedServer, ensure_server

ENV_DATABASE_URL = "GPUFABRIC_DATABASE_URL"
ENV_DATA_DIR = "GPUFABRIC_DATA_DIR"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class WarehouseError(RuntimeError):
    """The warehouse URL is unusable or the server cannot be reached; never shows a password."""


def data_dir() -> Path:
    """Root of local state (embedded Postgres, Dagster home, simulator output)."""
    return Path(os.environ.get(ENV_DATA_DIR) or PROJECT_ROOT / ".data").resolve()


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except Exception:  # sqlalchemy raises ArgumentError with the URL in it; do not echo it
        raise WarehouseError(f"{ENV_DATABASE_URL} is not a database URL (expected postgresql://...)") from None
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise WarehouseError(
            f"only PostgreSQL is supported, got '{parsed.get_backend_name()}' "
            f"in {parsed.render_as_string(hide_password=True)}"
        )
    return parsed.set(drivername="postgresql")


@dataclass
class Warehouse:
    """One Postgres database and the ways each tool needs to reach it."""

    base_url: URL  # drivername 'postgresql', password included
    embedded: EmbeddedServer | None = None
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def display_url(self) -> str:
        return self.base_url.render_as_string(hide_password=True)

    @property
    def libpq_url(self) -> str:
        """For psql, psycopg and dbt: postgresql://user:pw@host:port/db."""
        return self.base_url.render_as_string(hide_password=False)

    @property
    def sqlalchemy_url(self) -> str:
        return self.base_url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)

    @property
    def dagster_url(self) -> str:
        # dagster-postgres uses psycopg2, and SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3.
        return self.base_url.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)

    def libpq_env(self) -> dict[str, str]:
        """The connection as GPUFABRIC_DB_* variables, which dbt/profiles.yml reads."""
        url = self.base_url
        return {
            "GPUFABRIC_DB_HOST": url.host or "127.0.0.1",
            "GPUFABRIC_DB_PORT": str(url.port or 5432),
            "GPUFABRIC_DB_USER": url.username or "postgres",
            "GPUFABRIC_DB_PASSWORD": url.password or "",
            "GPUFABRIC_DB_NAME": url.database or "postgres",
        }

    @cached_property
    def engine(self) -> Engine:
        return create_engine(self.sqlalchemy_url, pool_pre_ping=True, pool_size=5, max_overflow=10)

    def connect(self, autocommit: bool = False) -> psycopg.Connection:
        """A plain psycopg 3 connection, for COPY and bulk work."""
        try:
            return psycopg.connect(self.libpq_url, autocommit=autocommit)
        except psycopg.OperationalError as err:
            raise WarehouseError(f"cannot connect to {self.display_url}: {_first_line(err)}") from None

    def dispose(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()

    @contextlib.contextmanager
    def scratch_database(self, prefix: str, *, keep: bool = False) -> Iterator[str]:
        """A new, empty database on this server (its libpq URL), dropped afterwards unless ``keep``:
        where tests and benchmarks build a warehouse of their own beside this one."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        admin = self.base_url.set(database="postgres").render_as_string(hide_password=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        try:
            yield self.base_url.set(database=name).render_as_string(hide_password=False)
        finally:
            if not keep:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        psycopg.sql.Identifier(name)))


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def open_warehouse(url: str | None = None, *, run_migrations: bool = True) -> Warehouse:
    """Resolve, start if embedded, and migrate. Safe to call from many processes at once."""
    url = url or os.environ.get(ENV_DATABASE_URL) or None
    if url:
        wh = Warehouse(base_url=_parse(url))
    else:
        server = ensure_server(data_dir() / "postgres")
        wh = Warehouse(base_url=make_url(server.url(driver="postgresql")), embedded=server)
    if run_migrations:
        try:
            migrate.upgrade(wh.engine)
        except Exception as err:
            if isinstance(err, WarehouseError):
                raise
            raise WarehouseError(f"migrating {wh.display_url} failed: {_first_line(err)}") from err
    return wh
