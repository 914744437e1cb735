"""The lazily created one-shot completion signal and assert_completed()."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from lionexec import TERMINAL_STATUSES, Event, EventStatus

TERMINAL = sorted(TERMINAL_STATUSES, key=lambda s: s.value)
LIVE = [EventStatus.PENDING, EventStatus.PROCESSING]


def test_signal_is_created_on_first_access_and_reused() -> None:
    event = Event()
    assert event._completion is None
    signal = event.completion_event
    assert isinstance(signal, trio.Event)
    assert event.completion_event is signal


@pytest.mark.parametrize("status", TERMINAL, ids=lambda s: s.value)
def test_signal_created_after_terminal_status_starts_set(status: EventStatus) -> None:
    event = Event()
    event.status = status
    assert event.completion_event.is_set()


@pytest.mark.parametrize("status", LIVE, ids=lambda s: s.value)
def test_signal_created_while_live_starts_unset(status: EventStatus) -> None:
    event = Event()
    event.status = status
    assert not event.completion_event.is_set()


@pytest.mark.parametrize("status", TERMINAL, ids=lambda s: s.value)
async def test_every_terminal_status_wakes_waiters(status: EventStatus) -> None:
    event = Event()
    woke: list[EventStatus] = []

    async def waiter() -> None:
        await event.wait_completed()
        woke.append(event.status)

    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert woke == []
            event.status = status
    assert woke == [status, status]


def test_live_assignment_never_clears_the_signal() -> None:
    event = Event()
    signal = event.completion_event
    event.status = EventStatus.COMPLETED
    event.status = EventStatus.PENDING
    event.status = "processing"
    assert signal.is_set()
    assert event.completion_event is signal


async def test_wait_completed_returns_at_once_when_already_terminal() -> None:
    event = Event()
    event.status = EventStatus.ABORTED
    with trio.fail_after(1):
        await event.wait_completed()


def test_assert_completed_passes_only_for_completed() -> None:
    event = Event()
    event.status = EventStatus.COMPLETED
    event.assert_completed()


@pytest.mark.parametrize(
    "status", [s for s in EventStatus if s is not EventStatus.COMPLETED], ids=lambda s: s.value
)
def test_assert_completed_raises_with_execution_fields_except_response(
    status: EventStatus,
) -> None:
    event = Event()
    event.status = status
    event.execution.response = "SECRET-RESPONSE"
    event.execution.add_error(ValueError("why"))
    with pytest.raises(RuntimeError) as info:
        event.assert_completed()
    message = str(info.value)
    assert f"'status': '{status.value}'" in message
    assert "'duration': None" in message
    assert "'retryable': None" in message
    assert "ValueError" in message
    assert "SECRET-RESPONSE" not in message
    assert "'response'" not in message


@given(st.booleans(), st.lists(st.sampled_from(list(EventStatus)), max_size=20))
def test_signal_follows_the_one_shot_rule_for_any_assignment_sequence(
    create_first: bool, statuses: list[EventStatus]
) -> None:
    """Set iff a terminal status was assigned after creation, or was current at creation."""
    event = Event()
    signal = event.completion_event if create_first else None
    expected = False
    for status in statuses:
        event.status = status
        expected = expected or status.is_terminal
    if signal is None:
        signal = event.completion_event
        expected = event.status.is_terminal
    assert signal.is_set() == expected
