"""Worker fixtures: the journal tests' PostgreSQL server, and worker processes.

``python -m lionexec worker`` processes are started with the tools of ``tools.py``; each is
stopped (SIGTERM, then SIGKILL) when its test ends, also when it fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from ..support.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A journal to open: a SQLite file, or a fresh database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


def call(function: str, n: int) -> dict[str, object]:
    """A proposed call of *function* with the one argument ``n``."""
    return {"function": function, "arguments": {"n": n}}


async def until(predicate: Callable[[], Any], *, within: float, what: str) -> Any:
    """Poll *predicate* until it returns something true; fail after *within* seconds."""
    with trio.move_on_after(within):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(0.02)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


async def eventually(probe: Callable[[], Awaitable[Any]], *, within: float, what: str) -> Any:
    """Await *probe* until it returns something true; fail after *within* seconds."""
    with trio.move_on_after(within):
        while True:
            value = await probe()
            if value:
                return value
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}")


@attrs.define
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def lines(self) -> list[dict[str, Any]]:
        text = self.out.read_text() if self.out.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def event(self, name: str) -> dict[str, Any] | None:
        return next((line for line in self.lines() if line.get("event") == name), None)

    def stderr(self) -> str:
        return self.err.read_text()[-3000:] if self.err.exists() else ""


@attrs.define
class Workers:
    """Starts worker processes on one database; stops them all at the end."""

    target: str
    tmp: Path
    effects: Path
    started: list[WorkerProcess] = attrs.Factory(list)

    async def start(
        self,
        name: str,
        *,
        lease: float = 1.0,
        concurrency: int = 8,
        hang: str | None = None,
        limits: bool | str = False,
        env: dict[str, str] | None = None,
        ready: bool = True,
    ) -> WorkerProcess:
        environ = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LIONEXEC_TEST_EFFECTS": str(self.effects),
            **(env or {}),
        }
        environ.pop("LIONEXEC_TEST_HANG", None)
        if hang is not None:
            environ["LIONEXEC_TEST_HANG"] = hang
        out, err = self.tmp / f"{name}.out", self.tmp / f"{name}.err"
        command = [
            sys.executable,
            "-m",
            "lionexec",
            "worker",
            "--database",
            self.target,
            "--tools",
            "tests.workers.tools:registry",
            "--name",
            name,
            "--lease",
            str(lease),
            "--poll",
            "0.1",
            "--grace",
            "2",
            "--concurrency",
            str(concurrency),
        ]
        if limits:
            name = "limits" if limits is True else limits
            command += ["--limits", f"tests.workers.tools:{name}"]
        with out.open("wb") as stdout, err.open("wb") as stderr:
            # Popen starts the process and returns; its output goes to files
            proc = subprocess.Popen(  # noqa: ASYNC220
                command, stdout=stdout, stderr=stderr, env=environ, cwd=ROOT
            )
        worker = WorkerProcess(name, proc, out, err)
        self.started.append(worker)
        if ready:
            await self.ready(worker)
        return worker

    async def ready(self, worker: WorkerProcess) -> None:
        def check() -> bool:
            if worker.proc.poll() is not None:
                raise AssertionError(f"worker {worker.name} exited: {worker.stderr()}")
            return worker.event("ready") is not None

        await until(check, within=30, what=f"worker {worker.name} to be ready")

    async def stop(self, worker: WorkerProcess) -> dict[str, Any]:
        """SIGTERM *worker*, wait for it, return its final counters."""
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGTERM)
        await until(lambda: worker.proc.poll() is not None, within=20, what="a worker to stop")
        assert worker.proc.returncode == 0, worker.stderr()
        stopped = worker.event("stopped")
        assert stopped is not None, worker.stderr()
        return stopped

    def ran(self) -> Counter[tuple[str, int]]:
        """How many times each (tool, n) ran, in every process."""
        if not self.effects.exists():
            return Counter()
        return Counter(
            (line.split()[0], int(line.split()[1]))
            for line in self.effects.read_text().splitlines()
        )

    def close(self) -> None:
        for worker in self.started:
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGCONT)
                worker.proc.kill()
            worker.proc.wait(timeout=10)


@pytest.fixture(params=["postgres"])
def workers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workers]:
    if request.param == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        target = server.create_database()
    else:
        target = str(tmp_path / "journal.db")
    pool = Workers(target, tmp_path, tmp_path / "effects")
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def sqlite_workers(tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(str(tmp_path / "journal.db"), tmp_path, tmp_path / "effects")
    try:
        yield pool
    finally:
        pool.close()
