"""Session governance: the pre-invoke gate and the session's event store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import attrs
import trio

from .._failures import FailureLog, ReportedFailure, call_user, must_await
from ._context import ToolInvocation

__all__ = [
    "Gate",
    "GateDenied",
    "SessionObserver",
    "SessionObserverStatistics",
    "SubscriberFailure",
]

#: A session gate: called with one :class:`ToolInvocation`; a truthy result (or awaited
#: result) allows the call.
Gate: TypeAlias = Callable[[ToolInvocation], Awaitable[object] | object]
#: Selects stored payloads: a class (``isinstance``) or a predicate.
Condition: TypeAlias = type | Callable[[Any], object]
#: Receives a stored payload; may return an awaitable.
Subscriber: TypeAlias = Callable[[Any], Awaitable[object] | object]

G = TypeVar("G", bound=Gate)
S = TypeVar("S", bound=Subscriber)


@attrs.frozen
class GateDenied:
    """The session gate refused a call. Recorded in the observer's store.

    Attributes:
        invocation: the refused call.
        reason: what the gate returned, or what it raised.
        error: the exception the gate raised, or ``None`` if it returned a falsy value.
    """

    invocation: ToolInvocation
    reason: str
    error: Exception | None = attrs.field(default=None, kw_only=True)


#: The failure record :meth:`SessionObserver.emit` returns: a
#: :class:`~lionexec.ReportedFailure` whose ``where`` is ``"observer"``. (The name of its older,
#: observer-only predecessor.)
SubscriberFailure: TypeAlias = ReportedFailure


@attrs.frozen(kw_only=True)
class SessionObserverStatistics:
    """A snapshot of a :class:`SessionObserver` (see :meth:`SessionObserver.statistics`).

    Attributes:
        has_gate: whether a gate is set.
        records: how many payloads are stored.
        denials: how many calls the gate denied.
        subscriptions: how many subscriptions there are.
        routes: how many routes there are.
        failures_total: how many failures were ever reported to the observer's failure log.
        failures_dropped: how many of those the log no longer keeps.
    """

    has_gate: bool
    records: int
    denials: int
    subscriptions: int
    routes: int
    failures_total: int
    failures_dropped: int


def _matches(condition: Condition, payload: Any) -> bool:
    if isinstance(condition, type):
        return isinstance(payload, condition)
    return bool(condition(payload))


class SessionObserver:
    """A session's gate on tool calls, and the store of what happened in it.

    **Gate.** :meth:`authorize` asks the gate set with :meth:`gate` whether a call may run. No
    gate allows everything. A falsy result, or an :class:`Exception` from the gate (or from its
    result's truth value), denies: a :class:`GateDenied` is emitted into the store and
    ``False`` returned. The gate only ever sees :class:`ToolInvocation` values, never other
    payloads.

    **Store.** :meth:`emit` stores a payload first, then files it in every named stream whose
    route condition it meets (:meth:`route`), then calls every subscriber whose condition it
    meets (:meth:`subscribe`), in registration order. Conditions are classes (matched with
    ``isinstance``) or predicates. Any :class:`Exception` raised by a condition or subscriber
    is isolated: it is reported once to :attr:`failures` (which keeps it and logs it on the
    ``lionexec`` logger) and returned from :meth:`emit`; it never reaches the emitter, and
    never undoes the store. Cancellation propagates.

    :meth:`authorize` and :meth:`emit` are checkpoints on every path. A cancelled
    :meth:`authorize` raises ``trio.Cancelled`` before asking the gate; a cancelled
    :meth:`emit` still stores and routes its payload (synchronously), then raises before
    calling any subscriber.

    Args:
        failures: where failures are reported; by default a :class:`~lionexec.FailureLog` of
            the observer's own. Pass a shared one (as a branch does) to keep and log each
            failure once, whichever component noticed it.
    """

    def __init__(self, *, failures: FailureLog | None = None) -> None:
        self._gate: Gate | None = None
        self._denials = 0
        self._records: list[Any] = []
        #: The records :meth:`_keep` stored as recorded, by their index in ``_records``, each
        #: with what copies it when read. Indexes, not a wrapper around each record: an
        #: object per observed call, kept as long as the observer, costs the cyclic GC
        #: more than storing it.
        self._kept: dict[int, Callable[[Any], Any]] = {}
        self._subscriptions: list[tuple[Condition, Subscriber]] = []
        self._routes: list[tuple[Condition, str]] = []
        self._streams: dict[str, list[Any]] = {}
        #: Dispatch failures, oldest first (bounded; see :class:`~lionexec.FailureLog`).
        self.failures: FailureLog = FailureLog() if failures is None else failures

    # -- gate ---------------------------------------------------------------------------------

    def gate(self, check: G) -> G:
        """Make *check* the gate, replacing any other; returns it (usable as a decorator)."""
        if not callable(check):
            raise TypeError(f"a gate must be callable, not {check!r}; use clear_gate() to remove")
        self._gate = check
        return check

    def clear_gate(self) -> None:
        """Remove the gate: :meth:`authorize` allows everything again."""
        self._gate = None

    @property
    def has_gate(self) -> bool:
        return self._gate is not None

    async def authorize(self, invocation: ToolInvocation) -> bool:
        """Whether the gate allows *invocation*; a denial is recorded as :class:`GateDenied`.

        A checkpoint on every path (before the gate is asked).
        """
        await trio.lowlevel.checkpoint()
        return await self._authorize(invocation)

    async def _authorize(self, invocation: ToolInvocation) -> bool:
        """:meth:`authorize` without its own checkpoint (bound by :class:`BoundSeams` for a
        caller that yields once per call)."""
        if not isinstance(invocation, ToolInvocation):
            raise TypeError(f"authorize() takes a ToolInvocation, not {type(invocation).__name__}")
        allowed = self._ask(invocation)
        return True if isinstance(allowed, bool) else await allowed

    def _ask(self, invocation: ToolInvocation) -> bool | Awaitable[bool]:
        """:meth:`_authorize` of a :class:`ToolInvocation` as far as it gets without
        awaiting: ``True`` if the gate allowed it at once; otherwise a coroutine that awaits
        the gate's result and records a denial (:meth:`_settle`). A synchronous gate that
        allows (the usual case) then costs no coroutine."""
        check = self._gate
        if check is None:
            return True
        try:
            verdict = check(invocation)  # call_user, without its coroutine (see must_await)
            # (True, the usual verdict, is never awaitable: no call to tell)
            if verdict is True or (not must_await(verdict) and verdict):
                return True
        except Exception as exc:
            return self._settle(invocation, None, exc)
        return self._settle(invocation, verdict, None)

    async def _settle(
        self, invocation: ToolInvocation, verdict: object, error: Exception | None
    ) -> bool:
        """The gate's *verdict* awaited if it must be, then ``True``, or the denial
        recorded (the gate's *error*, or a falsy verdict) and ``False``."""
        if error is None:
            try:
                if must_await(verdict):
                    verdict = await verdict
                if verdict:
                    return True
                denial = GateDenied(invocation, f"the session gate returned {verdict!r}")
            except Exception as exc:
                error = exc
        if error is not None:
            reason = f"the session gate raised {type(error).__name__}: {error}"
            denial = GateDenied(invocation, reason, error=error)
        self._denials += 1
        await self._dispatch(denial, invocation.call_id, self._store(denial, invocation.call_id))
        return False

    def statistics(self) -> SessionObserverStatistics:
        """Counts of what the observer holds, and its failure counters, as a snapshot."""
        failures = self.failures.statistics()
        return SessionObserverStatistics(
            has_gate=self._gate is not None,
            records=len(self._records),
            denials=self._denials,
            subscriptions=len(self._subscriptions),
            routes=len(self._routes),
            failures_total=failures.total,
            failures_dropped=failures.dropped,
        )

    # -- store --------------------------------------------------------------------------------

    @property
    def records(self) -> tuple[Any, ...]:
        """Every emitted payload, in order.

        A branch's events are stored as they were recorded and copied here, on each read:
        each read returns copies of its own (equal, not identical), so that changing one
        changes nothing recorded.
        """
        kept = self._kept
        if not kept:
            return tuple(self._records)
        return tuple(kept[i](r) if i in kept else r for i, r in enumerate(self._records))

    @property
    def denials(self) -> list[GateDenied]:
        """Every recorded gate denial, in order."""
        return self.by_type(GateDenied)

    def by_type(self, cls: type[Any]) -> list[Any]:
        """The stored payloads that are instances of *cls*, in order."""
        kept = self._kept
        return [
            kept[i](r) if i in kept else r
            for i, r in enumerate(self._records)
            if isinstance(r, cls)
        ]

    def stream(self, name: str) -> tuple[Any, ...]:
        """The payloads routed into the stream *name*, in order (empty if none)."""
        return tuple(self._streams.get(name, ()))

    def subscribe(self, condition: Condition, handler: S) -> S:
        """Call *handler* with every payload emitted from now on that meets *condition*."""
        if not callable(handler):
            raise TypeError(f"a subscriber must be callable, not {handler!r}")
        if not callable(condition):
            raise TypeError(f"a condition is a class or a predicate, not {condition!r}")
        self._subscriptions.append((condition, handler))
        return handler

    def unsubscribe(self, handler: Subscriber) -> int:
        """Remove every subscription of *handler*; return how many there were."""
        before = len(self._subscriptions)
        self._subscriptions = [(c, h) for c, h in self._subscriptions if h != handler]
        return before - len(self._subscriptions)

    def route(self, condition: Condition, *, into: str) -> None:
        """File every payload emitted from now on that meets *condition* in stream *into*."""
        if not callable(condition):
            raise TypeError(f"a condition is a class or a predicate, not {condition!r}")
        self._routes.append((condition, into))
        self._streams.setdefault(into, [])

    async def emit(self, payload: Any, *, call_id: str | None = None) -> list[ReportedFailure]:
        """Store *payload*, route it, dispatch it; return the isolated failures.

        Each failure is a :class:`~lionexec.ReportedFailure` with ``where="observer"``, the
        culprit's ``repr`` and *call_id* (the tool call the payload belongs to, if the caller
        knows it), reported to :attr:`failures` once. A checkpoint on every path, after the
        payload is stored and routed (synchronously): if the caller is cancelled, the payload
        is still stored, the subscribers do not run, and ``trio.Cancelled`` propagates.
        """
        failures = self._store(payload, call_id)
        await trio.lowlevel.checkpoint()
        await self._dispatch(payload, call_id, failures)
        return failures

    async def _emit(self, payload: Any, *, call_id: str | None = None) -> list[ReportedFailure]:
        """:meth:`emit` without its own checkpoint (bound by :class:`BoundSeams`: the act
        transaction's announcements follow a call that has yielded already)."""
        failures = self._store(payload, call_id)
        if self._subscriptions:
            await self._dispatch(payload, call_id, failures)
        return failures

    def _keep(self, record: Any, detach: Callable[[Any], Any]) -> bool:
        """Store *record* to be copied with *detach* when read, if nothing needs a copy now
        (no route or subscription, which would see it at once); returns whether it did.
        Otherwise the caller emits ``detach(record)``.

        For the act transaction's events (bound by :class:`BoundSeams` as its
        ``keep_event``): an observer keeps every call's event, and most are never read (a
        copy per call was a sixth of a governed call's cost, and 390 of the 2,058 bytes a
        gated call retained).
        """
        if self._routes or self._subscriptions:
            return False
        records = self._records
        self._kept[len(records)] = detach
        records.append(record)
        return True

    def _store(self, payload: Any, call_id: str | None) -> list[ReportedFailure]:
        """Store and route *payload*; synchronous. Returns the route conditions' failures."""
        self._records.append(payload)
        failures: list[ReportedFailure] = []
        if not self._routes:
            return failures
        for condition, name in list(self._routes):
            try:
                if _matches(condition, payload):
                    self._streams[name].append(payload)
            except Exception as exc:
                failures.append(
                    self.failures.failed("observer", exc, call_id=call_id, culprit=condition)
                )
        return failures

    async def _dispatch(
        self, payload: Any, call_id: str | None, failures: list[ReportedFailure]
    ) -> None:
        """Call the subscribers whose condition *payload* meets; add their failures."""

        def failed(culprit: Callable[..., Any], exc: Exception) -> None:
            failures.append(
                self.failures.failed("observer", exc, call_id=call_id, culprit=culprit)
            )

        for condition, handler in list(self._subscriptions):
            try:
                if not _matches(condition, payload):
                    continue
            except Exception as exc:
                failed(condition, exc)
                continue
            try:
                await call_user(handler, payload)
            except Exception as exc:
                failed(handler, exc)
