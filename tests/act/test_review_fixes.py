"""Regression tests for bugs a review reproduced in the act layer.

The context a tool gets after a transform; leaving a branch by cancellation (its sinks'
records and files); announce's isolation of overridden seams and of exceptions that do not
copy; and the envelope reader's errors.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from lionexec import ActionOutcome, Branch, HookBus, HookPoint, SessionObserver, Tool
from lionexec.act import EvidenceRecord, JsonlSink, WriteAhead, read_batch
from lionexec.act.envelope import read_arguments
from lionexec.act.transaction import CallTransaction
from lionexec.governance import CallContext
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

# -- 1. the context of a transformed call --------------------------------------------------


async def test_a_tool_taking_its_context_gets_the_transformed_arguments_in_it() -> None:
    seen: dict[str, Any] = {}

    async def write(path: str, ctx: CallContext | None = None) -> str:
        assert ctx is not None
        seen["kwarg"], seen["context"] = path, dict(ctx.arguments)
        return "ok"

    def sandbox(arguments: dict[str, Any]) -> dict[str, Any]:
        return {**arguments, "path": "/sandbox/" + arguments["path"].lstrip("/")}

    branch = Branch()
    branch.register_tools(Tool.from_function(write, preprocessor=sandbox, context_param="ctx"))
    [response] = await branch.act(call("write", path="/etc/passwd"))
    assert response.content.outcome is ActionOutcome.COMPLETED
    assert seen == {"kwarg": "/sandbox/etc/passwd", "context": {"path": "/sandbox/etc/passwd"}}
    [record] = list(branch.log)
    assert record.event.context.arguments == {"path": "/sandbox/etc/passwd"}
    assert_consistent(branch)


# -- 2. leaving a branch by cancellation ---------------------------------------------------


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


# -- 3. announce isolates the seams a subclass overrides -----------------------------------


class AuditObserver(SessionObserver):
    async def emit(self, payload: Any, *, call_id: str | None = None) -> None:
        raise ConnectionError("audit service down")


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
    # left normally, then the deadline lands while the sink closes (session 13 review)
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


async def test_an_observer_whose_emit_raises_is_reported_not_raised(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def quick() -> int:
        return 1

    async def slow() -> int:
        await trio.sleep(10)
        return 2

    branch = Branch(observer=AuditObserver())
    branch.register_tools([quick, slow])
    responses = await branch.act([call("quick"), call("slow")])
    assert [r.content.outcome for r in responses] == [ActionOutcome.COMPLETED] * 2
    failures = list(branch.failures)
    assert [f.where for f in failures] == ["observer", "observer"]
    assert {f.call_id for f in failures} == {record.call_id for record in branch.log}
    assert_consistent(branch)


async def test_an_observer_whose_emit_raises_does_not_replace_a_cancellation(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def slow() -> int:
        await trio.sleep(10)
        return 2

    branch = Branch(observer=AuditObserver())
    branch.register_tools(slow)
    with trio.move_on_after(1) as scope:
        await branch.act(call("slow"))
    assert scope.cancelled_caught
    [response] = branch.messages.responses()
    assert response.content.outcome is ActionOutcome.CANCELLED
    [failure] = list(branch.failures)
    assert failure.where == "observer"


async def test_a_hook_bus_whose_emit_raises_is_reported_at_each_point() -> None:
    class BrokenBus(HookBus):
        async def emit(self, point: HookPoint, **kwargs: Any) -> Any:
            raise RuntimeError(f"bus broke at {point.value}")

    async def ok() -> int:
        return 1

    hooks = BrokenBus()
    for point in (HookPoint.TOOL_POST, HookPoint.MESSAGE_ADD):
        hooks.on(point, lambda **kwargs: None)
    branch = Branch(hooks=hooks)
    branch.register_tools(ok)
    [response] = await branch.act(call("ok"))
    assert response.content.outcome is ActionOutcome.COMPLETED
    assert [f.where for f in list(branch.failures)] == [
        "hook:tool.post",
        "hook:message.add",
        "hook:message.add",
    ]


async def test_announcing_an_interrupted_call_never_replaces_the_cancellation(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_announce(self: CallTransaction) -> None:
        raise RuntimeError("announce broke")

    monkeypatch.setattr(CallTransaction, "announce", broken_announce)
    branch = Branch(observer=SessionObserver())
    branch.register_tools(slow_tool)
    with trio.move_on_after(1) as scope:
        await branch.act(call("slow_tool"))
    assert scope.cancelled_caught
    [failure] = list(branch.failures)
    assert failure.where == "announce"


async def slow_tool() -> None:
    await trio.sleep(10)


# -- 4. exceptions that do not copy --------------------------------------------------------


class CopiesToText(Exception):
    def __reduce__(self) -> Any:  # copy.copy() of it is a str
        return (str, ("odd",))


class Frozen(Exception):
    def __setattr__(self, name: str, value: Any) -> None:  # its copy refuses __cause__
        if name == "__cause__":
            raise AttributeError(f"{name} is frozen")
        super().__setattr__(name, value)


@pytest.mark.parametrize("error", [CopiesToText("tool failed"), Frozen("tool failed")])
async def test_a_tool_error_that_does_not_copy_is_passed_as_it_is(
    autojump_clock: trio.abc.Clock, error: Exception
) -> None:
    async def bad() -> None:
        raise error

    async def slow() -> str:
        await trio.sleep(10)
        return "done"

    seen: list[Any] = []
    branch = Branch()
    branch.register_tools([bad, slow])
    branch.hooks.on(HookPoint.TOOL_ERROR, lambda **kwargs: seen.append(kwargs["error"]))
    responses = await branch.act([call("bad"), call("slow")], suppress_errors=True)
    assert [r.content.outcome for r in responses] == [
        ActionOutcome.FAILED,
        ActionOutcome.COMPLETED,
    ]
    assert seen == [error]
    assert branch.failures.statistics().total == 0
    assert_consistent(branch)


# -- 5. the envelope reader's errors -------------------------------------------------------


class BadMap(Mapping[str, Any]):
    """A mapping whose values cannot be read."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        return iter(["x"])

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("choice", [None, 1, "text", {"message": None}])
def test_a_chat_completion_whose_choice_has_no_message_is_a_value_error(choice: Any) -> None:
    with pytest.raises(ValueError, match="choice of a ChatCompletion"):
        read_batch({"object": "chat.completion", "choices": [choice]})


