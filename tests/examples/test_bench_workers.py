"""benchmarks/workers.py's worker pool leaves no process behind when its start fails."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import lionexec  # noqa: F401  (the package under test, before the checkout is on the path)

from ..support.postgres import PostgresServer

# benchmarks/ is not installed: reach it in the checkout (appended, so the installed lionexec
# is never shadowed by the checkout's copy)
if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.workers import WorkerPool


async def test_a_worker_pool_cancelled_while_starting_stops_its_workers(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    pool = WorkerPool(postgres_server.create_database(), 2, tmp_path)
    with trio.fail_after(60):
        with trio.move_on_after(0.05):  # long before a worker has imported lionexec
            async with pool:
                pass
        assert len(pool.procs) == 2
        assert all(proc.poll() is not None for proc, _ in pool.procs)


async def test_a_worker_pool_whose_worker_exits_stops_the_others(tmp_path: Path) -> None:
    pool = WorkerPool("postgresql://nobody@127.0.0.1:1/none", 2, tmp_path)
    with trio.fail_after(60):
        try:
            async with pool:
                raise AssertionError("no worker can start on that database")
        except RuntimeError as exc:
            assert "a worker exited" in str(exc)
    assert all(proc.poll() is not None for proc, _ in pool.procs)
