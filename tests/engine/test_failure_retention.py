"""A failed event keeps its error inspectable but no frames, locals or coroutines alive.

``invoke()`` and ``stream()`` record a captured failure with the tracebacks of it and of
everything chained to it cleared (otherwise a failing call retained 3,784 B, most of it
frames). What the caller was already handling is left alone; re-raised exceptions keep theirs.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator

import pytest
import trio

from lionexec.engine import Event, EventStatus
from lionexec.engine._execution import drop_tracebacks


class Payload:
    """Something only the failing frame refers to."""


class Fails(Event):
    def __init__(self) -> None:
        super().__init__()
        self.payload_ref: weakref.ref[Payload] | None = None

    async def _invoke(self) -> None:
        payload = Payload()
        self.payload_ref = weakref.ref(payload)
        await trio.lowlevel.checkpoint()
        raise ValueError("bad input", 42)


class FailsChained(Event):
    async def _invoke(self) -> None:
        try:
            {}["missing"]
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc


class StreamFails(Event):
    def __init__(self) -> None:
        super().__init__(streaming=True)

    async def _stream(self) -> AsyncIterator[int]:
        yield 1
        raise ValueError("mid-stream")


async def test_a_failure_is_recorded_without_its_traceback_and_frees_the_frame() -> None:
    event = Fails()
    await event.invoke()
    error = event.execution.error
    assert event.status is EventStatus.FAILED
    assert isinstance(error, ValueError)
    assert (str(error), error.args) == ("('bad input', 42)", ("bad input", 42))
    assert error.__traceback__ is None
    gc.collect()
    assert event.payload_ref is not None and event.payload_ref() is None


async def test_the_cause_chain_stays_but_without_tracebacks() -> None:
    event = FailsChained()
    await event.invoke()
    error = event.execution.error
    assert isinstance(error, RuntimeError) and isinstance(error.__cause__, KeyError)
    assert error.__traceback__ is None and error.__cause__.__traceback__ is None
    assert error.__context__ is error.__cause__


async def test_what_the_caller_was_handling_keeps_its_traceback() -> None:
    event = FailsChained()
    try:
        raise LookupError("the caller's own")
    except LookupError as exc:
        outer = exc
        await event.invoke()
    assert outer.__traceback__ is not None
    error = event.execution.error
    assert isinstance(error, RuntimeError)
    inner = error.__cause__
    assert isinstance(inner, KeyError) and inner.__context__ is outer
    assert inner.__traceback__ is None


async def test_a_stream_failure_is_recorded_without_its_traceback() -> None:
    event = StreamFails()
    assert [c async for c in event.stream()] == [1]
    assert event.status is EventStatus.FAILED
    assert isinstance(event.execution.error, ValueError)
    assert event.execution.error.__traceback__ is None


async def test_retain_tracebacks_keeps_them() -> None:
    class Debugged(Fails):
        retain_tracebacks = True

    event = Debugged()
    await event.invoke()
    assert event.execution.error is not None
    assert isinstance(event.execution.error, ValueError)
    assert event.execution.error.__traceback__ is not None


async def test_cancellation_keeps_its_traceback_while_it_propagates() -> None:
    class Sleeps(Event):
        async def _invoke(self) -> None:
            await trio.sleep_forever()

    event = Sleeps()
    with trio.move_on_after(0) as scope:
        await event.invoke()
    assert scope.cancelled_caught
    error = event.execution.error
    assert isinstance(error, trio.Cancelled) and error.__traceback__ is not None


def test_drop_tracebacks_follows_groups_and_survives_cycles() -> None:
    def raised(exc: BaseException) -> BaseException:
        try:
            raise exc
        except BaseException as caught:
            return caught

    a, b = raised(ValueError("a")), raised(KeyError("b"))
    group = raised(ExceptionGroup("both", [a, b]))
    a.__context__ = group  # a cycle through the chain
    drop_tracebacks(group)
    assert [e.__traceback__ for e in (group, a, b)] == [None, None, None]


def test_drop_tracebacks_stops_at_the_given_exception() -> None:
    try:
        raise KeyError("outer")
    except KeyError as outer:
        try:
            raise ValueError("inner")
        except ValueError as inner:
            caught = inner
        drop_tracebacks(caught, stop=outer)
        assert caught.__traceback__ is None
        assert outer.__traceback__ is not None


@pytest.mark.parametrize("retain", [False, True])
async def test_the_failed_event_is_freed_without_the_cycle_collector(retain: bool) -> None:
    """A traceback refers to invoke()'s frame, which refers to the event: a reference cycle
    that only the cycle collector can free. Without the traceback the event dies at once."""

    class E(Fails):
        retain_tracebacks = retain

    event = E()
    await event.invoke()
    ref = weakref.ref(event)
    gc.disable()
    try:
        del event
        assert (ref() is None) is not retain
    finally:
        gc.enable()
        gc.collect()
