"""The Branch: a conversation that can act, with every call governed and recorded."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs
import trio

from lionexec.conversation import ActionResponse, MessageManager
from lionexec.errors import ConfigurationError
from lionexec.governance import HookBus, PermissionPolicy, SessionObserver
from lionexec.tools import ActionManager, Tool

from .alcall import AlcallParams, fan_out
from .envelope import Proposal, read_proposal
from .log import EventLog, ReportedFailure
from .transaction import answer_unanswered, new_request, run_call

__all__ = ["Branch", "Strategy"]

logger = logging.getLogger("lionexec.act")

Strategy = Literal["concurrent", "sequential"]
_STRATEGIES = ("concurrent", "sequential")


@attrs.define(eq=False)
class Branch:
    """A conversation branch: history, tools, governance and an event log.

    Attributes:
        id: this branch's id (it appears in every call context and log record).
        messages: the conversation history.
        registry: the tools this branch may call.
        hooks: the hook bus (``tool.pre`` may deny; ``tool.post``/``tool.error`` observe).
        observer: the session observer whose gate authorizes each call, or ``None``.
        policy: the permission policy, or ``None`` to allow every call the gate allows.
        log: the event log (in memory; :meth:`with_log_file` adds a JSONL file sink).
        failures: failures of observers, non-blocking hooks, message callbacks and the log
            sink, reported here (and to the ``lionexec.act`` logger) instead of being raised.
        cancel_grace: seconds the announcements of calls recorded ``cancelled`` may take
            (hooks, observer, callbacks run shielded, within this bound) before the
            cancellation propagates.
    """

    id: uuid.UUID = attrs.field(factory=uuid.uuid4, on_setattr=attrs.setters.frozen)
    messages: MessageManager = attrs.field(factory=MessageManager)
    registry: ActionManager = attrs.field(factory=ActionManager)
    hooks: HookBus = attrs.field(factory=HookBus)
    observer: SessionObserver | None = None
    policy: PermissionPolicy | None = None
    log: EventLog = attrs.field(factory=EventLog)
    cancel_grace: float = 1.0
    failures: list[ReportedFailure] = attrs.field(factory=list, init=False)
    #: ``str(id)``, computed once: every message and call context of this branch names it.
    name: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.name = str(self.id)

    @classmethod
    def with_log_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> Branch:
        """A branch whose event log is also appended to the JSONL file at *path*."""
        return cls(log=EventLog(path), **kwargs)

    def register_tools(
        self,
        tools: Tool | Callable[..., Any] | Iterable[Tool | Callable[..., Any]],
        *,
        update: bool = False,
    ) -> None:
        """Register one tool or callable, or several. See :meth:`ActionManager.register_tools`."""
        if isinstance(tools, Tool) or callable(tools):
            self.registry.register_tool(tools, update=update)
        else:
            self.registry.register_tools(tools, update=update)

    def report_failure(self, where: str, call_id: str | None, error: BaseException) -> None:
        """Keep and log a failure that must not escape (see :attr:`failures`)."""
        logger.error("%s failed for call %s: %r", where, call_id, error)
        self.failures.append(ReportedFailure(where=where, call_id=call_id, error=error))

    async def act(
        self,
        action_request: object,
        *,
        strategy: Strategy = "concurrent",
        verbose_action: bool = False,
        suppress_errors: bool = True,
        call_params: AlcallParams | None = None,
    ) -> list[ActionResponse]:
        """Run proposed tool calls and return their recorded responses, in input order.

        *action_request* is one proposal or a list of them: an
        :class:`~lionexec.conversation.ActionRequest`, a mapping with ``function`` and
        ``arguments``, an OpenAI ``tool_calls`` item, an Anthropic ``tool_use`` block, or an
        object with ``function`` and ``arguments`` attributes. Every proposal is read before
        anything runs; a shape that cannot be read raises :class:`ValueError` and nothing is
        recorded.

        The requests are added to :attr:`messages` in proposal order before any call runs;
        each call ends with exactly one linked response, written together with its event-log
        record the moment its outcome is known, whose outcome is
        completed, failed, denied, invalid, timed_out or cancelled. Denied and invalid calls
        are values, whatever *suppress_errors* says. With ``suppress_errors=False`` a failed
        call's original exception is raised after the history is written; in a concurrent
        batch that cancels the calls still running (each is recorded ``cancelled``) unless
        ``call_params.return_exceptions`` keeps the exception in its slot instead.

        Cancellation: every call not yet answered is recorded ``cancelled`` synchronously,
        then ``trio.Cancelled`` propagates.
        """
        if strategy not in _STRATEGIES:
            raise ConfigurationError(
                f"strategy must be 'concurrent' or 'sequential', got {strategy!r}"
            )
        envelopes = action_request if isinstance(action_request, list) else [action_request]
        proposals = [read_proposal(envelope) for envelope in envelopes]
        if not proposals:
            return []
        _check_requests(proposals)
        params = call_params or AlcallParams()
        requests = [new_request(self, proposal) for proposal in proposals]
        for request in requests:  # proposal order; each response is linked as its call ends
            self.messages.add_message(request)

        async def one(index: int, proposal: Proposal) -> ActionResponse:
            return await run_call(
                self,
                proposal,
                requests[index],
                params=params,
                suppress_errors=suppress_errors,
                verbose=verbose_action,
            )

        try:
            if strategy == "sequential":
                results: Sequence[ActionResponse | Exception] = await self._sequential(
                    one, proposals, params
                )
            else:
                results = await fan_out(
                    one,
                    proposals,
                    max_concurrent=params.max_concurrent,
                    throttle_period=params.throttle_period,
                    return_exceptions=params.return_exceptions,
                )
        except BaseException as exc:
            await answer_unanswered(self, proposals, requests, exc)
            raise
        return list(results)  # type: ignore[arg-type]

    async def _sequential(
        self, one: Any, proposals: list[Proposal], params: AlcallParams
    ) -> list[ActionResponse | Exception]:
        results: list[ActionResponse | Exception] = []
        for index, proposal in enumerate(proposals):
            if index and params.throttle_period:
                await trio.sleep(params.throttle_period)
            try:
                results.append(await one(index, proposal))
            except Exception as exc:
                if not params.return_exceptions:
                    raise
                results.append(exc)
        return results


def _check_requests(proposals: list[Proposal]) -> None:
    """Refuse, before anything runs, requests that could not get exactly one new response."""
    seen: set[uuid.UUID] = set()
    for proposal in proposals:
        request = proposal.request
        if request is None:
            continue
        if request.action_response_id is not None:
            raise ValueError(
                f"action request {request.id} ({request.function}) is already answered by "
                f"response {request.action_response_id}; propose the call again instead"
            )
        if request.id in seen:
            raise ValueError(f"action request {request.id} appears twice in one batch")
        seen.add(request.id)
