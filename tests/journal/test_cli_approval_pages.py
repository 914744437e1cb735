"""``lionexec journal approvals`` and ``show`` read approvals a page at a time (filters in
the query), and give what :meth:`Journal.approvals` gives."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.journal import Approval, Journal, SqliteJournal, _scan
from lionexec.journal._cli import main

from .conftest import JournalFactory
from .test_cli_commands import POLICY, TOOLS

MANY = 5000


async def park(journal: Journal, n: int, *, prefix: str = "pay") -> str:
    """*n* parked pay calls in one new branch (one batch); the branch id."""
    branch = await journal.branch(policy=POLICY)
    branch.register_tools(TOOLS)
    async with branch:
        calls = [
            {"function": "pay", "arguments": {"invoice": f"A{i}"}, "call_id": f"{prefix}{i}"}
            for i in range(n)
        ]
        answers = await branch.act(calls)
    assert {a.outcome for a in answers} == {ActionOutcome.AWAITING_APPROVAL}
    return branch.name


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


@pytest.mark.timeout(60)
async def test_approval_pages_equal_the_library(
    journals: JournalFactory, monkeypatch: Any
) -> None:
    monkeypatch.setattr(_scan, "PAGE", 3)
    async with journals.new() as journal:
        first = await park(journal, 7)
        second = await park(journal, 4, prefix="other")
        pending = await journal.approvals(first)
        await journal.approve(pending[0].approval_id)
        await journal.reject(pending[1].approval_id, reason="no")
    async with journals.new() as journal:
        every = await journal.approvals(state=None)
        pages = [page async for page in _scan.approval_pages(journal)]
        assert [len(p) for p in pages] == [3, 3, 3, 2]
        assert [r.approval_id for p in pages for r in p] == [a.approval_id for a in every]
        for state in ("pending", "approved", "rejected", "used"):
            got = [r async for p in _scan.approval_pages(journal, status=state) for r in p]
            assert [r.approval_id for r in got] == [
                a.approval_id for a in await journal.approvals(state=state)
            ]
        mine = [r async for p in _scan.approval_pages(journal, branch=second) for r in p]
        assert len(mine) == 4 and {r.branch_id for r in mine} == {second}
        cut = every[5].created_at
        since = [r async for p in _scan.approval_pages(journal, since=cut) for r in p]
        assert [r.approval_id for r in since] == [
            a.approval_id for a in every if a.created_at >= cut
        ]
        by_call = [r async for p in _scan.approval_pages(journal, call_id="pay3") for r in p]
        assert [(r.branch_id, r.call_id) for r in by_call] == [(first, "pay3")]
        assert [
            p async for p in _scan.approval_pages(journal, call_id="pay3", branch=second)
        ] == []
        assert await _scan.approval_counts(journal) == {"pending": 9, "approved": 1, "rejected": 1}


@pytest.mark.timeout(120)
def test_many_approvals_are_listed_whole_in_pages(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "journal.db"

    async def setup() -> tuple[str, str, list[Approval]]:
        async with SqliteJournal(path) as journal:
            branch = await park(journal, MANY)
            other = await park(journal, 3, prefix="x")
            every = await journal.approvals(state=None)
            await journal.reject(every[-1].approval_id, reason="no")
            return branch, other, await journal.approvals(state=None)

    branch, other, expected = trio.run(setup)
    assert len(expected) == MANY + 3

    fetched: list[int] = []
    original = Journal._run

    async def counting(self: Journal, fn: Any, **kwargs: Any) -> Any:
        result = await original(self, fn, **kwargs)
        if isinstance(result, list):
            fetched.append(len(result))
        return result

    monkeypatch.setattr(_scan, "PAGE", 256)
    monkeypatch.setattr(Journal, "_run", counting)

    status, text = run("approvals", str(path), "--json")
    assert status == 0
    rows = [json.loads(x) for x in text.splitlines()]
    assert [r["approval_id"] for r in rows] == [a.approval_id for a in expected]
    assert {r["call_id"] for r in rows[:MANY]} == {f"pay{i}" for i in range(MANY)}
    assert rows[-1]["state"] == "rejected" and rows[-1]["reason"] == "no"
    # every row came in a page of at most 256: never the whole table in one read
    assert max(fetched) == 256 and len(fetched) >= (MANY + 3) // 256
    assert sum(fetched) == MANY + 3

    fetched.clear()
    status, text = run("approvals", str(path), "--json", "--branch", other)
    assert status == 0 and sorted(json.loads(x)["call_id"] for x in text.splitlines()) == [
        "x0",
        "x1",
        "x2",
    ]
    assert sum(fetched) == 3  # the branch filter is in the query, not applied afterwards

    fetched.clear()
    status, text = run("approvals", str(path), "--json", "--status", "rejected")
    assert status == 0 and [json.loads(x)["approval_id"] for x in text.splitlines()] == [
        expected[-1].approval_id
    ]
    assert sum(fetched) == 1

    fetched.clear()
    status, text = run("approvals", str(path), "--json", "--limit", "300")
    assert status == 0 and len(text.splitlines()) == 300
    assert sum(fetched) == 512  # two pages read, the rest not

    status, text = run("approvals", str(path), "--branch", branch)
    lines = text.splitlines()
    assert lines[0].startswith("approval_id") and len(lines) == 1 + 50 + 1
    assert lines[-1] == f"… {MANY - 50} more approvals not shown: --limit N (0 for all) or --json"

    fetched.clear()
    status, text = run("show", str(path), "--json")
    shown = json.loads(text)
    assert shown["approvals"] == {"pending": MANY + 2, "rejected": 1}
    assert [p["approval_id"] for p in shown["pending"]] == [
        a.approval_id for a in expected if a.state == "pending"
    ]
    assert max(fetched) <= 256

    fetched.clear()  # approving by call id finds its approval by a query, not a listing
    status, text = run("approve", str(path), "pay17", "--branch", branch)
    assert status == 0 and text.startswith("approved apr_") and "call pay17 " in text
    assert sum(fetched) == 1

    status, text = run("show", str(path))
    assert f"approvals: {MANY + 3} (approved 1, pending {MANY + 1}, rejected 1)" in text
    assert f"… {MANY + 1 - 50} more pending approvals not shown" in text
