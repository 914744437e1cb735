"""The action transaction: the one authoritative executor of model-facing tool calls.

Every call :meth:`Branch.act` runs, single or batched, goes through :func:`run_call`, in these
phases, each seeing the same frozen :class:`~lionexec.governance.CallContext`:

1. **resolve** the tool and **validate** the arguments (unknown tool or bad arguments:
   ``invalid``);
2. **authorize** through the session gate, then the **permission policy** (with escalation),
   then the blocking ``tool.pre`` hooks (any of them saying no: ``denied``);
3. **invoke** a :class:`~lionexec.tools.FunctionCalling`, whose pipeline runs the tool's
   preprocessor (the **transform**), then **revalidates** (schema and policy again, after
   every transform; a tool without a preprocessor has no transform, so the arguments it is
   called with are exactly the ones validated and authorized above), then calls the tool
   (sync tools offloaded), then its postprocessor; per-attempt timeout and retries
   (idempotent tools only, unless forced) stay inside this one transaction;
4. **evidence**: the event log record and the linked request/response pair are written
   together, synchronously, the moment the outcome is known;
5. ``tool.post`` (completed) or ``tool.error`` (anything else) hooks, the session observer
   and message callbacks run last. Their failures are isolated and reported on
   :attr:`Branch.failures`; they can never change or split what was recorded.

Cancellation: if ``trio.Cancelled`` (or any other ``BaseException``) passes through before
evidence was written, a ``cancelled`` response is recorded synchronously, then announced
(``tool.error``, observer, message callbacks, ``message.add``) in a shielded scope bounded by
:attr:`Branch.cancel_grace` seconds, and the exception is re-raised. A request is never left
without a response, and whoever mirrors the history through callbacks sees it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from lionexec.conversation import (
    OUTCOME_STATUS,
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    ErrorInfo,
)
from lionexec.engine import EventStatus
from lionexec.errors import CallRejected, ToolNotFoundError, ValidationError
from lionexec.governance import CallContext, HookPoint
from lionexec.tools import FunctionCalling, Revalidator, Tool

from .alcall import AlcallParams
from .envelope import Proposal
from .log import ActionLogRecord

if TYPE_CHECKING:
    from .branch import Branch

__all__ = ["SUMMARY_LIMIT", "VERBOSE_LIMIT", "answer_unanswered", "new_request", "run_call"]

logger = logging.getLogger("lionexec.act")

#: Hook argument and result summaries are cut to this many characters.
SUMMARY_LIMIT = 200
#: ``verbose_action`` log previews are cut to this many characters.
VERBOSE_LIMIT = 50


def summarize(value: object, limit: int = SUMMARY_LIMIT) -> str:
    """``str(value)`` cut to *limit* characters; never raises."""
    try:
        text = str(value)
    except Exception:
        text = f"<unprintable {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@attrs.define(eq=False)
class _Call:
    """One call's progress through the transaction."""

    proposal: Proposal
    request: ActionRequest
    tool: Tool | None = None
    event: FunctionCalling | None = None
    attempts: int = 0
    response: ActionResponse | None = None
    failure: BaseException | None = None


def new_request(branch: Branch, proposal: Proposal) -> ActionRequest:
    """The request message for *proposal* (the caller's own, when it passed one)."""
    if proposal.request is not None:
        return proposal.request
    return ActionRequest.create(
        proposal.function,
        proposal.arguments or {},
        call_id=proposal.call_id,
        sender=branch.name,
        recipient=proposal.function,
    )


async def run_call(
    branch: Branch,
    proposal: Proposal,
    request: ActionRequest,
    *,
    params: AlcallParams,
    suppress_errors: bool,
    verbose: bool,
) -> ActionResponse:
    """Run one proposed call through every phase and return its recorded response.

    Raises the tool's original exception after recording, when the call failed and
    *suppress_errors* is false. Cancellation records ``cancelled`` and propagates.
    """
    call = _Call(proposal, request)
    if verbose:
        logger.info(
            "act %s(%s) [%s]",
            proposal.function,
            summarize(proposal.arguments, VERBOSE_LIMIT),
            proposal.call_id,
        )
    try:
        await _govern_and_invoke(branch, call, params)
    except Exception as exc:  # a fault in a phase itself, not in the tool
        if call.response is not None:
            raise
        call.failure = exc
        _record(branch, call, ActionOutcome.FAILED, error=ErrorInfo.from_exception(exc))
    except BaseException as exc:
        if call.response is None:
            _record_interrupted(branch, call, exc)
            await announce_interrupted(branch, [call])
        raise
    response = call.response
    assert response is not None
    if verbose:
        logger.info(
            "act %s -> %s %s",
            proposal.call_id,
            response.content.outcome.value,
            summarize(
                response.content.output
                if response.content.error is None
                else response.content.error.message,
                VERBOSE_LIMIT,
            ),
        )
    await _after_evidence(branch, call)
    if call.failure is not None and not suppress_errors:
        raise call.failure
    return response


