"""``POST /v1/act``: the request body's checks and the handler that runs its tool calls."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._slots import builder
from ..act import Branch, Proposal, read_proposal
from ..conversation import ActionOutcome, ActionRequest, ActionResponse
from ..errors import DuplicateCallError
from ..journal import Journal, canonical_json
from ..journal.workers import load_request
from ._approvals import _awaiting
from ._asgi import (
    ClientGone,
    HTTPError,
    check_declared_size,
    late_body,
    receive_body,
    send_json,
)
from ._config import ServerConfig
from ._conversations import (
    CONVERSATION_ID,
    Conversation,
    Conversations,
    _is_cancellation,
    _journal_refusal,
    tool_message,
)
from ._json import BadJSON, _json_type, _preview, loads

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

STRATEGIES: Final = ("concurrent", "sequential")


@attrs.frozen
class Call:
    """One checked tool call of a request: its id, function and arguments, the envelope act
    gets (its arguments parsed) and what :func:`read_proposal` read from it."""

    call_id: str
    function: str
    arguments: dict[str, Any] | None
    envelope: object
    proposal: Proposal


@attrs.frozen
class ActBody:
    conversation_id: str
    calls: list[Call]
    strategy: str


# Trusted builders (see lionexec._slots): _act_body checked every value, once per request.
_build_call: Final = builder(Call, "call_id", "function", "arguments", "envelope", "proposal")
_build_body: Final = builder(ActBody, "conversation_id", "calls", "strategy")


class ActHandlers(Conversations):
    """``POST /v1/act``: check a request, run its calls (or replay the recorded ones), reply."""

    # -- POST /v1/act -------------------------------------------------------------------------

    async def act(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Read the body, check it, run its calls, reply; 408, 413 and 400 as the module
        says, 504 past ``request_timeout``, nothing if the client leaves.

        The body is read, and the calls run, under one cancel scope: the nursery of the
        disconnect watcher (see :func:`until_disconnect`), whose deadline is
        ``body_timeout`` while the body arrives and ``request_timeout`` once the calls are
        about to run (a cancel scope costs as much as a small call's check).
        """
        config = self.config
        check_declared_size(scope, config.max_body)
        refused: HTTPError | ClientGone | None = None
        request: ActBody | None = None
        outcome: list[ActionResponse] | HTTPError | None = None
        done = gone = False
        async with trio.open_nursery() as nursery:
            cancel = nursery.cancel_scope
            cancel.deadline = trio.current_time() + config.body_timeout
            try:  # (raised in the nursery's body, it would leave wrapped in a group)
                request = _act_body(await receive_body(receive, config.max_body), config)
                conversation = self.conversation(request.conversation_id)
            except (HTTPError, ClientGone) as exc:
                refused = exc
            else:
                # The watcher has a scope of its own, which the request cancels once it is
                # done: the watcher then returns, and the nursery closes with no exception to
                # gather (cancelling the nursery's scope raises Cancelled in both tasks and
                # wraps them in a group, a noticeable part of a small request's CPU).
                watching = trio.CancelScope()

                async def watch() -> None:
                    nonlocal gone
                    with watching:
                        while (await receive())["type"] != "http.disconnect":
                            pass
                        gone = True
                        cancel.cancel()

                nursery.start_soon(watch)
                cancel.deadline = trio.current_time() + config.request_timeout
                conversation.active += 1  # (as _using marks it busy, without a context manager)
                lock = conversation.lock
                try:
                    # A free lock is taken without a schedule point of its own: the calls
                    # that run under it are a checkpoint already (Branch.act is), and a trip
                    # through the scheduler is a noticeable part of a small request's CPU. A
                    # held one is waited for as ``async with`` waits (cancellably, in turn).
                    try:
                        lock.acquire_nowait()
                    except trio.WouldBlock:
                        await lock.acquire()
                    try:
                        # an HTTPError is returned, not raised (raised, it would leave the
                        # nursery wrapped in an exception group)
                        if self.journal is None:
                            outcome = await self._run(conversation, request)
                        else:
                            outcome = await self._run_journaled(conversation, request)
                        done = True
                    finally:
                        lock.release()
                finally:
                    self._used(conversation)
                watching.cancel()
        if refused is not None:
            raise refused
        if request is None:  # the nursery's deadline cut the body short
            raise late_body(config.body_timeout)
        if gone:
            return  # the client is gone
        if not done:  # neither done nor left: the deadline (a cancellation from outside
            raise self._timed_out()  # would have propagated, not reached this line)
        if isinstance(outcome, HTTPError):
            raise outcome
        assert outcome is not None
        # in input order: each response answers the call at its position
        messages = [
            tool_message(response, call.call_id)
            for response, call in zip(outcome, request.calls, strict=True)
        ]
        payload = {"conversation_id": request.conversation_id, "messages": messages}
        await send_json(send, 200, payload)

    def _timed_out(self) -> HTTPError:
        """The 504 of a request that took longer than ``request_timeout``."""
        timeout = self.config.request_timeout
        if self.config.workers:
            return HTTPError(
                504,
                f"the request took longer than request_timeout ({timeout:g} s); its calls stay "
                "queued for the workers: retry with the same tool call ids for their results",
            )
        return HTTPError(
            504,
            f"the request took longer than request_timeout ({timeout:g} s); calls still "
            "running were recorded cancelled",
        )

    async def _run_journaled(
        self, conversation: Conversation, request: ActBody
    ) -> list[ActionResponse] | HTTPError:
        """:meth:`_run` on the conversation's branch as the journal holds it now.

        Under the conversation's lock across replicas (PostgreSQL), the branch is loaded
        from the journal for this request (so it holds what any replica committed) and
        closed, its records committed, before this returns. A journal that refuses a
        commit (a lost connection, a writer that does not take the lock) gets the client a
        503: nothing it did not commit is reported as done.
        """
        try:
            async with self._replica_lock(conversation), self._loaded(conversation):
                return await self._run(conversation, request)
        except BaseException as exc:
            refused = _journal_refusal(exc)
            if refused is None:
                raise
            return HTTPError(503, f"the journal refused this request ({refused}); try again")

    def _replica_lock(self, conversation: Conversation) -> Any:
        return self._replica_lock_of(conversation.branch_id)

    @asynccontextmanager
    async def _loaded(self, conversation: Conversation) -> AsyncIterator[Branch]:
        """The conversation's journaled branch, loaded from the journal (only what was
        committed since its last request here, if its history was kept), running for the
        block (its hooks published while the hub has subscribers); closed at the end, and
        its history kept if the journal holds all of it."""
        journal = self.journal
        assert journal is not None
        branch = await journal.branch(
            conversation.branch_id,
            since=self._take_kept(conversation),
            registry=self.registry,
            policy=self.policy,
            sinks=self.sinks,
        )
        self._swap(conversation, branch)
        try:
            async with branch:
                yield branch
        finally:
            assert conversation.idle is not None
            self._swap(conversation, conversation.idle)
        # (only after a clean close: the next request reads what was committed since)
        self._keep(conversation, journal.committed_history(branch))

    async def _run(
        self, conversation: Conversation, request: ActBody
    ) -> list[ActionResponse] | HTTPError:
        cid, branch = conversation.id, conversation.branch
        calls = request.calls
        recorded = branch.messages.request_for_call_id
        slots: list[ActionResponse | None] = [None] * len(calls)
        fresh: list[int] = []
        for index, call in enumerate(calls):  # every check before anything runs
            previous = recorded(call.call_id)
            if previous is None:
                fresh.append(index)
                continue
            content = previous.content
            if not _same_call(content.function, content.arguments, call):
                return HTTPError(
                    409,
                    f"tool call id {call.call_id!r} is already recorded in this conversation "
                    "with a different function or arguments; use a new id for a new call",
                )
            response = branch.messages.response_for(previous)
            if response is None and self.journal is not None:
                response = await self._parked(branch, previous)
            if response is None:
                return HTTPError(409, f"tool call id {call.call_id!r} has no recorded response")
            slots[index] = response
        cap = self.config.max_history
        if self.journal is not None and fresh and len(branch.messages) + 2 * len(fresh) > cap:
            return HTTPError(
                409,
                f"conversation {cid!r} has {len(branch.messages)} messages; {len(fresh)} new "
                f"calls (a request and a response each) would take it past max_history "
                f"({cap}): start a new conversation",
            )
        if self.config.workers and fresh:
            conflict = await self._check_queued(branch, calls, fresh)
            if conflict is not None:
                return conflict
        hub = self.hub
        if hub.watched:
            hub.publish(
                "act.start", cid, calls=len(calls), strategy=request.strategy,
                replayed=len(calls) - len(fresh),
            )  # fmt: skip
        else:
            hub.publish("act.start", cid)  # nobody listens: only the event id advances
        first_new = len(branch.messages)
        try:
            if len(fresh) == 1 and not self.config.workers:
                # the call read once (see _act_body), not again by act
                call = calls[fresh[0]]
                [slots[fresh[0]]] = await branch._act_read(
                    call.envelope, call.proposal, self.limiter
                )
            else:
                await self._run_fresh(branch, calls, fresh, slots, request.strategy)
        except BaseException as exc:
            if _is_cancellation(exc):
                cancelled = [
                    conversation.call_id(message)
                    for message in branch.messages.messages[first_new:]
                    if isinstance(message, ActionResponse)
                    and message.content.outcome is ActionOutcome.CANCELLED
                ]
                self.hub.publish("act.cancelled", cid, call_ids=cancelled)
            raise
        responses = [r for r in slots if r is not None]
        if self.hub.watched:
            statuses = [
                {"call_id": conversation.call_id(r), "status": r.content.status.value}
                for r in responses
            ]
            self.hub.publish("act.end", cid, results=statuses)
        else:
            self.hub.publish("act.end", cid)  # nobody listens: only the event id advances
        return responses

    async def _run_fresh(
        self,
        branch: Branch,
        calls: list[Call],
        fresh: list[int],
        slots: list[ActionResponse | None],
        strategy: Any,
    ) -> None:
        """Run the calls at the *fresh* indexes, each holding a token of :attr:`limiter`."""
        if not fresh:
            return
        if self.config.workers:
            await self._submit_and_wait(branch, calls, fresh, slots, strategy)
            return
        envelopes = [calls[index].envelope for index in fresh]
        responses = await branch.act(envelopes, strategy=strategy, limiter=self.limiter)
        for index, response in zip(fresh, responses, strict=True):
            slots[index] = response

    async def _parked(self, branch: Branch, request: ActionRequest) -> ActionResponse | None:
        """The ``awaiting_approval`` answer of a call parked for an approval not yet used,
        or ``None`` (a retry while it waits gets the answer its first request got)."""
        assert self.journal is not None
        # The journal looks approvals up by id or by state, not by call: read only the
        # undecided and the unused ones (few), not every approval the branch ever had.
        for state in ("pending", "approved"):
            for approval in await self.journal.approvals(branch.id, state=state):
                if approval.call_id == request.content.call_id:
                    return _awaiting(request, approval, branch)
        return None

    async def _check_queued(
        self, branch: Branch, calls: list[Call], fresh: list[int]
    ) -> HTTPError | None:
        """A 409 if a call id is already queued (by any replica) with another function or
        other arguments; ``None`` otherwise (a queued call is waited for, not run again)."""
        assert self.journal is not None
        wanted = {calls[index].call_id: calls[index] for index in fresh}
        for row in await self.journal.queued(branch.id):
            call = wanted.get(row.call_id)
            if call is None or row.request is None:
                continue
            content = load_request(row.request).content
            if not _same_call(content.function, content.arguments, call):
                return HTTPError(
                    409,
                    f"tool call id {call.call_id!r} is already queued in this conversation "
                    "with a different function or arguments; use a new id for a new call",
                )
        return None

    async def _submit_and_wait(
        self,
        branch: Branch,
        calls: list[Call],
        fresh: list[int],
        slots: list[ActionResponse | None],
        strategy: Any,
    ) -> None:
        """Queue the *fresh* calls for the workers (those not queued yet) and wait for their
        responses, which are recorded in *branch*'s history (and committed) as they come.

        ``sequential``: one call at a time, each submitted once the previous one is answered.
        """
        assert self.journal is not None
        journal = self.journal
        queued = {row.call_id for row in await journal.queued(branch.id)}
        groups = [[index] for index in fresh] if strategy == "sequential" else [fresh]
        for group in groups:
            new = [calls[index].envelope for index in group if calls[index].call_id not in queued]
            await _submit(journal, branch.id, new)
            ids = [calls[index].call_id for index in group]
            responses = await journal.wait(ids, branch_id=branch.id, into=branch)
            for index, response in zip(group, responses, strict=True):
                slots[index] = response


