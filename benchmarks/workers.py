"""Workers (issue 15): worker processes claiming journaled calls from one PostgreSQL.

Rows (lionexec only; the other implementations have no counterpart and show as n/a):

* **throughput scaling**: ``N`` submitted calls of a trivial tool, run by 1, 2 and 4
  ``python -m lionexec worker`` processes on one PostgreSQL: calls per second from the
  first submit to the last response (``journal.wait``), over ``RUNS`` runs (a fresh database
  each), and the ratio of 2 and 4 workers to 1. On a 2-core machine the cores, shared by
  the workers, the database and the submitter, are the limit, not the queue.
* **per-call overhead of a claimed call against an in-process journaled call**, on the
  same PostgreSQL: microseconds per call for ``N`` calls submitted to one worker process
  and waited for, against ``N`` concurrent calls of one ``Branch.act`` on a
  :class:`~lionexec.journal.PostgresJournal` branch in this process (outcomes
  committed); and the round trip of one call at a time (``submit`` + ``wait``, against a
  one-call ``act``), ``SINGLE`` calls in sequence.

The PostgreSQL server is started by this process (``initdb`` + ``pg_ctl`` in a temporary
directory, as the ``postgres`` user when run as root, ``fsync=off``) and stopped when it
ends; without server binaries or ``psycopg`` (the ``postgres`` extra) the rows show as n/a.
Run it alone with ``python -m benchmarks.workers --impl lionexec --quick``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import trio

from ._harness import Case, k, main, unavailable

ROOT = Path(__file__).resolve().parent.parent
CALLS, QUICK_CALLS = 3_000, 300
SINGLE, QUICK_SINGLE = 200, 30
RUNS, QUICK_RUNS = 3, 1
PROCESSES = (1, 2, 4)
#: Calls per ``submit`` (and branches they are spread over).
CHUNK, BRANCHES = 250, 4


async def noop(x: int) -> int:
    """The trivial tool every row runs."""
    return x


def _registry() -> Any:
    from lionexec.tools import ActionManager, Tool

    manager = ActionManager()
    manager.register_tools([Tool.from_function(noop, effect="pure")])
    return manager


#: ``--tools benchmarks.workers:registry`` for the worker processes.
registry = _registry()


# -- a PostgreSQL server for this process ------------------------------------------------------


class Postgres:
    """A throwaway PostgreSQL server (started once per process, stopped at exit)."""

    _server: Postgres | None = None

    def __init__(self, base: Path, port: int, bindir: Path, as_user: list[str]) -> None:
        self.base, self.port, self.bindir, self.as_user = base, port, bindir, as_user

    @classmethod
    def get(cls) -> Postgres:
        if cls._server is None:
            cls._server = cls._start()
            atexit.register(cls._server.stop)
        return cls._server

    @staticmethod
    def _bindir() -> Path:
        found = shutil.which("pg_config")
        if found is not None:
            out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
            if (Path(out.stdout.strip()) / "initdb").exists():
                return Path(out.stdout.strip())
        for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
            if (candidate / "initdb").exists():
                return candidate
        raise RuntimeError("no PostgreSQL server binaries (initdb) found")

    @classmethod
    def _start(cls) -> Postgres:
        import psycopg  # noqa: F401  # the postgres extra, or n/a

        bindir = cls._bindir()
        base = Path(tempfile.mkdtemp(prefix="lionexec-bench-pg-"))
        as_user: list[str] = []
        if os.geteuid() == 0:
            as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(base, "postgres", "postgres")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = cls(base, port, bindir, as_user)
        data = str(base / "data")
        init = [str(bindir / "initdb"), "-D", data, "-A", "trust", "--no-sync", "-U", "postgres"]
        subprocess.run([*as_user, *init], capture_output=True, check=True, timeout=120)
        options = (
            f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={base} "
            "-c fsync=off -c max_connections=200"
        )
        log = str(base / "log")
        start = [str(bindir / "pg_ctl"), "-D", data, "-l", log, "-o", options, "-w", "start"]
        subprocess.run([*as_user, *start], capture_output=True, check=True, timeout=60)
        return server

    def stop(self) -> None:
        stop = [str(self.bindir / "pg_ctl"), "-D", str(self.base / "data"), "-m", "fast", "stop"]
        subprocess.run([*self.as_user, *stop], capture_output=True, check=False, timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)

    def database(self) -> str:
        """A fresh, empty database's URL."""
        import psycopg

        name = "bench_" + uuid.uuid4().hex[:12]
        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