@pytest.mark.parametrize(
    ("raw", "kind"), [(BadMap(), "BadMap"), ({"x": BadMap()}, "dict")], ids=["top", "nested"]
)
async def test_arguments_that_cannot_be_read_make_the_call_invalid(raw: Any, kind: str) -> None:
    assert read_arguments(raw) == (
        None,
        f"arguments could not be read from {kind}: RuntimeError('boom')",
    )

    async def f(x: Any = None) -> int:
        return 1

    branch = Branch()
    branch.register_tools(f)
    [response] = await branch.act({"function": "f", "arguments": raw})
    assert response.content.outcome is ActionOutcome.INVALID
    assert response.content.error is not None
    assert response.content.error.message.startswith(f"arguments could not be read from {kind}")
    assert_consistent(branch)


# -- batches: retry delays, throttles (session 13, second review) -----------------------------


@pytest.mark.parametrize(
    ("backoff", "initial", "retry", "expected"),
    [(2.0, 0.0, 1024, 0.0), (10.0, 0.001, 309, 1.0), (2, 0.0, 1024, 0.0), (2, 1.0, 5000, 1.0)],
)
def test_a_retry_delay_is_capped_never_an_overflow(
    backoff: float, initial: float, retry: int, expected: float
) -> None:
    from lionexec.act.batch import RetryPolicy

    policy = RetryPolicy(attempts=6000, backoff=backoff, initial_delay=initial, max_delay=1.0)
    assert policy.delay(retry) == expected


async def test_alcall_makes_every_attempt_past_an_overflowing_backoff(
    autojump_clock: trio.abc.Clock,
) -> None:
    from lionexec.act import AlcallParams, alcall

    attempts = 0

    async def flaky(x: int) -> int:
        nonlocal attempts
        attempts += 1
        raise ValueError("transient")

    params = AlcallParams(
        retry_attempts=400, retry_backoff=10.0, retry_initial_delay=0.001, retry_max_delay=0.01
    )
    with pytest.raises(ValueError, match="transient"):  # the tool's own error, not Overflow
        await alcall(flaky, [1], params)
    assert attempts == 401


@pytest.mark.parametrize("shape", ["max_concurrent", "limiter"])
async def test_a_throttle_spaces_real_starts_when_a_call_waits_for_capacity(
    shape: str, autojump_clock: trio.abc.Clock
) -> None:
    from lionexec.act import AlcallParams, alcall

    durations = [10.0, 9.5, 1.0, 1.0]
    starts: list[float] = []

    async def work(i: int) -> None:
        starts.append(trio.current_time())
        await trio.sleep(durations[i])

    if shape == "max_concurrent":
        await alcall(work, range(4), AlcallParams(max_concurrent=2, throttle_period=1.0))
    else:  # two at a time through a shared limiter: its token is the wait
        from lionexec.act.batch import fan_out

        async def run(_: int, i: int) -> None:
            await work(i)

        limiter = trio.CapacityLimiter(2)
        await fan_out(run, list(range(4)), throttle_period=1.0, limiter=limiter)
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(starts) == 4 and min(gaps) >= 1.0 - 1e-9, gaps


async def test_a_call_cancelled_before_it_starts_gives_its_tokens_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    from lionexec.act.batch import fan_out

    limiter = trio.CapacityLimiter(2)

    async def work(i: int, item: int) -> None:
        await trio.sleep(5)

    with trio.move_on_after(0.5):  # the second start waits on the throttle, holding tokens
        await fan_out(work, [1, 2], max_concurrent=2, throttle_period=1.0, limiter=limiter)
    assert limiter.borrowed_tokens == 0
