"""Recovery: every journaled request left without a response gets exactly one.

Run :meth:`Journal.recover <lionexec.journal.Journal.recover>` once after opening a journal,
before serving, with the tools. For each branch, each request of its committed history that
has no response is resolved by what the journal knows of it and the tool's effect class
(``Tool(effect=...)``, as recorded when the call was invoked):

============================== ============================================================
the call                       resolution
============================== ============================================================
never reached the write-ahead  it never ran. ``pure``/``idempotent``/``keyed``: run now
commit (no call row)           (``rerun``); ``unsafe``: ``cancelled`` (``not_started``).
``pure``, ``idempotent``,      run again through ``Branch.act`` with the same idempotency key
``keyed``                      (``rerun``); the attempts count on from the journal's.
``unsafe``, with a             ``tool.reconcile(context)`` finds out: :class:`Applied` →
``reconcile`` hook             ``completed`` with its output (``reconciled``);
                               :class:`NotApplied` → run once now (``rerun``); raising →
                               ``interrupted`` (the hook's error named).
``unsafe``                     ``interrupted``: "may or may not have taken effect"; never run.
============================== ============================================================

Re-runs go through the whole transaction again (validation, gate, policy, hooks), so a call
may also end ``denied`` or ``invalid`` (a tool no longer registered). Recovery never rebuilds
an event from a record (a record is evidence of what ran, not something to run again): it
proposes the journaled request again, or records a response for it.

With several processes on one database, recover only when no other process is running calls
(it cannot tell a call running elsewhere from one whose process died).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from lionexec.conversation import ActionOutcome, ActionRequest, ActionResponse, ErrorInfo
from lionexec.governance import CallContext
from lionexec.tools import ActionManager, Tool, is_async_callable, run_callable

from ._approvals import ApprovalDesk
from ._claims import release_unstarted
from ._keys import stored_json
from ._report import Action, RecoveryReport, Resolution, as_journal_error, registry_of
from .backends.base import RERUNNABLE, USED, ApprovalRow, CallRow, Store
from .workers import _queue as queue

if TYPE_CHECKING:
    from lionexec.act import Branch

__all__ = ["Applied", "NotApplied", "recover"]

INTERRUPTED_MESSAGE = (
    "the process stopped while this call was running; it may or may not have taken effect"
)
NOT_STARTED_MESSAGE = "the process stopped before this call started; it did not run"


@attrs.frozen
class Applied:
    """A reconcile hook's answer: the call took effect; *output* is its result."""

    output: Any = None


@attrs.frozen
class NotApplied:
    """A reconcile hook's answer: the call did not take effect (it is run once now)."""


async def recover(
    desk: ApprovalDesk,
    tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None,
    **branch_kwargs: Any,
) -> RecoveryReport:
    """Resolve every unanswered journaled request (see the module docs).

    *tools*: the registry (or tools) to re-run calls with; a safe call whose tool is not
    among them is left unanswered (``left``) for a recovery that has it (``None``: every
    safe call; ``unsafe`` ones need no tool). *branch_kwargs* go
    to :meth:`Journal.branch` (``policy=``, ``hooks=``, ...). Branches open in this journal
    are skipped (their calls are running, not lost).

    Calls parked for approval are not lost either: decided approvals are applied first
    (:meth:`Journal.resume`); calls still waiting are reported ``awaiting_approval`` and
    left unanswered. A call whose approval was used (it was resumed) and that has no outcome
    is recovered like any other call, its approval allowing a re-run of a safe tool; but one
    whose resume died before the call's write-ahead (it never started) has its approval
    given back and is resumed: it runs once now, whatever its effect class.
    """
    registry = registry_of(tools)
    # A resume that died between claiming approvals and the write-ahead of their runs left
    # them used for calls that never started: they are approved again, and run now.
    await desk.engine.run(release_unstarted, cancellable=False)
    resolutions: list[Resolution] = list(await desk.resume(registry, **branch_kwargs))
    held = any(r.action == "resumed_elsewhere" for r in resolutions)
    # Two passes: a safe call that holds no key of its own (it never reached its write-ahead,
    # or it waited for a key another call held) is re-run once every branch's calls that
    # hold keys are resolved: its key's holder may be a lost call of a later branch.
    later: list[uuid.UUID] = []
    branch_ids = [uuid.UUID(b) for b in await desk.engine.run(lambda store: store.branches())]
    for branch_id in branch_ids:
        if await _recover_pass(desk, branch_id, registry, branch_kwargs, resolutions, False):
            later.append(branch_id)
    for branch_id in later:
        await _recover_pass(desk, branch_id, registry, branch_kwargs, resolutions, True)
    if held:
        # A branch was held by a call of a dead resume, recovered above: its other approved
        # calls run now; what this report said of them before is replaced.
        again = await desk.resume(registry, **branch_kwargs)
        done = {(r.branch_id, r.call_id) for r in again}
        resolutions = [
            r
            for r in resolutions
            if (r.branch_id, r.call_id) not in done
            or r.action not in ("resumed_elsewhere", "awaiting_approval")
        ] + list(again)
    return RecoveryReport(tuple(resolutions))


