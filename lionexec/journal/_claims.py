"""Claims of approvals: the single transactions a resume takes a branch's decided approvals
with, and recovery gives back those whose calls never started (see
:mod:`lionexec.journal._approvals`). Store-level: each function runs inside one
transaction (``journal.run``).
"""

from __future__ import annotations

import attrs

from lionexec._jsonable import utf8_text
from lionexec.conversation import ActionOutcome, ActionRequest, ActionResponse, ErrorInfo

from ._history import load_history, message_body
from ._keys import stored_json
from .backends._sql import lock_branches
from .backends.base import (
    APPROVED,
    EXPIRED,
    REJECTED,
    USED,
    ApprovalRow,
    Batch,
    MessageRow,
    Store,
)

__all__ = [
    "Claim",
    "answer_denied",
    "claim_branch",
    "denial",
    "outcomes",
    "release_unstarted",
    "unuse",
    "unuse_unstarted",
    "use",
]


@attrs.frozen
class Claim:
    """What one resume of a branch took (:func:`claim_branch`): the approved calls it runs (their
    approvals now ``used``), the rejected or expired calls it answers in the branch (one open
    here), those the claim answered itself, and the calls another resumer holds or has
    answered (with that answer's outcome, if there is one yet)."""

    run: list[ApprovalRow]
    deny: list[ApprovalRow]
    denied: list[ApprovalRow]
    elsewhere: list[tuple[ApprovalRow, str | None]]


def claim_branch(
    store: Store,
    branch_id: str,
    call_ids: frozenset[str],
    runnable: bool,
    live: bool,
    now: float,
) -> Claim:
    """Claim branch *branch_id*'s decided approvals of *call_ids* for one resume (one
    transaction; see the module docs).

    The branch is held while any of its ``used`` approvals has an unanswered call: a resume
    in another process (or journal object) runs it, and a second writer of the branch would
    be refused at its first commit. Nothing is taken then. Otherwise every ``approved`` one
    whose call is unanswered moves to ``used`` (with *runnable*: this resume has the tools),
    and the unanswered rejected or expired ones are answered ``denied``: in this very
    transaction (so that two resumes never both answer one), or, for a branch *live* in this
    journal, by the resume through the branch.
    """
    if getattr(store, "bulk", False):  # PostgreSQL: claims of one branch take turns
        lock_branches(store.tx, [branch_id])  # type: ignore[attr-defined]
    rows = store.approvals(branch_id, None)
    answered = store.known_call_ids(branch_id, [row.call_id for row in rows], answered=True)
    mine = [row for row in rows if row.call_id in call_ids]
    held = any(row.state == USED and row.call_id not in answered for row in rows)
    run: list[ApprovalRow] = []
    deny: list[ApprovalRow] = []
    elsewhere: list[ApprovalRow] = []
    for row in mine:
        if row.call_id in answered:
            if row.state != APPROVED:  # resumed (and answered) by another since this one looked
                elsewhere.append(row)
        elif held:
            elsewhere.append(row)
        elif row.state == APPROVED and runnable:
            if use(store, row, now) is not None:
                run.append(row)
        elif row.state in (REJECTED, EXPIRED):
            deny.append(row)
    denied = [] if live or not deny else answer_denied(store, branch_id, deny, now)
    found = outcomes(store, branch_id, elsewhere) if elsewhere else {}
    return Claim(
        run,
        deny if live else [],
        denied,
        [(row, found.get(row.call_id)) for row in elsewhere],
    )


def denial(request: ActionRequest, row: ApprovalRow, branch_id: str) -> ActionResponse:
    """The ``denied`` response of a call whose approval was rejected or expired."""
    if row.state == REJECTED:
        error = ErrorInfo(
            "ApprovalRejected",
            f"approval {row.approval_id} was rejected"
            + (f" by {row.decided_by}" if row.decided_by else "")
            + (f": {row.reason}" if row.reason else ""),
        )
    else:
        error = ErrorInfo(
            "ApprovalExpired",
            f"approval {row.approval_id} expired before it was decided ({row.escalation})",
        )
    return ActionResponse.create(
        request,
        error=error,
        outcome=ActionOutcome.DENIED,
        attempts=0,
        sender=request.function,
        recipient=branch_id,
    )


