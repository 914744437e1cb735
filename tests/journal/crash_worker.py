"""A journaled batch that kills itself with SIGKILL at a chosen point (run by test_crash.py).

Usage: ``python crash_worker.py TARGET EFFECT POINT EFFECTS_FILE BRANCH_ID CALLS HIT DURABILITY``

Runs two batches of CALLS concurrent calls of ``work(n)`` (effect class EFFECT) on branch
BRANCH_ID of the journal at TARGET (opened with ``durability=DURABILITY``), one after the
other, and SIGKILLs itself at the HIT-th time POINT is reached:

* ``before_request``: at a call's write-ahead, before its request is committed;
* ``after_request``: after the request commit, before the tool is invoked;
* ``during_invoke``: inside the tool, after its side effect;
* ``before_outcome``: a response is in the history, not yet committed;
* ``after_outcome``: right after a commit that carried an outcome;
* ``during_commit``: inside a group commit, statements run, before ``COMMIT``.

Every run of the tool appends ``n`` to EFFECTS_FILE (``O_APPEND``): side effects counted
outside the journal. Exits 0 if the point was never reached.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import trio

from lionexec.conversation import ActionResponse
from lionexec.journal import JournalSink, open_journal
from lionexec.journal._commit import CommitEngine
from lionexec.journal._sink import before_answers
from lionexec.journal.backends import Batch, Claim
from lionexec.journal.backends._sql import SqlStore
from lionexec.tools import Tool

POINTS = (
    "before_request",
    "after_request",
    "during_invoke",
    "before_outcome",
    "after_outcome",
    "during_commit",
)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def side_effect(path: str, n: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n}\n".encode())
    finally:
        os.close(fd)


def make_tool(effect: str, effects_file: str, on_invoke: Any = None) -> Tool:
    def work(n: int) -> int:
        side_effect(effects_file, n)
        if on_invoke is not None:
            on_invoke()
        return n * 2

    return Tool.from_function(work, effect=effect, inline=True)  # type: ignore[arg-type]


class Trap:
    """Counts arrivals at one point; kills the process at the chosen one."""

    def __init__(self, point: str, hit: int) -> None:
        self.point = point
        self.hit = hit
        self.seen = 0

    def reach(self, point: str) -> None:
        if point == self.point:
            self.seen += 1
            if self.seen == self.hit:
                die()


def install(trap: Trap) -> None:
    write_ahead = JournalSink.write_ahead
    stage = JournalSink._stage
    lead = CommitEngine._lead
    commit = SqlStore.commit
    carried: list[bool] = [False]

    async def trapped_write_ahead(self: JournalSink, entry: Any) -> Any:
        trap.reach("before_request")
        reply = await write_ahead(self, entry)
        trap.reach("after_request")
        return reply

    def trapped_stage(self: JournalSink, batch: Batch, *, defer_answers: bool = False) -> int:
        pending = self.history.messages[self._mirrored :]
        if defer_answers:  # (a commit that leaves the answers out does not carry them)
            pending = before_answers(pending)
        if any(isinstance(m, ActionResponse) for m in pending):
            trap.reach("before_outcome")
            carried[0] = True
        return stage(self, batch, defer_answers=defer_answers)

    async def trapped_lead(self: CommitEngine) -> None:
        carried[0] = False
        await lead(self)
        if carried[0]:
            trap.reach("after_outcome")

    def trapped_commit(self: SqlStore, batch: Batch) -> list[Claim]:
        claims = commit(self, batch)
        trap.reach("during_commit")
        return claims

    JournalSink.write_ahead = trapped_write_ahead  # type: ignore[method-assign]
    JournalSink._stage = trapped_stage  # type: ignore[method-assign]
    CommitEngine._lead = trapped_lead  # type: ignore[method-assign]
    SqlStore.commit = trapped_commit  # type: ignore[method-assign]


async def main(argv: list[str]) -> int:
    target, effect, point, effects_file, branch_id, calls, hit, durability = argv
    if point not in POINTS:
        raise SystemExit(f"unknown kill point {point!r}; one of {POINTS}")
    trap = Trap(point, int(hit))
    install(trap)
    tool = make_tool(effect, effects_file, on_invoke=lambda: trap.reach("during_invoke"))
    async with open_journal(target, durability=durability) as journal:  # type: ignore[arg-type]
        branch = await journal.branch(branch_id)
        branch.register_tools(tool)
        async with branch:
            for first in (0, int(calls)):
                await branch.act(
                    [
                        {"function": "work", "arguments": {"n": n}}
                        for n in range(first, first + int(calls))
                    ]
                )
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
