"""The loop that joins a model to :meth:`Branch.act`: ask, record the turn, run its tool calls
under governance, send the results back, until the model answers without tool calls.

Needs the ``http`` extra (``httpx``).
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Final, Literal, TypeAlias, cast

import attrs
import trio

from lionexec._extras import missing_extra

try:
    import httpx
except ModuleNotFoundError as exc:  # (the http extra)
    raise missing_extra(exc, "http", "lionexec.models (the agent loop)") from exc

from lionexec.act import AlcallParams, Branch, RetryPolicy, Strategy, read_proposal
from lionexec.conversation import (
    ActionOutcome,
    ActionResponse,
    AssistantResponse,
    Instruction,
    MessageManager,
    System,
    new_call_id,
)
from lionexec.conversation.formats import provider_format
from lionexec.engine import EventStatus, Processor
from lionexec.errors import ConfigurationError
from lionexec.limits import RateLimiter

from ._call import (
    Endpoint,
    ModelCall,
    build_payload,
    close_client,
    open_client,
    text_delta,
)
from ._errors import MalformedResponseError, ModelError
from ._response import ModelResponse

__all__ = [
    "LoopResult",
    "Model",
    "ModelCallObserver",
    "RunEvent",
    "StopReason",
    "TextDelta",
    "ToolCallsProposed",
    "ToolResult",
    "TurnCompleted",
    "run",
    "run_stream",
]

#: The shape the loop takes the branch's tools in: Chat Completions tools, which
#: :func:`build_payload` converts for the endpoint's API.
_TOOL_SCHEMA: Final = provider_format("chat").tool_schema

StopReason = Literal["answered", "max_turns", "length", "content_filter", "awaiting_approval"]


#: Called once per model call a :class:`Model` made, when the caller's wait for it ended:
#: ``observer(call, context)``, with the :class:`ModelCall` (its status, response or error as
#: they stand then) and a copy of the caller's :mod:`contextvars` context taken as the call was
#: made (a tracing span the caller had current). Synchronous, on the trio thread: it must not
#: block (hand slow work to a thread). An exception it raises is logged, never raised into the
#: caller, and changes nothing of the call.
ModelCallObserver: TypeAlias = Callable[[ModelCall, contextvars.Context], None]

_log = logging.getLogger("lionexec.models")


def _new_params() -> dict[str, Any]:
    return {}


def _observers(value: Sequence[ModelCallObserver]) -> tuple[ModelCallObserver, ...]:
    observers = tuple(value)
    for observer in observers:
        if not callable(observer):
            raise ConfigurationError(
                f"a model call observer must be callable(call, context), not {observer!r}"
            )
    return observers


@attrs.define(kw_only=True)
class Model:
    """A chat model behind an OpenAI-compatible endpoint, and how its calls are run.

    **One HTTP client.** Every call of a model goes through one ``httpx.AsyncClient``, so
    connections are pooled (and HTTP/2 is used where the server offers it and ``h2`` is
    installed): the given :attr:`client`, used as it is and never closed by lionexec, or, by
    default, one the model opens at its first call and closes in :meth:`aclose` (use the
    model as ``async with Model(...) as model:``). Under trio, an opened client belongs to
    the ``trio.run`` it was opened in: close the model before that run ends, and do not use
    it from another run (a closed model opens a new client at its next call).

    Attributes:
        endpoint: where requests go (:class:`Endpoint`).
        name: the model name sent in each request.
        params: other request parameters (``temperature``, ``max_tokens``, ...).
        client: an ``httpx.AsyncClient`` shared by the calls, used as it is (``None``: the
            model opens its own, see above).
        processor: a running processor (typically a
            :class:`~lionexec.models.RateLimitedProcessor`) to enqueue non-streamed calls on;
            its :meth:`~lionexec.engine.Processor.execute` service must be running. ``None``
            invokes each call directly.
        limiter: a rate limiter for calls made without the processor (streamed ones, or all
            when there is no processor). Calls enqueued on a ``RateLimitedProcessor`` use its
            limiter.
        observers: :data:`ModelCallObserver` callables told of every call :meth:`complete`
            and the loop (:func:`run`, :func:`run_stream`) make, once each call's caller
            stopped waiting for it (completed, failed or cancelled), e.g.
            :meth:`lionexec.otel.OtelSink.observe_model_call`.
        retry: when a call is sent again after a ``5xx`` or a connection error
            (a :class:`~lionexec.act.RetryPolicy`; each attempt is in the call's
            ``attempt_log``); ``None``: never.
        deadline: seconds for each call as a whole, retries included (see
            :class:`ModelCall`), or ``None``.
    """

    endpoint: Endpoint
    name: str
    params: dict[str, Any] = attrs.field(factory=_new_params)
    client: httpx.AsyncClient | None = None
    processor: Processor | None = None
    limiter: RateLimiter | None = None
    observers: tuple[ModelCallObserver, ...] = attrs.field(default=(), converter=_observers)
    retry: RetryPolicy | None = None
    deadline: float | None = None
    _own_client: httpx.AsyncClient | None = attrs.field(default=None, init=False, repr=False)

    def http_client(self) -> httpx.AsyncClient:
        """The client this model's calls use: :attr:`client`, or the model's own (opened
        now if it is not open: see the class docstring). Does not block."""
        if self.client is not None:
            return self.client
        if self._own_client is None or self._own_client.is_closed:
            self._own_client = open_client(self.endpoint)
        return self._own_client

    async def aclose(self) -> None:
        """Close the client the model opened (a given :attr:`client` is left open).

        Blocks while the pooled connections close (bounded and shielded: cancellation does
        not leave them open). Calling it again does nothing; a later call opens a new client.
        """
        own, self._own_client = self._own_client, None
        if own is not None:
            await close_client(own)

    async def __aenter__(self) -> Model:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def call(
        self,
        messages: Sequence[Mapping[str, Any]] | MessageManager,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        streaming: bool = False,
    ) -> ModelCall:
        """A pending :class:`ModelCall` for *messages* and *tools* (OpenAI chat format).

        *messages* is a history (exported for the endpoint's API by its own exports) or
        OpenAI chat messages (converted); see :func:`~lionexec.models.build_payload`.
        """
        payload = build_payload(self.endpoint.api, self.name, messages, tools=tools, **self.params)
        return ModelCall(
            endpoint=self.endpoint,
            payload=payload,
            client=self.http_client(),
            limiter=self.limiter,
            retry=self.retry,
            deadline=self.deadline,
            streaming=streaming,
        )

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]] | MessageManager,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> ModelResponse:
        """Send one request and return the response, through :attr:`processor` if set.

        *messages* as for :meth:`call`.

        Raises the error the call captured (:class:`~lionexec.models.ProviderError`, ...).
        Cancellation: a call still waiting in the processor's queue is marked ``cancelled`` (it
        will not be sent); one already running is cancelled with the processor's scope only.
        """
        call = self.call(messages, tools=tools)
        context = contextvars.copy_context() if self.observers else None
        processor = self.processor
        try:
            if processor is None:
                await call.invoke()
            else:
                try:
                    await processor.enqueue(call)
                    await call.wait_completed()
                except BaseException:
                    if call.execution.status is EventStatus.PENDING:
                        call.status = EventStatus.CANCELLED
                    raise
        finally:
            if context is not None:
                self._observed(call, context)
        return _result(call)

    def _observed(self, call: ModelCall, context: contextvars.Context) -> None:
        """Tell the observers of *call*; synchronous, never raises (failures are logged)."""
        for observer in self.observers:
            try:
                observer(call, context)
            except Exception:
                _log.exception("model call observer %r raised; the call is unchanged", observer)


def _result(call: ModelCall) -> ModelResponse:
    if call.execution.status is EventStatus.COMPLETED and isinstance(
        call.execution.response, ModelResponse
    ):
        return call.execution.response
    error = call.execution.error
    if isinstance(error, BaseExceptionGroup):
        error = error.exceptions[-1]
    if isinstance(error, Exception):
        raise error
    raise ModelError(f"model call {call.id} ended {call.execution.status.value}")


# -- what the loop reports ----------------------------------------------------------------------


@attrs.frozen
class TextDelta:
    """Assistant text as it streams in."""

    text: str


@attrs.frozen
class ToolCallsProposed:
    """The model proposed tool calls (OpenAI ``tool_calls`` items, as sent); they are about to
    be recorded and run."""

    index: int
    calls: tuple[dict[str, Any], ...]


@attrs.frozen
class ToolResult:
    """One call's recorded response."""

    response: ActionResponse


