"""A real PostgreSQL server for the test session (the journal and worker tests share it).

Started by the session itself (``initdb`` + ``pg_ctl`` in a temporary directory, as the
``postgres`` user when running as root), once, and stopped at the end even when tests fail.
Without a server the PostgreSQL cases are skipped, except under CI (``CI`` set), where they
fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import pytest
import trio


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found is not None:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    return None


@attrs.define
class PostgresServer:
    """A PostgreSQL server of the test session."""

    base: Path
    port: int
    bindir: Path
    as_user: list[str]

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.base / "data"), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )


def _start_postgres() -> tuple[PostgresServer | None, str]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, "psycopg is not installed (the postgres extra)"
    bindir = _bindir()
    if bindir is None:
        return None, "no PostgreSQL server binaries (initdb) found"
    base = Path(tempfile.mkdtemp(prefix="lionexec-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            return None, "running as root without runuser"
        as_user = [runuser, "-u", "postgres", "--"]
        shutil.chown(base, "postgres", "postgres")
    server = PostgresServer(base, _free_port(), bindir, as_user)
    init = subprocess.run(
        [
            *as_user,
            str(bindir / "initdb"),
            "-D",
            str(base / "data"),
            "-A",
            "trust",
            "--no-sync",
            "-U",
            "postgres",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if init.returncode != 0:
        return None, f"initdb failed: {init.stderr[-500:]}"
    options = (
        f"-c listen_addresses=127.0.0.1 -p {server.port} -c unix_socket_directories={base} "
        "-c fsync=off -c max_connections=200"
    )
    start = server.pg_ctl("-l", str(base / "log"), "-o", options, "-w", "start")
    if start.returncode != 0:
        log = (base / "log").read_text() if (base / "log").exists() else ""
        return None, f"pg_ctl start failed: {start.stderr[-300:]} {log[-500:]}"
    return server, ""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server, why = _start_postgres()
    if server is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI: a PostgreSQL server is required and could not be started: {why}")
        pytest.skip(f"no PostgreSQL server: {why}")
    try:
        yield server
    finally:
        # immediate: the data directory is deleted next, so the shutdown checkpoint a fast
        # stop writes is wasted work, and on a loaded machine it outlasted the last test's
        # time budget
        server.pg_ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(server.base, ignore_errors=True)


#: Sessions waiting for a lock: a condition on ``pg_stat_activity``.
WAITING_FOR_A_LOCK = "wait_event_type = 'Lock'"


async def until_sessions(url: str, where: str, params: Sequence[object], *, some: bool) -> None:
    """Until some sessions of the server (rows of ``pg_stat_activity``) are *where* (*some*),
    or none are: polled, bounded (a session's state has no event to wait on, and a
    termination ends it asynchronously)."""
    import psycopg

    sql = f"SELECT 1 FROM pg_stat_activity WHERE {where}"
    with psycopg.connect(url, autocommit=True) as conn, trio.fail_after(10):
        while bool(conn.execute(sql, params).fetchall()) != some:  # noqa: ASYNC110
            await trio.sleep(0.01)


def terminate_sessions(url: str, where: str, params: Sequence[object]) -> None:
    """End the server's sessions that are *where* (``pg_terminate_backend``)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        sql = f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {where}"
        conn.execute(sql, params)