async def _submit(journal: Journal, branch_id: uuid.UUID, envelopes: list[object]) -> None:
    """Queue *envelopes*; one another replica queued meanwhile is left as it is."""
    if not envelopes:
        return
    try:
        await journal.submit(branch_id, envelopes)
    except DuplicateCallError:  # all or nothing: queue the others one by one
        for envelope in envelopes:
            with suppress(DuplicateCallError):
                await journal.submit(branch_id, [envelope])


def _act_body(body: bytes, config: ServerConfig) -> ActBody:
    """Check a ``POST /v1/act`` body; raise a 400 naming the first problem."""
    try:
        data = loads(body, max_depth=config.max_json_depth)
    except BadJSON as exc:
        raise HTTPError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise HTTPError(400, f"body must be a JSON object, got {_json_type(data)}")
    if "conversation_id" not in data:
        raise HTTPError(400, "missing conversation_id")
    conversation_id = data["conversation_id"]
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.fullmatch(conversation_id):
        raise HTTPError(
            400,
            "conversation_id must be a string of 1-128 letters, digits or ._~:- characters, "
            f"got {_preview(conversation_id)}",
        )
    if "tool_calls" not in data:
        raise HTTPError(400, "missing tool_calls")
    tool_calls = data["tool_calls"]
    if not isinstance(tool_calls, list):
        raise HTTPError(400, f"tool_calls must be a list, got {_json_type(tool_calls)}")
    if len(tool_calls) > config.max_calls:
        raise HTTPError(
            400,
            f"at most max_calls ({config.max_calls}) tool calls per request, "
            f"got {len(tool_calls)}",
        )
    strategy = data.get("strategy", "concurrent")
    if strategy not in STRATEGIES:
        raise HTTPError(
            400, f"strategy must be 'concurrent' or 'sequential', got {_preview(strategy)}"
        )
    if not tool_calls:  # (it would create an empty conversation)
        raise HTTPError(400, "tool_calls is empty: a request runs at least one tool call")
    calls: list[Call] = []
    seen: set[str] = set()
    for index, tool_call in enumerate(tool_calls):
        envelope = _parsed_arguments(tool_call, index, config)
        # Branch.act reads every call before running any and raises ValueError for one it
        # cannot read; reading them here first gives the same message without creating the
        # conversation.
        try:
            proposal = read_proposal(envelope)
        except ValueError as exc:
            raise HTTPError(400, f"tool_calls[{index}]: {exc}") from None
        if proposal.call_id in seen:
            raise HTTPError(
                400, f"tool_calls[{index}]: call id {proposal.call_id!r} appears twice"
            )
        seen.add(proposal.call_id)
        calls.append(
            _build_call(
                proposal.call_id, proposal.function, proposal.arguments, envelope, proposal
            )
        )
    return _build_body(conversation_id, calls, strategy)


