"""Durable approvals: an ``escalate`` decision that waits in the journal, holding no task.

A journaled branch whose :class:`~lionexec.governance.PermissionPolicy` has no escalation
handler of its own gets one from the journal (:class:`ApprovalGate`, installed by
:meth:`Journal.branch <lionexec.journal.Journal.branch>` and :meth:`Journal.approving
<lionexec.journal.Journal.approving>`). When the policy escalates a call, the gate

* **parks** it, if the call has no approval yet: one group commit writes the branch's history
  (the request included) and a ``pending`` approval bound to the call (branch, call id), the
  digest of its normalized, validated arguments (``canonical_json``) and the digest of the
  policy that asked (its :meth:`~lionexec.governance.PermissionPolicy.to_dict`, the tool and
  the matching rule, with the tool's :attr:`~lionexec.tools.Tool.approval_binding` if it has
  one: a sandboxed command tool's profile, see :mod:`lionexec.sandbox`). ``act()`` answers
  the call with an unrecorded response of outcome ``awaiting_approval`` naming the
  approval; the request stays unanswered in the history;
* **allows** it, if its approval was consumed for this very call here (``approved`` →
  ``used``: claimed by a resume, or one compare-and-set statement) and the digests match;
* **refuses** it otherwise (:class:`~lionexec.journal.ApprovalClosed` naming the approval and
  its state; the call is ``denied`` with that reason).

An approval's states::

    pending ──approve──▶ approved ──resume (compare and set)──▶ used
       │
       ├──reject──▶ rejected    ─┐
       └──expires_at──▶ expired ─┴─ resume records ``denied`` (exactly once)

Deciding (:meth:`Journal.approve`, :meth:`Journal.reject`) changes only the approval's row:
any process or machine on the same database may do it. **Resuming**
(:meth:`Journal.resume`, also run by :meth:`Journal.recover`) claims a branch's decided
approvals in one transaction (:func:`~lionexec.journal._claims.claim_branch`): nothing while
another resume holds the branch (one of its ``used`` approvals has an unanswered call), else
its ``approved`` ones move to ``used``, and its ``rejected`` or ``expired`` ones are answered
``denied`` with the reason (in that transaction). The claimed calls are proposed again to
their branch (the whole transaction: validation, gate, policy, hooks). So resumes in any
number of processes or journal objects run each call once; one that took nothing reports its
calls ``resumed_elsewhere``. A claim whose run did not start is given back (``approved``
again): at once by the resume that fails, or by recovery after it died
(:func:`~lionexec.journal._claims.release_unstarted`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from lionexec._failures import call_user
from lionexec._jsonable import is_unicode, utf8_text
from lionexec.conversation import ActionOutcome, ActionRequest
from lionexec.governance import (
    AwaitingApproval,
    CallContext,
    EscalationHandler,
    PermissionDecision,
    PermissionPolicy,
)
from lionexec.tools import ActionManager, Tool

from ._claims import claim_branch, denial, unuse_unstarted
from ._commit import CommitEngine
from ._keys import (
    branch_uuid,
    canonical_json,
    cut,
    digest,
    policy_digest,
    storable_key,
    stored_json,
)
from ._report import Resolution, as_journal_error, registry_of
from .backends.base import (
    APPROVAL_STATES,
    APPROVED,
    EXPIRED,
    PENDING,
    REJECTED,
    USED,
    ApprovalRow,
    Store,
)
from .errors import ApprovalClosed, ApprovalError, ApprovalNotFound, JournalError

if TYPE_CHECKING:
    from lionexec.act import Branch

__all__ = ["Approval", "ApprovalDesk", "ApprovalGate", "BranchOpener"]

#: Approvals consumed in this process and not yet presented to the policy, at most.
_MEMO = 4096


@attrs.frozen(kw_only=True)
class Approval:
    """A durable approval (see the module docs).

    Attributes:
        approval_id: its id (``"apr_"`` + 32 hex digits).
        branch_id: the branch of the call it is bound to.
        call_id: the call's tool-call id.
        function: the tool.
        arguments: the normalized, validated arguments it approves (exactly these).
        state: ``pending``, ``approved``, ``used``, ``rejected`` or ``expired``.
        expires_at: when a pending approval expires (``journal.clock()`` seconds), or
            ``None`` for never.
        created_at: when the call was parked.
        escalation: why the policy asked (its decision's reason).
        rule: the policy rule that escalated, if one did.
        policy: the digest of the policy that asked (with the tool and the rule).
        digest: the digest of the arguments.
        idempotency_key: the call's idempotency key.
        decided_at: when it was approved, rejected or expired, if it was.
        decided_by: who approved or rejected it (as given).
        reason: why it was rejected (as given).
    """

    approval_id: str
    branch_id: str
    call_id: str
    function: str
    arguments: Any
    state: str
    expires_at: float | None
    created_at: float
    escalation: str
    rule: str | None
    policy: str
    digest: str
    idempotency_key: str
    decided_at: float | None
    decided_by: str | None
    reason: str | None

    @classmethod
    def from_row(cls, row: ApprovalRow) -> Approval:
        return cls(
            approval_id=row.approval_id,
            branch_id=row.branch_id,
            call_id=row.call_id,
            function=row.function,
            arguments=stored_json(row.arguments, f"arguments of approval {row.approval_id!r}"),
            state=row.state,
            expires_at=row.expires_at,
            created_at=row.created_at,
            escalation=row.escalation,
            rule=row.rule,
            policy=row.policy,
            digest=row.digest,
            idempotency_key=row.idempotency_key,
            decided_at=row.decided_at,
            decided_by=row.decided_by,
            reason=row.reason,
        )


def check_state(state: str | None) -> None:
    if state is not None and state not in APPROVAL_STATES:
        raise ValueError(
            f"an approval state is one of {', '.join(APPROVAL_STATES)}, not {state!r}"
        )


def closed(row: ApprovalRow, why: str = "") -> ApprovalClosed:
    detail = f" ({row.reason})" if row.state == REJECTED and row.reason else ""
    return ApprovalClosed(
        f"approval {row.approval_id} (call {row.call_id!r} of branch {row.branch_id}) is "
        f"{row.state}{detail}{why}",
        approval_id=row.approval_id,
        state=row.state,
    )


def decide(
    store: Store, approval_id: str, state: str, now: float, by: str | None, reason: str | None
) -> tuple[ApprovalRow | None, ApprovalRow | None]:
    """Move a pending approval to *state* (one transaction): ``(found, after)``.

    A pending approval past its ``expires_at`` moves to ``expired`` instead. *after* is
    ``None`` when the approval was not pending (nothing changed).
    """
    row = store.approval(approval_id)
    if row is None or row.state != PENDING:
        return row, None
    if row.expires_at is not None and row.expires_at <= now:
        state, by, reason = EXPIRED, None, None
    after = store.set_approval(approval_id, PENDING, state, now, by, reason)
    if after is None:  # decided meanwhile by another transaction (PostgreSQL, READ COMMITTED)
        return store.approval(approval_id), None
    return row, after


def plausible_id(approval_id: object) -> bool:
    """Whether *approval_id* could name an approval: text every backend can look up (a
    string that is not empty, encodes as UTF-8 and holds no NUL character)."""
    return (
        isinstance(approval_id, str)
        and bool(approval_id)
        and is_unicode(approval_id)
        and "\x00" not in approval_id
    )


def not_found(approval_id: object) -> ApprovalNotFound:
    shown = cut(ascii(approval_id) if isinstance(approval_id, str) else repr(approval_id), 80)
    return ApprovalNotFound(
        f"no approval has the id {shown}", approval_id=utf8_text(str(approval_id))
    )


def storable_text(name: str, text: str | None) -> str | None:
    """*text* (who decided, or why) as an approval keeps it: UTF-8 (a lone surrogate becomes
    U+FFFD); a NUL character, which PostgreSQL cannot store, is refused (in every backend)."""
    if text is None:
        return None
    if "\x00" in text:
        raise ValueError(f"{name} must not hold a NUL character, got {cut(ascii(text), 80)}")
    return utf8_text(text)


async def decide_or_raise(
    desk: ApprovalDesk, approval_id: str, state: str, by: str | None, reason: str | None
) -> Approval:
    if not plausible_id(approval_id):
        await trio.lowlevel.checkpoint()
        raise not_found(approval_id)
    if by is not None and not isinstance(by, str):
        raise TypeError(f"by must be a string or None, not {type(by).__name__}")
    by, reason = storable_text("by", by), storable_text("reason", reason)
    now = desk.clock()
    found, after = await desk.engine.run(
        lambda store: decide(store, approval_id, state, now, by, reason), cancellable=False
    )
    if found is None:
        raise not_found(approval_id)
    if after is None:
        raise closed(found)
    if after.state != state:
        raise closed(after, f": it expired at {after.expires_at} before it was {state}")
    return Approval.from_row(after)


# -- the approvals of one journal ---------------------------------------------------------------


class BranchOpener(Protocol):
    """Opens a journaled branch of the journal the approvals are kept in
    (:meth:`Journal.branch <lionexec.journal.Journal.branch>`)."""

    def __call__(
        self, branch_id: uuid.UUID | str | None = None, **kwargs: Any
    ) -> Awaitable[Branch]: ...


class ApprovalDesk:
    """The approvals of one journal: their settings, the approvals consumed in this process,
    the resumes running. The journal owns one and delegates its approval methods to it.

    Args:
        engine: the journal's commit engine (its connection and open branches).
        open_branch: opens a branch of the journal (to resume its approved calls).

    Attributes:
        clock: the clock approvals are dated by (``time.time``; tests may set another).
        consumed_here: approvals consumed (``used``) in this process for a call about to run
            here.
        resuming: branches being resumed here (:meth:`resume`): a lock each, and how many
            hold or wait for it.
    """

    def __init__(self, engine: CommitEngine, open_branch: BranchOpener) -> None:
        self.engine = engine
        self.open_branch = open_branch
        self.clock: Callable[[], float] = time.time
        self._expiry: float | None = 86_400.0
        self.consumed_here: OrderedDict[str, None] = OrderedDict()
        self.resuming: dict[str, tuple[trio.Lock, list[int]]] = {}

    @property
    def expiry(self) -> float | None:
        """Seconds a parked call's approval stays pending before it expires (``None``:
        never); a number >= 0 (``0``: at once), else ``ValueError``. Default one day."""
        return self._expiry

    @expiry.setter
    def expiry(self, seconds: float | None) -> None:
        if seconds is not None:
            try:
                valid = not isinstance(seconds, bool) and isinstance(seconds, int | float)
                value = float(seconds) if valid else math.nan
            except OverflowError:  # (an int past a float's range)
                value = math.inf
            if not 0 <= value < math.inf:
                shown = (
                    f"an int of {seconds.bit_length()} bits"
                    if isinstance(seconds, int) and seconds.bit_length() > 256
                    else repr(seconds)[:80]
                )
                raise ValueError(
                    f"approval_expiry must be a finite number of seconds >= 0 or None, not {shown}"
                )
            seconds = value
        self._expiry = seconds

    def approving(self, policy: PermissionPolicy) -> PermissionPolicy:
        """*policy* (an equal copy) whose escalations these approvals settle (see
        :meth:`Journal.approving <lionexec.journal.Journal.approving>`)."""
        handler = policy.on_escalate
        if isinstance(handler, ApprovalGate) and handler.desk is self:
            return policy
        if isinstance(handler, ApprovalGate):
            handler = handler.fallback
        return attrs.evolve(policy, on_escalate=ApprovalGate(self, policy, handler))

    async def listing(
        self, branch_id: uuid.UUID | str | None, state: str | None
    ) -> list[Approval]:
        """The approvals (of one branch, or all) in *state*, oldest first; expired ones
        marked first."""
        check_state(state)
        name = None if branch_id is None else str(branch_uuid(branch_id))
        now = self.clock()

        def listing(store: Store) -> list[ApprovalRow]:
            store.expire_approvals(now)
            return store.approvals(name, state)

        return [Approval.from_row(row) for row in await self.engine.run(listing)]

    async def get(self, approval_id: str) -> Approval:
        """The approval *approval_id*; raises :class:`~lionexec.journal.ApprovalNotFound`."""
        if not plausible_id(approval_id):
            await trio.lowlevel.checkpoint()
            raise not_found(approval_id)
        row = await self.engine.run(lambda store: store.approval(approval_id))
        if row is None:
            raise not_found(approval_id)
        return Approval.from_row(row)

    async def approve(self, approval_id: str, by: str | None) -> Approval:
        """Approve a pending approval (one compare-and-set transaction); return it."""
        return await decide_or_raise(self, approval_id, APPROVED, by, None)

    async def reject(self, approval_id: str, reason: str, by: str | None) -> Approval:
        """Reject a pending approval with *reason*; return it."""
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string, not {reason!r}")
        return await decide_or_raise(self, approval_id, REJECTED, by, reason)

    async def resume(
        self,
        tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None,
        *,
        only_branch: uuid.UUID | str | None = None,
        **branch_kwargs: Any,
    ) -> list[Resolution]:
        """Apply every decided approval whose call is still unanswered (see
        :meth:`Journal.resume <lionexec.journal.Journal.resume>`)."""
        only = None if only_branch is None else str(branch_uuid(only_branch))
        return await apply_decided(self, tools, only_branch=only, **branch_kwargs)


# -- the escalation handler ---------------------------------------------------------------------


class ApprovalGate:
    """The escalation handler that turns ``escalate`` into a durable approval (module docs).

    Args:
        desk: the approvals of the journal they are kept in.
        policy: the policy it settles escalations for (its identity is part of each approval).
        fallback: the policy's own handler, if it had one: it settles calls that have no
            approval (nothing is parked then).
    """

    def __init__(
        self, desk: ApprovalDesk, policy: PermissionPolicy, fallback: EscalationHandler | None
    ) -> None:
        self.desk = desk
        self.policy = policy
        self.fallback = fallback

    def __repr__(self) -> str:
        return f"<ApprovalGate {self.desk.engine.target}>"

    async def __call__(self, decision: PermissionDecision, ctx: CallContext) -> object:
        """Allow (``True``), park (:class:`~lionexec.governance.AwaitingApproval`) or raise
        :class:`~lionexec.journal.ApprovalClosed` (the policy denies then, naming it)."""
        desk = self.desk
        branch_id, call_id = ctx.branch_id, ctx.call_id
        if branch_id is None:
            raise ApprovalError(
                f"call {call_id!r} runs in no branch: it cannot wait for an approval",
                approval_id="",
            )
        arguments = canonical_json(ctx.arguments)
        args_digest = digest(arguments)
        policy = policy_digest(self.policy, decision, ctx.tool)
        now = desk.clock()

        def look(store: Store) -> tuple[ApprovalRow | None, bool]:
            store.expire_approvals(now)
            row = store.approval_of(branch_id, call_id)
            if (
                row is not None
                and row.state == APPROVED
                and row.digest == args_digest
                and row.policy == policy
            ):
                used = store.set_approval(
                    row.approval_id, APPROVED, USED, now, row.decided_by, row.reason
                )
                if used is None:  # used meanwhile by another transaction: say so
                    return store.approval_of(branch_id, call_id), False
                return row, True
            return row, False

        row, consumed = await desk.engine.run(look, cancellable=False)
        if consumed:
            assert row is not None
            desk.consumed_here[row.approval_id] = None
            _bound(desk.consumed_here)
            return True
        if row is None:
            if self.fallback is not None:
                return await call_user(self.fallback, decision, ctx)
            return await self._park(decision, ctx, arguments, args_digest, policy, now)
        if row.digest != args_digest:
            raise closed(
                row, f"; it approves other arguments than the call passes ({cut(arguments)})"
            )
        if row.policy != policy:
            raise closed(
                row,
                "; it was asked by another policy or rule, or for the tool under another "
                "approval binding (a sandboxed tool's profile changed, say)",
            )
        if row.state == USED and row.approval_id in desk.consumed_here:
            return (
                True  # consumed for this call here (by resume), or asked again after a transform
            )
        if row.state == PENDING:
            return AwaitingApproval(row.approval_id, row.expires_at)
        raise closed(row)

    async def _park(
        self,
        decision: PermissionDecision,
        ctx: CallContext,
        arguments: str,
        args_digest: str,
        policy: str,
        now: float,
    ) -> AwaitingApproval:
        desk = self.desk
        engine = desk.engine
        branch_id, call_id = ctx.branch_id, ctx.call_id
        assert branch_id is not None
        sink = engine.live_sink(branch_id)
        request = sink.history.request_for_call_id(call_id) if sink is not None else None
        if sink is None or request is None:
            raise JournalError(
                f"call {call_id!r} of branch {branch_id} is not in a branch open in "
                f"{engine.name}: only a journaled branch can park a call for approval"
            )
        expiry = desk.expiry
        row = ApprovalRow(
            approval_id="apr_" + uuid.uuid4().hex,
            idempotency_key=storable_key(
                ctx.idempotency_key or f"{branch_id}/{call_id}", call_id, ctx.function
            ),
            branch_id=branch_id,
            call_id=utf8_text(call_id),
            request_id=str(request.id),
            function=utf8_text(ctx.function),
            arguments=arguments,
            digest=args_digest,
            policy=policy,
            rule=decision.matched_rule,
            escalation=decision.reason,
            state=PENDING,
            created_at=now,
            expires_at=None if expiry is None else now + expiry,
            decided_at=None,
            decided_by=None,
            reason=None,
        )
        # One group commit, shielded (bounded: the commit in flight and this one): a call is
        # parked wholly or not at all; a cancellation arriving meanwhile takes effect after it,
        # and the call stays parked (it is not also answered ``cancelled``).
        with trio.CancelScope(shield=True):
            await engine.commit(sink, None, approval=row)
            # The call parked at once by another task (or process) keeps its approval (the
            # insert does nothing then): name the stored one.
            stored = await engine.run(
                lambda store: store.approval_of(branch_id, row.call_id), cancellable=False
            )
        if stored is not None:
            row = stored
        return AwaitingApproval(row.approval_id, row.expires_at)


def _bound(memo: OrderedDict[str, None]) -> None:
    while len(memo) > _MEMO:
        memo.popitem(last=False)


# -- resuming -----------------------------------------------------------------------------------


async def apply_decided(
    desk: ApprovalDesk,
    tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None,
    *,
    only_branch: str | None = None,
    **branch_kwargs: Any,
) -> list[Resolution]:
    """Apply every decided approval whose call is still unanswered (see the module docs);
    with *only_branch*, only that branch's."""
    registry = registry_of(tools)
    now = desk.clock()

    def decided(store: Store) -> list[ApprovalRow]:
        """The decided approvals whose calls are unanswered (a rejected or expired one stays
        so once its call was answered ``denied``: it is not listed again)."""
        store.expire_approvals(now)
        rows = [
            row for state in (APPROVED, REJECTED, EXPIRED) for row in store.approvals(None, state)
        ]
        by_branch: dict[str, list[str]] = {}
        for row in rows:
            by_branch.setdefault(row.branch_id, []).append(row.call_id)
        answered = {
            (branch_id, call_id)
            for branch_id, call_ids in by_branch.items()
            for call_id in store.known_call_ids(branch_id, call_ids, answered=True)
        }
        rows = [row for row in rows if (row.branch_id, row.call_id) not in answered]
        return sorted(rows, key=lambda row: (row.created_at, row.approval_id))

    rows = await desk.engine.run(decided)
    if only_branch is not None:
        rows = [row for row in rows if row.branch_id == only_branch]
    by_branch: dict[str, list[ApprovalRow]] = {}
    for row in rows:
        by_branch.setdefault(row.branch_id, []).append(row)
    resolutions: list[Resolution] = []
    for branch_id, approvals in by_branch.items():
        entry = desk.resuming.get(branch_id)
        if entry is not None and entry[0].locked() and (desk, branch_id) in _resumed_here.get():
            # A tool run by a resume of this branch resumes again (or a task it started,
            # which inherited the context, while that resume runs): that resume waits for
            # the tool, so waiting for it would never end. It is left to that one (what it did
            # not take, a later resume applies).
            continue
        # One resume of a branch at a time in this journal: two at once would both open
        # (and enter) the one branch object the journal holds, or use it while the other
        # leaves it. (Resumes in other journals or processes are kept out by the claim.)
        async with _resuming(desk, branch_id):
            resolutions += await _resume_one(desk, registry, branch_id, approvals, branch_kwargs)
    if not rows:
        await trio.lowlevel.checkpoint()
    return resolutions


