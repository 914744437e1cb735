"""A call id is used once per branch, even after ``retain=`` trimmed its call from memory.

The branch's own index of call ids holds only what it keeps in memory; the journal keeps the
whole history (schema version 4 indexes its requests' call ids). A reused call id was refused
by the journal's key, or answered from it, but its request was journaled with the history:
the journal's history held the id twice, an export every provider refuses.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.errors import DuplicateCallError
from lionexec.journal import SCHEMA_VERSION, SqliteJournal
from lionexec.journal.backends._sql import MIGRATIONS
from lionexec.tools import Tool

from .conftest import JournalFactory


def work(n: int) -> int:
    """Work."""
    return n


def call(call_id: str, n: Any = 1, function: str = "work") -> dict[str, Any]:
    return {"function": function, "arguments": {"n": n}, "call_id": call_id}


@pytest.mark.parametrize(
    "first",
    [call("a"), call("a", n="not an int"), call("a", function="nope")],
    ids=["completed", "invalid", "unknown tool"],
)
async def test_a_call_id_trimmed_from_memory_is_still_refused(
    journals: JournalFactory, first: dict[str, Any]
) -> None:
    with trio.fail_after(20):
        async with journals.new() as journal:
            branch = await journal.branch(retain=1)
            branch.register_tools(Tool.from_function(work, effect="pure"))
            async with branch:
                await branch.act(first)
                for call_id in "bcde":
                    await branch.act(call(call_id))
                assert "a" not in {r.call_id for r in branch.messages.requests()}  # trimmed
                before = len(branch.messages)
                with pytest.raises(DuplicateCallError, match="'a'") as info:
                    await branch.act([call("f"), call("a", n=2)])
                assert info.value.call_id == "a"
                assert len(branch.messages) == before  # nothing of the batch recorded
                [response] = await branch.act(call("f"))  # the batch's other id is free
                assert response.output == 1
            branch_id = branch.id
        async with journals.new() as journal:
            history = await journal.history(branch_id)
    call_ids = [r.call_id for r in history.requests()]
    assert call_ids == ["a", "b", "c", "d", "e", "f"]


async def test_a_trimmed_call_id_in_an_assistant_turn_is_refused(
    journals: JournalFactory,
) -> None:
    def turn(call_id: str) -> dict[str, Any]:
        item = {"id": call_id, "type": "function"}
        item["function"] = {"name": "work", "arguments": '{"n": 1}'}
        return {"role": "assistant", "content": None, "tool_calls": [item]}

    with trio.fail_after(20):
        async with journals.new() as journal:
            branch = await journal.branch(retain=1)
            branch.register_tools(Tool.from_function(work, effect="pure"))
            async with branch:
                for call_id in "abc":
                    await branch.act(turn(call_id))
                before = len(branch.messages)
                with pytest.raises(DuplicateCallError, match="'a'"):
                    await branch.act(turn("a"))
                assert len(branch.messages) == before  # not even the turn


async def test_an_untrimmed_branch_asks_nothing_of_the_journal(
    journals: JournalFactory,
) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(work, effect="pure"))
        asked: list[Any] = []
        sink = branch.sinks[0]
        known = sink.known_call_ids  # type: ignore[attr-defined]

        async def counting(call_ids: Any) -> Any:
            asked.append(call_ids)
            return await known(call_ids)

        sink.known_call_ids = counting  # type: ignore[attr-defined]
        with trio.fail_after(20):
            async with branch:
                await branch.act(call("a"))
                with pytest.raises(DuplicateCallError, match="'a'"):
                    await branch.act(call("a"))
        assert asked == []  # the branch's own index is complete


def _version_3_journal(path: Path, branch_id: str) -> None:
    """A journal written by lionexec before schema version 4: one branch, call ``old``."""
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("CREATE TABLE lionexec_schema_version (version INTEGER NOT NULL)")
        connection.execute("INSERT INTO lionexec_schema_version (version) VALUES (3)")
        for number, statements in MIGRATIONS:
            if number <= 3:
                for statement in statements:
                    assert isinstance(statement, str)
                    connection.execute(statement)
        connection.execute("INSERT INTO lionexec_branches VALUES (?, 0)", (branch_id,))
        request = {
            "id": "b6cab067-aa5b-4c25-be1f-0bf08cc16e36",
            "created_at": 1.0,
            "sender": branch_id,
            "recipient": "work",
            "content": {
                "function": "work",
                "arguments": {"n": 1},
                "action_response_id": None,
                "call_id": "old",
                "raw_arguments": None,
            },
            "kind": "action_request",
            "role": "action",
        }
        response = {
            "id": "6eebbcbc-6db2-433d-9666-1a24b99879ed",
            "created_at": 2.0,
            "sender": "work",
            "recipient": branch_id,
            "content": {
                "function": "work",
                "arguments": {"n": 1},
                "output": 1,
                "action_request_id": request["id"],
                "error": None,
                "outcome": "completed",
            },
            "kind": "action_response",
            "role": "action",
        }
        for seq, message in enumerate((request, response)):
            connection.execute(
                "INSERT INTO lionexec_messages VALUES (?, ?, ?, ?, ?)",
                (branch_id, seq, message["id"], message["kind"], json.dumps(message)),
            )
    connection.close()


def _back_to_3(store: Any) -> None:
    """Take a journal back to schema version 3: no call-id column (and no log)."""
    store.tx.execute("DROP TABLE lionexec_log")  # (store.tx folded it first)
    store.tx.execute("DROP INDEX lionexec_messages_call")
    store.tx.execute("ALTER TABLE lionexec_messages DROP COLUMN call_id")
    store.tx.execute("UPDATE lionexec_schema_version SET version = 3")


async def test_migration_4_indexes_the_call_ids_already_journaled(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    branch_id = "3de81226-fa99-4f03-8c16-38ac03062f07"
    _version_3_journal(path, branch_id)
    with trio.fail_after(20):
        async with SqliteJournal(path) as journal:
            answered = await journal._run(
                lambda s: s.known_call_ids(branch_id, ["old", "b"], answered=True)
            )
            assert answered == {"old"}  # its response, through the request it answers
            branch = await journal.branch(branch_id, retain=1)
            branch.register_tools(Tool.from_function(work, effect="pure"))
            async with branch:
                assert [r.call_id for r in branch.messages.requests()] == ["old"]
                for call_id in "bcd":
                    await branch.act(call(call_id))
                with pytest.raises(DuplicateCallError, match="'old'"):
                    await branch.act(call("old"))
    connection = sqlite3.connect(path)
    version = connection.execute("SELECT version FROM lionexec_schema_version").fetchall()
    assert version == [(SCHEMA_VERSION,)] and SCHEMA_VERSION >= 4
    connection.close()


async def test_migration_4_runs_on_every_sql_backend(durable: JournalFactory) -> None:
    """A journal taken back to version 3 (no call-id column) is migrated on open: the call
    ids it holds are indexed."""
    journals = durable
    with trio.fail_after(20):
        async with journals.new() as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(work, effect="pure"))
            async with branch:
                await branch.act([call("old"), call("older", n="bad")])

            await journal.backend.run(_back_to_3)
        async with journals.new() as journal:
            wanted = ["old", "older", "new"]
            known = await journal._run(lambda s: s.known_call_ids(str(branch.id), wanted))
            answered = await journal._run(
                lambda s: s.known_call_ids(str(branch.id), wanted, answered=True)
            )
    assert known == answered == {"old", "older"}


async def test_migration_4_reads_a_call_id_utf8_cannot_hold(durable: JournalFactory) -> None:
    """A request recorded by hand with a lone surrogate in its call id: journaled as U+FFFD,
    and migration 4 indexes it the same way (it raised UnicodeEncodeError, and the journal
    could no longer be opened)."""
    from lionexec.conversation import ActionRequest

    journals = durable
    with trio.fail_after(20):
        async with journals.new() as journal:
            branch = await journal.branch()
            branch.messages.add_message(ActionRequest.create("work", {"n": 1}, call_id="c\ud800"))
            async with branch:
                await journal.flush()

            await journal.backend.run(_back_to_3)
        async with journals.new() as journal:
            known = await journal._run(lambda s: s.known_call_ids(str(branch.id), ["c\ufffd"]))
    assert known == {"c\ufffd"}
