"""The Event's state, status setter and invoke() lifecycle."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from lionexec import TERMINAL_STATUSES, Event, EventStatus, Execution, Unset


class Returns(Event):
    """Returns a fixed value after an optional sleep on trio's clock."""

    def __init__(self, value: Any = None, delay: float = 0.0) -> None:
        super().__init__()
        self.value = value
        self.delay = delay

    async def _invoke(self) -> Any:
        if self.delay:
            await trio.sleep(self.delay)
        return self.value


class Raises(Event):
    def __init__(self, exc: BaseException, delay: float = 0.0) -> None:
        super().__init__()
        self.exc = exc
        self.delay = delay

    async def _invoke(self) -> Any:
        if self.delay:
            await trio.sleep(self.delay)
        raise self.exc


# -- state -------------------------------------------------------------------------------------


def test_new_event_is_pending_with_unset_duration_and_retryable() -> None:
    event = Event()
    assert event.status is EventStatus.PENDING
    assert event.execution.duration is Unset
    assert event.execution.retryable is Unset
    assert event.response is None
    assert event.execution.error is None
    assert event.streaming is False


def test_status_reads_execution_status() -> None:
    event = Event()
    event.execution.status = EventStatus.FAILED
    assert event.status is EventStatus.FAILED


@pytest.mark.parametrize("status", list(EventStatus))
def test_status_setter_accepts_enum_and_each_of_the_seven_strings(status: EventStatus) -> None:
    by_enum, by_string = Event(), Event()
    by_enum.status = status
    by_string.status = status.value
    assert by_enum.status is status
    assert by_string.status is status


@pytest.mark.parametrize("bad", ["done", "COMPLETED", "", 3, None, True, object()])
def test_status_setter_rejects_unknown_values_naming_the_allowed_ones(bad: object) -> None:
    event = Event()
    with pytest.raises(ValueError, match="expected one of 'pending', 'processing'") as info:
        event.status = bad  # type: ignore[assignment]
    assert repr(bad) in str(info.value)
    assert event.status is EventStatus.PENDING


def test_status_setter_enforces_no_transition_graph() -> None:
    event = Event()
    for status in [
        EventStatus.COMPLETED,
        EventStatus.PENDING,
        EventStatus.ABORTED,
        EventStatus.PROCESSING,
        EventStatus.SKIPPED,
    ]:
        event.status = status
        assert event.status is status


def test_direct_execution_status_assignment_bypasses_validation_and_signalling() -> None:
    event = Event()
    signal = event.completion_event
    event.execution.status = "nonsense"  # type: ignore[assignment]
    assert event.execution.status == "nonsense"
    event.execution.status = EventStatus.COMPLETED
    assert not signal.is_set()


def test_response_is_a_proxy_to_execution_response() -> None:
    event = Event()
    event.response = {"a": 1}
    assert event.execution.response == {"a": 1}
    event.execution.response = 7
    assert event.response == 7


def test_base_request_is_an_empty_dict() -> None:
    assert Event().request == {}


async def test_retryable_is_descriptive_and_never_causes_a_retry() -> None:
    calls = 0

    class Flaky(Event):
        async def _invoke(self) -> None:
            nonlocal calls
            calls += 1
            raise ConnectionError("down")

    event = Flaky()
    event.execution.retryable = True
    await event.invoke()
    await event.invoke()
    assert calls == 1
    assert event.status is EventStatus.FAILED
    assert event.execution.retryable is True


@pytest.mark.parametrize("status", list(EventStatus))
def test_execution_status_takes_the_enum_or_its_string(status: EventStatus) -> None:
    assert Execution(status=status).status is status
    assert Execution(status=status.value).status is status


@pytest.mark.parametrize("value", ["bogus", "PENDING", 3, None])
def test_execution_refuses_an_unknown_status_naming_it(value: Any) -> None:
    with pytest.raises(ValueError, match=rf"invalid event status {value!r}"):
        Execution(status=value)


async def test_an_event_built_with_a_string_status_runs() -> None:
    event = Returns("done")
    event.execution = Execution(status="pending")  # type: ignore[arg-type]  # a caller's str
    await event.invoke()
    assert (event.status, event.response) == (EventStatus.COMPLETED, "done")


def test_assigning_execution_status_directly_still_bypasses_validation() -> None:
    # The record is data: direct assignment bypasses the setter's validation (and signalling).
    execution = Execution()
    execution.status = "anything"  # type: ignore[assignment]
    assert execution.status == "anything"


