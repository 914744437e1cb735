"""Approvals over HTTP: list the parked calls, decide one, resume it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

import trio

from .._jsonable import is_unicode
from ..act import Branch
from ..conversation import ActionOutcome, ActionRequest, ActionResponse, ErrorInfo
from ..governance import PermissionPolicy
from ..journal import Approval, ApprovalClosed, ApprovalNotFound, Journal, JournalError
from ._asgi import HTTPError, send_json
from ._config import ServerConfig
from ._conversations import (
    CONVERSATION_ID,
    Conversation,
    Conversations,
    _is_cancellation,
    _journal_refusal,
    branch_id_of,
    tool_message,
)
from ._json import BadJSON, _json_type, _preview, loads

if TYPE_CHECKING:
    from hypercorn.typing import ASGISendCallable

#: What an approval id in a URL may be (the journal's are ``apr_`` + 32 hex digits).
APPROVAL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The state an approval is in once a decision (``approve``/``reject``) has been made.
DECIDED: Final = {"approve": "approved", "reject": "rejected"}


def approval_policy(approve: Iterable[str], tools: Iterable[str]) -> PermissionPolicy:
    """A policy that escalates every call of the *approve* tools and allows the others."""
    escalate = set(approve)
    return PermissionPolicy(
        mode="rules",
        allow={name: ["*"] for name in tools if name not in escalate},
        escalate={name: ["*"] for name in sorted(escalate)},
    )


def _awaiting(request: ActionRequest, approval: Approval, branch: Branch) -> ActionResponse:
    """The (unrecorded) answer for a call still waiting for *approval*: the one act gave
    when it parked the call, word for word (the policy's ``escalate`` reason, then
    ``; awaiting approval <id>``, as :class:`~lionexec.governance.PermissionPolicy` words
    it; ``tests/examples`` checks that a retry's answer equals the first)."""
    return ActionResponse.create(
        request,
        output={"approval_id": approval.approval_id, "expires_at": approval.expires_at},
        error=ErrorInfo(
            "AwaitingApproval", f"{approval.escalation}; awaiting approval {approval.approval_id}"
        ),
        outcome=ActionOutcome.AWAITING_APPROVAL,
        attempts=0,
        sender=request.content.function,
        recipient=branch.name,
    )


def _approval_record(approval: Approval, conversation_id: str | None) -> dict[str, Any]:
    return {
        "approval_id": approval.approval_id,
        "conversation_id": conversation_id,
        "call_id": approval.call_id,
        "function": approval.function,
        "arguments": approval.arguments,
        "state": approval.state,
        "escalation": approval.escalation,
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "decided_by": approval.decided_by,
        "reason": approval.reason,
    }


class ApprovalHandlers(Conversations):
    """``GET /v1/approvals`` and ``POST /v1/approvals/{id}``: list, decide and resume
    the calls parked for a person's approval."""

    def _journal(self) -> Journal:
        if self.journal is None:
            raise HTTPError(404, "approvals need a journal (start the server with one)")
        return self.journal

    async def pending_approvals(self, query: dict[str, list[str]], send: ASGISendCallable) -> None:
        """``GET /v1/approvals[?conversation_id=...]``: the pending approvals, oldest first."""
        journal = self._journal()
        conversation_id = query.get("conversation_id", [None])[-1]
        branch_id = None
        if conversation_id is not None:
            if not CONVERSATION_ID.fullmatch(conversation_id):
                raise HTTPError(400, f"no such conversation id {conversation_id[:40]!r}")
            branch_id = branch_id_of(conversation_id)
        try:
            approvals = await journal.approvals(branch_id, state="pending")
        except JournalError as exc:
            raise HTTPError(
                503, f"the journal could not list approvals ({exc}); try again"
            ) from None
        names = {c.branch_id: c.id for c in self.conversations.values()}
        records = [
            _approval_record(a, names.get(uuid.UUID(a.branch_id), conversation_id))
            for a in approvals
        ]
        await send_json(send, 200, {"approvals": records})

    async def decide(self, approval_id: str, body: bytes, send: ASGISendCallable) -> None:
        """``POST /v1/approvals/{id}``: approve (or reject) a parked call, then run it.

        Body (optional; empty means approve): ``{"decision": "approve" | "reject",
        "reason": str (required to reject), "by": str}``; then :meth:`settle`, whose result
        is the reply.
        """
        decision, reason, by = _decision_body(body, self.config)
        await send_json(send, 200, await self.settle(approval_id, decision, reason, by))

    async def settle(
        self, approval_id: str, decision: str, reason: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Decide approval *approval_id* (``"approve"``, or ``"reject"`` with a *reason*) as
        *by*, then resume its call; what ``POST /v1/approvals/{id}`` replies.

        The decision is one compare-and-set in the journal (an approval is decided once:
        :class:`HTTPError` 409 after that, except that the same decision again, approving an
        ``approved`` one or rejecting a ``rejected`` one, finishes resuming it); then,
        holding the conversation like a request does, the call is resumed: an approved call
        runs once through the whole transaction, a rejected one is answered ``denied`` with
        the reason. Returns ``{"approval": {...}, "message": <the call's tool message>}``;
        :class:`HTTPError` 504 after ``request_timeout`` (the decision stands), 404 for an
        unknown approval, 503 when the journal fails. The console's decisions come here too.
        """
        journal = self._journal()
        if not APPROVAL_ID.fullmatch(approval_id):
            raise HTTPError(404, f"no approval {approval_id[:80]!r}")
        if decision not in DECIDED:
            raise HTTPError(
                400, f"decision must be 'approve' or 'reject', got {_preview(decision)}"
            )
        if decision == "reject" and not reason:
            raise HTTPError(400, "a rejection needs a reason")
        try:
            approval = await journal.approval(approval_id)
            # The same decision again (a retry after a 504) goes straight to resuming.
            if approval.state != DECIDED[decision]:
                if decision == "approve":
                    approval = await journal.approve(approval_id, by=by)
                else:
                    approval = await journal.reject(approval_id, reason=reason or "", by=by)
        except ApprovalNotFound:
            raise HTTPError(404, f"no approval {approval_id[:80]!r}") from None
        except ApprovalClosed as exc:
            raise HTTPError(409, str(exc)) from None
        except JournalError as exc:  # decided after all? the same decision again resumes it
            raise HTTPError(503, f"the journal refused the decision ({exc}); try again") from None
        branch_id = uuid.UUID(approval.branch_id)
        timeout = self.config.request_timeout
        with trio.move_on_after(timeout) as scope:
            message = await self._resume(branch_id, approval)
        if scope.cancelled_caught:
            raise HTTPError(504, await self._unfinished(approval_id, approval))
        try:
            approval = await journal.approval(approval_id)  # used, once its call ran
        except JournalError as exc:
            raise HTTPError(
                503,
                f"the call was resumed, but the journal could not be read back ({exc}); its "
                "conversation's history has its answer",
            ) from None
        names = {c.branch_id: c.id for c in self.conversations.values()}
        return {"approval": _approval_record(approval, names.get(branch_id)), "message": message}

    async def _unfinished(self, approval_id: str, approval: Approval) -> str:
        """What a 504 of ``POST /v1/approvals/{id}`` says: what became of the call, as the
        journal holds it now."""
        assert self.journal is not None
        late = f"within request_timeout ({self.config.request_timeout:g} s)"
        with suppress(JournalError):  # then say what was known before
            approval = await self.journal.approval(approval_id)
        if approval.state == "used":
            return (
                f"approval {approval_id} was approved and used: its call started, but it did "
                f"not finish {late} and was cancelled (it is not run again)"
            )
        return (
            f"approval {approval_id} is {approval.state}, but its call was not resumed "
            f"{late}; POST the same decision again to finish resuming it"
        )

    async def _resume(self, branch_id: uuid.UUID, approval: Approval) -> dict[str, Any] | None:
        """Resume the decided calls of branch *branch_id* under its locks, holding a token
        of :attr:`limiter` (as any call does); the tool message of *approval*'s call
        (``None`` if it has no answer yet). Its events are published like a request's
        when this server knows the conversation (it served it since it started)."""
        assert self.journal is not None
        journal = self.journal
        lock = self._lock_for(branch_id)
        known = (c for c in self.conversations.values() if c.branch_id == branch_id)
        conversation = next(known, None)
        call_id = approval.call_id
        try:
            async with lock, self._replica_lock_of(branch_id):
                kept = None if conversation is None else self._take_kept(conversation)
                branch = await journal.branch(
                    branch_id,
                    since=kept,
                    registry=self.registry,
                    policy=self.policy,
                    sinks=self.sinks,
                )
                with self._resuming(conversation, branch) as publish:
                    async with branch, self.limiter:
                        publish("act.start", calls=1, strategy="concurrent", replayed=0)
                        first_new = len(branch.messages)
                        try:
                            await journal.resume(
                                self.registry,
                                only_branch=branch_id,
                                policy=self.policy,
                                sinks=self.sinks,
                            )
                        except BaseException as exc:
                            if _is_cancellation(exc):
                                cancelled = any(
                                    isinstance(message, ActionResponse)
                                    and message.content.outcome is ActionOutcome.CANCELLED
                                    for message in branch.messages.messages[first_new:]
                                )
                                publish("act.cancelled", call_ids=[call_id] if cancelled else [])
                            raise
                    if conversation is not None:  # (as a request keeps it: see _loaded)
                        self._keep(conversation, journal.committed_history(branch))
                    request = branch.messages.request_for_call_id(call_id)
                    response = branch.messages.response_for(request) if request else None
                    status = None if response is None else response.content.status.value
                    publish("act.end", results=[{"call_id": call_id, "status": status}])
        except BaseException as exc:
            refused = _journal_refusal(exc)
            if refused is None:
                raise
            raise HTTPError(503, f"the journal refused to resume the call ({refused})") from None
        finally:
            idle = not lock.locked() and not lock.statistics().tasks_waiting
            if idle and not any(c.branch_id == branch_id for c in self.conversations.values()):
                self._locks.pop(branch_id, None)
        return None if response is None else tool_message(response, call_id)

    @contextmanager
    def _resuming(
        self, conversation: Conversation | None, branch: Branch
    ) -> Iterator[Callable[..., None]]:
        """Make *branch* the conversation's for the block (its hook and message events
        published while anyone listens; busy, so never evicted meanwhile); yields what
        publishes the request-level events (nothing, for a conversation not known here)."""
        if conversation is None or conversation.idle is None:
            yield lambda *_, **__: None
            return
        cid = conversation.id
        with self._using(conversation):
            self._swap(conversation, branch)
            try:
                yield lambda kind, **data: self.hub.publish(kind, cid, **data)
            finally:
                self._swap(conversation, conversation.idle)


def _decision_body(body: bytes, config: ServerConfig) -> tuple[str, str | None, str | None]:
    """``(decision, reason, by)`` of a ``POST /v1/approvals/{id}`` body; a 400 if bad."""
    if not body.strip():
        return "approve", None, None
    try:
        data = loads(body, max_depth=config.max_json_depth)
    except BadJSON as exc:
        raise HTTPError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise HTTPError(400, f"body must be a JSON object, got {_json_type(data)}")
    unknown = set(data) - {"decision", "reason", "by"}
    if unknown:
        raise HTTPError(400, f"unknown fields: {', '.join(map(repr, sorted(unknown)))[:200]}")
    decision = data.get("decision", "approve")
    if decision not in ("approve", "reject"):
        raise HTTPError(400, f"decision must be 'approve' or 'reject', got {_preview(decision)}")
    reason, by = data.get("reason"), data.get("by")
    for name, value in (("reason", reason), ("by", by)):
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 1000):
            raise HTTPError(400, f"{name} must be a string of 1-1000 characters")
        if value is not None and not is_unicode(value):
            raise HTTPError(400, f"{name} must be valid Unicode (no lone surrogates)")
    if decision == "reject" and reason is None:
        raise HTTPError(400, "a rejection needs a reason")
    return decision, reason, by
