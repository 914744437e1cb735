"""The command line's paged reads give what the journal's whole-list API gives, on every
backend (memory, SQLite, PostgreSQL), with pages small enough that every read spans several."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from lionexec.journal import _scan, write_jsonl
from lionexec.journal._cli_read import export_streamed, write_jsonl_streamed

from .conftest import JournalFactory
from .test_cli_commands import POLICY, TOOLS


@pytest.mark.timeout(60)
async def test_paged_reads_equal_the_library(journals: JournalFactory, monkeypatch: Any) -> None:
    monkeypatch.setattr(_scan, "PAGE", 3)
    async with journals.new() as journal:
        names = []
        for n in (7, 4):
            branch = await journal.branch(policy=POLICY)
            branch.register_tools(TOOLS)
            names.append(branch.name)
            async with branch:
                texts = ["boom" if i % 3 == 2 else f"t{i}" for i in range(n)]
                await branch.act([{"function": "echo", "arguments": {"text": t}} for t in texts])
                await branch.act({"function": "pay", "arguments": {"invoice": "A"}})
    async with journals.new() as journal:
        expected = await journal.calls()
        paged = [row.key async for page in _scan.call_pages(journal) for row in page]
        assert paged == [c.idempotency_key for c in expected] and len(paged) == 11
        failed = [r async for page in _scan.call_pages(journal, status="failed") for r in page]
        assert len(failed) == 3 and {r.outcome for r in failed} == {"failed"}
        mine = [r async for page in _scan.call_pages(journal, branch=names[1]) for r in page]
        assert len(mine) == 4
        stats = await _scan.branch_stats(journal)
        assert [(b, req, resp) for b, _, req, resp in stats] == [
            (names[0], 8, 7),  # the parked call's request waits for its approval
            (names[1], 5, 4),
        ]
        assert await _scan.count_responses(journal) == 11

        buffer = io.StringIO()
        await export_streamed(journal, buffer)
        assert json.loads(buffer.getvalue()) == await journal.export()
        streamed, whole = io.StringIO(), io.StringIO()
        await write_jsonl_streamed(journal, streamed)
        await write_jsonl(journal, whole)
        assert streamed.getvalue() == whole.getvalue() and whole.getvalue().count("\n") == 11


@pytest.mark.timeout(60)
async def test_the_worker_queue_is_read_in_pages_in_submission_order(
    durable: JournalFactory, monkeypatch: Any
) -> None:
    monkeypatch.setattr(_scan, "PAGE", 3)
    async with durable.new() as journal:
        submitted = []
        for branch in ("b0", "b1"):  # (two branches: the key's second column)
            for text in ("x", "y"):
                submitted += await journal.submit(
                    f"00000000-0000-4000-8000-00000000000{branch[1]}",
                    [{"function": "echo", "arguments": {"text": f"{text}{i}"}} for i in range(4)],
                )
        pages = [page async for page in _scan.queue_pages(journal)]
    assert [len(page) for page in pages] == [3, 3, 3, 3, 3, 1]
    rows = [row for page in pages for row in page]
    assert sorted(row["call_id"] for row in rows) == sorted(submitted)
    keys = [(row["submitted_at"], row["branch_id"], row["call_id"]) for row in rows]
    assert keys == sorted(keys) and len(set(keys)) == 16
