"""The work every area measures, per implementation: events that return, raise or nap.

Each implementation's classes are built on first use, so a process imports only the library
it measures. The raw trio floor is a slotted record with a uuid4 (from lionexec's fast
generator, :func:`lionexec._ids.uuid4`, as in every floor: the floor should not lose on a slower
id) and a try/except capture wrapper timed with ``trio.current_time()``: the least an event
lifecycle can cost on trio.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import trio

from lionexec._ids import uuid4

NAP = 0.001  # seconds a "sleeping" event waits


class EventTypes(NamedTuple):
    """An implementation's event classes: returns 1, raises ValueError, sleeps :data:`NAP`."""

    ok: type[Any]
    fail: type[Any]
    nap: type[Any]


@functools.cache
def lionexec_events() -> EventTypes:
    import lionexec

    class Ok(lionexec.Event):
        async def _invoke(self) -> int:
            return 1

    class Fail(lionexec.Event):
        async def _invoke(self) -> int:
            raise ValueError("boom")

    class Nap(lionexec.Event):
        async def _invoke(self) -> int:
            await trio.sleep(NAP)
            return 1

    return EventTypes(Ok, Fail, Nap)


@functools.cache
def lionagi_events() -> EventTypes:
    import asyncio

    from lionagi.protocols.generic.event import Event  # type: ignore[import-not-found,unused-ignore]

    class Ok(Event):  # type: ignore[misc,unused-ignore]
        async def _invoke(self) -> int:
            return 1

    class Fail(Event):  # type: ignore[misc,unused-ignore]
        async def _invoke(self) -> int:
            raise ValueError("boom")

    class Nap(Event):  # type: ignore[misc,unused-ignore]
        async def _invoke(self) -> int:
            await asyncio.sleep(NAP)
            return 1

    return EventTypes(Ok, Fail, Nap)


# -- the raw trio floor ------------------------------------------------------------------------


class RawEvent:
    """A minimal event record: identity, timestamps, status and outcome."""

    __slots__ = ("created_at", "duration", "error", "id", "response", "status")

    def __init__(self) -> None:
        self.id = uuid4()
        self.created_at = time.time()
        self.status = "pending"
        self.duration: float | None = None
        self.response: Any = None
        self.error: BaseException | None = None

    async def invoke(self) -> None:
        """Run the work once from pending, capturing ordinary failures."""
        if self.status != "pending":
            return
        self.status = "processing"
        start = trio.current_time()
        try:
            self.response = await self._work()
        except Exception as exc:
            self.error = exc
            self.status = "failed"
        except BaseException as exc:
            self.error = exc
            self.status = "cancelled"
            raise
        else:
            self.status = "completed"
        finally:
            self.duration = trio.current_time() - start

    async def _work(self) -> Any:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        error = self.error
        return {
            "id": str(self.id),
            "created_at": self.created_at,
            "metadata": {},
            "execution": {
                "status": self.status,
                "duration": self.duration,
                "response": self.response,
                "error": None
                if error is None
                else {"error": type(error).__name__, "message": str(error)},
                "retryable": None,
            },
        }


class RawOk(RawEvent):
    __slots__ = ()

    async def _work(self) -> int:
        return 1


class RawFail(RawEvent):
    __slots__ = ()

    async def _work(self) -> int:
        raise ValueError("boom")


class RawNap(RawEvent):
    __slots__ = ()

    async def _work(self) -> int:
        await trio.sleep(NAP)
        return 1


def raw_events() -> EventTypes:
    return EventTypes(RawOk, RawFail, RawNap)


def event_types(impl: str) -> EventTypes:
    makers: dict[str, Callable[[], EventTypes]] = {
        "lionexec": lionexec_events,
        "lionagi": lionagi_events,
        "raw": raw_events,
    }
    return makers[impl]()