async def _resume_one(
    desk: ApprovalDesk,
    registry: ActionManager | None,
    branch_id: str,
    approvals: list[ApprovalRow],
    branch_kwargs: dict[str, Any],
) -> list[Resolution]:
    """Claim and apply *approvals* (decided ones of branch *branch_id*); report each."""
    sink = desk.engine.live_sink(branch_id)
    live = sink is not None and sink.branch is not None
    calls = frozenset(row.call_id for row in approvals)
    claim = await desk.engine.run(
        partial(
            claim_branch,
            branch_id=branch_id,
            call_ids=calls,
            runnable=live or registry is not None,
            live=live,
            now=desk.clock(),
        ),
        cancellable=False,
    )
    resolutions = [
        _reported(registry, row, row.state, ActionOutcome.DENIED) for row in claim.denied
    ]
    resolutions += [
        _reported(registry, row, "resumed_elsewhere", outcome) for row, outcome in claim.elsewhere
    ]
    if not claim.run and not claim.deny:
        return resolutions
    branch: Branch | None = None
    try:
        if live:
            assert sink is not None and sink.branch is not None
            branch = sink.branch
            resolutions += await _resume_branch(desk, branch, claim.run, claim.deny)
        else:
            kwargs = dict(branch_kwargs)
            if registry is not None:
                kwargs["registry"] = registry
            branch = await desk.open_branch(branch_id, **kwargs)
            async with branch:
                resolutions += await _resume_branch(desk, branch, claim.run, claim.deny)
    except BaseException as exc:
        # The claims of calls that did not run here are given back (approved again), so that
        # a later resume runs them; those answered here stay used.
        history = None if branch is None else branch.messages
        unrun = [row for row in claim.run if history is None or _unanswered(history, row)]
        if unrun:
            await _approve_again(desk, unrun)
        if isinstance(exc, BaseExceptionGroup):  # the branch failed to commit as it closed
            error = as_journal_error(exc)
            if error is not None:
                raise error from exc
        raise
    return resolutions


