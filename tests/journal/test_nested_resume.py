"""A tool that ``journal.resume()`` runs and that resumes again, while a call of its own branch
was approved in the meantime.

The outer resume holds the branch (one resume of a branch at a time) and waits for the tool;
the inner resume waited for the outer one: a concurrent batch hung for good, a one-call batch
(the tool in the resuming task itself) failed with trio's "attempt to re-acquire an already
held Lock". The inner resume now leaves that branch to the resume it runs under, and a later
resume applies the approval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.act import Branch
from lionexec.conversation import ActionOutcome
from lionexec.governance import PermissionPolicy
from lionexec.journal import Journal, MemoryJournal, SqliteJournal
from lionexec.tools import Tool

POLICY = PermissionPolicy(mode="rules", escalate={"pay": ["*"]})


def call(invoice: str) -> dict[str, Any]:
    return {"function": "pay", "arguments": {"invoice": invoice}, "call_id": f"call_{invoice}"}


def journal_for(kind: str, tmp_path: Path) -> Journal:
    return MemoryJournal() if kind == "memory" else SqliteJournal(tmp_path / "journal.db")


async def paying_branch(journal: Journal, pay: Any) -> tuple[Branch, list[Tool]]:
    tools = [Tool.from_function(pay)]
    branch = await journal.branch(policy=POLICY)
    branch.register_tools(tools)
    return branch, tools


async def park(branch: Branch, invoices: list[str], approvals: dict[str, str]) -> None:
    """Act each invoice's call (each escalates); note its approval id in *approvals*."""
    for invoice in invoices:
        [parked] = await branch.act(call(invoice))
        assert parked.outcome is ActionOutcome.AWAITING_APPROVAL
        approvals[invoice] = parked.output["approval_id"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("batch", [1, 2], ids=["one-call-batch", "concurrent-batch"])
async def test_a_resume_inside_a_resume_of_the_branch_leaves_it_to_the_outer_one(
    tmp_path: Path, kind: str, batch: int
) -> None:
    paid: list[str] = []
    inner: list[Any] = []
    approvals: dict[str, str] = {}
    invoices = [f"A{i}" for i in range(batch)] + ["LATE"]

    async with journal_for(kind, tmp_path) as journal:

        async def pay(invoice: str) -> str:
            """Pay an invoice; the first one approves the late call and resumes."""
            paid.append(invoice)
            if invoice == "A0":
                await journal.approve(approvals["LATE"])
                inner.append(await journal.resume(tools, policy=POLICY))
            return f"paid {invoice}"

        branch, tools = await paying_branch(journal, pay)
        with trio.fail_after(20):
            async with branch:
                await park(branch, invoices, approvals)
                for invoice in invoices[:-1]:
                    await journal.approve(approvals[invoice])
                outer = await journal.resume(tools, policy=POLICY)
                assert inner == [[]]  # the branch was left to the outer resume
                assert sorted(r.call_id for r in outer) == [f"call_A{i}" for i in range(batch)]
                assert {r.outcome for r in outer} == {ActionOutcome.COMPLETED}
                assert journal._approvals.resuming == {}
                # the late approval is still there for the next resume
                [late] = await journal.resume(tools, policy=POLICY)
                assert (late.call_id, late.outcome) == ("call_LATE", ActionOutcome.COMPLETED)
                assert await journal.resume(tools, policy=POLICY) == []
            history = await journal.history(branch.id)
            assert history.unanswered() == []
            assert len(history.responses()) == len(invoices)
    assert sorted(paid) == sorted(invoices)


@pytest.mark.timeout(30)
async def test_a_task_a_resumed_tool_started_resumes_the_branch_once_that_resume_ended(
    tmp_path: Path,
) -> None:
    """The task inherits the context the tool ran in; once the resume that ran the tool has
    ended, nothing waits for that task, and its resume applies the branch's approvals."""
    later: list[Any] = []
    approvals: dict[str, str] = {}
    outer_done, later_done = trio.Event(), trio.Event()

    async with SqliteJournal(tmp_path / "journal.db") as journal:
        async with trio.open_nursery() as background:

            async def resume_later() -> None:
                await outer_done.wait()
                later.append(await journal.resume(tools, policy=POLICY))
                later_done.set()

            async def pay(invoice: str) -> str:
                """Pay an invoice; the first one approves the late call and leaves a task."""
                if invoice == "A0":
                    await journal.approve(approvals["LATE"])
                    background.start_soon(resume_later)
                return f"paid {invoice}"

            branch, tools = await paying_branch(journal, pay)
            with trio.fail_after(20):
                async with branch:
                    await park(branch, ["A0", "LATE"], approvals)
                    await journal.approve(approvals["A0"])
                    [first] = await journal.resume(tools, policy=POLICY)
                    assert first.call_id == "call_A0"
                    outer_done.set()
                    await later_done.wait()
        [[late]] = later
        assert (late.call_id, late.outcome) == ("call_LATE", ActionOutcome.COMPLETED)
