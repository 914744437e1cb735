"""The append-only log of an SQLite journal: plain commits append, every reader sees the
tables whole (the log folded first), a journal folds on close and in the background, and
anything that is not plain takes the long way."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.act import AlcallParams
from lionexec.conversation import ActionOutcome
from lionexec.journal import SqliteJournal
from lionexec.journal.backends import _sqlite
from lionexec.tools import Tool

from .conftest import flaky_once


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calls(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"function": "add", "arguments": {"a": i, "b": 1}, **extra} for i in range(n)]


def counts(path: Path) -> dict[str, int]:
    """Rows of each table (and calls done), read by a connection of its own (which folds
    nothing)."""
    with sqlite3.connect(path) as conn:
        found = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("lionexec_log", "lionexec_messages", "lionexec_calls")
        }
        [(found["done"],)] = conn.execute(
            "SELECT count(*) FROM lionexec_calls WHERE state = 'done'"
        )
    return found


async def test_plain_calls_are_appended_to_the_log_and_a_read_folds_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                responses = await branch.act(calls(5), strategy="sequential")
                call_ids = [r.content.call_id for r in branch.messages.requests()]
                # 5 requests, 5 responses, 5 claims: in the log, not in the tables
                assert counts(path) == {
                    "lionexec_log": 15,
                    "lionexec_messages": 0,
                    "lionexec_calls": 0,
                    "done": 0,
                }
                journaled = await journal.calls(branch.id)  # a read: folded first
                assert counts(path) == {
                    "lionexec_log": 0,
                    "lionexec_messages": 10,
                    "lionexec_calls": 5,
                    "done": 5,
                }
    assert [r.output for r in responses] == [1, 2, 3, 4, 5]
    assert [c.call_id for c in journaled] == call_ids
    assert [(c.attempts, c.outcome) for c in journaled] == [(1, "completed")] * 5


async def test_closing_a_journal_folds_its_log(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                await branch.act(calls(3))
            assert counts(path)["lionexec_log"] > 0
    assert counts(path) == {
        "lionexec_log": 0,
        "lionexec_messages": 6,
        "lionexec_calls": 3,
        "done": 3,
    }


async def test_a_long_log_is_folded_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite, "FOLD_ROWS", 12)
    path = tmp_path / "j.db"
    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                await branch.act(calls(20), strategy="sequential")
                # no read was made: the writer thread folds on its own. A transaction that
                # reads nothing, queued after that fold on the writer thread, ends after it.
                await journal.backend.run(lambda store: None)
                seen = counts(path)
    assert seen["lionexec_log"] < 60  # (20 calls: 60 rows, most folded)
    assert seen["done"] >= 1


async def test_a_retry_takes_the_long_way_and_counts_its_attempts(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    flaky = flaky_once()

    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(flaky, idempotent=True))
            async with branch:
                [response] = await branch.act(
                    {"function": "flaky", "arguments": {"n": 7}},
                    call_params=AlcallParams(retry_attempts=1),
                )
            [call] = await journal.calls(branch.id)
    assert response.outcome is ActionOutcome.COMPLETED
    assert response.output == 7
    assert (call.attempts, call.outcome) == (2, "completed")


async def test_a_key_of_the_callers_own_takes_the_long_way(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    ran: list[int] = []

    def charge(n: int) -> int:
        """Charge once."""
        ran.append(n)
        return n

    tool = Tool.from_function(charge, idempotency_key=lambda args: f"charge-{args['n']}")
    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            one, two = await journal.branch(), await journal.branch()
            one.register_tools(tool)
            two.register_tools(tool)
            async with one, two:
                [first] = await one.act({"function": "charge", "arguments": {"n": 5}})
                assert counts(path)["lionexec_calls"] == 1  # claimed in the table, not the log
                [again] = await two.act({"function": "charge", "arguments": {"n": 5}})
    assert ran == [5]  # the second call got the first one's recorded outcome
    assert first.output == again.output == 5


async def test_a_journal_of_schema_4_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                await branch.act(calls(2))
        with sqlite3.connect(path) as conn:  # as lionexec wrote it before the log
            conn.execute("DROP TABLE lionexec_log")
            conn.execute("UPDATE lionexec_schema_version SET version = 4")
        async with SqliteJournal(path) as journal:
            again = await journal.branch(branch.id)
            again.register_tools(add)
            async with again:
                await again.act({"function": "add", "arguments": {"a": 9, "b": 1}})
                assert counts(path)["lionexec_log"] == 3  # appended: one claim, two messages
            journaled = await journal.calls(branch.id)
        with sqlite3.connect(path) as conn:
            [(version,)] = conn.execute("SELECT version FROM lionexec_schema_version")
    assert version == 5
    assert [c.done for c in journaled] == [True] * 3


async def test_an_sqlite_without_update_from_folds_outcomes_one_row_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite, "_UPDATE_FROM", False)  # (as SQLite before 3.33)
    path = tmp_path / "j.db"
    with trio.fail_after(30):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                await branch.act(calls(3), strategy="sequential")
                assert counts(path)["lionexec_log"] == 9
            journaled = await journal.calls(branch.id)
    assert [(c.done, c.outcome) for c in journaled] == [(True, "completed")] * 3
    assert counts(path)["lionexec_log"] == 0


async def test_an_append_writes_nothing_when_anything_stands_in_its_way(tmp_path: Path) -> None:
    from lionexec.journal.backends import _log
    from lionexec.journal.backends.base import Batch, MessageRow, RequestOp

    def batch(seq: int, call_id: str, key: str | None = None) -> Batch:
        op = RequestOp(
            key=key or f"b/{call_id}",
            branch_id="b",
            call_id=call_id,
            request_id=f"r{seq}",
            function="f",
            arguments="{}",
            effect="pure",
            at=1.0,
            fresh=True,
        )
        message = MessageRow("b", seq, f"r{seq}", "action_request", "{}", call_id)
        return Batch(messages=[message], requests=[op])

    def log_rows() -> int:
        with sqlite3.connect(tmp_path / "j.db") as conn:
            return int(conn.execute("SELECT count(*) FROM lionexec_log").fetchone()[0])

    with trio.fail_after(30):
        async with SqliteJournal(tmp_path / "j.db") as journal:

            def append(b: Batch) -> Any:
                return journal.backend.run(lambda store: _log.append(store, b))  # type: ignore[arg-type]

            [claim] = await append(batch(0, "c0"))
            assert claim.mine and claim.row.attempts == 1
            assert log_rows() == 2  # the message and its claim
            assert await append(batch(0, "c9")) is None  # position 0 is taken (in the log)
            assert log_rows() == 2
            await journal.backend.run(lambda store: store.fold())  # type: ignore[attr-defined]
            assert await append(batch(0, "c9")) is None  # position 0 (in the table now)
            assert await append(batch(1, "c1", key="b/c0")) is None  # a key held
            [claim] = await append(batch(1, "c1"))  # nothing in the way
            assert claim.row.key == "b/c1"
            assert log_rows() == 2