# -- invoke ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [s for s in EventStatus if s is not EventStatus.PENDING])
async def test_invoke_is_a_noop_unless_pending(status: EventStatus) -> None:
    event = Returns("fresh")
    event.status = status
    event.execution.response = "old"
    event.execution.duration = 1.5
    event.execution.error = "kept"
    await event.invoke()
    assert event.status is status
    assert event.response == "old"
    assert event.execution.duration == 1.5
    assert event.execution.error == "kept"


async def test_invoke_marks_processing_while_running() -> None:
    seen: list[EventStatus] = []

    class Peek(Event):
        async def _invoke(self) -> None:
            seen.append(self.status)

    await Peek().invoke()
    assert seen == [EventStatus.PROCESSING]


async def test_invoke_stores_return_value_and_completes(autojump_clock: trio.abc.Clock) -> None:
    event = Returns({"answer": 42}, delay=2.5)
    await event.invoke()
    assert event.status is EventStatus.COMPLETED
    assert event.response == {"answer": 42}
    assert event.execution.error is None
    assert event.execution.duration == pytest.approx(2.5)


async def test_invoke_captures_ordinary_exception_as_failed_without_raising(
    autojump_clock: trio.abc.Clock,
) -> None:
    boom = ValueError("boom")
    event = Raises(boom, delay=1.0)
    event.execution.response = "before"
    await event.invoke()
    assert event.status is EventStatus.FAILED
    assert event.execution.error is boom
    assert event.response == "before"
    assert event.execution.duration == pytest.approx(1.0)


async def test_invoke_records_trio_cancellation_and_reraises(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = Returns("never", delay=10.0)
    with trio.move_on_after(3.0) as scope:
        await event.invoke()
    assert scope.cancelled_caught
    assert event.status is EventStatus.CANCELLED
    assert isinstance(event.execution.error, trio.Cancelled)
    assert event.response is None
    assert event.execution.duration == pytest.approx(3.0)


@pytest.mark.parametrize(
    "exc",
    [
        KeyboardInterrupt(),
        SystemExit(3),
        GeneratorExit(),
        BaseExceptionGroup("g", [KeyboardInterrupt()]),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_invoke_records_other_base_exceptions_as_cancelled_and_reraises(
    exc: BaseException,
) -> None:
    event = Raises(exc)
    with pytest.raises(type(exc)) as info:
        await event.invoke()
    assert info.value is exc
    assert event.status is EventStatus.CANCELLED
    assert event.execution.error is exc
    assert isinstance(event.execution.duration, float)


async def test_invoke_captures_an_exception_group_of_ordinary_errors_as_failed() -> None:
    group = ExceptionGroup("two", [ValueError("a"), KeyError("b")])
    event = Raises(group)
    await event.invoke()
    assert event.status is EventStatus.FAILED
    assert event.execution.error is group


async def test_noop_invoke_keeps_the_earlier_duration(autojump_clock: trio.abc.Clock) -> None:
    event = Returns(1, delay=4.0)
    await event.invoke()
    await trio.sleep(10)
    await event.invoke()
    assert event.execution.duration == pytest.approx(4.0)


async def test_bare_event_captures_not_implemented_as_failed() -> None:
    event = Event()
    await event.invoke()
    assert event.status is EventStatus.FAILED
    assert isinstance(event.execution.error, NotImplementedError)


async def test_terminal_status_is_recorded_before_a_waiter_runs() -> None:
    event = Returns("x")
    observed: list[tuple[EventStatus, object]] = []

    async def waiter() -> None:
        await event.wait_completed()
        observed.append((event.status, event.execution.duration))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await event.invoke()
    assert observed[0][0] is EventStatus.COMPLETED
    assert isinstance(observed[0][1], float)


async def test_failure_never_cancels_a_sibling_in_the_same_nursery(
    autojump_clock: trio.abc.Clock,
) -> None:
    bad, good = Raises(RuntimeError("x"), delay=1), Returns("ok", delay=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bad.invoke)
        nursery.start_soon(good.invoke)
    assert (bad.status, good.status) == (EventStatus.FAILED, EventStatus.COMPLETED)


def test_terminal_set_is_exactly_five_statuses() -> None:
    assert {
        EventStatus.COMPLETED,
        EventStatus.FAILED,
        EventStatus.SKIPPED,
        EventStatus.CANCELLED,
        EventStatus.ABORTED,
    } == TERMINAL_STATUSES
    assert all(s.is_terminal == (s in TERMINAL_STATUSES) for s in EventStatus)
