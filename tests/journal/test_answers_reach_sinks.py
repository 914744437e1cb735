"""Answers journal recovery decides outside ``act()`` reach the branch's other sinks as any
answer does: a tracing sink sees them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

from lionexec.act import EvidenceRecord, WriteAhead
from lionexec.conversation import ActionOutcome
from lionexec.journal import Journal
from lionexec.journal.backends import MemoryBackend
from lionexec.tools import Tool


class Seen:
    """A sink that keeps what it was written: (call id, outcome, invoked here)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, ActionOutcome, bool]] = []

    async def write_ahead(self, entry: WriteAhead) -> None:
        await trio.lowlevel.checkpoint()

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        await trio.lowlevel.checkpoint()
        self.records += [
            (r.request.call_id, r.response.outcome, r.log is not None) for r in records
        ]

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_recoverys_answers_reach_the_sinks(autojump_clock: Any) -> None:
    started = trio.Event()

    async def charge(order: str) -> str:
        """Charge an order (not safe to repeat)."""
        started.set()
        await trio.sleep_forever()  # the process dies while it runs
        return order

    tool = Tool.from_function(charge, effect="unsafe")
    backend = MemoryBackend()
    journal = Journal(backend)
    await journal.open()
    branch = await journal.branch()
    branch.register_tools(tool)
    async with branch, trio.open_nursery() as nursery:
        nursery.start_soon(branch.act, {"function": "charge", "arguments": {"order": "A"}})
        await started.wait()
        await journal.aclose()  # the process "dies": nothing more reaches the journal
        nursery.cancel_scope.cancel()
    seen = Seen()
    async with Journal(backend) as restarted:
        report = await restarted.recover([tool], sinks=[seen])
    [resolution] = report.resolutions
    assert resolution.action == "interrupted"
    assert seen.records == [(resolution.call_id, ActionOutcome.INTERRUPTED, False)]
