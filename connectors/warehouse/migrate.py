"""Run the Alembic migrations under ``sql/`` at start-up, idempotently and race-free."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
# Any constant works; it only has to be the same in every process that migrates.
_MIGRATION_LOCK_KEY = 0x67707566  # "gpuf"


def _config() -> Config:
    cfg = Config(str(SQL_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(SQL_DIR / "migrations"))
    return cfg


def head_revision() -> str:
    """The head(s) of the migration graph, comma-joined.

    Each area (lldp, infiniband, telemetry, ...) keeps its own branch off the foundation
    revision, so areas developed in parallel never fight over one linear chain; upgrading goes
    to all heads.
    """
    heads = ScriptDirectory.from_config(_config()).get_heads()
    assert heads, "sql/migrations has no revisions"
    return ",".join(sorted(heads))


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        exists = conn.execute(text("SELECT to_regclass('ops.alembic_version')")).scalar()
        if exists is None:
            return None
        heads = MigrationContext.configure(conn, opts={"version_table_schema": "ops"}).get_current_heads()
        return ",".join(sorted(heads)) or None


def upgrade(engine: Engine) -> str:
    """Bring the database to head. Parallel callers wait on an advisory lock, then find it done."""
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
        try:
            cfg = _config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "heads")
            conn.commit()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK_KEY})
            conn.commit()
    return head_revision()
