"""Every nursery lionexec holds open is held in a KI-protected frame.

A ``KeyboardInterrupt`` that lands in a frame as it resumes from its nursery's ``__aexit__``
(after the body: outside the ``async with``'s exception table) leaves the nursery never
exited; trio's state is then corrupt, and a child that outlives the run in a shielded,
bounded cleanup makes ``trio.run`` end in ``TrioInternalError`` (reproduced in raw trio by
``tests/act/test_branch_entry.py``). In a KI-protected frame trio delivers the interrupt at
the next checkpoint instead. This audit wraps ``trio.open_nursery`` and records, for each
lionexec function that opens one, whether that frame is protected.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec import Branch
from lionexec.engine import Event, Executor, Processor
from lionexec.journal import SqliteJournal
from lionexec.journal.workers import Worker
from lionexec.tools import Tool

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def holders(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """``{function: protected}`` for each lionexec function that opens a nursery."""
    seen: dict[str, bool] = {}
    real: Callable[..., Any] = trio.open_nursery

    def recording(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        if "/lionexec/" in caller.f_code.co_filename.replace("\\", "/"):
            seen[caller.f_code.co_qualname] = trio.lowlevel.currently_ki_protected()
        return real(*args, **kwargs)

    monkeypatch.setattr(trio, "open_nursery", recording)
    return seen


class Nothing(Event):
    async def _invoke(self) -> None:
        return None


async def ok() -> int:
    return 1


async def test_the_act_and_engine_nurseries(holders: dict[str, bool], tmp_path: Path) -> None:
    branch = Branch.with_log_file(tmp_path / "log.jsonl")
    branch.register_tools(Tool.from_function(ok))
    async with branch:
        await branch.act([{"function": "ok", "arguments": {}}] * 2)  # (spawn_each)
        limiter = trio.CapacityLimiter(2)  # (fan_out's _concurrently)
        await branch.act([{"function": "ok", "arguments": {}}] * 2, limiter=limiter)
    processor = Processor(queue_capacity=4, capacity_refresh_time=0.01, concurrency_limit=1)
    await processor.enqueue(Nothing())
    await processor.process()
    config = {"queue_capacity": 4, "capacity_refresh_time": 0.01, "concurrency_limit": 1}
    executor = Executor(processor_config=config)
    async with executor.running():
        pass
    assert holders == dict.fromkeys(
        [
            "Branch.__aenter__",
            "Branch._serve",
            "spawn_each",
            "_concurrently",
            "Processor._cycle",
            "Executor.running",
        ],
        True,
    )


async def test_the_journal_nurseries(holders: dict[str, bool], tmp_path: Path) -> None:
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = await journal.branch()
        async with branch:
            await journal.flush()
        worker = Worker(journal, [Tool.from_function(ok)], poll=0.01)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            nursery.cancel_scope.cancel()
    wanted = ("CommitEngine.flush", "Worker.run", "Worker._serve_calls")
    assert {name: holders.get(name) for name in wanted} == dict.fromkeys(wanted, True)