def answer_denied(
    store: Store, branch_id: str, rows: list[ApprovalRow], now: float
) -> list[ApprovalRow]:
    """Append the ``denied`` response of each of *rows* (unanswered) to the stored history of
    branch *branch_id*, in this transaction; return those answered."""
    stored = store.messages(branch_id)
    history = load_history(branch_id, stored)
    answered = []
    for row in rows:
        request = history.request_for_call_id(row.call_id)
        if request is not None and history.response_for(request) is None:
            history.record_action(request, denial(request, row, branch_id))
            answered.append(row)
    batch = Batch()
    for seq, message in enumerate(history.appended_since(len(stored)), start=len(stored)):
        message_id = str(message.id)
        call_id = None
        if isinstance(message, ActionResponse):
            request_id = message.content.action_request_id
            asked = history[request_id] if request_id is not None else None
            if isinstance(asked, ActionRequest):
                call_id = utf8_text(asked.content.call_id)
        batch.messages.append(
            MessageRow(
                branch_id,
                seq,
                message_id,
                message.kind,
                message_body(message, message_id),
                call_id,
            )
        )
    if batch:
        store.commit(batch)
    return answered


def outcomes(store: Store, branch_id: str, rows: list[ApprovalRow]) -> dict[str, str]:
    """The outcomes the journal holds for the calls of *rows* (by call id; a call not answered
    yet has none): from their call rows, else (a call answered without running, ``denied``)
    from their response messages."""
    wanted = {row.call_id for row in rows}
    found = {
        call.call_id: call.outcome
        for call in store.calls(branch_id, False)
        if call.call_id in wanted and call.outcome is not None
    }
    if wanted - found.keys():
        for message in store.messages(branch_id):
            if message.kind == "action_response" and message.call_id in wanted - found.keys():
                record = stored_json(message.body, f"message {message.seq} of {branch_id}")
                content = record.get("content") if isinstance(record, dict) else None
                value = content.get("outcome") if isinstance(content, dict) else None
                if isinstance(value, str) and value in ActionOutcome._value2member_map_:
                    found[message.call_id] = value
    return found


def use(store: Store, approval: ApprovalRow, now: float) -> ApprovalRow | None:
    return store.set_approval(
        approval.approval_id, APPROVED, USED, now, approval.decided_by, approval.reason
    )


def unuse(store: Store, approval: ApprovalRow, now: float) -> ApprovalRow | None:
    return store.set_approval(
        approval.approval_id, USED, APPROVED, now, approval.decided_by, approval.reason
    )


def unuse_unstarted(store: Store, approval: ApprovalRow, now: float) -> ApprovalRow | None:
    """:func:`unuse` *approval* unless its call reached its write-ahead (it has a call row:
    it may have run, so its approval stays used and recovery judges it by effect class)."""
    if any(call.call_id == approval.call_id for call in store.calls(approval.branch_id, False)):
        return None
    return unuse(store, approval, now)


def release_unstarted(store: Store) -> int:
    """Give back (``used`` → ``approved``) every claim whose call never started: unanswered,
    and never reached its write-ahead (no call row). Run by recovery, which runs when no
    other process runs calls: such a claim's resume died before its run began. Returns how
    many were given back."""
    by_branch: dict[str, list[ApprovalRow]] = {}
    for row in store.approvals(None, USED):
        by_branch.setdefault(row.branch_id, []).append(row)
    released = 0
    for branch_id, rows in by_branch.items():
        answered = store.known_call_ids(branch_id, [row.call_id for row in rows], answered=True)
        started = {call.call_id for call in store.calls(branch_id, False)}
        for row in rows:
            if row.call_id not in answered and row.call_id not in started:
                at = row.decided_at if row.decided_at is not None else row.created_at
                released += unuse(store, row, at) is not None
    return released