@attrs.frozen
class TurnCompleted:
    """A model turn finished (its tool calls, if any, have all been answered)."""

    index: int
    response: ModelResponse


@attrs.frozen
class LoopResult:
    """How a loop ended.

    Attributes:
        text: the last assistant text.
        stop_reason: ``"answered"`` (a turn without tool calls), ``"max_turns"`` (the limit
            was reached; the last turn's calls were run and answered but not sent back),
            ``"length"`` or ``"content_filter"`` (the model stopped for that reason),
            ``"awaiting_approval"`` (a call of the last turn was parked for a durable
            approval: its request waits unanswered, and the model is not asked again until
            the approval is decided and the call resumed).
        turns: model turns taken.
        responses: every model response, in order.
    """

    text: str
    stop_reason: StopReason
    turns: int
    responses: tuple[ModelResponse, ...]


RunEvent = TextDelta | ToolCallsProposed | ToolResult | TurnCompleted | LoopResult


# -- the loop -----------------------------------------------------------------------------------


async def run(
    branch: Branch,
    model: Model,
    instruction: str | None = None,
    *,
    system: str | None = None,
    max_turns: int = 10,
    strategy: Strategy = "concurrent",
    call_params: AlcallParams | None = None,
    run_id: str | None = None,
) -> LoopResult:
    """Run *model* on *branch* until it answers without tool calls, *max_turns* is reached, or
    a call is parked for a durable approval (``stop_reason`` ``"awaiting_approval"``).

    Records *system* (when the history has no system message yet) and *instruction* (a user
    turn), then repeats: send the history with the branch's tools (exported for the endpoint's
    API: ``to_openai()``, ``to_responses()`` or ``to_anthropic()``); record
    the whole assistant turn (its text and its tool calls, as an
    :class:`~lionexec.conversation.AssistantResponse` with linked requests); run the calls
    through :meth:`Branch.act` with all its governance (a call naming no registered tool, or
    with arguments that are not a JSON object, is answered ``invalid``); send the results back.

    **Durable runs.** On a journaled branch every model reply is held by the journal before
    the loop acts on it or returns it, as tool requests are: the instruction (and *system*)
    before the first model call, a turn with its tool calls before they run, the final answer
    before it is returned (:meth:`Branch.flush`). Give *run_id* (any text naming this run,
    unique on the branch) and the same call, made again after the process died (with the
    journal recovered: ``journal.recover(tools)``), continues the run instead of starting
    another: the instruction is not recorded again, turns already answered are not asked of
    the model again, and the loop goes on at the first unanswered turn; a run that already
    finished returns its recorded answer without calling the model, and one whose call is
    parked for an approval returns ``"awaiting_approval"`` again. A resumed run's
    :attr:`LoopResult.turns` counts every turn of the run, its ``responses`` only the model
    responses of this call. A run ended by ``"length"`` or ``"content_filter"`` is recorded
    as its last turn's text, and returned again as ``"answered"``. Continuing a run another
    instruction has followed on the branch, or passing a different instruction under the same
    *run_id*, is a :class:`~lionexec.errors.ConfigurationError`.

    Raises what a failed model call captured (:class:`~lionexec.models.ProviderError`,
    :class:`~lionexec.models.MalformedResponseError`, ...); nothing of that turn is recorded.
    Cancellation at any point leaves the history consistent: a turn is recorded only with its
    requests, and :meth:`Branch.act` answers every request (``cancelled``) before
    ``trio.Cancelled`` propagates.
    """
    result: LoopResult | None = None
    async with aclosing(
        _loop(branch, model, instruction, system, max_turns, strategy, call_params, run_id, False)
    ) as events:
        async for event in events:
            if isinstance(event, LoopResult):
                result = event
    assert result is not None
    return result