def _reported(
    registry: ActionManager | None, row: ApprovalRow, action: Any, outcome: str | None
) -> Resolution:
    """The resolution of a call not run by this resume (its effect class from *registry*)."""
    known = registry is not None and row.function in registry
    return Resolution(
        branch_id=row.branch_id,
        call_id=row.call_id,
        function=row.function,
        effect=registry.get(row.function).effect if registry is not None and known else "unsafe",
        action=action,
        outcome=None if outcome is None else ActionOutcome(outcome),
        attempts=0,
    )


#: The branches (a journal's approvals, branch id) a resume is resuming in this context: the
#: tools it runs (in its task, or in tasks it starts, which inherit the context) see them.
_resumed_here: contextvars.ContextVar[frozenset[tuple[ApprovalDesk, str]]] = (
    contextvars.ContextVar("lionexec_resumed_here", default=frozenset())
)


@contextlib.asynccontextmanager
async def _resuming(desk: ApprovalDesk, branch_id: str) -> AsyncIterator[None]:
    """Hold the journal's lock for resuming branch *branch_id* (made on first use, dropped
    when nobody holds or waits for it), and name the branch in :data:`_resumed_here`."""
    entry = desk.resuming.get(branch_id)
    if entry is None:
        entry = desk.resuming[branch_id] = (trio.Lock(), [0])
    lock, users = entry
    users[0] += 1
    try:
        async with lock:
            token = _resumed_here.set(_resumed_here.get() | {(desk, branch_id)})
            try:
                yield
            finally:
                _resumed_here.reset(token)
    finally:
        users[0] -= 1
        if not users[0] and desk.resuming.get(branch_id) is entry:
            del desk.resuming[branch_id]