def _parsed_arguments(tool_call: object, index: int, config: ServerConfig) -> object:
    """*tool_call* with its ``arguments`` string parsed under the body's limits.

    A string that breaks a limit is a 400; one that is simply not JSON is left for
    ``Branch.act`` to record as an ``invalid`` call. Act gets the parsed object, so it never
    parses model text with looser rules than these.
    """
    slot = _arguments_slot(tool_call)
    if slot is None:
        return tool_call
    holder, key = slot
    assert isinstance(tool_call, dict)  # _arguments_slot finds slots in objects only
    raw = holder.get(key)
    if not isinstance(raw, str) or not raw.strip():
        return tool_call
    where = f"tool_calls[{index}] arguments"
    try:
        parsed = loads(raw, max_depth=config.max_json_depth, what=where)
    except BadJSON as exc:
        if exc.hostile:
            raise HTTPError(400, str(exc)) from None
        return tool_call
    if holder is not tool_call:
        return {**tool_call, "function": {**holder, key: parsed}}
    return {**tool_call, key: parsed}


def _arguments_slot(tool_call: object) -> tuple[dict[str, Any], str] | None:
    """``(holder, key)`` of the arguments :func:`read_proposal` reads from *tool_call*, in
    its order of shapes: Chat ``function.arguments``, Anthropic ``tool_use`` ``input``,
    Responses ``function_call`` ``arguments``, or a plain ``{"function", "arguments"}``."""
    if not isinstance(tool_call, dict):
        return None
    kind = tool_call.get("type")
    spec = tool_call.get("function")
    if kind == "function" and isinstance(spec, dict):
        return spec, "arguments"
    if kind == "tool_use":
        return tool_call, "input"
    if kind == "function_call" or ("function" in tool_call and "arguments" in tool_call):
        return tool_call, "arguments"
    return None


def _same_call(function: str, arguments: dict[str, Any], call: Call) -> bool:
    """Whether a recorded request is *call* again: the same function, and arguments equal as
    JSON (``false`` is not ``0``, nor ``1.0`` ``1``), not merely as Python values."""
    return function == call.function and canonical_json(arguments) == canonical_json(
        call.arguments or {}
    )
