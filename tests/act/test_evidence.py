"""The evidence seam: synchronous writers, sinks and their contracts, the write-ahead point,
overflow."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

import lionexec.act
import lionexec.act.sinks
from lionexec import ActionOutcome, Branch, Tool
from lionexec.act import (
    DurableEvidenceSink,
    EventLog,
    EvidenceRecord,
    EvidenceSink,
    JsonlSink,
    WriteAhead,
)
from lionexec.errors import NotDurableError
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

Outcome = ActionOutcome


class RecordingSink:
    """A sink that remembers what it saw, and can be held up."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.batches: list[int] = []
        self.release = trio.Event()
        self.release.set()
        self.closed = False

    def __repr__(self) -> str:
        return "RecordingSink()"

    async def write_ahead(self, entry: WriteAhead) -> None:
        self.events.append(("write_ahead", (entry.request.call_id, dict(entry.arguments))))
        await trio.lowlevel.checkpoint()

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        await self.release.wait()
        self.batches.append(len(records))
        for record in records:
            self.events.append(("write", (record.request.call_id, record.response.outcome)))

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


async def test_write_ahead_runs_before_the_tool_with_the_authorized_arguments() -> None:
    sink = RecordingSink()

    async def add(a: int, b: int) -> int:
        sink.events.append(("tool", (a, b)))
        return a + b

    async with Branch(sinks=[sink]) as branch:
        branch.register_tools(Tool.from_function(add))
        await branch.act({"function": "add", "arguments": {"a": "1", "b": 2}, "call_id": "c1"})
    assert sink.events == [
        ("write_ahead", ("c1", {"a": 1, "b": 2})),  # validated (coerced) arguments
        ("tool", (1, 2)),
        ("write", ("c1", Outcome.COMPLETED)),
    ]
    assert sink.closed


async def test_calls_that_never_run_reach_the_sink_but_not_the_write_ahead_point() -> None:
    sink = RecordingSink()
    async with Branch(sinks=[sink]) as branch:
        await branch.act({"function": "missing", "arguments": {}, "call_id": "c1"})
    assert sink.events == [("write", ("c1", Outcome.INVALID))]


async def test_the_drain_service_batches_and_leaving_writes_everything() -> None:
    sink = RecordingSink()
    sink.release = trio.Event()

    async def ok(n: int) -> int:
        return n

    async with Branch(sinks=[sink]) as branch:
        branch.register_tools(Tool.from_function(ok))
        await branch.act([call("ok", n=i) for i in range(10)])
        await trio.testing.wait_all_tasks_blocked()
        stats = branch.statistics().sinks[0]
        assert stats.written + stats.buffered + sum(sink.batches) >= 0
        sink.release.set()
    assert sum(sink.batches) == 10
    assert len(sink.batches) < 10  # records drained together, not one write each
    final = branch.statistics().sinks[0]
    assert (final.written, final.buffered, final.dropped, final.serving) == (10, 0, 0, False)


