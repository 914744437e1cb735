"""Durable approvals: an ``escalate`` decision parked in the journal, decided from anywhere,
resumed once, surviving a restart; run against every backend."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.governance import CallContext, PermissionPolicy
from lionexec.journal import ApprovalClosed, ApprovalNotFound, Journal, JournalError
from lionexec.tools import Tool

from .conftest import JournalFactory

COMPLETED = ActionOutcome.COMPLETED
POLICY = PermissionPolicy(mode="rules", allow={"look": ["*"]}, escalate={"pay": ["*"]})


class Ledger:
    """The downstream system: what really ran."""

    def __init__(self) -> None:
        self.paid: list[tuple[str, int]] = []

    def tools(self) -> list[Tool]:
        def pay(invoice: str, amount: int) -> str:
            """Pay an invoice."""
            self.paid.append((invoice, amount))
            return f"paid {invoice}"

        def look(invoice: str) -> str:
            """Look an invoice up."""
            return f"invoice {invoice}"

        return [Tool.from_function(pay), Tool.from_function(look)]


def paid(history: Any) -> list[Any]:
    """The responses of the ``pay`` calls in *history*."""
    return [r for r in history.responses() if r.function == "pay"]


PAY = {"function": "pay", "arguments": {"invoice": "A1", "amount": 7}, "call_id": "call_pay"}


async def park(journal: Journal, ledger: Ledger) -> tuple[str, str]:
    """Act a batch whose ``pay`` call escalates; return (branch id, approval id)."""
    branch = await journal.branch(policy=POLICY)
    branch.register_tools(ledger.tools())
    async with branch:
        look = {"function": "look", "arguments": {"invoice": "A1"}}
        parked, looked = await branch.act([PAY, look])
    assert looked.outcome is ActionOutcome.COMPLETED
    assert parked.outcome is ActionOutcome.AWAITING_APPROVAL
    assert parked.content.status.value == "pending"
    assert parked.error is not None and parked.error.type == "AwaitingApproval"
    approval_id = parked.output["approval_id"]
    assert approval_id in parked.error.message
    # nothing recorded for the parked call: its request waits unanswered
    [waiting] = branch.messages.unanswered()
    assert waiting.call_id == "call_pay"
    assert parked.id not in branch.messages
    assert ledger.paid == []
    return branch.name, approval_id


async def test_an_approved_call_survives_a_restart_and_runs_once(journals: JournalFactory) -> None:
    ledger = Ledger()
    async with journals.new() as journal:
        branch_id, approval_id = await park(journal, ledger)
    async with journals.new() as journal:  # a restart: the approval and the request are kept
        [approval] = await journal.approvals()
        assert approval.approval_id == approval_id
        assert (approval.branch_id, approval.call_id, approval.function) == (
            branch_id,
            "call_pay",
            "pay",
        )
        assert approval.arguments == {"invoice": "A1", "amount": 7}
        assert approval.state == "pending"
        assert approval.rule == "*"
        history = await journal.history(branch_id)
        assert [r.call_id for r in history.unanswered()] == ["call_pay"]
        # recovery leaves a parked call waiting (it is not interrupted, not re-run)
        report = await journal.recover(ledger.tools(), policy=POLICY)
        assert report.counts() == {"awaiting_approval": 1}
    async with journals.new() as journal:  # approved from "another process"
        approved = await journal.approve(approval_id, by="alice")
        assert (approved.state, approved.decided_by) == ("approved", "alice")
    assert ledger.paid == []  # deciding runs nothing
    async with journals.new() as journal:
        [resolution] = await journal.resume(ledger.tools(), policy=POLICY)
        assert (resolution.action, resolution.outcome) == ("approved", ActionOutcome.COMPLETED)
        assert await journal.resume(ledger.tools(), policy=POLICY) == []  # once
        with pytest.raises(ApprovalClosed, match="is used") as info:
            await journal.approve(approval_id)  # an approval cannot be reused
        assert (info.value.approval_id, info.value.state) == (approval_id, "used")
    assert ledger.paid == [("A1", 7)]
    async with journals.new() as journal:
        history = await journal.history(branch_id)
        assert history.unanswered() == []
        responses = paid(history)
        assert [(r.outcome, r.output) for r in responses] == [(ActionOutcome.COMPLETED, "paid A1")]
        assert (await journal.approval(approval_id)).state == "used"
        assert await journal.approvals() == []
        report = await journal.recover(ledger.tools(), policy=POLICY)
        assert report.resolutions == ()
    assert ledger.paid == [("A1", 7)]


async def test_a_rejected_call_is_denied_once_with_the_reason(journals: JournalFactory) -> None:
    ledger = Ledger()
    async with journals.new() as journal:
        branch_id, approval_id = await park(journal, ledger)
    async with journals.new() as journal:
        rejected = await journal.reject(approval_id, reason="not this month", by="bob")
        assert (rejected.state, rejected.reason, rejected.decided_by) == (
            "rejected",
            "not this month",
            "bob",
        )
        with pytest.raises(ApprovalClosed, match="rejected"):
            await journal.approve(approval_id)
    async with journals.new() as journal:
        [resolution] = await journal.resume(ledger.tools(), policy=POLICY)
        assert (resolution.action, resolution.outcome) == ("rejected", ActionOutcome.DENIED)
        assert await journal.resume(ledger.tools(), policy=POLICY) == []
    async with journals.new() as journal:
        [response] = paid(await journal.history(branch_id))
        assert response.outcome is ActionOutcome.DENIED
        assert response.error is not None and response.error.type == "ApprovalRejected"
        assert "not this month" in response.error.message and "bob" in response.error.message
    assert ledger.paid == []


async def test_an_expired_approval_is_denied(journals: JournalFactory) -> None:
    ledger = Ledger()
    now = [1_000.0]
    async with journals.new() as journal:
        journal.clock = lambda: now[0]
        journal.approval_expiry = 60.0
        branch_id, approval_id = await park(journal, ledger)
        [approval] = await journal.approvals()
        assert approval.expires_at == 1_060.0
    now[0] = 1_060.0
    async with journals.new() as journal:
        journal.clock = lambda: now[0]
        with pytest.raises(ApprovalClosed, match="expired") as info:
            await journal.approve(approval_id)
        assert info.value.state == "expired"
        assert await journal.approvals() == []
        [expired] = await journal.approvals(state="expired")
        assert expired.approval_id == approval_id
        [resolution] = await journal.resume(ledger.tools(), policy=POLICY)
        assert (resolution.action, resolution.outcome) == ("expired", ActionOutcome.DENIED)
        [response] = paid(await journal.history(branch_id))
        assert response.error is not None and response.error.type == "ApprovalExpired"
    assert ledger.paid == []


async def test_an_approval_approves_only_its_arguments_and_policy(
    journals: JournalFactory,
) -> None:
    ledger = Ledger()
    async with journals.new() as journal:
        branch_id, approval_id = await park(journal, ledger)
        await journal.approve(approval_id)
        policy = journal.approving(POLICY)
        [tool] = [t for t in ledger.tools() if t.name == "pay"]

        def context(**arguments: Any) -> CallContext:
            return CallContext(
                function="pay",
                arguments=arguments,
                call_id="call_pay",
                branch_id=branch_id,
                tool=tool,
            )

        changed = await policy.decide(context(invoice="A1", amount=700))
        assert changed.behavior == "deny"
        assert "ApprovalClosed" in changed.reason and "other arguments" in changed.reason
        other = journal.approving(PermissionPolicy(mode="rules", escalate={"pay": ["p*"]}))
        assert (await other.decide(context(invoice="A1", amount=7))).behavior == "deny"
        assert (await journal.approval(approval_id)).state == "approved"  # neither used it
        # the approved arguments, asked by the same policy: allowed, once
        assert (await policy.decide(context(invoice="A1", amount=7))).behavior == "allow"
        assert (await journal.approval(approval_id)).state == "used"
        journal._approvals.consumed_here.clear()  # the call ran; asked again, it is spent
        again = await policy.decide(context(invoice="A1", amount=7))
        assert again.behavior == "deny" and "is used" in again.reason


async def test_unknown_ids_and_bad_decisions_are_named(journals: JournalFactory) -> None:
    async with journals.new() as journal:
        with pytest.raises(ApprovalNotFound, match="apr_nope"):
            await journal.approve("apr_nope")
        with pytest.raises(ApprovalNotFound):
            await journal.reject("apr_nope", reason="no")
        with pytest.raises(ValueError, match="reason"):
            await journal.reject("apr_nope", reason="")
        with pytest.raises(ValueError, match="state"):
            await journal.approvals(state="waiting")


async def test_two_processes_resuming_at_once_run_the_call_once(journals: JournalFactory) -> None:
    ledger = Ledger()
    async with journals.new() as journal:
        _, approval_id = await park(journal, ledger)
        await journal.approve(approval_id)
    results: list[Any] = []

    async def resume() -> None:
        async with journals.new() as journal:
            results.append(await journal.resume(ledger.tools(), policy=POLICY))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(resume)
        nursery.start_soon(resume)
    assert ledger.paid == [("A1", 7)]
    ran = [r for r in results if [(x.action, x.outcome) for x in r] == [("approved", COMPLETED)]]
    assert len(ran) == 1
    # the other found nothing left to resume, or says that another resume has the call (and
    # its outcome, if it was answered by then)
    [other] = [r for r in results if r is not ran[0]]
    assert [(x.call_id, x.action) for x in other] in ([], [("call_pay", "resumed_elsewhere")])
    assert all(x.outcome in (None, COMPLETED) for x in other)


async def test_a_policy_with_its_own_handler_parks_nothing(journals: JournalFactory) -> None:
    ledger = Ledger()
    asked: list[str] = []

    def handler(decision: Any, ctx: CallContext) -> bool:
        asked.append(ctx.call_id)
        return True

    async with journals.new() as journal:
        branch = await journal.branch(
            policy=PermissionPolicy.from_dict(POLICY.to_dict(), on_escalate=handler)
        )
        branch.register_tools(ledger.tools())
        async with branch:
            [response] = await branch.act(PAY)
        assert response.outcome is ActionOutcome.COMPLETED
        assert asked == ["call_pay"]
        assert await journal.approvals(state=None) == []


async def test_a_branch_outside_the_journal_cannot_park(journals: JournalFactory) -> None:
    from lionexec.act import Branch

    ledger = Ledger()
    async with journals.new() as journal:
        branch = Branch(policy=journal.approving(POLICY))  # a worker's branch, say
        branch.register_tools(ledger.tools())
        [response] = await branch.act(PAY)
        assert response.outcome is ActionOutcome.DENIED
        assert response.error is not None and "only a journaled branch" in response.error.message
    assert ledger.paid == []


async def test_a_batch_summary_counts_a_parked_call_as_pending(journals: JournalFactory) -> None:
    from lionexec.act import BatchSummary
    from lionexec.engine import EventStatus

    ledger = Ledger()
    async with journals.new() as journal:
        branch = await journal.branch(policy=POLICY)
        branch.register_tools(ledger.tools())
        async with branch:
            responses = await branch.act(
                [PAY, {"function": "look", "arguments": {"invoice": "B"}}]
            )
    summary = BatchSummary.of(responses)
    assert summary.by_outcome[ActionOutcome.AWAITING_APPROVAL] == 1
    assert summary.by_status[EventStatus.PENDING] == 1
    assert sum(summary.by_status.values()) == summary.total == 2
    assert (summary.succeeded, summary.unsuccessful, summary.all_succeeded) == (1, 1, False)


async def test_two_approvers_at_once_decide_once(journals: JournalFactory) -> None:
    ledger = Ledger()
    async with journals.new() as journal:
        _, approval_id = await park(journal, ledger)
    outcomes: list[str] = []

    async def approve(by: str) -> None:
        async with journals.new() as journal:
            try:
                outcomes.append((await journal.approve(approval_id, by=by)).decided_by or "")
            except ApprovalClosed as exc:
                outcomes.append(exc.state)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(approve, "alice")
        nursery.start_soon(approve, "bob")
    assert sorted(outcomes) in (["alice", "approved"], ["approved", "bob"])


async def test_resume_refuses_an_open_branch_that_is_not_running(
    journals: JournalFactory,
) -> None:
    ledger = Ledger()
    async with journals.new() as journal:
        branch_id, approval_id = await park(journal, ledger)
        await journal.approve(approval_id)
        branch = await journal.branch(branch_id, policy=POLICY)  # open here, not entered
        branch.register_tools(ledger.tools())
        with pytest.raises(JournalError, match="not running"):
            await journal.resume()
        assert (await journal.approval(approval_id)).state == "approved"  # not used up
        async with branch:
            [resolution] = await journal.resume()
        assert resolution.outcome is ActionOutcome.COMPLETED
    assert ledger.paid == [("A1", 7)]


@pytest.mark.parametrize(
    ("effect", "action", "outcome", "runs"),
    [("pure", "rerun", ActionOutcome.COMPLETED, 2), ("unsafe", "interrupted", None, 1)],
)
async def test_a_crash_after_the_approval_was_used_is_recovered_by_effect_class(
    journals: JournalFactory, effect: str, action: str, outcome: ActionOutcome | None, runs: int
) -> None:
    ran: list[int] = []
    dying: list[Journal] = []

    async def pay(invoice: str, amount: int) -> str:
        """Pay an invoice (the process dies while it runs the first time)."""
        ran.append(amount)
        if dying:
            await dying.pop().aclose()  # nothing after this reaches the journal
        return f"paid {invoice}"

    def tool() -> Tool:
        return Tool.from_function(pay, effect=effect)  # type: ignore[arg-type]

    async with journals.new() as journal:
        branch = await journal.branch(policy=POLICY)
        branch.register_tools(tool())
        async with branch:
            [parked] = await branch.act(PAY)
        approval_id = parked.output["approval_id"]
        await journal.approve(approval_id)
    journal = journals.new()
    await journal.open()
    dying.append(journal)
    died: Exception | None = None
    try:  # the process "dies" in the tool: what it does after that reaches nothing
        await journal.resume([tool()], policy=POLICY)
    except Exception as exc:
        died = exc
    assert died is not None
    assert ran == [7]
    async with journals.new() as journal:  # the restart
        assert (await journal.approval(approval_id)).state == "used"
        report = await journal.recover([tool()], policy=POLICY)
        [resolution] = report.resolutions
        assert resolution.action == action
        history = await journal.history(resolution.branch_id)
        [response] = paid(history)
        assert response.outcome is (outcome or ActionOutcome.INTERRUPTED)
    assert len(ran) == runs  # the used approval allows the safe re-run; unsafe never re-runs


async def test_the_command_line_shows_pending_approvals(tmp_path: Any) -> None:
    import io

    from lionexec.journal import SqliteJournal
    from lionexec.journal._cli import main

    path = tmp_path / "journal.db"
    async with SqliteJournal(path) as journal:
        _, approval_id = await park(journal, Ledger())
    out = io.StringIO()
    assert await trio.to_thread.run_sync(lambda: main(["show", str(path)], out=out)) == 0
    text = out.getvalue()
    assert "approvals: 1 (pending 1)" in text
    [pending] = text.split("pending approvals:\n")[1].splitlines()[1:]  # (after the header)
    assert pending.split()[:2] == [approval_id, "pending"]


async def test_a_call_cancelled_while_its_park_commits_stays_parked() -> None:
    """Three calls park at once: the first commits alone, the other two in the next group
    commit; the batch is cancelled while that commit runs. The call waiting for it (not its
    leader) must end parked like the others, not answered ``cancelled`` with its approval
    committed anyway."""
    from lionexec.journal.backends import Batch, Claim, MemoryBackend, MemoryStore

    scope = trio.CancelScope()

    class Store(MemoryStore):
        def commit(self, batch: Batch) -> list[Claim]:
            if len(batch.approvals) == 2:
                scope.cancel()
            return super().commit(batch)

    backend = MemoryBackend()
    backend.store = Store()
    ledger = Ledger()
    calls = [
        {"function": "pay", "arguments": {"invoice": f"A{i}", "amount": i}, "call_id": f"c{i}"}
        for i in range(3)
    ]
    async with Journal(backend) as journal:
        branch = await journal.branch(policy=POLICY)
        branch.register_tools(ledger.tools())
        async with branch:
            with scope:
                await branch.act(calls)
            assert scope.cancelled_caught
        approvals = await journal.approvals(branch.id)
        answered = {r.call_id for r in branch.messages.requests()} - {
            r.call_id for r in branch.messages.unanswered()
        }
        # each call is either parked (unanswered, with its approval) or answered (without)
        assert sorted(a.call_id for a in approvals) == ["c0", "c1", "c2"]
        assert answered == set()
    assert ledger.paid == []


async def test_an_escalation_met_after_the_transform_parks_the_transformed_arguments(
    journals: JournalFactory,
) -> None:
    sent: list[str] = []

    def send(to: str) -> str:
        """Send a message."""
        sent.append(to)
        return f"sent to {to}"

    def route(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"to": "ops@" + arguments["to"].split("@")[-1]}  # rewrites the subject

    def tool() -> Tool:
        return Tool.from_function(send, subject="to", preprocessor=route)

    policy = PermissionPolicy(
        mode="rules", allow={"send": ["dev@*"]}, escalate={"send": ["ops@*"]}
    )
    async with journals.new() as journal:
        branch = await journal.branch(policy=policy)
        branch.register_tools(tool())
        async with branch:
            [parked] = await branch.act(
                {"function": "send", "arguments": {"to": "dev@x"}, "call_id": "c1"}
            )
        assert parked.outcome is ActionOutcome.AWAITING_APPROVAL
        [approval] = await journal.approvals()
        assert approval.arguments == {"to": "ops@x"}  # what will run, not what was proposed
        await journal.approve(approval.approval_id)
    async with journals.new() as journal:
        [resolution] = await journal.resume([tool()], policy=policy)
        assert resolution.outcome is ActionOutcome.COMPLETED
    assert sent == ["ops@x"]


async def test_exports_while_a_call_waits(journals: JournalFactory) -> None:
    import json

    ledger = Ledger()
    async with journals.new() as journal:
        branch_id, approval_id = await park(journal, ledger)
        data = await journal.export()
        json.dumps(data, allow_nan=False)  # strict JSON
        [approval] = data["approvals"]
        assert (approval["approval_id"], approval["state"]) == (approval_id, "pending")
        history = await journal.history(branch_id)
        # the request is exported unanswered (the exports' NoResponse result), as any request
        # without a response: the model is not told an outcome that was not decided
        [result] = [
            m for m in history.to_openai() if m["role"] == "tool" and "NoResponse" in str(m)
        ]
        assert result["tool_call_id"] == "call_pay"


async def test_approvals_used_for_calls_that_never_ran_are_approved_again(
    journals: JournalFactory,
) -> None:
    from lionexec.journal import JournalConnectionError
    from lionexec.journal._claims import claim_branch

    ledger = Ledger()
    second = {"function": "pay", "arguments": {"invoice": "B2", "amount": 3}, "call_id": "call_b"}
    async with journals.new() as journal:
        branch = await journal.branch(policy=POLICY)
        branch.register_tools(ledger.tools())
        async with branch:
            await branch.act([PAY, second])
        for approval in await journal.approvals():
            await journal.approve(approval.approval_id)
    async with journals.new() as journal:
        real = journal._engine.run
        after_claim: list[Any] = []

        async def down_after_the_claim(fn: Any, *, cancellable: bool = True) -> Any:
            # the approvals claimed, the journal goes away as the branch is read to run them
            if getattr(fn, "func", None) is claim_branch:
                after_claim.append(fn)
            elif len(after_claim) == 1:
                after_claim.append(fn)
                raise JournalConnectionError("the journal went away")
            return await real(fn, cancellable=cancellable)

        journal._engine.run = down_after_the_claim  # type: ignore[method-assign]
        with pytest.raises(JournalConnectionError):  # raised as itself
            await journal.resume(ledger.tools(), policy=POLICY)
        del journal._engine.run
        assert len(after_claim) == 2
        assert ledger.paid == []
        assert {a.state for a in await journal.approvals(state=None)} == {"approved"}
        resolutions = await journal.resume(ledger.tools(), policy=POLICY)
        assert [r.outcome for r in resolutions] == [ActionOutcome.COMPLETED] * 2
    assert sorted(ledger.paid) == [("A1", 7), ("B2", 3)]


async def test_a_call_parked_twice_at_once_gets_the_stored_approval(
    journals: JournalFactory,
) -> None:
    from lionexec.conversation import ActionRequest

    async with journals.new() as journal:
        policy = journal.approving(POLICY)
        branch = await journal.branch(policy=POLICY)
        async with branch:
            arguments = {"invoice": "A1", "amount": 7}
            branch.messages.add_message(ActionRequest.create("pay", arguments, call_id="twice"))
            ctx = CallContext(
                function="pay", arguments=arguments, call_id="twice", branch_id=branch.name
            )
            decisions: list[Any] = []

            async def decide() -> None:
                decisions.append(await policy.decide(ctx))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(decide)
                nursery.start_soon(decide)
        [stored] = await journal.approvals()
        assert [d.approval.approval_id for d in decisions] == [stored.approval_id] * 2