# -- worker processes --------------------------------------------------------------------------


class WorkerPool:
    """``python -m lionexec worker`` processes on one database; stopped on exit."""

    def __init__(self, url: str, count: int, tmp: Path) -> None:
        self.url, self.count, self.tmp = url, count, tmp
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    async def __aenter__(self) -> WorkerPool:
        """Start the workers and wait until each says it is ready; if one exits first, or
        they are not ready in 60 s (or this is cancelled), the ones started are stopped."""
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for i in range(self.count):
            out = self.tmp / f"w{i}.out"
            command = [sys.executable, "-m", "lionexec", "worker", "--database", self.url]
            command += ["--tools", "benchmarks.workers:registry", "--name", f"w{i}"]
            command += ["--concurrency", "32", "--poll", "0.5", "--lease", "30", "--grace", "5"]
            with out.open("wb") as stdout:
                proc = subprocess.Popen(  # noqa: ASYNC220  # starts and returns
                    command, stdout=stdout, stderr=subprocess.DEVNULL, env=env, cwd=ROOT
                )
            self.procs.append((proc, out))
        with trio.fail_after(60):
            for proc, out in self.procs:
                while b'"ready"' not in (out.read_bytes() if out.exists() else b""):
                    if proc.poll() is not None:
                        raise RuntimeError(f"a worker exited with {proc.returncode}")
                    await trio.sleep(0.02)

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop every worker: SIGTERM, then SIGKILL after 20 s. Shielded (bounded), so a
        cancelled benchmark leaves no process behind."""
        with trio.CancelScope(shield=True):
            for proc, _ in self.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc, _ in self.procs:
                try:
                    await trio.to_thread.run_sync(proc.wait, 20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    await trio.to_thread.run_sync(proc.wait)


async def submit_and_wait(url: str, n: int) -> float:
    """Seconds from the first submit of *n* calls to the last response."""
    from lionexec.journal import open_journal

    async with open_journal(url) as journal:
        branches = [uuid.uuid4() for _ in range(BRANCHES)]
        started = time.perf_counter()
        ids: list[str] = []
        for i, start in enumerate(range(0, n, CHUNK)):
            calls = [
                {"function": "noop", "arguments": {"x": x}}
                for x in range(start, min(n, start + CHUNK))
            ]
            ids += await journal.submit(branches[i % BRANCHES], calls)
        responses = await journal.wait(ids)
        elapsed = time.perf_counter() - started
    assert len(responses) == n and all(r.success for r in responses)
    return elapsed


async def claimed_round_trips(url: str, n: int) -> float:
    """Seconds for *n* single calls, one at a time, each submitted and waited for."""
    from lionexec.journal import open_journal

    async with open_journal(url) as journal:
        branch = uuid.uuid4()
        started = time.perf_counter()
        for x in range(n):
            [call_id] = await journal.submit(branch, [{"function": "noop", "arguments": {"x": x}}])
            [response] = await journal.wait([call_id], branch_id=branch)
            assert response.success
        return time.perf_counter() - started


async def journaled_act(url: str, n: int, single: bool) -> float:
    """Seconds for *n* calls run in this process on a journaled branch: one concurrent
    ``act`` (outcomes committed), or *single*: *n* one-call ``act`` in sequence."""
    from lionexec.journal import open_journal

    async with open_journal(url) as journal:
        branch = await journal.branch()
        branch.register_tools(registry.get("noop"))
        async with branch:
            started = time.perf_counter()
            if single:
                for x in range(n):
                    [response] = await branch.act([{"function": "noop", "arguments": {"x": x}}])
                    assert response.success
            else:
                calls = [{"function": "noop", "arguments": {"x": x}} for x in range(n)]
                responses = await branch.act(calls)
                assert all(r.success for r in responses)
            await branch.sinks[0].flush()  # type: ignore[attr-defined]  # outcomes committed
            return time.perf_counter() - started


# -- the cases -------------------------------------------------------------------------------


def scaling_body(runs: int) -> Any:
    async def body(n: int) -> dict[str, tuple[str, float | list[float]]]:
        server = Postgres.get()
        if n <= 1:  # the harness's warm-up: the server is up, nothing else to warm
            return {}
        rates: dict[int, list[float]] = {count: [] for count in PROCESSES}
        tmp = Path(tempfile.mkdtemp(prefix="lionexec-bench-workers-"))
        for _ in range(runs):
            for count in PROCESSES:
                url = server.database()
                async with WorkerPool(url, count, tmp):
                    rates[count].append(n / await submit_and_wait(url, n))
        shutil.rmtree(tmp, ignore_errors=True)
        out: dict[str, tuple[str, float | list[float]]] = {}
        for count in PROCESSES:
            plural = "es" if count > 1 else ""
            out[f"{count} worker process{plural}"] = ("req/s", rates[count])
        base = statistics.median(rates[1])
        for count in PROCESSES[1:]:
            out[f"{count} / 1 worker processes"] = ("x", [r / base for r in rates[count]])
        return out

    return body


def overhead_body(runs: int, single: int) -> Any:
    async def body(n: int) -> dict[str, tuple[str, float | list[float]]]:
        server = Postgres.get()
        if n <= 1:
            return {}
        claimed: list[float] = []
        local: list[float] = []
        claimed_one: list[float] = []
        local_one: list[float] = []
        tmp = Path(tempfile.mkdtemp(prefix="lionexec-bench-workers-"))
        for _ in range(runs):
            url = server.database()
            local.append(await journaled_act(url, n, False) / n * 1e6)
            local_one.append(await journaled_act(url, single, True) / single * 1e6)
            async with WorkerPool(url, 1, tmp):
                claimed.append(await submit_and_wait(url, n) / n * 1e6)
                claimed_one.append(await claimed_round_trips(url, single) / single * 1e6)
        shutil.rmtree(tmp, ignore_errors=True)
        return {
            "claimed by 1 worker process": ("us/op", claimed),
            "in-process journaled act": ("us/op", local),
            "claimed / in-process": ("x", [c / j for c, j in zip(claimed, local, strict=True)]),
            f"round trip of 1 call × {single}, claimed": ("us/op", claimed_one),
            f"round trip of 1 call × {single}, in-process act": ("us/op", local_one),
        }

    return body


def cases(impl: str, quick: bool) -> list[Case]:
    n = QUICK_CALLS if quick else CALLS
    runs = QUICK_RUNS if quick else RUNS
    single = QUICK_SINGLE if quick else SINGLE
    out = [
        Case(
            f"workers: {k(n)} calls on PostgreSQL, throughput",
            n,
            scaling_body(runs),
            kind="report",
            warmup=1,
        ),
        Case(
            f"workers: {k(n)} calls on PostgreSQL, per call",
            n,
            overhead_body(runs, single),
            kind="report",
            warmup=1,
        ),
    ]
    if impl != "lionexec":
        return unavailable(out, "no counterpart: lionexec's worker processes")
    try:
        Postgres.get()
    except Exception as exc:  # no server binaries, no psycopg: n/a, with the reason
        return unavailable(out, f"no PostgreSQL: {type(exc).__name__}: {exc}"[:160])
    return out


if __name__ == "__main__":
    main(cases)
