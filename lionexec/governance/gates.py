"""Session governance: the pre-invoke gate and the session's event store."""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import attrs

from .context import ToolInvocation
from .hooks import MAX_KEPT_FAILURES

__all__ = ["Gate", "GateDenied", "SessionObserver", "SubscriberFailure"]

logger = logging.getLogger("lionexec.governance")

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
    error: Exception | None = None


@attrs.frozen
class SubscriberFailure:
    """A route condition, subscription condition or subscriber raised while a payload was
    dispatched; the payload was already stored, and the other subscribers still ran.

    Attributes:
        payload: what was being dispatched.
        callable: the condition or subscriber that raised.
        error: what it raised.
    """

    payload: Any
    callable: Callable[..., Any]
    error: Exception


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
    is isolated: it is logged on the ``lionexec.governance`` logger, returned from
    :meth:`emit`, and kept in :attr:`failures`; it never reaches the emitter, and never undoes
    the store. Cancellation propagates.
    """

    def __init__(self) -> None:
        self._gate: Gate | None = None
        self._records: list[Any] = []
        self._subscriptions: list[tuple[Condition, Subscriber]] = []
        self._routes: list[tuple[Condition, str]] = []
        self._streams: dict[str, list[Any]] = {}
        #: The most recent dispatch failures, oldest first.
        self.failures: deque[SubscriberFailure] = deque(maxlen=MAX_KEPT_FAILURES)

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
        """Whether the gate allows *invocation*; a denial is recorded as :class:`GateDenied`."""
        if not isinstance(invocation, ToolInvocation):
            raise TypeError(f"authorize() takes a ToolInvocation, not {type(invocation).__name__}")
        check = self._gate
        if check is None:
            return True
        try:
            verdict = check(invocation)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict:
                return True
            denial = GateDenied(invocation, f"the session gate returned {verdict!r}")
        except Exception as exc:
            reason = f"the session gate raised {type(exc).__name__}: {exc}"
            denial = GateDenied(invocation, reason, exc)
        await self.emit(denial)
        return False

    # -- store --------------------------------------------------------------------------------

    @property
    def records(self) -> tuple[Any, ...]:
        """Every emitted payload, in order."""
        return tuple(self._records)

    @property
    def denials(self) -> list[GateDenied]:
        """Every recorded gate denial, in order."""
        return self.by_type(GateDenied)

    def by_type(self, cls: type[Any]) -> list[Any]:
        """The stored payloads that are instances of *cls*, in order."""
        return [r for r in self._records if isinstance(r, cls)]

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

    async def emit(self, payload: Any) -> list[SubscriberFailure]:
        """Store *payload*, route it, dispatch it; return the isolated failures."""
        self._records.append(payload)
        failures: list[SubscriberFailure] = []

        def failed(culprit: Callable[..., Any], exc: Exception) -> None:
            logger.error("dispatching %r: %r failed", payload, culprit, exc_info=exc)
            failure = SubscriberFailure(payload, culprit, exc)
            failures.append(failure)
            self.failures.append(failure)

        for condition, name in list(self._routes):
            try:
                if _matches(condition, payload):
                    self._streams[name].append(payload)
            except Exception as exc:
                failed(condition, exc)
        for condition, handler in list(self._subscriptions):
            try:
                if not _matches(condition, payload):
                    continue
            except Exception as exc:
                failed(condition, exc)
                continue
            try:
                result = handler(payload)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                failed(handler, exc)
        return failures
