"""Bad input: each a named error, and nothing committed is lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.journal import (
    SCHEMA_VERSION,
    JournalConnectionError,
    JournalError,
    JournalSchemaError,
    NotAJournalError,
    SqliteJournal,
    open_journal,
)
from lionexec.tools import Tool

from ..support.postgres import WAITING_FOR_A_LOCK, terminate_sessions, until_sessions
from .conftest import JournalFactory, PostgresServer


def add(a: int, b: int) -> int:
    return a + b


async def test_a_garbage_file_is_not_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not SQLite at all, just some bytes " * 100)
    with pytest.raises(NotAJournalError, match=r"garbage\.db") as info:
        async with SqliteJournal(path):
            pass
    assert info.value.target == str(path)
    assert path.read_bytes().startswith(b"this is not SQLite")  # untouched


async def test_a_foreign_sqlite_database_is_not_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    before = path.read_bytes()
    with pytest.raises(NotAJournalError, match=r"another program.*users.*left untouched"):
        async with SqliteJournal(path):
            pass
    assert path.read_bytes() == before  # not even switched to WAL mode (in the header)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # noqa: ASYNC240 (no -wal, -shm)
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"users"}  # nothing was created in it


async def test_a_directory_is_not_a_journal(tmp_path: Path) -> None:
    with pytest.raises(NotAJournalError, match="directory"):
        async with SqliteJournal(tmp_path):
            pass


async def test_a_newer_schema_is_refused_and_left_alone(journals: JournalFactory) -> None:
    if journals.kind == "memory":
        pytest.skip("the memory journal has no schema")
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            await branch.act({"function": "add", "arguments": {"a": 1, "b": 2}})
        backend = journal.backend
        await backend.run(
            lambda store: store.tx.execute(  # type: ignore[attr-defined]
                "UPDATE lionexec_schema_version SET version = ?", (SCHEMA_VERSION + 1,)
            )
        )
    with pytest.raises(JournalSchemaError, match=f"version {SCHEMA_VERSION + 1}") as info:
        async with journals.new():
            pass
    assert (info.value.found, info.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)


async def test_migrations_are_applied_once_and_recorded(journals: JournalFactory) -> None:
    if journals.kind == "memory":
        pytest.skip("the memory journal has no schema")
    for _ in range(2):
        async with journals.new() as journal:
            rows = await journal.backend.run(
                lambda store: store.tx.execute("SELECT version FROM lionexec_schema_version")  # type: ignore[attr-defined]
            )
            assert rows == [(SCHEMA_VERSION,)]


async def test_a_wrong_url_is_a_connection_error_naming_it() -> None:
    with pytest.raises(JournalConnectionError, match="mysql"):
        open_journal("mysql://localhost/db")
    journal = open_journal("postgresql://nobody:secret@127.0.0.1:1/nothing", connect_timeout=1)
    with pytest.raises(JournalConnectionError, match=r"127\.0\.0\.1:1") as info:
        async with journal:
            pass
    assert "secret" not in str(info.value)  # the password is never in a message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://nobody@127.0.0.1:1/nothing?password=secret&connect_timeout=1",
        "postgresql://nobody@127.0.0.1:1/nothing?sslmode=disable&PASSWORD=secret",
    ],
    ids=["query", "query-upper"],
)
async def test_a_password_given_as_a_parameter_is_never_in_a_message(url: str) -> None:
    # (once, only the user:password@ form was redacted)
    journal = open_journal(url, connect_timeout=1)
    assert "secret" not in journal.target
    with pytest.raises(JournalConnectionError) as info:
        async with journal:
            pass
    assert "secret" not in str(info.value)


def test_redact_removes_a_keyword_strings_password() -> None:
    from lionexec.journal.backends import redact

    assert redact("host=h password='se cr\\'et' dbname=x") == "host=h password=*** dbname=x"
    assert redact("host=h password=secret") == "host=h password=***"
    # unquoted: & is an ordinary character, and a backslash escapes the next one
    assert redact("host=db password=sec&ret dbname=x") == "host=db password=*** dbname=x"
    assert redact("host=db password=top\\ secret dbname=x") == "host=db password=*** dbname=x"


#: The sessions of one database, and those of them waiting for a lock.
_OURS = "datname = %s"
_WAITING = f"{_OURS} AND {WAITING_FOR_A_LOCK}"


async def test_lost_connections_fail_only_the_call_under_way_and_keep_what_was_committed(
    postgres_server: PostgresServer,
) -> None:
    """Every session of the journal's database is ended between calls: the next calls go on
    (the journal connects again). Then its commit connection is ended while a call's
    write-ahead waits on the server: that call fails unrun, with the connection's error, and
    the next one completes. Nothing committed is lost, nothing ran unjournaled."""
    import psycopg

    from lionexec.journal import PostgresJournal

    url = postgres_server.create_database()
    dbname = url.rsplit("/", 1)[1]
    runs: list[int] = []

    def work(n: int) -> int:
        runs.append(n)
        return n

    admin = postgres_server.admin_url

    async with PostgresJournal(url, min_size=1, max_size=1) as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(work))
        async with branch:
            [first] = await branch.act({"function": "work", "arguments": {"n": 1}})
            await branch.sinks[0].flush()  # type: ignore[attr-defined]  # its outcome too
            terminate_sessions(admin, _OURS, (dbname,))
            await until_sessions(admin, _OURS, (dbname,), some=False)
            between = [
                (await branch.act({"function": "work", "arguments": {"n": n}}))[0]
                for n in range(2, 4)
            ]
            await branch.sinks[0].flush()  # type: ignore[attr-defined]

            with psycopg.connect(url) as holder:  # another session holds the calls table
                holder.execute("LOCK TABLE lionexec_calls IN ACCESS EXCLUSIVE MODE")

                async def end_the_waiting_commit() -> None:
                    try:
                        await until_sessions(admin, _WAITING, (dbname,), some=True)
                        terminate_sessions(admin, _WAITING, (dbname,))
                        await until_sessions(admin, _WAITING, (dbname,), some=False)
                    finally:
                        holder.rollback()  # (the failed call's own records commit next)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(end_the_waiting_commit)
                    [lost] = await branch.act({"function": "work", "arguments": {"n": 4}})
            [after] = await branch.act({"function": "work", "arguments": {"n": 5}})
        assert first.outcome is ActionOutcome.COMPLETED
        assert [r.outcome for r in between] == [ActionOutcome.COMPLETED] * 2
        assert lost.outcome is ActionOutcome.FAILED  # its request could not be committed
        assert lost.error is not None and lost.error.type == "JournalConnectionError"
        assert 4 not in runs  # ... and it never ran
        assert after.outcome is ActionOutcome.COMPLETED  # connected again
    async with PostgresJournal(url) as journal:  # nothing committed was lost, nothing ran
        calls = {c.arguments["n"]: c for c in await journal.calls()}  # unjournaled
        assert set(calls) == set(runs) == {1, 2, 3, 5}
        assert all(c.done for c in calls.values())
        history = await journal.history(branch.id)
        assert history == branch.messages


async def test_cancelling_a_query_cancels_it_on_the_server(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    from lionexec.journal import PostgresJournal

    url = postgres_server.create_database()
    async with PostgresJournal(url) as journal:
        with trio.move_on_after(0.3) as scope:
            await journal.backend.run(
                lambda store: store.tx.execute("SELECT pg_sleep(30)")  # type: ignore[attr-defined]
            )
        assert scope.cancelled_caught
        with psycopg.connect(postgres_server.admin_url, autocommit=True) as admin:
            for _ in range(50):
                rows = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%%' "
                    "AND state = 'active'"
                ).fetchone()
                if rows is not None and rows[0] == 0:
                    break
                await trio.sleep(0.05)
            assert rows is not None and rows[0] == 0
        # the pool's connection is usable again
        assert await journal.calls() == []


async def test_lone_surrogates_are_journaled_and_exported_as_utf8(
    journals: JournalFactory,
) -> None:
    import io
    import json

    from lionexec.journal import write_jsonl

    def echo(text: str) -> str:
        """Echo text with a lone surrogate."""
        return "\ud800" + text

    def boom(text: str) -> str:
        """Fail with a lone surrogate in the message."""
        raise ValueError("\udfff" + text)

    journal = journals.new()
    async with journal:
        hostile, other = await journal.branch(), await journal.branch()
        hostile.register_tools(echo)
        hostile.register_tools(boom)
        other.register_tools(add)
        results: dict[str, list[object]] = {}

        async def act(name: str, branch: object, calls: object) -> None:
            results[name] = await branch.act(calls)  # type: ignore[attr-defined]

        async with hostile, other, trio.open_nursery() as nursery:  # one group commit
            nursery.start_soon(
                act,
                "hostile",
                hostile,
                [
                    {"function": "echo", "arguments": {"text": "x"}},
                    {"function": "boom", "arguments": {"text": "x"}},
                ],
            )
            nursery.start_soon(
                act, "other", other, {"function": "add", "arguments": {"a": 1, "b": 2}}
            )
        [answer] = results["other"]
        assert answer.outcome is ActionOutcome.COMPLETED  # type: ignore[attr-defined]
        echoed, boomed = results["hostile"]
        assert echoed.outcome is ActionOutcome.COMPLETED  # type: ignore[attr-defined]
        assert boomed.outcome is ActionOutcome.FAILED  # type: ignore[attr-defined]
        assert len(await journal.history(other.id)) == len(other.messages)
        assert len(await journal.history(hostile.id)) == len(hostile.messages)
        exported = json.dumps(await journal.export(), allow_nan=False, ensure_ascii=False)
        exported.encode("utf-8")
        out = io.StringIO()
        assert await write_jsonl(journal, out) == 3
        for line in out.getvalue().splitlines():
            line.encode("utf-8")
            json.loads(line)


async def test_a_lone_surrogate_in_a_message_survives_a_restart_as_it_was(
    journals: JournalFactory,
) -> None:
    from lionexec.conversation import Instruction

    async with journals.new() as journal:
        branch = await journal.branch()
        async with branch:
            branch.messages.add_message(Instruction(content="caf\u00e9 \ud800!"))
    async with journals.new() as journal:
        [message] = await journal.history(branch.id)
        assert message.content == "caf\u00e9 \ud800!"  # (lossless: written with \\u escapes)


async def test_a_schema_name_damaged_on_disk_is_not_a_journal_naming_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "damaged.db"
    async with SqliteJournal(path) as journal:
        await journal.branch()
    data = bytearray(path.read_bytes())
    at = data.find(b"lionexec_schema_version")  # the first copy: sqlite_master's name column
    assert at > 0
    data[at] = 0xFF  # one flipped byte: the name is no longer UTF-8
    path.write_bytes(bytes(data))
    with pytest.raises(NotAJournalError, match=r"damaged\.db is not a lionexec journal") as info:
        async with SqliteJournal(path):
            pass
    assert info.value.target == str(path)


async def test_a_stored_argument_that_is_not_json_is_a_journal_error_naming_the_call(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with SqliteJournal(path) as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(add))
        async with branch:
            await branch.act({"function": "add", "arguments": {"a": 1, "b": 2}})
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE lionexec_calls SET arguments = '{not json'")
    async with SqliteJournal(path) as journal:
        with pytest.raises(
            JournalError, match=r"journal's arguments of call 'call_\w+' is not valid JSON"
        ):
            await journal.calls()