async def _recover_pass(
    desk: ApprovalDesk,
    branch_id: uuid.UUID,
    registry: ActionManager | None,
    branch_kwargs: dict[str, Any],
    resolutions: list[Resolution],
    keyless: bool,
) -> bool:
    """Recover the unanswered calls of one branch: those that hold a key (and the unsafe
    ones), or with *keyless* the safe ones that hold none; add their resolutions. Returns
    whether the branch has keyless safe calls left for the second pass."""
    name = str(branch_id)
    engine = desk.engine
    if name in engine.sinks:
        return False
    history = await engine.history(name)
    if not history.unanswered():
        return False
    kwargs = dict(branch_kwargs)
    if registry is not None:
        kwargs["registry"] = registry
    branch = await desk.open_branch(branch_id, **kwargs)
    rows = {
        row.call_id: row
        for row in await engine.run(
            lambda store, n=name: store.calls(n, True)  # type: ignore[misc]
        )
    }
    approvals = {
        row.call_id: row
        for row in await engine.run(
            lambda store, n=name: store.approvals(n, None)  # type: ignore[misc]
        )
    }
    wanted = [(name, request.call_id) for request in history.unanswered()]
    queued = {
        row.call_id: row
        for row in await engine.run(lambda store: _queued(store, wanted))
        if row is not None
    }
    used = [row.approval_id for row in approvals.values() if row.state == USED]
    desk.consumed_here.update(dict.fromkeys(used))
    try:
        async with branch:
            found, left = await _recover_branch(branch, rows, registry, approvals, queued, keyless)
            resolutions.extend(found)
    except BaseExceptionGroup as group:
        error = as_journal_error(group)
        if error is None:
            raise
        raise error from group
    finally:
        for approval_id in used:
            desk.consumed_here.pop(approval_id, None)
    return left


def _queued(store: Store, pairs: list[tuple[str, str]]) -> list[queue.QueuedCall | None]:
    """The queue's rows of *pairs* (none in a journal that holds no queue: in memory)."""
    if getattr(store, "tx", None) is None:
        return []
    return queue.lookup(store, pairs)