async def _govern_and_invoke(branch: Branch, call: _Call, params: AlcallParams) -> None:
    proposal = call.proposal
    if proposal.arguments is None:
        _invalid(branch, call, ValidationError(proposal.problem or "unreadable arguments"))
        return
    try:
        tool = branch.registry.get(proposal.function)
        arguments = tool.validate(proposal.arguments)
    except (ToolNotFoundError, ValidationError) as exc:
        _invalid(branch, call, exc)
        return
    call.tool = tool
    context = CallContext(
        function=tool.name,
        arguments=arguments,
        call_id=proposal.call_id,
        branch_id=branch.name,
        tool=tool,
    )

    if branch.observer is not None and not await branch.observer.authorize(context.invocation()):
        _denied(branch, call, "GateDenied", "denied by governance gate")
        return
    if branch.policy is not None:
        decision = await branch.policy.decide(context)
        if decision.behavior != "allow":
            _denied(branch, call, "PermissionDenied", decision.reason)
            return
    if branch.hooks.handlers_for(HookPoint.TOOL_PRE):
        verdict = await branch.hooks.run_pre(
            tool_name=tool.name,
            call_id=proposal.call_id,
            arguments=summarize(dict(context.arguments)),
            context=context,
        )
        if not verdict.allowed:
            _denied(branch, call, "HookDenied", verdict.reason or "denied by a tool.pre hook")
            return

    async def revalidate(transformed: dict[str, Any]) -> dict[str, Any]:
        try:
            checked = tool.validate(transformed)
        except ValidationError as exc:
            raise CallRejected(ActionOutcome.INVALID, f"after transform: {exc}") from exc
        if branch.policy is not None:
            again = context.with_arguments(checked)
            decision = await branch.policy.decide(again)
            if decision.behavior != "allow":
                raise CallRejected(ActionOutcome.DENIED, f"after transform: {decision.reason}")
        return checked

    checker = revalidate if tool.preprocessor is not None else None
    await _invoke_with_retries(branch, call, tool, arguments, checker, params)


async def _invoke_with_retries(
    branch: Branch,
    call: _Call,
    tool: Tool,
    arguments: Mapping[str, Any],
    revalidate: Revalidator | None,
    params: AlcallParams,
) -> None:
    may_retry = tool.idempotent or params.force_retry
    while True:
        event = FunctionCalling(
            tool=tool, arguments=arguments, revalidate=revalidate, validated=True
        )
        call.event = event
        call.attempts += 1
        if params.timeout is None:
            await event.invoke()
        else:
            with trio.move_on_after(params.timeout) as scope:
                await event.invoke()
            if scope.cancelled_caught:
                _record(
                    branch,
                    call,
                    ActionOutcome.TIMED_OUT,
                    error=ErrorInfo("TimeoutError", f"timed out after {params.timeout:g}s"),
                )
                return
        error = event.execution.error
        if isinstance(error, CallRejected):
            outcome = ActionOutcome(error.outcome)
            event.status = OUTCOME_STATUS[outcome]
            _record(branch, call, outcome, error=ErrorInfo.from_exception(error))
            return
        if event.status is EventStatus.COMPLETED:
            _record(branch, call, ActionOutcome.COMPLETED, output=event.response)
            return
        if not may_retry or call.attempts > params.retry_attempts:
            assert isinstance(error, BaseException)
            call.failure = error if isinstance(error, Exception) else None
            _record(branch, call, ActionOutcome.FAILED, error=ErrorInfo.from_exception(error))
            return
        await trio.sleep(params.retry_delay(call.attempts - 1))


def _invalid(branch: Branch, call: _Call, exc: Exception) -> None:
    _record(branch, call, ActionOutcome.INVALID, error=ErrorInfo.from_exception(exc))


def _denied(branch: Branch, call: _Call, kind: str, reason: str) -> None:
    _record(branch, call, ActionOutcome.DENIED, error=ErrorInfo(kind, reason))


def _record_interrupted(branch: Branch, call: _Call, exc: BaseException) -> None:
    """Record the outcome of a call interrupted by *exc* (cancellation and the like).

    If the latest attempt already ended ``failed`` (the interruption came while waiting to
    retry), that failure is the truth recorded; otherwise the call is ``cancelled``.
    """
    event = call.event
    if event is not None and event.status is EventStatus.FAILED:
        error = event.execution.error
        assert isinstance(error, BaseException)
        _record(branch, call, ActionOutcome.FAILED, error=ErrorInfo.from_exception(error))
        return
    if event is not None and not event.status.is_terminal:
        event.status = EventStatus.CANCELLED  # started, but interrupted before invoke() ran
    _record(branch, call, ActionOutcome.CANCELLED, error=interruption(exc))


