"""Leaving a branch by cancellation: what happens to its sinks' records and files.

The records buffered when a branch is left by a cancellation (or its service is cancelled)
are written within the branch's ``cancel_grace``; a write the cancellation cut short is
counted dropped; every sink is closed once, a close cut short is finished within the grace,
and a close that fails or runs out of time is reported, never raised over the cancellation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from lionexec import Branch
from lionexec.act import EvidenceRecord, JsonlSink, WriteAhead
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

# -- leaving a branch by cancellation -------------------------------------------------------------


async def test_leaving_a_branch_by_cancellation_writes_its_jsonl_records_and_closes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    started = 0

    async def quick(x: int) -> int:
        return x

    with trio.CancelScope() as scope:

        async def slow(x: int) -> int:
            nonlocal started
            started += 1
            if started == 3:
                scope.cancel()  # how a server shuts down: the block is cancelled
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        branch = Branch.with_log_file(path, cancel_grace=60)  # (a real-time bound: ample)
        branch.register_tools([quick, slow])
        async with branch:
            await branch.act(call("quick", x=1))
            await branch.act([call("slow", x=i) for i in range(3)])
    assert scope.cancelled_caught
    outcomes = [json.loads(line)["outcome"] for line in path.read_text().splitlines()]
    assert outcomes == ["completed", "cancelled", "cancelled", "cancelled"]
    [sink] = branch.sinks
    assert isinstance(sink, JsonlSink) and sink._file is None  # closed
    [stats] = branch.statistics().sinks
    assert (stats.buffered, stats.written, stats.dropped, stats.serving) == (0, 4, 0, False)
    assert branch.failures.statistics().total == 0
    assert_consistent(branch)


class StuckSink:
    """A sink whose writes never finish once ``stuck`` is set; it counts its closes."""

    def __init__(self) -> None:
        self.stuck = False
        self.written = 0
        self.closes = 0

    def __repr__(self) -> str:
        return "StuckSink()"

    async def write_ahead(self, entry: WriteAhead) -> None:
        await trio.lowlevel.checkpoint()

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        if self.stuck:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        self.written += len(records)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        self.closes += 1


async def test_records_a_sink_cannot_write_within_the_grace_are_counted_dropped(
    autojump_clock: trio.abc.Clock,
) -> None:
    sink = StuckSink()

    async def quick() -> None:
        sink.stuck = True  # its record's write never finishes

    async def slow() -> None:
        await trio.sleep_forever()

    branch = Branch(sinks=[sink], cancel_grace=3)
    branch.register_tools([quick, slow])
    with trio.move_on_after(5):
        async with branch:
            await branch.act(call("quick"))
            await branch.act(call("slow"))  # recorded cancelled: buffered behind the first
    # the write in progress is cut; the buffered one gets the grace, then the sink is closed
    assert trio.current_time() == 5 + 3
    assert (sink.written, sink.closes) == (0, 1)
    [stats] = branch.statistics().sinks
    assert (stats.buffered, stats.written, stats.dropped, stats.serving) == (0, 0, 2, False)
    assert [f.where for f in branch.failures] == ["sink", "sink"]
    assert_consistent(branch)


async def test_a_record_that_reached_the_service_as_the_block_was_left_is_written() -> None:
    """The block is left by a ``BaseException`` (as by a cancellation) in the step that
    offered a record: the service, woken with it, is stopped before it runs. The record is
    written within the grace, not dropped: a stop cuts short only a write that began. (A
    cancelled server lost records so, when its service ran after the block was left.)"""

    class Stop(BaseException):
        pass

    sink = StuckSink()  # (never stuck here: each write checkpoints, then counts)

    async def ok() -> int:
        return 1

    branch = Branch(sinks=[sink], cancel_grace=60)  # (a real-time bound: ample)
    branch.register_tools(ok)
    stopped = False
    with trio.fail_after(10):
        try:
            async with branch:
                await branch.act(call("ok"))  # its record reaches the service, not yet run
                raise Stop
        except* Stop:
            stopped = True
    assert stopped
    assert (sink.written, sink.closes) == (1, 1)
    [stats] = branch.statistics().sinks
    assert (stats.buffered, stats.written, stats.dropped, stats.serving) == (0, 1, 0, False)
    assert branch.failures.statistics().total == 0
    assert_consistent(branch)


async def test_a_cancelled_branch_service_writes_what_is_buffered_and_closes_its_sinks() -> None:
    sink = StuckSink()
    release = trio.Event()

    async def ok() -> int:
        return 1

    branch = Branch(sinks=[sink], cancel_grace=60)  # (a real-time bound: ample)
    branch.register_tools(ok)
    async with trio.open_nursery() as nursery:
        service = trio.CancelScope()

        async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with service:
                await branch.serve(task_status=task_status)

        await nursery.start(serve)

        async def hold_up(records: Sequence[EvidenceRecord]) -> None:
            await release.wait()  # the first write waits while the second record arrives
            sink.written += len(records)

        sink.write = hold_up  # type: ignore[method-assign]
        await branch.act(call("ok"))
        await trio.testing.wait_all_tasks_blocked()
        await branch.act(call("ok"))
        service.cancel()
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert service.cancelled_caught
    assert (sink.written, sink.closes) == (1, 1)  # the buffered record; the held-up one lost
    [stats] = branch.statistics().sinks
    assert (stats.written, stats.dropped, stats.serving) == (1, 1, False)


async def test_a_sink_that_fails_to_close_while_cancelled_does_not_replace_the_cancellation() -> (
    None
):
    class BadClose(StuckSink):
        async def aclose(self) -> None:
            await super().aclose()
            raise OSError("the disk is gone")

    sink = BadClose()
    branch = Branch(sinks=[sink])
    with trio.CancelScope() as scope:
        async with branch:
            scope.cancel()
            await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert sink.closes == 1
    [failure] = list(branch.failures)
    assert failure.where == "sink" and "the disk is gone" in str(failure.error)


# -- closing a sink within the grace --------------------------------------------------------------


class SlowCloseSink:
    """A sink whose close takes *close_for* seconds (a flush, a final commit)."""

    def __init__(self, close_for: float) -> None:
        self.close_for, self.written, self.closed = close_for, 0, False

    def __repr__(self) -> str:
        return "SlowCloseSink()"

    async def write_ahead(self, entry: WriteAhead) -> None:
        await trio.lowlevel.checkpoint()

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        await trio.lowlevel.checkpoint()
        self.written += len(records)

    async def aclose(self) -> None:
        await trio.sleep(self.close_for)
        self.closed = True


async def quick() -> int:
    return 1


async def test_a_close_a_cancellation_cuts_short_is_finished_within_the_grace(
    autojump_clock: trio.abc.Clock,
) -> None:
    # left normally, then the deadline lands while the sink closes
    sink = SlowCloseSink(close_for=1.0)
    branch = Branch(sinks=[sink], cancel_grace=60)
    branch.register_tools([quick])
    with trio.move_on_after(0.5) as scope:
        async with branch:
            await branch.act(call("quick"))
    assert scope.cancelled_caught
    assert sink.closed and sink.written == 1
    assert trio.current_time() == pytest.approx(1.5)  # cut at 0.5, closed again in 1 s
    assert list(branch.failures) == []


async def test_a_sink_that_does_not_close_within_the_grace_is_reported(
    autojump_clock: trio.abc.Clock,
) -> None:
    sink = SlowCloseSink(close_for=10.0)
    branch = Branch(sinks=[sink], cancel_grace=2)
    branch.register_tools([quick])
    with trio.move_on_after(0.5):
        async with branch:
            await branch.act(call("quick"))
    assert not sink.closed
    assert trio.current_time() == pytest.approx(2.5)
    [failure] = list(branch.failures)
    assert failure.where == "sink" and "did not close within cancel_grace" in str(failure.error)