def _unanswered(history: Any, row: ApprovalRow) -> bool:
    request = history.request_for_call_id(row.call_id)
    return request is not None and history.response_for(request) is None


async def _resume_branch(
    desk: ApprovalDesk, branch: Branch, run: list[ApprovalRow], deny: list[ApprovalRow]
) -> list[Resolution]:
    """Run the claimed approved calls *run* (their approvals ``used``) through *branch* and
    answer the rejected or expired *deny* ``denied``. Raises if *branch* is not running."""
    history = branch.messages
    resolutions: list[Resolution] = []
    if run and not all(feed.serving for feed in branch._feeds):
        raise JournalError(
            f"branch {branch.name} is open in {desk.engine.name} but not running: enter it "
            "(`async with branch:`) before resuming its approved calls (nothing was used)"
        )
    for row in deny:
        request = history.request_for_call_id(row.call_id)
        if request is None or history.response_for(request) is not None:
            continue  # answered already (resolved before, or answered another way)
        branch._record_answer(request, denial(request, row, branch.name))
        resolutions.append(_resolution(branch, row, row.state, ActionOutcome.DENIED, 0))
    started: list[tuple[ApprovalRow, ActionRequest]] = []
    unused: list[ApprovalRow] = []
    for row in run:
        request = history.request_for_call_id(row.call_id)
        if request is None or history.response_for(request) is not None:
            unused.append(row)  # answered in this branch, not yet committed: not run here
        else:
            started.append((row, request))
    if unused:
        await _approve_again(desk, unused)
    for row, _ in started:
        desk.consumed_here[row.approval_id] = None
    try:
        if started:
            responses = await branch.act([request for _, request in started])
            for (row, _), response in zip(started, responses, strict=True):
                resolutions.append(
                    _resolution(
                        branch, row, "approved", response.outcome, response.content.attempts
                    )
                )
    finally:
        for row, _ in started:
            desk.consumed_here.pop(row.approval_id, None)
    await desk.engine.flush()
    return resolutions


async def _approve_again(desk: ApprovalDesk, rows: list[ApprovalRow]) -> None:
    """Move *rows* back from ``used`` to ``approved`` (compare-and-set each), but those whose
    call reached its write-ahead after all; best effort.

    Shielded from cancellation, bounded by the journal's ``commit_timeout`` (at most 30 s
    of trio's clock without one): a journal that fails or does not answer leaves them
    ``used`` (recovery gives them back, as after a crash).
    """
    timeout = desk.engine.commit_timeout
    bound = timeout if timeout is not None else 30.0
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + bound
        for row in rows:
            try:
                at = row.decided_at if row.decided_at is not None else desk.clock()
                await desk.engine.run(partial(unuse_unstarted, approval=row, now=at))
            except Exception:  # the journal is down: the approval stays used
                return


def _resolution(
    branch: Branch, row: ApprovalRow, action: Any, outcome: ActionOutcome | None, attempts: int
) -> Resolution:
    registry = branch.registry
    return Resolution(
        branch_id=row.branch_id,
        call_id=row.call_id,
        function=row.function,
        effect=registry.get(row.function).effect if row.function in registry else "unsafe",
        action=action,
        outcome=outcome,
        attempts=attempts,
    )
