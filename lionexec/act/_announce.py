"""What a recorded call tells the seams that listen: the announce phase of the act
transaction (:class:`~lionexec.act._transaction.CallTransaction`).

After evidence, a call is announced to its ``tool.post`` (completed) or ``tool.error`` (any
other invoked outcome) hooks, the session observer, the history's message callbacks and the
``message.add`` hooks. Each gets a copy (or a text summary) of what was recorded, never the
record itself; their failures are reported on the branch's failure log, never raised, and can
never change or split what was recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lionexec.conversation import ActionRequest, ActionResponse
from lionexec.engine import EventStatus
from lionexec.governance import HookPoint
from lionexec.tools import FunctionCalling

from ._copies import copy_error, detached, detached_message, summarize
from ._delivery import tell_callbacks, tell_callbacks_shielded

if TYPE_CHECKING:
    from ._envelope import Proposal
    from ._scope import CallScope

__all__ = ["Announcing"]

# Enum members read on every announced call, as module names: through the class, each read
# costs about as much as a small function call on Python 3.11.
_COMPLETED = EventStatus.COMPLETED
_TOOL_POST = HookPoint.TOOL_POST
_TOOL_ERROR = HookPoint.TOOL_ERROR
_MESSAGE_ADD = HookPoint.MESSAGE_ADD
# Where a failing seam is reported (as HookBus names its handlers' failures)
_WHERE_POST = f"hook:{_TOOL_POST.value}"
_WHERE_ERROR = f"hook:{_TOOL_ERROR.value}"
_WHERE_MESSAGE_ADD = f"hook:{_MESSAGE_ADD.value}"


class Announcing:
    """The announce phase of a call transaction (its other phases are the transaction's own).

    A base of :class:`~lionexec.act._transaction.CallTransaction`, which holds the state
    read here.
    """

    __slots__ = ()

    scope: CallScope
    proposal: Proposal
    request: ActionRequest
    response: ActionResponse | None
    event: FunctionCalling | None

    async def announce(self, deadline: float | None = None) -> None:
        """Hooks, observer and message callbacks, after the record is complete. Never raises
        an ``Exception``.

        The ``on_message_added`` callbacks hear of the call even if a cancellation comes
        first (in a hook, say): shielded, by *deadline* (that of the announcement of a call
        being cancelled) or within the branch's ``cancel_grace``; then it propagates.

        Each gets a copy (or a text summary) of what was recorded, never the record itself.
        Their failures are reported on the branch's failure log (once each); so is one of
        a seam's own method a subclass overrides, and the seams after it still run.
        """
        scope = self.scope
        history = scope.history
        try:
            event = self.event
            if event is not None:
                pending = self._post_now(event)
                if pending is not None:
                    await pending
                if scope.observer is not None:
                    pending = self._observe_now(event)
                    if pending is not None:
                        await pending
        except BaseException:  # cancelled in a hook: the callbacks still hear of the call
            if history.on_message_added:
                await self._tell_callbacks(deadline, shielded=True)
            raise
        if history.on_message_added:
            await self._tell_callbacks(deadline)
        if _MESSAGE_ADD in scope.hooks.points:
            request, response = self.request, self.response
            assert response is not None
            emit_hook = scope.seams.emit
            await self._seam(
                _WHERE_MESSAGE_ADD,
                emit_hook,
                lambda: emit_hook(_MESSAGE_ADD, message=detached_message(request)),
            )
            await self._seam(
                _WHERE_MESSAGE_ADD,
                emit_hook,
                lambda: emit_hook(_MESSAGE_ADD, message=detached_message(response)),
            )

    def _announce_now(self) -> Awaitable[None] | None:
        """:meth:`announce` as far as it gets without awaiting: ``None`` when every seam ran
        synchronously (synchronous ``tool.post``/``tool.error`` handlers, an observer that
        keeps the event), otherwise an awaitable of the rest. Without message callbacks
        or ``message.add`` handlers, and with synchronous hooks (most are), a call is
        announced without a coroutine."""
        scope = self.scope
        if scope.history.on_message_added or _MESSAGE_ADD in scope.hooks.points:
            return self.announce()
        event = self.event
        if event is None:
            return None
        pending = self._post_now(event)
        if pending is not None:
            return self._observed_after(pending, event)
        if scope.observer is not None:
            return self._observe_now(event)
        return None

    async def _observed_after(self, pending: Awaitable[None], event: FunctionCalling) -> None:
        await pending
        if self.scope.observer is not None:
            rest = self._observe_now(event)
            if rest is not None:
                await rest

    def _post_now(self, event: FunctionCalling) -> Awaitable[None] | None:
        """The ``tool.post`` (completed) or ``tool.error`` (any other invoked outcome)
        handlers, as far as they run without awaiting: ``None``, or an awaitable of the rest.
        A failure (of a handler, or of building its keyword arguments) is reported, never
        raised. (*event*: the call's, which ran.)"""
        execution = event.execution
        point = _TOOL_POST if execution.status is _COMPLETED else _TOOL_ERROR
        scope = self.scope
        hooks = scope.hooks
        if point not in hooks.points:
            return None
        proposal = self.proposal
        # what costs a summary or a copy, only for a handler that may read it
        reads = hooks._reads.get(point)
        # The keyword arguments are built inside the try, so their failure is reported too.
        try:
            arguments: dict[str, Any]
            if point is not _TOOL_POST:
                arguments = {"tool_name": proposal.function, "call_id": proposal.call_id}
                if reads is None or "error" in reads:
                    arguments["error"] = copy_error(execution.error)
                arguments["status"] = execution.status
                arguments["duration"] = execution.duration
            elif reads is None or "result" in reads:
                arguments = {
                    "tool_name": proposal.function,
                    "call_id": proposal.call_id,
                    "result": summarize(execution.response),
                    "duration": execution.duration,
                }
            else:
                arguments = {
                    "tool_name": proposal.function,
                    "call_id": proposal.call_id,
                    "duration": execution.duration,
                }
            failures = scope.seams.emit_now(point, arguments)
        except Exception as exc:
            where = _WHERE_POST if point is _TOOL_POST else _WHERE_ERROR
            self._failed(where, exc, self.scope.seams.emit)
            return None
        if failures is None or type(failures) is list:  # (every handler ran synchronously)
            return None
        where = _WHERE_POST if point is _TOOL_POST else _WHERE_ERROR
        return self._seam(where, self.scope.seams.emit, _given(failures))

    def _observe_now(self, event: FunctionCalling) -> Awaitable[None] | None:
        """The session observer's record of *event* (the call's, which ran): kept as it is,
        synchronously, when nothing would see it at once (see
        :attr:`BoundSeams.keep_event`), otherwise an awaitable emitting a copy. A failure is
        reported, never raised."""
        seams = self.scope.seams
        try:
            keep_event = seams.keep_event
            assert keep_event is not None
            if keep_event(event, detached):
                return None
            emit_event = seams.emit_event
            assert emit_event is not None
            emitted = emit_event(detached(event), call_id=self.proposal.call_id)
        except Exception as exc:
            self._failed("observer", exc, seams.emit_event)
            return None
        return self._seam("observer", seams.emit_event, _given(emitted))

    async def _tell_callbacks(self, deadline: float | None, *, shielded: bool = False) -> None:
        """Tell the history's ``on_message_added`` callbacks of the recorded request and
        response (copies): each callback each message once, even if a cancellation comes
        (see :mod:`._delivery`); *shielded* while one is in flight already."""
        scope = self.scope
        response = self.response
        assert response is not None
        try:
            messages = (detached_message(self.request), detached_message(response))
        except Exception as exc:  # (copying never raises; a last guard)
            self._failed("message_callback", exc, detached_message)
            return
        tell = tell_callbacks_shielded if shielded else tell_callbacks
        await tell(scope.history, messages, self.proposal.call_id, scope.cancel_grace, deadline)

    async def _seam(
        self, where: str, culprit: object, emit: Callable[[], Awaitable[object]]
    ) -> None:
        """Await ``emit()`` (its arguments built inside, so their failure is caught too);
        an ``Exception`` is reported (:meth:`_failed`), never raised."""
        try:
            await emit()
        except Exception as exc:
            self._failed(where, exc, culprit)

    def _failed(self, where: str, exc: Exception, culprit: object) -> None:
        """Report a seam's own failure during :meth:`announce` (never raised)."""
        self.scope.failures.failed(where, exc, call_id=self.proposal.call_id, culprit=culprit)


def _given(awaitable: Awaitable[object]) -> Callable[[], Awaitable[object]]:
    """A function returning *awaitable*, for :meth:`CallTransaction._seam` (made here, so a
    phase that does not need one creates no closure cell on every call)."""
    return lambda: awaitable
