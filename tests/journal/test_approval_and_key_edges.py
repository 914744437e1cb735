"""Durable approvals and idempotency keys, their edges: two resumes of one branch
at once in one journal, idempotency keys no backend can keep (a hostile key must fail its own
call, not the group commit it would share with other conversations), and decisions given
text a backend cannot store."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.governance import PermissionPolicy
from lionexec.journal import ApprovalNotFound, Journal, MemoryJournal, SqliteJournal
from lionexec.tools import Tool

from .conftest import JournalFactory

POLICY = PermissionPolicy(mode="rules", escalate={"pay": ["*"]})
PAY = {"function": "pay", "arguments": {"invoice": "A1", "amount": 7}, "call_id": "call_pay"}


def pay_tool(paid: list[str]) -> Tool:
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice."""
        paid.append(invoice)
        return f"paid {invoice}"

    return Tool.from_function(pay)


async def park(journal: Journal, paid: list[str], call: dict[str, Any] = PAY) -> tuple[str, str]:
    """Act *call* (it escalates); return (branch id, approval id)."""
    branch = await journal.branch(policy=POLICY)
    branch.register_tools(pay_tool(paid))
    async with branch:
        [parked] = await branch.act(call)
    assert parked.outcome is ActionOutcome.AWAITING_APPROVAL
    return branch.name, parked.output["approval_id"]


@pytest.mark.timeout(30)
async def test_two_resumes_at_once_in_one_journal_run_the_call_once(tmp_path: Path) -> None:
    """Both opened the branch (the journal's one object for it) and entered it: trio's
    nursery stack was corrupted and the second resume failed with ``NotDurableError``."""
    paid: list[str] = []
    path = tmp_path / "journal.db"
    with trio.fail_after(20):
        async with SqliteJournal(path) as journal:
            branch_id, approval_id = await park(journal, paid)
            await journal.approve(approval_id)
        async with SqliteJournal(path) as journal:  # the branch is not open here
            results: list[Any] = []

            async def resume() -> None:
                results.append(await journal.resume([pay_tool(paid)], policy=POLICY))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(resume)
                nursery.start_soon(resume)
            # one ran it; the other (which waited for it) says so, with the call's outcome
            assert sorted((r.action, r.outcome) for [r] in results) == [
                ("approved", ActionOutcome.COMPLETED),
                ("resumed_elsewhere", ActionOutcome.COMPLETED),
            ]
            assert journal._approvals.resuming == {}  # (nothing kept once no resume runs)
            history = await journal.history(branch_id)
            assert history.unanswered() == []
            assert [r.outcome for r in history.responses()] == [ActionOutcome.COMPLETED]
            assert (await journal.approval(approval_id)).state == "used"
    assert paid == ["A1"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hostile", ["long", "nul"])
async def test_a_key_no_backend_can_keep_fails_its_own_call_only(
    durable: JournalFactory, hostile: str
) -> None:
    """A tool's key derived from what the model sent (up to a million characters) was
    stored as is: PostgreSQL refuses a key over its index limit, or holding NUL, and the
    group commit carrying it failed every call it carried, of any branch; SQLite kept it
    (the same journal behaved differently by backend)."""
    runs: list[str] = []

    def transfer(transfer_id: str) -> str:
        """Move money."""
        runs.append("transfer")
        return "moved"

    def look(x: str) -> str:
        """Look."""
        runs.append(x)
        return x

    keyed = Tool.from_function(
        transfer, effect="keyed", idempotency_key=lambda a: a["transfer_id"]
    )
    bad = "x" * 3000 if hostile == "long" else "T\x00"
    with trio.fail_after(40):
        async with durable.new() as journal:
            mine = await journal.branch()
            other = await journal.branch()  # another conversation
            for branch in (mine, other):
                branch.register_tools([keyed, Tool.from_function(look)])
            results: dict[str, Any] = {}

            async def act(branch: Any, name: str, call: dict[str, Any]) -> None:
                results[name] = await branch.act(call)

            async with mine, other, trio.open_nursery() as nursery:
                call = {"function": "transfer", "arguments": {"transfer_id": bad}}
                nursery.start_soon(act, mine, "hostile", call)
                for i in range(4):  # write-aheads sharing the hostile call's group commit
                    look_call = {"function": "look", "arguments": {"x": str(i)}}
                    nursery.start_soon(act, other, str(i), look_call)
            [refused] = results.pop("hostile")
            assert refused.outcome is ActionOutcome.FAILED
            assert refused.error is not None and "idempotency key" in refused.error.message
            assert ("NUL" if hostile == "nul" else "bytes long") in refused.error.message
            assert len(refused.error.message) < 1000
            for responses in results.values():
                assert [r.outcome for r in responses] == [ActionOutcome.COMPLETED]
            assert sorted(runs) == ["0", "1", "2", "3"]  # the transfer never ran
            assert [c.function for c in await journal.calls(mine.id)] == []
            # parking the same call is refused alike (its approval would keep the key)
            parking = await journal.branch(
                policy=PermissionPolicy(mode="rules", escalate={"transfer": ["*"]})
            )
            parking.register_tools(keyed)
            async with parking:
                [denied] = await parking.act(call)
            assert denied.outcome is ActionOutcome.DENIED
            assert denied.error is not None and "idempotency key" in denied.error.message
            assert await journal.approvals(state=None) == []


@pytest.mark.timeout(30)
async def test_decisions_with_text_a_backend_cannot_store_are_refused_clearly(
    tmp_path: Path,
) -> None:
    """A lone surrogate in ``by`` or ``reason`` (or the id) raised ``UnicodeEncodeError`` from
    the driver; a NUL was stored by SQLite and refused by PostgreSQL with a driver error."""
    paid: list[str] = []
    with trio.fail_after(20):
        async with SqliteJournal(tmp_path / "journal.db") as journal:
            _, first = await park(journal, paid)
            _, second = await park(journal, paid, dict(PAY, call_id="call_2"))
            for bad_id in ("apr_\ud800", "apr_\x00", "apr_" + "0" * 100_000):
                with pytest.raises(ApprovalNotFound) as info:
                    await journal.approve(bad_id)
                assert len(str(info.value)) < 200
                with pytest.raises(ApprovalNotFound):
                    await journal.approval(bad_id)
            with pytest.raises(ValueError, match="NUL"):
                await journal.approve(first, by="al\x00ice")
            with pytest.raises(ValueError, match="NUL"):
                await journal.reject(first, reason="no\x00")
            assert (await journal.approval(first)).state == "pending"  # nothing decided
            approved = await journal.approve(first, by="al\ud800ice")  # kept as UTF-8
            assert (approved.state, approved.decided_by) == ("approved", "al\ufffdice")
            rejected = await journal.reject(second, reason="not \udc00 this")
            assert (rejected.state, rejected.reason) == ("rejected", "not \ufffd this")
            assert (await journal.approval(second)).reason == "not \ufffd this"


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        math.inf,
        -1.0,
        True,
        "60",
        10**400,
        pytest.param(10**5000, id="an int of 16610 bits"),
    ],
)
def test_an_approval_expiry_that_could_never_be_compared_is_refused(bad: object) -> None:
    journal = MemoryJournal()
    with pytest.raises(ValueError, match="approval_expiry"):
        journal.approval_expiry = bad  # type: ignore[assignment]
    assert journal.approval_expiry == 86_400.0  # unchanged
    journal.approval_expiry = 0  # at once
    journal.approval_expiry = None  # never
    assert journal.approval_expiry is None
