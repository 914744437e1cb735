"""HookBus: blocking tool.pre verdicts, isolated non-blocking points; their bound seams."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from lionexec import FailureLog, ReportedFailure
from lionexec.conversation import ActionRequest, Instruction, Message, MessageManager
from lionexec.governance import (
    MAX_KEPT_FAILURES,
    BoundSeams,
    HookBus,
    HookBusStatistics,
    HookFailure,
    HookPoint,
    PreHookResult,
    SessionObserver,
    StopHook,
)


def test_hook_points_include_the_action_path_vocabulary() -> None:
    assert {p.name: p.value for p in HookPoint} == {
        "TOOL_PRE": "tool.pre",
        "TOOL_POST": "tool.post",
        "TOOL_ERROR": "tool.error",
        "MESSAGE_ADD": "message.add",
    }
    assert HookPoint("tool.pre") is HookPoint.TOOL_PRE


def test_on_off_and_handlers_for() -> None:
    bus = HookBus()

    def first(**_: Any) -> None: ...
    def second(**_: Any) -> None: ...

    assert bus.on("tool.post", first) is first
    bus.on(HookPoint.TOOL_POST, second)
    bus.on(HookPoint.TOOL_POST, first)
    assert bus.handlers_for("tool.post") == (first, second, first)
    bus.off(HookPoint.TOOL_POST, first)  # the latest registration
    assert bus.handlers_for(HookPoint.TOOL_POST) == (first, second)
    bus.off(HookPoint.TOOL_POST, lambda **_: None)  # absent: nothing happens
    assert bus.handlers_for(HookPoint.TOOL_ERROR) == ()
    assert bus.has_handlers(HookPoint.TOOL_POST)
    assert not bus.has_handlers(HookPoint.TOOL_ERROR)
    bus.on(HookPoint.TOOL_ERROR, second)
    assert bus.points == {HookPoint.TOOL_POST, HookPoint.TOOL_ERROR}
    bus.off(HookPoint.TOOL_POST, first)
    bus.off(HookPoint.TOOL_POST, second)
    assert not bus.has_handlers(HookPoint.TOOL_POST)  # every handler gone
    assert bus.points == {HookPoint.TOOL_ERROR}
    assert bus.statistics().handlers == {HookPoint.TOOL_ERROR: 1}


def test_unknown_points_and_uncallable_handlers_are_refused() -> None:
    bus = HookBus()
    with pytest.raises(ValueError, match=r"tool\.maybe"):
        bus.on("tool.maybe", lambda **_: None)
    with pytest.raises(TypeError, match="callable"):
        bus.on(HookPoint.TOOL_POST, "not a function")  # type: ignore[arg-type]


async def test_handlers_are_called_with_keyword_arguments_sync_or_async() -> None:
    bus = HookBus()
    calls: list[tuple[str, dict[str, Any]]] = []

    def sync_handler(**kwargs: Any) -> None:
        calls.append(("sync", kwargs))

    async def async_handler(*, tool_name: str, call_id: str) -> None:
        await trio.lowlevel.checkpoint()
        calls.append(("async", {"tool_name": tool_name, "call_id": call_id}))

    for point in (HookPoint.TOOL_PRE, HookPoint.TOOL_POST):
        bus.on(point, sync_handler)
        bus.on(point, async_handler)
    assert await bus.run_pre(tool_name="t", call_id="c") == PreHookResult(True)
    assert await bus.emit(HookPoint.TOOL_POST, tool_name="t", call_id="c") == []
    kwargs = {"tool_name": "t", "call_id": "c"}
    assert calls == [("sync", kwargs), ("async", kwargs)] * 2


async def test_pre_handlers_run_one_at_a_time_in_order(autojump_clock: trio.abc.Clock) -> None:
    bus = HookBus()
    log: list[str] = []

    def handler(name: str, delay: float) -> Any:
        async def run(**_: Any) -> None:
            log.append(f"{name} start")
            await trio.sleep(delay)
            log.append(f"{name} end")

        return run

    bus.on(HookPoint.TOOL_PRE, handler("slow", 5))
    bus.on(HookPoint.TOOL_PRE, handler("fast", 1))
    assert (await bus.run_pre()).allowed
    assert log == ["slow start", "slow end", "fast start", "fast end"]


async def test_stop_hook_skips_the_remaining_pre_handlers_and_is_not_a_denial() -> None:
    bus = HookBus()
    ran: list[str] = []

    def stopper(**_: Any) -> None:
        ran.append("stopper")
        raise StopHook

    bus.on(HookPoint.TOOL_PRE, stopper)
    bus.on(HookPoint.TOOL_PRE, lambda **_: ran.append("skipped"))
    assert await bus.run_pre() == PreHookResult(True)
    assert ran == ["stopper"]


async def test_a_raising_pre_handler_is_a_denial_value_not_an_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A blocking pre-hook's exception must not escape act(): it is a denial value.
    bus = HookBus()
    ran: list[str] = []
    error = PermissionError("not on fridays")

    def guard(**_: Any) -> None:
        raise error

    bus.on(HookPoint.TOOL_PRE, guard)
    bus.on(HookPoint.TOOL_PRE, lambda **_: ran.append("after"))
    with caplog.at_level(logging.WARNING, logger="lionexec.hooks"):
        result = await bus.run_pre(tool_name="t")
    assert not result.allowed
    assert result.error is error
    assert result.handler is guard
    assert result.reason is not None
    assert "PermissionError: not on fridays" in result.reason and "guard" in result.reason
    assert ran == []
    assert len(bus.failures) == 0  # a denial is not a failure
    assert any("denied" in r.getMessage() for r in caplog.records)


async def test_a_pre_handler_allows_with_true_or_none_and_denies_with_anything_else() -> None:
    # Fail closed: a verdict that is neither True nor None, say "deny" or 0, denies.
    def returning(value: object) -> Any:
        return lambda **_: value

    bus = HookBus()
    for value in (None, True):
        bus.on(HookPoint.TOOL_PRE, returning(value))
    assert (await bus.run_pre()).allowed
    for value in (0, "", [], "deny", "yes"):
        odd = HookBus()
        odd.on(HookPoint.TOOL_PRE, returning(value))
        verdict = await odd.run_pre()
        assert not verdict.allowed and verdict.error is None
        assert verdict.reason is not None and repr(value) in verdict.reason

    async def refuses(**_: Any) -> bool:
        return False

    bus.on(HookPoint.TOOL_PRE, refuses)
    result = await bus.run_pre()
    assert not result.allowed and result.error is None and result.handler is refuses
    assert result.reason is not None and "returned False" in result.reason


async def test_cancellation_in_a_pre_handler_propagates() -> None:
    bus = HookBus()

    async def waits(**_: Any) -> None:
        await trio.sleep_forever()

    bus.on(HookPoint.TOOL_PRE, waits)
    with trio.move_on_after(0) as scope:
        await bus.run_pre()
    assert scope.cancelled_caught


async def test_emit_isolates_logs_returns_and_keeps_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = HookBus()
    ran: list[str] = []

    def broken(**_: Any) -> None:
        raise RuntimeError("broken")

    async def broken_async(**_: Any) -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("k")

    bus.on(HookPoint.TOOL_ERROR, broken)
    bus.on(HookPoint.TOOL_ERROR, broken_async)
    bus.on(HookPoint.TOOL_ERROR, lambda **_: ran.append("healthy"))
    with caplog.at_level(logging.ERROR, logger="lionexec"):
        failures = await bus.emit(HookPoint.TOOL_ERROR, call_id="c")
    assert ran == ["healthy"]
    assert [(f.where, f.call_id, f.culprit, type(f.error)) for f in failures] == [
        ("hook:tool.error", "c", repr(broken), RuntimeError),
        ("hook:tool.error", "c", repr(broken_async), KeyError),
    ]
    assert all(type(f) is HookFailure is ReportedFailure for f in failures)
    assert list(bus.failures) == failures
    assert [r.name for r in caplog.records] == ["lionexec"] * 2  # each logged once


async def test_stop_hook_skips_the_remaining_handlers_of_emit() -> None:
    bus = HookBus()
    ran: list[str] = []

    def stopper(**_: Any) -> None:
        raise StopHook

    bus.on(HookPoint.TOOL_POST, stopper)
    bus.on(HookPoint.TOOL_POST, lambda **_: ran.append("skipped"))
    assert await bus.emit(HookPoint.TOOL_POST) == []
    assert ran == []


async def test_emit_refuses_the_blocking_point() -> None:
    with pytest.raises(ValueError, match="run_pre"):
        await HookBus().emit(HookPoint.TOOL_PRE)


async def test_cancellation_in_an_emit_handler_propagates() -> None:
    bus = HookBus()

    async def waits(**_: Any) -> None:
        await trio.sleep_forever()

    bus.on(HookPoint.TOOL_POST, waits)
    with trio.move_on_after(0) as scope:
        await bus.emit(HookPoint.TOOL_POST)
    assert scope.cancelled_caught
    assert list(bus.failures) == []


async def test_kept_failures_are_bounded_and_keep_the_most_recent() -> None:
    bus = HookBus()
    count = 0

    def broken(**_: Any) -> None:
        raise RuntimeError(count)

    bus.on(HookPoint.TOOL_POST, broken)
    logging.getLogger("lionexec").disabled = True
    try:
        for count in range(MAX_KEPT_FAILURES + 3):  # noqa: B007 - read by the handler
            await bus.emit(HookPoint.TOOL_POST)
    finally:
        logging.getLogger("lionexec").disabled = False
    assert len(bus.failures) == MAX_KEPT_FAILURES
    assert str(bus.failures[0].error) == "3"
    assert str(bus.failures[-1].error) == str(MAX_KEPT_FAILURES + 2)
    stats = bus.statistics()
    assert (stats.failures_total, stats.failures_dropped) == (MAX_KEPT_FAILURES + 3, 3)


async def test_a_failing_message_add_hook_leaves_the_history_consistent() -> None:
    bus = HookBus()
    reported: list[list[HookFailure]] = []

    def broken(**_: Any) -> None:
        raise RuntimeError("hook")

    async def forward(message: Message) -> None:
        reported.append(await bus.emit(HookPoint.MESSAGE_ADD, message=message))

    bus.on(HookPoint.MESSAGE_ADD, broken)
    history = MessageManager(on_message_added=[forward])
    message = Instruction(content="u")
    assert await history.a_add_message(message) == []  # the bus isolated it
    assert [len(r) for r in reported] == [1]
    assert list(history) == [message]


async def test_a_message_add_failure_names_the_call_of_its_message() -> None:
    bus = HookBus()
    bus.on(HookPoint.MESSAGE_ADD, lambda **_: 1 / 0)
    request = ActionRequest.create("f", {}, call_id="call_9")
    [failure] = await bus.emit(HookPoint.MESSAGE_ADD, message=request)
    assert (failure.where, failure.call_id) == ("hook:message.add", "call_9")
    [failure] = await bus.emit(HookPoint.MESSAGE_ADD, message=Instruction(content="u"))
    assert failure.call_id is None


def test_statistics_count_handlers_per_point_and_failures() -> None:
    bus = HookBus()

    def handler(**_: Any) -> None: ...

    assert bus.statistics() == HookBusStatistics(handlers={}, failures_total=0, failures_dropped=0)
    bus.on(HookPoint.TOOL_PRE, handler)
    bus.on(HookPoint.TOOL_POST, handler)
    bus.on(HookPoint.TOOL_POST, handler)
    bus.off(HookPoint.TOOL_PRE, handler)
    stats = bus.statistics()
    assert dict(stats.handlers) == {HookPoint.TOOL_POST: 2}
    with pytest.raises(TypeError):
        stats.handlers[HookPoint.TOOL_ERROR] = 1  # type: ignore[index]  # a snapshot


async def test_one_shared_failure_log_keeps_and_logs_each_failure_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A branch shares one FailureLog between its bus, observer and history: a raising
    # tool.post hook is then stored once and logged once, not once per component.
    shared = FailureLog()
    bus = HookBus(failures=shared)
    observer = SessionObserver(failures=shared)
    history = MessageManager(failures=shared)

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("broken")

    bus.on(HookPoint.TOOL_POST, broken)
    observer.subscribe(object, broken)
    history.on_message_added.append(broken)
    with caplog.at_level(logging.ERROR):
        await bus.emit(HookPoint.TOOL_POST, call_id="c1")
        await observer.emit("payload", call_id="c1")
        await history.a_add_message(Instruction(content="u"))
    assert [(f.where, f.call_id) for f in shared] == [
        ("hook:tool.post", "c1"),
        ("observer", "c1"),
        ("message_callback", None),
    ]
    assert bus.failures is observer.failures is history.failures is shared
    assert len([r for r in caplog.records if r.name.startswith("lionexec")]) == 3
    assert shared.statistics().total == 3


def test_the_bus_takes_its_options_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        HookBus(FailureLog())  # type: ignore[misc]


def test_a_verdict_takes_its_error_and_handler_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        PreHookResult(False, "no", ValueError("x"))  # type: ignore[misc]
    error = ValueError("x")
    assert PreHookResult(False, "no", error=error).error is error


# -- BoundSeams: the bus's seams, bound once ----------------------------------------------------


async def test_bound_seams_run_the_handlers_without_a_checkpoint_of_their_own() -> None:
    bus = HookBus()
    seen: list[str] = []
    bus.on(HookPoint.TOOL_PRE, lambda **kwargs: seen.append("pre"))
    bus.on(HookPoint.TOOL_POST, lambda **kwargs: seen.append("post"))
    seams = BoundSeams(bus)
    with trio.CancelScope() as scope:
        scope.cancel()  # sync handlers, no checkpoint inside: they run all the same
        assert (await seams.run_pre(tool_name="f")).allowed
        assert await seams.emit(HookPoint.TOOL_POST, call_id="c") == []
        with pytest.raises(trio.Cancelled):
            await bus.emit(HookPoint.TOOL_POST, call_id="c")  # the public method's checkpoint
    assert seen == ["pre", "post"]


async def test_a_bus_whose_emit_a_subclass_overrides_is_bound_to_the_override() -> None:
    class Counting(HookBus):
        emitted = 0

        async def emit(self, point: HookPoint | str, **kwargs: Any) -> list[ReportedFailure]:
            Counting.emitted += 1
            return await super().emit(point, **kwargs)

    seams = BoundSeams(Counting())
    assert await seams.emit(HookPoint.TOOL_POST) == []
    assert Counting.emitted == 1
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await seams.emit(HookPoint.TOOL_POST)  # checkpoint and all
