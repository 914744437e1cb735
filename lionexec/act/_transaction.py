"""The action transaction: one object per model-facing call, from proposal to evidence.

Every call :meth:`Branch.act` runs, single or batched, is one :class:`CallTransaction`, whose
:meth:`~CallTransaction.run` goes through these phases in order, each one a method, each seeing
the same frozen :class:`~lionexec.governance.CallContext`:

1. :meth:`~CallTransaction.resolve`: resolve the tool and validate the arguments (unknown
   tool or bad arguments: ``invalid``);
2. :meth:`~CallTransaction.gate`: the session observer's gate (no: ``denied``);
3. :meth:`~CallTransaction.authorize`: the permission policy, with escalation (no:
   ``denied``; on a journaled branch an escalation may park the call: ``awaiting_approval``,
   not recorded, the request left unanswered until the approval is decided);
4. :meth:`~CallTransaction.pre_hooks`: the blocking ``tool.pre`` hooks (no: ``denied``);
5. :meth:`~CallTransaction.transform`: the tool's preprocessor, then **revalidation** of
   what it returned, against the schema (``invalid``) and the policy (``denied``), always;
6. :meth:`~CallTransaction.invoke`: the write-ahead point (every sink's
   :meth:`~lionexec.act.EvidenceSink.write_ahead`), then a
   :class:`~lionexec.tools.FunctionCalling` per attempt, each bounded by ``timeout``
   (``timed_out``), retried (idempotent tools only, unless forced) per the
   :class:`~lionexec.act.RetryPolicy`;
7. :meth:`~CallTransaction.finish` (**evidence**): the linked request/response pair and, for
   an invoked call, the log record, written together, synchronously, KI-protected, the moment
   the outcome is known;
8. :meth:`~CallTransaction.announce`: ``tool.post`` (completed) or ``tool.error`` (any other
   invoked outcome) hooks, the session observer, message callbacks and ``message.add`` hooks.
   Their failures are isolated and reported on the branch's
   :class:`~lionexec.FailureLog`; they see copies, and can never change or split what was
   recorded. (This phase lives in :mod:`._announce`, a base of the transaction.)

A call with nothing to do between resolve and invoke (no gate, policy, ``tool.pre`` hook or
transform) and nothing invoke adds to its event's run (no sink to write ahead to, no attempt
deadline) has its event run by :meth:`~CallTransaction.run` itself: the same records, one
coroutine fewer (``tests/act/test_plain_path.py`` compares both ways field by field).

The transaction receives its collaborators as one small record (:class:`CallScope
<lionexec.act._scope.CallScope>`), never the branch itself; it calls the governance seams
through the scope's :class:`~lionexec.governance.BoundSeams`.

Cancellation: if ``trio.Cancelled`` (or any other ``BaseException``) passes through before
evidence was written, the call is recorded ``cancelled`` synchronously (or ``failed``, when it
came while waiting to retry a failed attempt), announced in a shielded scope bounded by
``cancel_grace`` seconds, and the exception is re-raised. A request is never left without a
response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Coroutine, Mapping
from types import MappingProxyType
from typing import Any, Literal

import trio

from lionexec._snapshot import atoms_only, snapshot
from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    ActionResponseContent,
    ErrorInfo,
)
from lionexec.engine import EventStatus
from lionexec.errors import ToolNotFoundError, ValidationError
from lionexec.governance import (
    CallContext,
    HookPoint,
    PermissionDecision,
    PreHookResult,
    ToolInvocation,
)
from lionexec.governance._hooks import _ALLOWED as _PRE_ALLOWED
from lionexec.tools import FunctionCalling, Tool

from ._alcall import AlcallParams
from ._announce import Announcing
from ._copies import VERBOSE_LIMIT, summarize
from ._envelope import Proposal
from ._log import build_log_record
from ._results import recorded_result, unserializable_result
from ._scalars import has_non_finite, same_scalars
from ._scope import CallScope, idempotency_key
from ._unanswered import announce_interrupted, interruption
from .sinks.base import WriteAhead

__all__ = ["CallTransaction"]

logger = logging.getLogger("lionexec.act")

# Enum members the act path reads on every call, as module names: through the class, each
# read costs about as much as a small function call on Python 3.11, several times a call.
_COMPLETED = EventStatus.COMPLETED
_FAILED = EventStatus.FAILED
_OUTCOME_COMPLETED = ActionOutcome.COMPLETED
_OUTCOME_FAILED = ActionOutcome.FAILED
_AWAITING_APPROVAL = ActionOutcome.AWAITING_APPROVAL
_TOOL_PRE = HookPoint.TOOL_PRE


class CallTransaction(Announcing):
    """One proposed call's way through every phase, to exactly one recorded response.

    Build one per call with the batch's :class:`CallScope` and parameters, then await
    :meth:`run`. Each phase method returns whether the call goes on; a phase that ends the
    call has recorded its outcome (:meth:`finish`) before returning ``False``, except a call
    parked for a durable approval, which has an unrecorded ``awaiting_approval`` answer.
    """

    __slots__ = (
        "_context",
        "_key",
        "_viewed",
        "arguments",
        "attempts",
        "event",
        "failure",
        "params",
        "phase",
        "proposal",
        "request",
        "response",
        "scope",
        "tool",
    )

    def __init__(
        self,
        scope: CallScope,
        proposal: Proposal,
        request: ActionRequest,
        params: AlcallParams[bool],
    ) -> None:
        self.scope = scope
        self.proposal = proposal
        self.request = request
        self.params = params
        self.tool: Tool | None = None
        self.arguments: dict[str, Any] = {}
        self._context: CallContext | None = None
        self._key: str | None = None
        self._viewed: dict[str, Any] | None = None
        self.event: FunctionCalling | None = None
        self.attempts = 0
        self.response: ActionResponse | None = None
        #: The tool's exception, re-raised by :meth:`run` when errors are not suppressed.
        self.failure: Exception | None = None
        #: The phase running now (named when a whole-call deadline expires).
        self.phase = "resolve"

    @property
    def call_id(self) -> str:
        return self.proposal.call_id

    @property
    def context(self) -> CallContext | None:
        """The frozen context gates, policy, hooks, sinks and the tool see; ``None`` until
        the tool is resolved.

        Built on first use, from the validated arguments: an ungoverned call of a tool that
        takes no context, on a branch without sinks, never needs one (6 % of the time of such
        a call). The arguments it is built from do not change
        before a transform, which replaces it (:meth:`transform`).
        """
        context = self._context
        if context is None and self.tool is not None:
            proposal, tool, branch = self.proposal, self.tool, self.scope.branch_name
            context = self._context = CallContext.for_call(
                tool.name,
                self._viewed or self._view(),
                proposal.call_id,
                branch,
                tool,
                self._key or idempotency_key(branch, proposal.call_id, tool, self.arguments),
            )
        return context

    def _view(self) -> dict[str, Any]:
        """The validated arguments as the context and the gate's invocation hold them,
        read-only: their own copy, unless nothing in them could change (scalars only), when
        the validated arguments themselves, which nothing changes. One for both."""
        arguments = self.arguments
        viewed = self._viewed = arguments if atoms_only(arguments) else snapshot(arguments)
        return viewed

    # -- the whole call -----------------------------------------------------------------------

    async def run(self, suppress_errors: bool = True, verbose: bool = False) -> ActionResponse:
        """Run every phase and return the recorded response.

        Raises the tool's original exception after recording, when the call failed and
        *suppress_errors* is false. Cancellation records ``cancelled`` and propagates.
        (Positional arguments too: a batch's task runs ``CallTransaction.run`` itself.)
        """
        if verbose:
            logger.info(
                "act %r(%s) [%r]",
                self.proposal.function,
                summarize(self.proposal.arguments, VERBOSE_LIMIT),
                self.call_id,
            )
        scope, params = self.scope, self.params
        try:
            deadline = params.call_timeout
            if deadline is None:
                if self.resolve():  # (otherwise resolve ended the call)
                    tool = self.tool
                    assert tool is not None
                    if (
                        tool.preprocessor is None
                        and params.timeout is None
                        and not scope.evidence.feeds
                    ):
                        # nothing between the governance phases and the tool (no transform,
                        # sink to write ahead to, attempt deadline): once they allow the call
                        # without awaiting (none to ask, or a plain gate, rules and
                        # synchronous hooks), the event is awaited here, as invoke() would,
                        # without its coroutine
                        going = (
                            True
                            if scope.plain and _TOOL_PRE not in scope.hooks.points
                            else self._govern(0)
                        )
                        if going is True:
                            self.phase = "invoke"
                            event = self._begin_attempt(1)
                            await event._run()
                            if event.execution.status is _COMPLETED:
                                self._finish_completed(event)
                            elif not self._attempted(event):
                                await self._retried()
                        elif going is not None:
                            await going
                    else:
                        rest = self._from(0)
                        if rest is not None:
                            await rest
            else:
                # the whole call's deadline runs from here, though the phases that end
                # without awaiting (resolve; a synchronous gate, rules and hooks) cannot be
                # cut by it
                started = trio.current_time()
                phases = self._phases()
                if phases is not None:  # (otherwise a phase ended the call)
                    with trio.move_on_at(started + deadline):
                        await phases
                    if self.response is None:
                        self._cut_short(
                            ActionOutcome.TIMED_OUT,
                            ErrorInfo(
                                "TimeoutError",
                                f"the call took longer than {deadline:g}s (call_timeout), "
                                f"in phase {self.phase}",
                            ),
                        )
        except Exception as exc:  # a fault in a phase itself, not in the tool
            if self.response is not None:
                raise
            self.failure = exc
            error = ErrorInfo.from_exception(exc)
            if self.event is not None and not self.event.status.is_terminal:
                self._settle_and_finish(_FAILED, ActionOutcome.FAILED, error, exc)
            else:
                self.finish(ActionOutcome.FAILED, error=error)
        except BaseException as exc:
            if self.response is None:
                self._cut_short(ActionOutcome.CANCELLED, interruption(exc))
                await announce_interrupted(scope, [self])
            raise
        response = self.response
        assert response is not None
        if verbose:
            content = response.content
            logger.info(
                "act %r -> %s %s",
                self.call_id,
                content.outcome.value,
                summarize(
                    content.output if content.error is None else content.error.message,
                    VERBOSE_LIMIT,
                ),
            )
        if (
            scope.hooks.points or scope.observer is not None or scope.history.on_message_added
        ) and response.content.outcome is not _AWAITING_APPROVAL:
            # nobody listening, nothing to do; a parked call has recorded nothing to announce
            pending = self._announce_now()
            if pending is not None:
                await pending
        if self.failure is not None and not suppress_errors:
            raise self.failure
        return response

    async def _retried(self) -> None:
        """The attempts after a failed first one that may be retried (see :meth:`invoke`)."""
        await trio.sleep(self.params.retry_delay(self.attempts - 1))
        self._begin_attempt(self.attempts + 1)
        await self.invoke()

    def _phases(self) -> Coroutine[Any, Any, None] | None:
        """:meth:`resolve`, then the coroutine of the phases after it, for :meth:`run` to
        await (``None`` if a phase ended the call). A call with nothing to govern or
        transform goes straight to :meth:`invoke`'s coroutine: no coroutine of its own (one
        coroutine fewer to create and run, for most calls)."""
        # No schedule point of its own: a call of a concurrent batch runs in a task just
        # spawned, and fan_out checkpoints before each call of a sequential one.
        if not self.resolve():
            return None
        scope, tool = self.scope, self.tool
        assert tool is not None
        if (
            scope.observer is None
            and scope.policy is None
            and _TOOL_PRE not in scope.hooks.points
            and tool.preprocessor is None
        ):
            self.phase = "invoke"
            return self.invoke()
        return self._from(0)

    def _from(self, step: int) -> Coroutine[Any, Any, None] | None:
        """The phases between resolve and invoke from *step* on (see :meth:`_govern`), then
        the coroutine of the transform or of :meth:`invoke`; ``None`` if a phase ended the
        call."""
        going = self._govern(step)
        if going is not True:
            return going
        assert self.tool is not None
        if self.tool.preprocessor is not None:
            return self._transformed()
        self.phase = "invoke"
        return self.invoke()

    def _govern(self, step: int) -> Literal[True] | Coroutine[Any, Any, None] | None:
        """The governance phases from *step* on (0 gate, 1 policy, 2 ``tool.pre``), in order,
        each only where it has something to do: ``True`` when every one allowed the call
        without awaiting, ``None`` if a phase ended the call, otherwise the coroutine that
        awaits the first phase that must await and goes on (:meth:`_resumed`, to the tool).

        A governance phase runs synchronously when its seams do (a plain gate, rules and
        synchronous hooks: no coroutine at all). The governance seams are called through the
        scope's BoundSeams, without their own checkpoints (their public methods have one
        each): a governed call takes as many scheduler steps as a plain one.
        """
        # (self.phase is named only where a phase awaits: the whole-call deadline, the one
        # reader of it, can only cut a call there)
        scope, tool = self.scope, self.tool
        assert tool is not None
        if step <= 0 and scope.observer is not None:
            going = self.gate()
            if going is not True:
                return None if going is False else self._resumed("gate", 1, going)
        if step <= 1 and scope.policy is not None:
            # a decision kept for the tool that allows (see authorize): nothing to ask
            kept = scope.seams.decided.get(tool)
            if kept is None or kept.behavior != "allow":
                going = self.authorize()
                if going is not True:
                    return None if going is False else self._resumed("policy", 2, going)
        if step <= 2 and _TOOL_PRE in scope.hooks.points:
            going = self.pre_hooks()
            if going is not True:
                return None if going is False else self._resumed("tool.pre", 3, going)
        return True

    async def _resumed(self, phase: str, step: int, going: Awaitable[bool]) -> None:
        """Await the phase that could not end synchronously (*phase*; *going*: whether the
        call goes on), then the phases from *step* on."""
        self.phase = phase
        if not await going:
            return
        rest = self._from(step)
        if rest is not None:
            await rest

    async def _transformed(self) -> None:
        self.phase = "transform"
        if not await self.transform():
            return
        self.phase = "invoke"
        await self.invoke()

    # -- phases -------------------------------------------------------------------------------

    def resolve(self) -> bool:
        """Resolve the tool and validate the arguments; ``invalid`` if either fails."""
        proposal = self.proposal
        if proposal.arguments is None:
            return self._invalid(ValidationError(proposal.problem or "unreadable arguments"))
        # The request's own arguments (the private copy of what the proposal read) are
        # validated: when they need no normalizing they are shared, not copied. Nothing
        # changes validated arguments, and every event is kept in the log: one dict fewer per
        # call, in time and in the memory each kept call retains.
        recorded = self.request.content.arguments
        try:
            tool = self.scope.registry.get(proposal.function)
            arguments = tool.validate(recorded, share=True)
        except (ToolNotFoundError, ValidationError) as exc:
            return self._invalid(exc)
        except RecursionError:
            return self._invalid(ValidationError("arguments are nested too deeply"))
        # (the request's own numbers are finite: the reader refuses NaN and Infinity)
        if arguments is not recorded:  # (validation normalized them)
            arguments = self._shared(arguments)
            if arguments is not recorded and has_non_finite(arguments):
                return self._invalid(
                    ValidationError("arguments contain a non-finite number (NaN or Infinity)")
                )
        # the tool's own key: not a non-empty string, the call is invalid; its function
        # raising is the tool's code failing (the call fails, the tool does not run)
        if tool.idempotency_key is not None:
            try:
                self._key = idempotency_key(
                    self.scope.branch_name, proposal.call_id, tool, arguments
                )
            except ValidationError as exc:
                return self._invalid(exc)
        self.tool = tool
        self.arguments = arguments
        return True

    def gate(self) -> bool | Awaitable[bool]:
        """The session gate; ``denied`` if it says no (or raises). Whether the call goes on:
        ``True`` at once when the gate allowed it synchronously, otherwise an awaitable."""
        scope = self.scope
        observer = scope.observer
        if observer is None:
            return True
        seams = scope.seams
        # BoundSeams.must_authorize(), read here without its call (every governed call asks):
        # nothing to ask, no invocation (nor context) to build
        if not seams.asks_always and observer._gate is None:
            return True
        tool, ask_gate = self.tool, seams.ask_gate
        assert tool is not None and ask_gate is not None
        # the invocation as the context would give it, without building a context for it
        # (the policy and the hooks may need none)
        viewed = self._viewed
        if viewed is None:  # (the first to need them: no call of _view())
            arguments = self.arguments
            viewed = self._viewed = arguments if atoms_only(arguments) else snapshot(arguments)
        allowed = ask_gate(
            ToolInvocation._for_call(
                tool.name, MappingProxyType(viewed), self.proposal.call_id, scope.branch_name
            )
        )
        return True if allowed is True else self._gate_answered(allowed)

    async def _gate_answered(self, allowed: Awaitable[object]) -> bool:
        if await allowed:
            return True
        return self._denied("GateDenied", "denied by governance gate")

    def authorize(self) -> bool | Awaitable[bool]:
        """The permission policy (escalating if it says so); ``denied`` unless it allows.
        Whether the call goes on, at once, or (an escalation, a policy of a subclass) an
        awaitable of it."""
        scope, tool = self.scope, self.tool
        if scope.policy is None:
            return True
        assert tool is not None
        seams = scope.seams
        decision = seams.decided.get(tool)  # a decision that depends on the tool alone
        if decision is not None:
            return self._decided(decision)
        context = self.context
        assert context is not None
        decide_now = seams.decide_now
        assert decide_now is not None
        decision = decide_now(context)
        if isinstance(decision, PermissionDecision):
            seams.keep_decision(tool, decision)
            return self._decided(decision)
        return self._decision_awaited(decision)

    async def _decision_awaited(self, decision: Awaitable[PermissionDecision]) -> bool:
        return self._decided(await decision)

    def _decided(self, decision: PermissionDecision) -> bool:
        if decision.behavior == "allow":
            return True
        if decision.approval is not None and self.scope.evidence.durable:
            return self._park(decision)
        return self._denied("PermissionDenied", _denial(decision))

    def pre_hooks(self) -> bool | Awaitable[bool]:
        """The blocking ``tool.pre`` hooks; ``denied`` if one says no. Whether the call goes
        on, at once when every handler ran synchronously, otherwise an awaitable of it.
        (Asked where ``tool.pre`` has handlers: without any, the call goes on.)"""
        scope, tool = self.scope, self.tool
        assert tool is not None
        kwargs: dict[str, Any] = {"tool_name": tool.name, "call_id": self.proposal.call_id}
        # what costs a summary or a context, only for a handler that may read it (handlers
        # that read no keyword, the usual ``**_`` catch-all, need neither)
        reads = scope.hooks._reads.get(_TOOL_PRE)
        if reads is None or reads:
            if reads is None or "arguments" in reads:
                kwargs["arguments"] = summarize(self.arguments)  # (the dict the context views)
            if reads is None or "context" in reads:
                kwargs["context"] = self.context
        verdict = scope.seams.pre_now(kwargs)
        if verdict is _PRE_ALLOWED:  # (what every run that allowed without awaiting returns)
            return True
        if isinstance(verdict, PreHookResult):
            return True if verdict.allowed else self._pre_decided(verdict)
        return self._pre_awaited(verdict)

    async def _pre_awaited(self, verdict: Awaitable[PreHookResult]) -> bool:
        return self._pre_decided(await verdict)

    def _pre_decided(self, verdict: PreHookResult) -> bool:
        if verdict.allowed:
            return True
        return self._denied("HookDenied", verdict.reason or "denied by a tool.pre hook")

    async def transform(self) -> bool:
        """The tool's preprocessor, then revalidation (schema, then policy), always.

        A tool without a preprocessor has no transform: the arguments it is called with are
        exactly the ones validated and authorized. Otherwise an event is built for the call
        here, so that what the transform did is in the log record, whatever comes of it:
        the preprocessor raising (or returning something other than a mapping) ends the call
        ``failed``; what it returns failing the schema
        ends it ``invalid``, failing the policy ``denied``.
        """
        tool = self.tool
        assert tool is not None and self.context is not None
        if tool.preprocessor is None:
            return True
        event = self._begin_attempt(1)  # the transform is part of the first attempt
        try:
            processed = await tool.transform(snapshot(self.arguments))
        except Exception as exc:
            return self._settle_and_finish(
                _FAILED, ActionOutcome.FAILED, ErrorInfo.from_exception(exc), exc
            )
        if not isinstance(processed, Mapping):
            problem = TypeError(
                f"the preprocessor of tool {tool.name!r} returned "
                f"{type(processed).__name__}, not a mapping of arguments"
            )
            return self._settle_and_finish(
                _FAILED, ActionOutcome.FAILED, ErrorInfo.from_exception(problem), problem
            )
        processed = dict(processed)
        event.arguments = snapshot(processed)
        try:
            checked = tool.validate(processed)
        except ValidationError as exc:
            error = ErrorInfo(type(exc).__name__, f"after transform: {exc}")
            return self._settle_and_finish(EventStatus.ABORTED, ActionOutcome.INVALID, error)
        context = self._context = self.context.with_arguments(snapshot(checked))
        if event.context is not None:  # a tool taking its context gets the revalidated one
            event.context = context
        decide = self.scope.seams.decide
        if decide is not None:
            decision = await decide(context)
            if decision.approval is not None and self.scope.evidence.durable:
                # parked on the transformed arguments
                _settle(event, EventStatus.SKIPPED)
                self.event, self.attempts = None, 0  # nothing ran, nothing is recorded
                return self._park(decision)
            if decision.behavior != "allow":
                error = ErrorInfo("PermissionDenied", f"after transform: {_denial(decision)}")
                return self._settle_and_finish(EventStatus.SKIPPED, ActionOutcome.DENIED, error)
        self.arguments = event.arguments = self._shared(checked)
        return True

    async def invoke(self) -> None:
        """The write-ahead point, then attempts, each a fresh event, until one settles it."""
        tool, params, scope = self.tool, self.params, self.scope
        assert tool is not None
        if self.event is None:  # no transform built it
            self._begin_attempt(1)
        while True:
            event = self.event
            assert event is not None
            reply = None
            if scope.evidence.feeds:  # without sinks, nothing to wait for (not even a call)
                reply = await scope.evidence.write_ahead(
                    WriteAhead(
                        scope.branch_name,
                        self.request,
                        event.arguments,
                        self.attempts,
                        self.context,
                    )
                )
            if reply is not None:
                if reply.recorded is not None:  # a completed idempotency key: not invoked
                    self._finish_recorded(reply.recorded)
                    return
                self.attempts += reply.prior_attempts
            # Event._run: invoke() without its schedule point after the outcome (see _phases)
            if params.timeout is None:
                await event._run()
            else:
                with trio.move_on_after(params.timeout) as attempt:
                    await event._run()
                if attempt.cancelled_caught:
                    self.finish(
                        ActionOutcome.TIMED_OUT,
                        error=ErrorInfo("TimeoutError", f"timed out after {params.timeout:g}s"),
                    )
                    return
            if self._attempted(event):
                return
            await trio.sleep(params.retry_delay(self.attempts - 1))
            self._begin_attempt(self.attempts + 1)

    def _attempted(self, event: FunctionCalling) -> bool:
        """Record the call if the attempt that ran *event* settles it: ``completed``, or
        ``failed`` when the tool may not be retried or the attempts are spent. ``False``:
        the call is to be retried."""
        execution = event.execution  # (not the Event properties: a call each, per read)
        if execution.status is _COMPLETED:
            self._finish_completed(event)
            return True
        error = execution.error
        assert isinstance(error, BaseException)
        tool, params = self.tool, self.params
        assert tool is not None
        if not (tool.idempotent or params.force_retry) or self.attempts > params.retry_attempts:
            self.failure = error if isinstance(error, Exception) else None
            self.finish(_OUTCOME_FAILED, error=ErrorInfo.from_exception(error))
            return True
        return False

    # -- evidence -----------------------------------------------------------------------------

    @trio.lowlevel.enable_ki_protection
    def finish(
        self,
        outcome: ActionOutcome,
        *,
        output: Any = None,
        error: ErrorInfo | None = None,
    ) -> None:
        """Evidence: build the response and write it with the log record. Synchronous.

        KI-protected: a ``KeyboardInterrupt`` lands before or after the record, never inside.
        """
        scope, request, proposal, attempts = self.scope, self.request, self.proposal, self.attempts
        response = ActionResponse._recorded(
            request, output, error, outcome, attempts, proposal.function, scope.branch_name
        )
        event = self.event
        log = None
        if event is not None:
            log = build_log_record(
                scope.branch_id,
                proposal.call_id,
                proposal.function,
                request.id,
                response.id,
                outcome,
                response.content.status,
                attempts,
                event,
            )
        scope.evidence.record(request, response, log)
        self.response = response

    @trio.lowlevel.enable_ki_protection
    def _finish_completed(self, event: FunctionCalling) -> None:
        """Record the completed *event*: ``completed`` with one private snapshot of its output,
        shared by the history and the log record (what the tool does later with the object it
        returned changes neither); ``failed``, naming the tool and the type, if the output
        is not JSON data (see :mod:`._results`). KI-protected, like :meth:`finish`."""
        execution = event.execution
        output, problem = recorded_result(execution.response)
        execution.response = output
        if problem is None:
            self.finish(_OUTCOME_COMPLETED, output=output)
            return
        exc = unserializable_result(self.proposal.function, problem)
        execution.response = None
        self.failure = exc
        _settle(event, _FAILED, exc)
        self.finish(_OUTCOME_FAILED, error=ErrorInfo.from_exception(exc))

    @trio.lowlevel.enable_ki_protection
    def _cut_short(self, outcome: ActionOutcome, error: ErrorInfo) -> None:
        """Record a call stopped from outside (cancelled, or over its whole-call deadline).

        If the latest attempt already ended ``completed`` (the interruption came after the
        tool returned, before the record), ``completed`` with its output is the truth
        recorded; if it ended ``failed`` (stopped while waiting to retry), that failure;
        otherwise *outcome*, and an event that was built but not finished ends ``cancelled``.
        Synchronous and KI-protected, like :meth:`finish`.
        """
        event = self.event
        if event is not None and event.status is _COMPLETED:
            self._finish_completed(event)
            return
        if event is not None and event.status is _FAILED:
            failed = event.execution.error
            assert isinstance(failed, BaseException)
            self.failure = failed if isinstance(failed, Exception) else None  # as invoke() does
            self.finish(ActionOutcome.FAILED, error=ErrorInfo.from_exception(failed))
            return
        if event is not None and not event.status.is_terminal:
            event.status = EventStatus.CANCELLED
        self.finish(outcome, error=error)

    def _shared(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """*arguments*, or the request's own dict when they hold the same scalars (validation
        or a transform changed nothing that matters). Every event is kept in the log, and
        nothing changes validated arguments: one dict fewer retained per call kept."""
        recorded = self.request.content.arguments
        if arguments is not recorded and same_scalars(arguments, recorded):
            return recorded
        return arguments

    @trio.lowlevel.enable_ki_protection
    def _begin_attempt(self, attempts: int) -> FunctionCalling:
        """A fresh event for attempt number *attempts*; event and count change together
        (KI-protected: a call with an event always counts an attempt, so it gets its log
        record)."""
        assert self.tool is not None
        tool = self.tool
        # the context only for a tool that takes it: every event is kept in the log, and a
        # context per call is ~20 % of the bytes a kept call retains
        context = self.context if tool.arguments.context_param is not None else None
        # Shared, not copied: nothing changes the validated arguments (the tool gets its own
        # copy at invoke; a transform makes a new dict). See _shared().
        event = FunctionCalling._for_call(tool, self.arguments, context)
        self.event, self.attempts = event, attempts
        return event

    @trio.lowlevel.enable_ki_protection
    def _settle_and_finish(
        self,
        status: EventStatus,
        outcome: ActionOutcome,
        error: ErrorInfo,
        exc: Exception | None = None,
    ) -> bool:
        """End the built, uninvoked event with *status* and record *outcome*, in one
        KI-protected step (the event and the response never disagree). Returns ``False``."""
        assert self.event is not None
        _settle(self.event, status, exc)
        if exc is not None:
            self.failure = exc
        self.finish(outcome, error=error)
        return False

    @trio.lowlevel.enable_ki_protection
    def _finish_recorded(self, recorded: ActionResponseContent) -> None:
        """Answer with an outcome a sink already holds (not invoked: no event, no attempt)."""
        self.event, self.attempts = None, 0
        self.finish(recorded.outcome, output=snapshot(recorded.output), error=recorded.error)

    def _invalid(self, exc: Exception) -> bool:
        return self._finish_false(ActionOutcome.INVALID, ErrorInfo.from_exception(exc))

    def _park(self, decision: PermissionDecision) -> bool:
        """Answer a call the policy parked for a durable approval (a journal's escalation
        handler committed its request and the approval): ``awaiting_approval``, naming the
        approval. Nothing is recorded: the request stays unanswered until the approval is
        decided and the journal resumes or denies the call. Returns ``False``."""
        approval = decision.approval
        assert approval is not None
        self.response = ActionResponse.create(
            self.request,
            output={"approval_id": approval.approval_id, "expires_at": approval.expires_at},
            error=ErrorInfo("AwaitingApproval", decision.reason),
            outcome=ActionOutcome.AWAITING_APPROVAL,
            attempts=0,
            sender=self.proposal.function,
            recipient=self.scope.branch_name,
        )
        return False

    def _denied(self, kind: str, reason: str) -> bool:
        return self._finish_false(ActionOutcome.DENIED, ErrorInfo(kind, reason))

    def _finish_false(self, outcome: ActionOutcome, error: ErrorInfo) -> bool:
        self.finish(outcome, error=error)
        return False


def _denial(decision: PermissionDecision) -> str:
    """Why a call the policy did not allow is denied. An approval can only be waited for on
    a branch with a durable journal, which keeps it and resumes the call: elsewhere nothing
    could ever answer the request, so the call is denied."""
    if decision.approval is None:
        return decision.reason
    return (
        f"{decision.reason}, but this branch has no durable journal to keep the approval "
        "and resume the call"
    )


def _settle(event: FunctionCalling, status: EventStatus, error: Exception | None = None) -> None:
    """End an event that was built but never invoked (its transform stopped the call)."""
    if error is not None:
        event.execution.add_error(error)
    event.status = status
