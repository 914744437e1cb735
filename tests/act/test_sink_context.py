"""A sink that asks for it (``captures_context``) gets the recording task's context."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

import trio

from lionexec.act import Branch
from lionexec.act.sinks.base import EvidenceRecord, WriteAhead, WriteAheadReply

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


class Recording:
    def __init__(self, captures_context: bool) -> None:
        self.captures_context = captures_context
        self.records: list[EvidenceRecord] = []

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        await trio.lowlevel.checkpoint()
        return None

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        self.records.extend(records)
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def call(function: str, **arguments: Any) -> dict[str, Any]:
    return {"function": function, "arguments": arguments}


async def test_each_record_carries_the_callers_context_when_asked() -> None:
    sink = Recording(captures_context=True)
    branch = Branch(sinks=[sink])
    branch.register_tools(add)
    async with branch:

        async def handle(request_id: str) -> None:
            REQUEST_ID.set(request_id)
            await branch.act([call("add", a=1, b=2), call("missing"), call("add", a=3, b=4)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(handle, "first")
            nursery.start_soon(handle, "second")
    assert len(sink.records) == 6
    seen: dict[str, int] = {}
    for record in sink.records:
        assert record.task_context is not None
        value = record.task_context.get(REQUEST_ID)
        seen[value] = seen.get(value, 0) + 1
    assert seen == {"first": 3, "second": 3}


async def test_no_context_is_copied_unless_a_sink_asks() -> None:
    sink = Recording(captures_context=False)
    branch = Branch(sinks=[sink])
    branch.register_tools(add)
    async with branch:
        await branch.act(call("add", a=1, b=2))
    [record] = sink.records
    assert record.task_context is None