def interruption(exc: BaseException) -> ErrorInfo:
    """How a call cut short by *exc* is described (a stable text, with no task addresses)."""
    if isinstance(exc, trio.Cancelled):
        return ErrorInfo("Cancelled", "the call was cancelled before it finished")
    name = type(exc).__name__
    return ErrorInfo(name, f"the call was interrupted by {name} before it finished")


async def answer_unanswered(
    branch: Branch,
    proposals: list[Proposal],
    requests: list[ActionRequest],
    exc: BaseException,
) -> None:
    """Record ``cancelled`` for every call of a stopped batch that has no response yet.

    Those are the calls that never started (queued behind a limiter or a throttle, or after
    the failure that stopped a sequential batch). Recorded synchronously, then announced,
    shielded and bounded.
    """
    reason = (
        interruption(exc)
        if not isinstance(exc, Exception)
        else ErrorInfo("NotStarted", f"the batch stopped at an earlier failure: {exc!r}")
    )
    stopped = []
    for proposal, request in zip(proposals, requests, strict=True):
        if request.action_response_id is None:
            call = _Call(proposal, request)
            _record(branch, call, ActionOutcome.CANCELLED, error=reason)
            stopped.append(call)
    if stopped:
        await announce_interrupted(branch, stopped)


async def announce_interrupted(branch: Branch, calls: list[_Call]) -> None:
    """Announce recorded calls while a cancellation is in flight: shielded, but bounded.

    The scope is shielded so the hooks, observer and callbacks can run at all, and its
    deadline (:attr:`Branch.cancel_grace` seconds) keeps the cancellation from being held up
    by a slow one.
    """
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + branch.cancel_grace
        for call in calls:
            await _after_evidence(branch, call)


def _record(
    branch: Branch,
    call: _Call,
    outcome: ActionOutcome,
    *,
    output: Any = None,
    error: ErrorInfo | None = None,
) -> None:
    """Evidence: write the linked pair and, for an invoked call, the log record. Synchronous."""
    response = ActionResponse.create(
        call.request,
        output=output,
        error=error,
        outcome=outcome,
        attempts=call.attempts,
        sender=call.proposal.function,
        recipient=branch.name,
    )
    branch.messages.record_action(call.request, response)
    call.response = response
    event = call.event
    if event is None:
        return
    write_error = branch.log.append(
        ActionLogRecord(
            branch_id=branch.id,
            call_id=call.proposal.call_id,
            function=call.proposal.function,
            request_id=call.request.id,
            response_id=response.id,
            outcome=outcome,
            status=response.content.status,
            attempts=call.attempts,
            event=event,
        )
    )
    if write_error is not None:
        branch.report_failure("event_log", call.proposal.call_id, write_error)


async def _after_evidence(branch: Branch, call: _Call) -> None:
    """Hooks, observer and message callbacks, after the record is complete. Never raises."""
    event, response = call.event, call.response
    assert response is not None
    call_id = call.proposal.call_id
    if event is not None:
        duration = event.execution.duration
        failures = []
        if event.status is EventStatus.COMPLETED:
            if branch.hooks.handlers_for(HookPoint.TOOL_POST):
                failures = await branch.hooks.emit(
                    HookPoint.TOOL_POST,
                    tool_name=call.proposal.function,
                    call_id=call_id,
                    result=summarize(event.response),
                    duration=duration,
                )
        elif branch.hooks.handlers_for(HookPoint.TOOL_ERROR):
            failures = await branch.hooks.emit(
                HookPoint.TOOL_ERROR,
                tool_name=call.proposal.function,
                call_id=call_id,
                error=event.execution.error,
                status=event.status,
                duration=duration,
            )
        for hook_failure in failures:
            branch.report_failure("hook", call_id, hook_failure.error)
        if branch.observer is not None:
            for subscriber_failure in await branch.observer.emit(event):
                branch.report_failure("observer", call_id, subscriber_failure.error)
    for callback_failure in await branch.messages.notify(call.request, response):
        branch.report_failure("message_callback", call_id, callback_failure.error)
    if branch.hooks.handlers_for(HookPoint.MESSAGE_ADD):
        for message in (call.request, response):
            for hook_failure in await branch.hooks.emit(HookPoint.MESSAGE_ADD, message=message):
                branch.report_failure("hook", call_id, hook_failure.error)