async def run_stream(
    branch: Branch,
    model: Model,
    instruction: str | None = None,
    *,
    system: str | None = None,
    max_turns: int = 10,
    strategy: Strategy = "concurrent",
    call_params: AlcallParams | None = None,
    run_id: str | None = None,
) -> AsyncGenerator[RunEvent, None]:
    """:func:`run`, streamed: yields :class:`TextDelta` as text arrives, then for a turn with
    tool calls :class:`ToolCallsProposed` and one :class:`ToolResult` per call, then
    :class:`TurnCompleted`; the last item is the :class:`LoopResult` (the only item, for a
    *run_id* whose run already ended).

    Model calls are streamed directly (under :attr:`Model.limiter`, not the processor).
    Use it with ``contextlib.aclosing``; closing it early is a cancellation for the history
    (every recorded request is answered).
    """
    async with aclosing(
        _loop(branch, model, instruction, system, max_turns, strategy, call_params, run_id, True)
    ) as events:
        async for event in events:
            yield event


async def _loop(
    branch: Branch,
    model: Model,
    instruction: str | None,
    system: str | None,
    max_turns: int,
    strategy: Strategy,
    call_params: AlcallParams | None,
    run_id: str | None,
    stream: bool,
) -> AsyncGenerator[RunEvent, None]:
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        await trio.lowlevel.checkpoint()
        raise ConfigurationError(f"max_turns must be an integer >= 1, got {max_turns!r}")
    history = branch.messages
    first = 0  # the first turn to ask the model for
    recorded = None if run_id is None else _recorded_run(branch, run_id, instruction)
    if recorded is not None:
        first, latest, unanswered = recorded
        ended: StopReason | None = None
        if latest is not None and not latest.tool_calls:
            ended = "answered"
        elif unanswered:
            ended = "awaiting_approval"
        elif first >= max_turns:
            ended = "max_turns"
        if ended is not None:
            await trio.lowlevel.checkpoint()
            yield LoopResult(latest.content if latest is not None else "", ended, first, ())
            return
    else:
        if system is not None and not any(isinstance(m, System) for m in history):
            history.add_message(System(content=system, recipient=branch.name))
        if instruction is not None:
            history.add_message(
                Instruction(content=instruction, recipient=branch.name)
                if run_id is None
                else Instruction(
                    id=_run_message_id(branch, run_id), content=instruction, recipient=branch.name
                )
            )
            await branch.flush()  # held before the model hears of it
    responses: list[ModelResponse] = []
    for index in range(first, max_turns):
        tools = branch.registry.schemas(_TOOL_SCHEMA)
        if stream:
            call = model.call(history, tools=tools, streaming=True)
            context = contextvars.copy_context() if model.observers else None
            try:
                # Closed (the call cancelled, its connection dropped) if this generator is.
                body = cast(AsyncGenerator[Any, None], call.stream())
                async with aclosing(body) as chunks:
                    async for chunk in chunks:
                        delta = text_delta(chunk)
                        if delta:
                            yield TextDelta(delta)
            finally:
                if context is not None:
                    model._observed(call, context)
            response = _result(call)
        else:
            response = await model.complete(history, tools=tools)
        responses.append(response)
        if not response.tool_calls:
            history.add_message(
                AssistantResponse(content=response.text, sender=model.name, recipient=branch.name)
            )
            await branch.flush()  # the answer is held before anyone is given it
            yield TurnCompleted(index, response)
            reason: StopReason = (
                "answered"
                if response.finish_reason in ("stop", "tool_calls")
                else response.finish_reason  # type: ignore[assignment]
            )
            yield LoopResult(response.text, reason, index + 1, tuple(responses))
            return
        yield ToolCallsProposed(index, response.tool_calls)
        # act() records the turn with all its requests in one step, before it checkpoints.
        turn = await _turn_message(branch, response)
        results = await branch.act(turn, strategy=strategy, call_params=call_params)
        parked = False
        for item in results:
            if isinstance(item, ActionResponse):
                parked = parked or item.outcome is ActionOutcome.AWAITING_APPROVAL
                yield ToolResult(item)
        yield TurnCompleted(index, response)
        if parked:  # a request waits unanswered: the model must not be asked to go on
            yield LoopResult(response.text, "awaiting_approval", index + 1, tuple(responses))
            return
    last = responses[-1]
    yield LoopResult(last.text, "max_turns", max_turns, tuple(responses))