async def _recover_branch(
    branch: Branch,
    rows: dict[str, CallRow],
    registry: ActionManager | None,
    approvals: dict[str, ApprovalRow],
    queued: dict[str, queue.QueuedCall],
    keyless: bool,
) -> tuple[list[Resolution], bool]:
    """The resolutions of *branch*'s unanswered calls but its safe calls that hold no key
    (with *keyless*: of those only), and whether it has such calls left.

    A call submitted to workers is theirs: never run or answered here. Its workers' answer is
    recorded once they have given it (``from_queue``), else it is left to them
    (``queued``; ``journal.wait(into=branch)`` records it)."""
    resolutions: list[Resolution] = []
    rerun: list[ActionRequest] = []
    left = False
    for request in branch.messages.unanswered():
        row = rows.get(request.call_id)
        tool = _tool(registry, request.function)
        effect = row.effect if row is not None else (tool.effect if tool else "unsafe")
        attempts = row.attempts if row is not None else 0
        note = _Note(branch.name, request, effect, resolutions)
        submitted = queued.get(request.call_id)
        if submitted is not None:
            if not keyless:
                response = submitted.response_message()
                if response is None:  # still queued or claimed
                    note("queued", None, attempts)
                else:
                    branch._record_answer(request, response)
                    note("from_queue", response.outcome, response.content.attempts)
            continue
        approval = approvals.get(request.call_id)
        parked = approval is not None and approval.state != USED
        if keyless != (row is None and effect in RERUNNABLE and not parked):
            left = left or not keyless
            continue
        if parked:
            note("awaiting_approval", None, 0)  # parked: its approval decides, not recovery
            continue
        if effect in RERUNNABLE:
            if tool is None:  # no tool to re-run it with: for a recovery that has one
                note("left", None, attempts)
            else:
                rerun.append(request)
            continue
        if row is None:
            error = ErrorInfo("NotStarted", NOT_STARTED_MESSAGE)
            _answer(branch, request, ActionOutcome.CANCELLED, 0, error=error)
            note("not_started", ActionOutcome.CANCELLED, 0)
            continue
        if tool is not None and tool.reconcile is not None:
            verdict = await _reconcile(tool, request, row)
            if isinstance(verdict, Applied):
                _answer(branch, request, ActionOutcome.COMPLETED, attempts, output=verdict.output)
                note("reconciled", ActionOutcome.COMPLETED, attempts)
                continue
            if isinstance(verdict, NotApplied):
                rerun.append(request)
                continue
            error = ErrorInfo("Interrupted", f"{INTERRUPTED_MESSAGE} (reconcile: {verdict})")
        else:
            error = ErrorInfo("Interrupted", INTERRUPTED_MESSAGE)
        _answer(branch, request, ActionOutcome.INTERRUPTED, attempts, error=error)
        note("interrupted", ActionOutcome.INTERRUPTED, attempts)
    if rerun:
        responses = await branch.act(rerun)
        for request, response in zip(rerun, responses, strict=True):
            row = rows.get(request.call_id)
            tool = _tool(registry, request.function)
            resolutions.append(
                Resolution(
                    branch_id=branch.name,
                    call_id=request.call_id,
                    function=request.function,
                    effect=row.effect if row is not None else (tool.effect if tool else "unsafe"),
                    action="rerun",
                    outcome=response.outcome,
                    attempts=response.content.attempts,
                )
            )
    else:
        await trio.lowlevel.checkpoint()
    for sink in branch.sinks:
        flush = getattr(sink, "flush", None)
        if flush is not None:
            await flush()
    return resolutions, left


@attrs.frozen
class _Note:
    """Appends one call's :class:`Resolution` to a list."""

    branch_id: str
    request: ActionRequest
    effect: str
    into: list[Resolution]

    def __call__(self, action: Action, outcome: ActionOutcome | None, attempts: int) -> None:
        self.into.append(
            Resolution(
                branch_id=self.branch_id,
                call_id=self.request.call_id,
                function=self.request.function,
                effect=self.effect,
                action=action,
                outcome=outcome,
                attempts=attempts,
            )
        )


def _answer(
    branch: Branch,
    request: ActionRequest,
    outcome: ActionOutcome,
    attempts: int,
    *,
    output: Any = None,
    error: ErrorInfo | None = None,
) -> None:
    response = ActionResponse.create(
        request,
        output=output,
        error=error,
        outcome=outcome,
        attempts=attempts,
        sender=request.function,
        recipient=branch.name,
    )
    branch._record_answer(request, response)


async def _reconcile(
    tool: Tool, request: ActionRequest, row: CallRow
) -> Applied | NotApplied | str:
    """The hook's verdict, or a description of why it gave none."""
    hook = tool.reconcile
    assert hook is not None
    context = CallContext(
        function=tool.name,
        arguments=stored_json(row.arguments, f"arguments of call {row.call_id!r}"),
        call_id=request.call_id,
        branch_id=row.branch_id,
        tool=tool,
        idempotency_key=row.key,
    )
    try:
        verdict = await run_callable(
            hook, is_async_callable(hook), (context,), {}, inline=False, limiter=tool.limiter
        )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    if isinstance(verdict, Applied | NotApplied):
        return verdict
    return f"the hook returned {type(verdict).__name__}, not Applied or NotApplied"


def _tool(registry: ActionManager | None, name: str) -> Tool | None:
    if registry is None or name not in registry:
        return None
    return registry.get(name)
