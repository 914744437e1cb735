"""The Event: one unit of in-process async work, its status, lifecycle and observable outcome."""

from __future__ import annotations

import copy
import sys
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, Self

import attrs
import trio

from lionexec import _unstructure
from lionexec._ids import uuid4

from ._execution import Execution, drop_tracebacks
from ._status import TERMINAL_STATUSES, EventStatus, status_of

if TYPE_CHECKING:
    from cattrs.preconf.json import JsonConverter

__all__ = ["NOT_SERIALIZED", "Event"]

#: Put ``{NOT_SERIALIZED: True}`` in an attrs field's ``metadata`` to keep it out of the
#: event's serialized record (as :attr:`Event.streaming` and a tool's callable are).
NOT_SERIALIZED = "lionexec.not_serialized"

_PENDING = EventStatus.PENDING
_PROCESSING = EventStatus.PROCESSING
_COMPLETED = EventStatus.COMPLETED
_FAILED = EventStatus.FAILED
_CANCELLED = EventStatus.CANCELLED
_KEEP: Any = object()  # _finish: leave the response as it is (a stream has none)


def _new_metadata() -> dict[str, Any]:
    return {}


@attrs.define(kw_only=True, eq=False)
class Event:
    """A unit of work with a seven-state lifecycle.

    Subclasses implement :meth:`_invoke` (and, for streaming work, :meth:`_stream`); the base
    class owns every state transition:

    * :meth:`invoke` runs only from ``pending``. An ordinary :class:`Exception` is captured:
      the event ends ``failed`` and nothing is raised. Any other :class:`BaseException`
      (``trio.Cancelled``, ``KeyboardInterrupt``, ...) is recorded, the event ends
      ``cancelled``, and the exception is re-raised so structured concurrency stays in charge.
    * The duration is recorded, on trio's clock, on every path that started.
    * Reaching a terminal status through :attr:`status` sets the one-shot completion signal
      that :meth:`wait_completed` waits on.
    * A captured failure is recorded without tracebacks (see :attr:`retain_tracebacks`), so a
      failed event keeps no frames, locals or coroutines alive.

    Events compare and hash by identity. An event's serialized record (:meth:`to_dict`) is for
    logs and inspection only; :meth:`from_dict` always raises.
    """

    id: uuid.UUID = attrs.field(factory=uuid4)
    created_at: float = attrs.field(factory=time.time)
    metadata: dict[str, Any] = attrs.field(factory=_new_metadata)
    execution: Execution = attrs.field(factory=Execution)
    streaming: bool = attrs.field(default=False, metadata={NOT_SERIALIZED: True})
    _completion: trio.Event | None = attrs.field(default=None, init=False, repr=False)

    #: Fields :meth:`as_fresh_event` never carries over to the new event.
    _fresh_excluded: ClassVar[frozenset[str]] = frozenset(
        {"id", "created_at", "metadata", "execution"}
    )
    #: Fields :meth:`as_fresh_event` shares with the new event instead of copying.
    _fresh_shared: ClassVar[frozenset[str]] = frozenset()

    retain_tracebacks: ClassVar[bool] = False
    """Whether a failure captured by :meth:`invoke` or :meth:`stream` keeps its traceback.

    ``False`` (the default): the exception is recorded in ``execution.error`` with the
    tracebacks of it and of every exception chained to it cleared (see
    :func:`~lionexec.engine._execution.drop_tracebacks`); type, message, ``args``, attributes
    and the ``__cause__``/``__context__`` chain stay. A traceback holds every frame between the
    failure and :meth:`invoke`, with their locals and coroutines, for as long as the event is
    kept. Set it to ``True`` on a subclass while debugging. Cancellation and other re-raised
    exceptions always keep theirs: they are still propagating.
    """

    # -- status -----------------------------------------------------------------------------

    @property
    def status(self) -> EventStatus:
        """The current status, i.e. ``execution.status``.

        Assigning accepts an :class:`EventStatus` or one of its seven string values; anything
        else raises :class:`ValueError`. Any legal status may follow any other (there is no
        transition graph). Assigning a terminal status sets the completion signal; assigning a
        live one never clears it.
        """
        return self.execution.status

    @status.setter
    @trio.lowlevel.enable_ki_protection  # status and completion signal change together
    def status(self, value: EventStatus | str) -> None:
        if type(value) is not EventStatus:
            value = status_of(value)
        self.execution.status = value
        if value in TERMINAL_STATUSES and self._completion is not None:
            self._completion.set()

    @property
    def response(self) -> Any:
        """The recorded response, i.e. ``execution.response`` (read and write)."""
        return self.execution.response

    @response.setter
    def response(self, value: Any) -> None:
        self.execution.response = value

    @property
    def request(self) -> dict[str, Any]:
        """Keyword arguments a processor passes to its permission check (``{}`` here)."""
        return {}

    # -- completion -------------------------------------------------------------------------

    @property
    def completion_event(self) -> trio.Event:
        """The one-shot completion signal, created on first access.

        If the event is already terminal when the signal is created, it starts set.
        """
        signal = self._completion
        if signal is None:
            signal = self._completion = trio.Event()
            if self.execution.status in TERMINAL_STATUSES:
                signal.set()
        return signal

    async def wait_completed(self) -> None:
        """Block until the event has reached a terminal status through :attr:`status`.

        Returns at once if it already has. Cancellation is delivered as usual; the event is
        not affected by a waiter being cancelled.
        """
        await self.completion_event.wait()

    def assert_completed(self) -> None:
        """Raise :class:`RuntimeError` unless the status is ``completed``.

        The message carries the serialized execution record, without the response.
        """
        if self.execution.status is not _COMPLETED:
            record = _converter().unstructure(self.execution)
            del record["response"]
            raise RuntimeError(f"event {self.id} did not complete: {record}")

    # -- running ----------------------------------------------------------------------------

    async def invoke(self) -> None:
        """Run :meth:`_invoke` once and record the outcome.

        A no-op unless the status is ``pending``. Ordinary exceptions end the event ``failed``
        and are not raised (they are recorded without tracebacks, see
        :attr:`retain_tracebacks`). Cancellation and other base exceptions end it
        ``cancelled`` and propagate. Status, error and duration are recorded synchronously,
        before anything is re-raised and before a waiter can run.

        ``KeyboardInterrupt``: the bookkeeping around the work is KI-protected, so a
        ``KeyboardInterrupt`` lands either in the work (the event ends ``cancelled``, as
        above) or around a complete record (the recorded outcome stands; trio raises the
        interrupt later, at a checkpoint of its main task). Whichever way it goes, the event
        is never left ``processing``: once the work is set up, an event the interrupt finds
        not terminal is marked ``cancelled`` before the interrupt leaves :meth:`invoke`.

        Always a checkpoint. If the caller's scope is already cancelled, :meth:`_invoke` is not
        called: a pending event ends ``cancelled`` (with that ``trio.Cancelled`` as its error)
        and the cancellation propagates. Otherwise the work starts without waiting, and once
        its outcome is recorded :meth:`invoke` yields to the scheduler (a schedule point that
        cannot be cancelled), so even an ``_invoke`` that never awaits lets other tasks run.
        """
        if self.execution.status is not _PENDING:
            await trio.lowlevel.checkpoint()
            return
        await self._run()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def _run(self) -> None:
        """:meth:`invoke` on a ``pending`` event, without the schedule point after the outcome.

        For a caller that yields itself (the act transaction: a call of a concurrent batch runs
        in a task just spawned, a sequential batch checkpoints between calls). Checks for
        cancellation before the work starts, like :meth:`invoke`; if the work never awaits,
        neither does this.

        The bookkeeping before and after the work (status, clock, response, error) is done in
        KI-protected synchronous steps (:meth:`_begin`, :meth:`_finish`). A
        ``KeyboardInterrupt`` that still lands between the work's end and its record (the few
        bytecodes before a protected step starts) finds the event not terminal and ends it
        ``cancelled`` before it propagates.
        """
        clock = trio.lowlevel.current_clock()  # read twice, looked up once (per event run)
        outer = sys.exception()  # our caller's, if any: not ours to strip (see _finish)
        start: float | None = None
        try:
            try:
                start = self._begin(clock)
                await trio.lowlevel.checkpoint_if_cancelled()
                response = await self._invoke()
            except Exception as exc:
                self._finish(clock, start, _FAILED, exc, outer)
            except BaseException as exc:
                self._finish(clock, start, _CANCELLED, exc)
                raise
            else:
                self._finish(clock, start, _COMPLETED, response=response)
        except BaseException as exc:
            if self.execution.status not in TERMINAL_STATUSES:  # interrupted before its record
                self._finish(clock, start, _CANCELLED, exc)
            raise

    @trio.lowlevel.enable_ki_protection
    def _begin(self, clock: trio.abc.Clock) -> float:
        """Read the start time, then mark the event ``processing``; synchronous, KI-protected."""
        start = clock.current_time()
        self.execution.status = _PROCESSING
        return start

    @trio.lowlevel.enable_ki_protection  # status and completion signal change together
    def _finish(
        self,
        clock: trio.abc.Clock,
        start: float | None,
        status: EventStatus,
        error: BaseException | None = None,
        outer: BaseException | None = None,
        response: Any = _KEEP,
    ) -> None:
        """Record the duration, the *response* (if given), the error and the terminal *status*,
        in that order; synchronous and KI-protected, the clock read included.

        The duration is the time on *clock* since *start* (left as it was if the work never
        started: *start* is ``None``). A captured failure (*status* ``failed``) loses its
        tracebacks unless :attr:`retain_tracebacks`; *outer*, the exception our caller was
        handling when the work began, and what is chained behind it, are left as they are. The
        status is stored as the :attr:`status` setter stores a terminal one.
        """
        execution = self.execution
        if start is not None:
            execution.duration = clock.current_time() - start
        if response is not _KEEP:
            execution.response = response
        if error is not None:
            if status is _FAILED and not self.retain_tracebacks:
                drop_tracebacks(error, stop=outer)
            if execution.error is None:
                execution.error = error  # add_error's first error, without the call
            else:
                execution.add_error(error)
        execution.status = status
        if self._completion is not None:
            self._completion.set()

    async def _invoke(self) -> Any:
        """The work itself. Subclasses override this; the base raises NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _invoke()")

    async def stream(self) -> AsyncIterator[Any]:
        """Yield the chunks of :meth:`_stream` unchanged, recording the outcome.

        Returns without yielding a chunk if the status is terminal (unlike :meth:`invoke`, a
        ``processing`` event may be streamed again). Exhaustion ends the event ``completed``;
        an ordinary exception, even after chunks, ends it ``failed`` (recorded as by
        :meth:`invoke`) and stops iteration without raising; cancellation, or the consumer
        closing the stream early, ends it ``cancelled`` and propagates. The inner generator is
        always closed. Chunks are not accumulated into the response. A ``KeyboardInterrupt``
        is handled as by :meth:`invoke`: it never leaves the event ``processing``.

        Checkpoints: the first step is always one (on a terminal event, a plain checkpoint; if
        the scope is already cancelled, the inner generator is not started and the event ends
        ``cancelled``), and so is the last, which records the outcome, then yields once to the
        scheduler. The steps in between checkpoint as the inner generator does.
        """
        if self.execution.status in TERMINAL_STATUSES:
            await trio.lowlevel.checkpoint()
            return
        clock = trio.lowlevel.current_clock()
        outer = sys.exception()
        start: float | None = None
        try:
            try:
                start = self._begin(clock)
                await trio.lowlevel.checkpoint_if_cancelled()
                async with aclosing(self._stream()) as chunks:
                    async for chunk in chunks:
                        yield chunk
            except Exception as exc:
                self._finish(clock, start, _FAILED, exc, outer)
            except BaseException as exc:
                self._finish(clock, start, _CANCELLED, exc)
                raise
            else:
                self._finish(clock, start, _COMPLETED)
        except BaseException as exc:
            if self.execution.status not in TERMINAL_STATUSES:  # interrupted before its record
                self._finish(clock, start, _CANCELLED, exc)
            raise
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def _stream(self) -> AsyncGenerator[Any, None]:
        """Streaming work. Subclasses override this; the base raises NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _stream()")
        yield  # pragma: no cover - makes this an async generator

    # -- records ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The event's JSON-compatible record, for logs and inspection.

        ``execution`` is always the five keys ``status``, ``duration``, ``response``,
        ``error`` and ``retryable``. Fields marked :data:`NOT_SERIALIZED` are left out.
        """
        record: dict[str, Any] = _converter().unstructure(self)
        return record

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoReturn:
        """Always raises: a record is not a resumable event. Create a fresh event instead."""
        raise NotImplementedError(
            f"cannot recreate a {cls.__name__} from a record; an event record is an "
            "observation, not a resumable event (use as_fresh_event() on a live event)"
        )

    def as_fresh_event(self, copy_meta: bool = False) -> Self:
        """A new pending event of the same class doing the same work.

        It has a new id, creation time and execution. Other fields are deep-copied where
        possible (those a subclass names in ``_fresh_shared`` are shared), and so are the
        attributes of a subclass that is not an attrs class (its ``__init__`` is not called).
        With *copy_meta* the metadata is deep-copied (best effort); either way it gains
        ``{"original": {"id": ..., "created_at": ...}}``.
        """
        kwargs: dict[str, Any] = {}
        for field in attrs.fields(type(self)):
            if not field.init or field.name in self._fresh_excluded:
                continue
            value = getattr(self, field.name)
            shared = field.name in self._fresh_shared
            kwargs[field.alias] = value if shared else _best_effort_copy(value)
        metadata = _best_effort_copy(self.metadata) if copy_meta else {}
        metadata["original"] = {"id": str(self.id), "created_at": self.created_at}
        cls = type(self)
        declared = next(c for c in cls.__mro__ if "__attrs_attrs__" in c.__dict__)
        if declared is cls:
            return cls(metadata=metadata, **kwargs)
        # A subclass with an __init__ of its own (not an attrs class): built without calling
        # it (its parameters are unknown here), its own attributes copied as fields are.
        fresh = object.__new__(cls)
        declared.__init__(fresh, metadata=metadata, **kwargs)  # type: ignore[misc]
        for name, value in getattr(self, "__dict__", {}).items():
            shared = name in self._fresh_shared
            fresh.__dict__[name] = value if shared else _best_effort_copy(value)
        return fresh


def _converter() -> JsonConverter:
    """The shared converter, as :mod:`lionexec.serialization` registered it (never imported)."""
    return _unstructure.converter


def _best_effort_copy(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception:
        return copy.copy(value) if isinstance(value, dict) else value