async def test_a_full_sink_holds_calls_at_the_write_ahead_point(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Overflow policy, part one: invoked calls wait for room (block at admission)."""
    sink = RecordingSink()
    sink.release = trio.Event()
    ran: list[int] = []

    async def ok(n: int) -> int:
        ran.append(n)
        return n

    async with Branch(sinks=[sink], sink_capacity=2) as branch:
        branch.register_tools(Tool.from_function(ok))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(branch.act, [call("ok", n=i) for i in range(6)])
            await trio.testing.wait_all_tasks_blocked()
            # the drain is stuck writing its first batch (one or two records); the buffer is
            # full again behind it, and the remaining calls wait before invoking their tools
            assert 2 < len(ran) < 6
            assert branch.statistics().sinks[0].buffered == 2
            sink.release.set()
        assert sorted(ran) == list(range(6))
    assert branch.statistics().sinks[0].dropped == 0
    assert branch.statistics().sinks[0].written == 6
    assert_consistent(branch)


async def test_a_full_sink_drops_records_of_calls_that_never_ran_and_reports_them() -> None:
    """Overflow policy, part two: what cannot wait is dropped from that sink, and reported."""
    sink = RecordingSink()
    sink.release = trio.Event()
    async with Branch(sinks=[sink], sink_capacity=1) as branch:
        await branch.act(
            [{"function": "nope", "arguments": {}, "call_id": f"c{i}"} for i in range(4)]
        )
        stats = branch.statistics().sinks[0]
        assert stats.dropped >= 1
        assert len(branch.messages.responses()) == 4  # the history keeps every record
        assert {f.where for f in branch.failures} == {"sink"}
        assert "record dropped" in str(branch.failures[0].error)
        sink.release.set()
    assert_consistent(branch)


async def test_the_jsonl_sink_writes_in_a_worker_thread(tmp_path: Any) -> None:
    threads: list[int] = []

    class Spy(JsonlSink):
        def _append(self, text: str) -> None:
            threads.append(threading.get_ident())
            super()._append(text)

    async def ok() -> int:
        return 1

    sink = Spy(tmp_path / "log.jsonl", dumps=lambda record: "{}")
    async with Branch(sinks=[sink]) as branch:
        branch.register_tools(Tool.from_function(ok))
        await branch.act([call("ok")] * 3)
    assert threads and threading.get_ident() not in threads
    assert (tmp_path / "log.jsonl").read_text().count("\n") == 3


async def test_evidence_is_written_under_ki_protection() -> None:
    protected: list[bool] = []

    class CheckingLog(EventLog):
        def append(self, record: Any) -> None:
            protected.append(trio.lowlevel.currently_ki_protected())
            super().append(record)

    async def ok() -> int:
        return 1

    branch = Branch(log=CheckingLog())
    branch.register_tools(Tool.from_function(ok))
    await branch.act([call("ok"), call("ok")])
    assert protected == [True, True]


async def test_serve_under_nursery_start_and_aclose() -> None:
    sink = RecordingSink()

    async def ok() -> int:
        return 1

    branch = Branch(sinks=[sink])
    branch.register_tools(Tool.from_function(ok))
    async with trio.open_nursery() as nursery:
        await nursery.start(branch.serve)
        await branch.act(call("ok"))
        await branch.aclose()
    assert sink.closed
    assert [kind for kind, _ in sink.events] == ["write_ahead", "write"]


def test_the_sinks_package_exports_the_contracts_and_sinks_homed_in_lionexec_act() -> None:
    for name in lionexec.act.sinks.__all__:
        obj = getattr(lionexec.act.sinks, name)
        assert obj is getattr(lionexec.act, name)
        assert obj.__module__ == "lionexec.act"


def test_a_durable_sink_is_told_apart_duck_typed(tmp_path: Any) -> None:
    class Durable(RecordingSink):
        durable = True
        committed = 0

        async def known_call_ids(self, call_ids: Sequence[str]) -> set[str]:
            await trio.lowlevel.checkpoint()
            return set()

        def expedite(self) -> None:
            pass

        async def flush(self) -> None:
            await trio.lowlevel.checkpoint()

    jsonl = JsonlSink(tmp_path / "log.jsonl", dumps=str)
    assert isinstance(jsonl, EvidenceSink) and not isinstance(jsonl, DurableEvidenceSink)
    assert isinstance(Durable(), DurableEvidenceSink)
    # a sink lacking durable members is a sink all the same: each member is used on its own
    assert isinstance(RecordingSink(), EvidenceSink)
    Branch(sinks=[RecordingSink(), Durable(), jsonl])


def test_a_sink_must_have_the_sink_methods() -> None:
    from lionexec import ConfigurationError

    with pytest.raises(ConfigurationError, match="write_ahead"):
        Branch(sinks=[object()])  # type: ignore[list-item]


async def test_act_of_an_empty_batch_is_a_checkpoint() -> None:
    branch = Branch()
    with trio.testing.assert_checkpoints():
        assert await branch.act([]) == []


async def test_a_sequential_batch_of_refused_calls_checkpoints_between_calls() -> None:
    branch = Branch()
    with trio.testing.assert_checkpoints():
        await branch.act([call("missing")] * 3, strategy="sequential")


async def test_act_waits_for_a_durable_sink_before_returning() -> None:
    sink = RecordingSink()
    sink.durable = True  # type: ignore[attr-defined]
    sink.release = trio.Event()
    returned = trio.Event()

    async def ok() -> int:
        return 1

    async with Branch(sinks=[sink]) as branch:
        branch.register_tools(Tool.from_function(ok))

        async def act() -> None:
            await branch.act([call("ok"), call("ok")])
            returned.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(act)
            await trio.testing.wait_all_tasks_blocked()
            assert not returned.is_set()  # the records are not written yet
            assert len(branch.messages.responses()) == 2  # but they are recorded
            sink.release.set()
        assert returned.is_set()
        assert sum(sink.batches) == 2


class FailingSink(RecordingSink):
    """A sink whose writes fail while ``failing`` is set."""

    def __init__(self, *, durable: bool) -> None:
        super().__init__()
        self.durable = durable
        self.failing = True

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        await trio.lowlevel.checkpoint()
        if self.failing:
            raise OSError("the disk is gone")
        await super().write(records)


async def test_act_raises_not_durable_when_a_durable_sink_does_not_hold_its_record() -> None:
    """A response a caller sees is one the durable sinks hold: when their write fails,
    ``act()`` raises instead of returning, the responses recorded and on the error."""
    sink = FailingSink(durable=True)

    async def ok(n: int) -> int:
        return n

    with trio.fail_after(5):
        async with Branch(sinks=[sink]) as branch:
            branch.register_tools(Tool.from_function(ok))
            with pytest.raises(NotDurableError) as caught:
                await branch.act([call("ok", n=1), call("ok", n=2)])
            assert isinstance(caught.value.__cause__, OSError)
            assert caught.value.sink == "RecordingSink()"
            assert "the durable sink RecordingSink() does not hold them" in str(caught.value)
            assert [r.output for r in caught.value.responses] == [1, 2]
            recorded = {r.id for r in branch.messages.responses()}
            assert recorded == {r.id for r in caught.value.responses}
            sink.failing = False
            [response] = await branch.act(call("ok", n=3))  # written: returned
            assert response.output == 3
    assert_consistent(branch)


async def test_act_raises_not_durable_when_the_durable_sinks_service_stops_first() -> None:
    sink = RecordingSink()
    sink.durable = True  # type: ignore[attr-defined]
    sink.release = trio.Event()  # its write never ends
    branch = Branch(sinks=[sink])

    async def ok() -> int:
        return 1

    branch.register_tools(Tool.from_function(ok))
    service = trio.CancelScope()
    caught: list[NotDurableError] = []

    async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with service:
            await branch.serve(task_status=task_status)

    async def act() -> None:
        with pytest.raises(NotDurableError) as raised:
            await branch.act(call("ok"))
        caught.append(raised.value)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve)
            nursery.start_soon(act)
            await trio.testing.wait_all_tasks_blocked()
            assert not caught  # act() waits for the write
            service.cancel()  # the service stops first: the record is never written
    [error] = caught
    assert "its service stopped before writing them" in str(error)
    assert error.__cause__ is None
    assert [r.output for r in error.responses] == [1]
    assert sink.batches == []


async def test_a_failed_write_of_a_sink_that_is_not_durable_is_reported_not_raised() -> None:
    sink = FailingSink(durable=False)

    async def ok(n: int) -> int:
        return n

    with trio.fail_after(5):
        async with Branch(sinks=[sink]) as branch:
            branch.register_tools(Tool.from_function(ok))
            [response] = await branch.act(call("ok", n=1))
    assert response.output == 1
    assert any(isinstance(f.error, OSError) and f.where == "sink" for f in branch.failures)


async def test_a_sink_whose_expedite_raises_is_reported_not_raised() -> None:
    class Hasty(RecordingSink):
        durable = True

        def expedite(self) -> None:
            raise RuntimeError("expedite broke")

    sink = Hasty()

    async def ok() -> int:
        return 1

    with trio.fail_after(5):
        async with Branch(sinks=[sink]) as branch:
            branch.register_tools(Tool.from_function(ok))
            [response] = await branch.act(call("ok"))
    assert response.content.outcome is Outcome.COMPLETED
    assert sum(sink.batches) == 1
    assert any(isinstance(f.error, RuntimeError) and f.where == "sink" for f in branch.failures), (
        list(branch.failures)
    )
    assert_consistent(branch)


async def test_act_does_not_wait_for_a_log_file_sink() -> None:
    sink = RecordingSink()
    sink.release = trio.Event()

    async def ok() -> int:
        return 1

    async with Branch(sinks=[sink]) as branch:
        branch.register_tools(Tool.from_function(ok))
        await branch.act(call("ok"))  # returns with its record still buffered
        assert branch.statistics().sinks[0].written == 0
        sink.release.set()