def _run_message_id(branch: Branch, run_id: str) -> uuid.UUID:
    """The message id of the instruction that starts run *run_id* on *branch*."""
    if not isinstance(run_id, str) or not run_id:
        raise ConfigurationError(f"run_id must be a non-empty string, got {run_id!r}")
    return uuid.uuid5(branch.id, run_id)


def _recorded_run(
    branch: Branch, run_id: str, instruction: str | None
) -> tuple[int, AssistantResponse | None, bool] | None:
    """What *branch*'s history holds of run *run_id*: its model turns so far, the last of
    them, and whether a request of that turn is unanswered (parked for an approval); ``None``
    when the run has not started (its instruction is not recorded)."""
    marker = _run_message_id(branch, run_id)
    history = branch.messages
    if marker not in history:
        if instruction is None:
            raise ConfigurationError(
                f"run {run_id!r} is not recorded on branch {branch.name}: "
                "pass its instruction to start it"
            )
        return None
    started = history[marker]
    if not isinstance(started, Instruction) or (
        instruction is not None and started.content != instruction
    ):
        raise ConfigurationError(
            f"run {run_id!r} of branch {branch.name} was started with another instruction: "
            "give each run an id of its own"
        )
    messages = history.messages
    start = next(i for i, message in enumerate(messages) if message is started)
    turns, last, followed = 0, None, False
    for message in messages[start + 1 :]:
        if isinstance(message, Instruction):
            followed = True
            break
        if isinstance(message, AssistantResponse):
            turns, last = turns + 1, message
    if followed and (last is None or last.tool_calls):
        raise ConfigurationError(
            f"run {run_id!r} of branch {branch.name} ended unanswered and another instruction "
            "followed it: it cannot be continued (start a new run)"
        )
    unanswered = last is not None and any(  # (a request retain= trimmed was answered)
        request_id in history and history.response_for(request_id) is None
        for request_id in last.tool_calls
    )
    return turns, last, unanswered


async def _turn_message(branch: Branch, response: ModelResponse) -> dict[str, Any]:
    """The turn as an OpenAI assistant message for :meth:`Branch.act`, which records it.

    Every tool call gets the call id act() will record: a model's id, unless the history
    already holds it (on a journaled branch that ``retain=`` trimmed, the journal's history:
    one read) or the turn repeats it (a model may send anything; act() would refuse the whole
    turn), then a fresh one. A call that cannot be read at all (no function name) is a
    :class:`MalformedResponseError`; arguments that are not a JSON object are left for act()
    to answer ``invalid``.
    """
    used = {request.call_id for request in branch.messages.requests()}
    read: list[str] = []
    for item in response.tool_calls:
        try:
            read.append(read_proposal(item).call_id)
        except ValueError as exc:
            raise MalformedResponseError(
                f"the model proposed a tool call that cannot be read: {exc}", body=repr(item)
            ) from None
    used.update(await branch._trimmed_call_ids(read))
    calls: list[dict[str, Any]] = []
    for item, call_id in zip(response.tool_calls, read, strict=True):
        if call_id in used:
            call_id = new_call_id()
        used.add(call_id)
        calls.append({**item, "id": call_id})
    return {"role": "assistant", "content": response.text, "tool_calls": calls}
