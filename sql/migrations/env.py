"""Alembic environment: runs on the connection the caller hands over, or GPUFABRIC_DATABASE_URL.

The version table lives in ``ops`` because Dagster's own storage (same database) keeps its
own ``public.alembic_version``; sharing one would corrupt both histories.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, text

VERSION_SCHEMA = "ops"


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {VERSION_SCHEMA}"))
    context.configure(connection=connection, version_table_schema=VERSION_SCHEMA, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = os.environ.get("GPUFABRIC_DATABASE_URL")
    if not url:
        raise SystemExit("set GPUFABRIC_DATABASE_URL, or let gpufabric run the migrations at start-up")
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        _run(conn)
