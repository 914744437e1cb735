"""``durability=``: the setting each backend has in force on the connections that commit."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionRequest, ActionResponse, Instruction
from lionexec.journal import Journal, SqliteJournal, open_journal
from lionexec.journal._commit import CommitEngine
from lionexec.journal._sink import before_answers
from lionexec.journal.backends import MemoryBackend, SqliteBackend
from lionexec.tools import Tool

from ..support.postgres import PostgresServer
from .conftest import flaky_once

# PRAGMA synchronous reads back as a number: 1 NORMAL, 2 FULL, 3 EXTRA
_NORMAL, _FULL, _EXTRA = 1, 2, 3


async def _pragma(journal: Any) -> int:
    backend = journal.backend
    assert isinstance(backend, SqliteBackend)
    rows = await backend.run(lambda store: store.tx.execute("PRAGMA synchronous"))
    return int(rows[0][0])


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, _NORMAL),
        ({"durability": "process"}, _NORMAL),
        ({"durability": "power"}, _FULL),
        ({"synchronous": "EXTRA"}, _EXTRA),
    ],
)
async def test_sqlite_writer_connection_has_the_durability_asked_for(
    tmp_path: Path, options: dict[str, Any], expected: int
) -> None:
    async with SqliteJournal(tmp_path / "j.db", **options) as journal:
        assert await _pragma(journal) == expected
    # open_journal passes the setting through to the backend
    async with open_journal(tmp_path / "k.db", **options) as journal:
        assert await _pragma(journal) == expected


def test_sqlite_durability_names_the_setting_it_means() -> None:
    assert SqliteBackend("x.db").durability == "process"
    assert SqliteBackend("x.db", durability="power").durability == "power"
    assert SqliteBackend("x.db", synchronous="FULL").durability == "power"
    assert SqliteBackend("x.db", synchronous="NORMAL").durability == "process"


def test_a_bad_durability_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"durability must be 'process' .* or 'power' .*, not"):
        SqliteJournal("x.db", durability="disk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"not both"):
        SqliteJournal("x.db", durability="power", synchronous="NORMAL")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("durability", "power"), [("process", False), ("power", True)])
async def test_postgres_commits_with_the_durability_asked_for(
    postgres_server: PostgresServer, durability: str, power: bool
) -> None:
    import psycopg

    url = postgres_server.create_database()
    dbname = url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as admin:
        # a database whose own setting loses the last commits on a crash of the server (read
        # by every connection opened to it from now on)
        admin.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
    from lionexec.journal import PostgresJournal

    async with PostgresJournal(url, durability=durability) as journal:  # type: ignore[arg-type]
        assert journal.backend.durability == durability  # type: ignore[attr-defined]
        rows = await journal.backend.run(lambda store: store.tx.execute("SHOW synchronous_commit"))
        # ... and the connection group commits go over (from the trio thread)
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(_double, effect="pure"))
        async with branch:
            await branch.act({"function": "_double", "arguments": {"x": 1}})
        committing = journal.backend._native.conn  # type: ignore[attr-defined]
        [(setting,)] = committing.execute("SHOW synchronous_commit").fetchall()
    # "process": the database's own setting; "power": fsync'd commits, whatever it says
    assert rows[0][0] == setting == ("on" if power else "off")


async def _double(x: int) -> int:
    return 2 * x


def test_postgres_refuses_a_bad_durability() -> None:
    from lionexec.journal import PostgresJournal

    with pytest.raises(ValueError, match=r"durability must be 'process' .* or 'power' .*, not"):
        PostgresJournal("postgresql://x@127.0.0.1/x", durability="fsync")  # type: ignore[arg-type]


# -- which commits a power loss may lose ---------------------------------------------------------
#
# With durability "power" every commit is synced except a write-ahead of calls that may run
# again (pure, idempotent, keyed): losing it in a power cut loses calls whose act() had not
# returned, and the commit of their outcomes, synced before act() returns, syncs it too.


def _spy_sqlite_commits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """Record each SQLite commit's batch with the ``synchronous`` level it commits under."""
    from lionexec.journal.backends._sql import SqlStore

    seen: list[tuple[Any, int]] = []
    commit = SqlStore.commit

    def spy(self: SqlStore, batch: Any) -> Any:
        [(level,)] = self.tx.execute("PRAGMA synchronous")
        seen.append((batch, int(level)))
        return commit(self, batch)

    monkeypatch.setattr(SqlStore, "commit", spy)
    return seen


def _may_lose(batch: Any) -> bool:
    """Whether a commit of *batch* may be lost in a power cut: write-aheads alone, each of a
    call that may run again."""
    return bool(
        batch.requests
        and not batch.outcomes
        and not batch.approvals
        and all(op.effect in ("pure", "idempotent", "keyed") for op in batch.requests)
    )


async def _pure(x: int) -> int:
    return x


async def _unsafe(x: int) -> int:
    return x


def _tools() -> list[Tool]:
    return [
        Tool.from_function(_pure, effect="pure"),
        Tool.from_function(_double, effect="idempotent"),
        Tool.from_function(_unsafe),  # (unsafe: the default)
    ]


def _calls(function: str, n: int) -> list[dict[str, Any]]:
    return [{"function": function, "arguments": {"x": i}} for i in range(n)]


async def _act_each_way(journal: Any) -> None:
    branch = await journal.branch()
    branch.register_tools(_tools())
    async with branch:
        responses = [
            *await branch.act(_calls("_pure", 1)),
            *await branch.act(_calls("_unsafe", 1)),
            *await branch.act(_calls("_double", 3)),  # concurrently
            *await branch.act(_calls("_pure", 3), strategy="sequential"),
            *await branch.act([*_calls("_pure", 2), *_calls("_unsafe", 1)]),
            *await branch.act(_calls("_pure", 2), strategy="sequential"),
        ]
    assert [r.success for r in responses] == [True] * 13


async def test_sqlite_power_syncs_every_commit_but_write_aheads_of_calls_that_may_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_sqlite_commits(monkeypatch)
    async with SqliteJournal(tmp_path / "j.db", durability="power") as journal:
        await _act_each_way(journal)
        assert await _pragma(journal) == _FULL  # (put back after each unsynced commit)
        unsynced = journal.backend.transactions_unsynced  # type: ignore[attr-defined]
    levels = [(_may_lose(batch), level) for batch, level in seen]
    assert all(level == (_NORMAL if lose else _FULL) for lose, level in levels), levels
    # the first act's write-ahead, the third's, the fourth's first; none of the unsafe calls'
    assert sum(lose for lose, _ in levels) == unsynced >= 3
    # an outcome commit follows each write-ahead it does not share a commit with: synced
    assert levels[:2] == [(True, _NORMAL), (False, _FULL)]
    assert levels[2:4] == [(False, _FULL), (False, _FULL)]


async def test_sqlite_process_durability_syncs_nothing_and_counts_nothing_unsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_sqlite_commits(monkeypatch)
    async with SqliteJournal(tmp_path / "j.db") as journal:
        await _act_each_way(journal)
        assert journal.backend.transactions_unsynced == 0  # type: ignore[attr-defined]
    assert seen and {level for _, level in seen} == {_NORMAL}


async def test_a_backend_without_the_synced_keyword_syncs_every_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Older(SqliteBackend):
        """A backend written before ``synced=``: the journal must not pass it."""

        async def run(self, fn: Any, *, cancellable: bool = True) -> Any:  # type: ignore[override]
            return await super().run(fn, cancellable=cancellable)

        def run_now(self, fn: Any) -> Any:  # type: ignore[override]
            return super().run_now(fn)

    seen = _spy_sqlite_commits(monkeypatch)
    async with Journal(Older(tmp_path / "j.db", durability="power")) as journal:
        await _act_each_way(journal)
    assert seen and {level for _, level in seen} == {_FULL}


@pytest.mark.timeout(60)
async def test_postgres_commits_write_aheads_of_calls_that_may_run_again_unsynced(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionexec.journal import PostgresJournal
    from lionexec.journal.backends import _postgres, _postgres_trio

    sent: list[list[str]] = []
    transact = _postgres_trio.TrioConnection.transact

    async def spy(self: Any, statements: Any) -> None:
        sent.append([sql for sql, _ in statements])
        await transact(self, statements)

    monkeypatch.setattr(_postgres_trio.TrioConnection, "transact", spy)
    unsynced = _postgres.UNSYNCED[0]
    for durability in ("power", "process"):
        sent.clear()
        url = postgres_server.create_database()
        async with PostgresJournal(url, durability=durability) as journal:  # type: ignore[arg-type]
            branch = await journal.branch()
            branch.register_tools(_tools())
            async with branch:
                responses = [
                    *await branch.act(_calls("_pure", 1)),
                    *await branch.act(_calls("_unsafe", 1)),
                ]
            committing = journal.backend._native.conn  # type: ignore[attr-defined]
            [(setting,)] = committing.execute("SHOW synchronous_commit").fetchall()
            calls = await journal.calls(branch.id)
        assert [r.success for r in responses] == [True, True]
        assert sorted(call.outcome for call in calls) == ["completed", "completed"]
        # the pure call's write-ahead alone (whatever the durability: it need only survive a
        # crash of this process); its outcome, the unsafe call's write-ahead and outcome as
        # the durability says, and the session's own setting left as it was
        marked = [unsynced in statements for statements in sent]
        assert marked == [True, False, False, False], sent
        assert sent[0][0] == unsynced
        assert setting == "on"  # (power's; and the server's own, under "process")


async def test_a_kept_history_is_brought_up_to_date_on_the_trio_thread_under_power_too(
    tmp_path: Path,
) -> None:
    # (a read has nothing a power loss could take: it need not wait for the writer thread)
    async with SqliteJournal(tmp_path / "j.db", durability="power") as journal:
        branch = await journal.branch()
        branch.register_tools(_tools())
        async with branch:
            await branch.act(_calls("_pure", 2))
        kept = journal.committed_history(branch)
        assert kept is not None
        backend = journal.backend
        assert isinstance(backend, SqliteBackend)
        before = (backend.transactions_now, backend.transactions_unsynced)
        history = await journal.history(branch.id, since=kept)
        assert history is kept and len(history) == 4
        assert (backend.transactions_now, backend.transactions_unsynced) == (
            before[0] + 1,
            before[1] + 1,
        )
        assert await _pragma(journal) == _FULL


@pytest.mark.timeout(60)
async def test_postgres_unsynced_write_aheads_that_read_their_claims_commit_too(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a retry, and a key of the tool's own, read their claim's row: those commits take the
    # thread-driven path, which must add the unsynced statement to its pipeline as well
    from lionexec.act import AlcallParams
    from lionexec.journal import PostgresJournal
    from lionexec.journal.backends import _postgres

    threaded: list[bool] = []  # each thread-driven transaction's synced=
    transaction = _postgres._transaction

    def spy(conn: Any, fn: Any, *, unread: bool, synced: bool) -> Any:
        threaded.append(synced)
        return transaction(conn, fn, unread=unread, synced=synced)

    monkeypatch.setattr(_postgres, "_transaction", spy)
    flaky = flaky_once()

    def charge(n: int) -> int:
        """Charge."""
        return n

    keyed = Tool.from_function(charge, idempotency_key=lambda args: f"charge-{args['n']}")
    async with PostgresJournal(postgres_server.create_database(), durability="power") as journal:
        branch = await journal.branch()
        branch.register_tools([Tool.from_function(flaky, effect="idempotent"), keyed])
        async with branch:
            [retried] = await branch.act(
                {"function": "flaky", "arguments": {"n": 7}},
                call_params=AlcallParams(retry_attempts=1),
            )
            [charged] = await branch.act({"function": "charge", "arguments": {"n": 5}})
        calls = {call.function: call for call in await journal.calls(branch.id)}
    assert (retried.output, charged.output) == (7, 5)
    assert (calls["flaky"].attempts, calls["flaky"].outcome) == (2, "completed")
    assert calls["charge"].outcome == "completed"
    assert False in threaded  # (the retry's write-ahead went the thread-driven way, unsynced)


# -- answers where a sync costs a flush ----------------------------------------------------------
#
# Where a synced commit waits for the disk (SQLite under "power", PostgreSQL), the answers of
# calls stay out of the write-ahead commits that need no sync: they commit in a synced commit
# of their own, once someone waits for them or their linger ends. A sequential batch of pure
# calls then pays one flush for many calls instead of one each.


def _spy_batches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, bool]]:
    """Record each group commit as (write-aheads, answers, synced)."""
    seen: list[tuple[int, int, bool]] = []
    commit_batch = CommitEngine._commit_batch

    async def spy(self: CommitEngine, batch: Any, **options: Any) -> Any:
        seen.append((len(batch.requests), len(batch.outcomes), options.get("synced", True)))
        return await commit_batch(self, batch, **options)

    monkeypatch.setattr(CommitEngine, "_commit_batch", spy)
    return seen


async def _sequential(journal: Any, function: str, n: int) -> list[Any]:
    branch = await journal.branch()
    branch.register_tools(_tools())
    async with branch:
        responses = await branch.act(_calls(function, n), strategy="sequential")
        # act() returned: every answer is committed, by a synced commit
        calls = await journal.calls(branch.id)
    assert [r.success for r in responses] == [True] * n
    assert [call.outcome for call in calls] == ["completed"] * n
    return calls


async def test_under_power_answers_of_calls_that_may_run_again_commit_in_one_synced_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_batches(monkeypatch)
    levels = _spy_sqlite_commits(monkeypatch)
    async with SqliteJournal(tmp_path / "j.db", durability="power") as journal:
        journal.linger = 60.0  # (no linger ends here: the answers wait for act() to return)
        await _sequential(journal, "_pure", 8)
    # the first commit holds every request and the first claim; each other claim commits
    # alone, unsynced; the eight answers commit together, synced, once act() waits for them
    assert seen[0][:2] == (1, 0)
    assert seen[1:8] == [(1, 0, False)] * 7
    assert seen[8:] == [(0, 8, True)]
    assert [level for batch, level in levels if batch.outcomes] == [_FULL]


async def test_under_power_an_unsafe_call_answer_rides_with_the_next_synced_write_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (an unsafe call's write-ahead is synced anyway: nothing to save by keeping answers out)
    seen = _spy_batches(monkeypatch)
    async with SqliteJournal(tmp_path / "j.db", durability="power") as journal:
        journal.linger = 60.0
        await _sequential(journal, "_unsafe", 3)
    assert seen == [(1, 0, True), (1, 1, True), (1, 1, True), (0, 1, True)]


async def test_under_process_sqlite_answers_ride_with_the_next_write_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (no commit waits for the disk: an answer costs nothing riding along)
    seen = _spy_batches(monkeypatch)
    async with SqliteJournal(tmp_path / "j.db") as journal:
        journal.linger = 60.0
        await _sequential(journal, "_pure", 3)
    assert [batch[:2] for batch in seen] == [(1, 0), (1, 1), (1, 1), (0, 1)]


async def test_an_answer_left_out_of_write_aheads_still_commits_within_its_linger(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    # write-aheads that keep coming never hold an answer back past its linger, even when
    # its linger ends while one of them commits (as on PostgreSQL, where each commit waits
    # for the server): a backend whose commits take 50 ms, answers that linger 20 ms
    class Slow(MemoryBackend):
        syncs_commits = True

        async def run(self, fn: Any, *, cancellable: bool = True) -> Any:
            await trio.sleep(0.05)
            return await super().run(fn, cancellable=cancellable)

    seen = _spy_batches(monkeypatch)
    async with Journal(Slow()) as journal:
        journal.linger = 0.02
        await _sequential(journal, "_pure", 12)
    write_aheads = [index for index, (claims, _, _) in enumerate(seen) if claims]
    answered = [index for index, (_, answers, _) in enumerate(seen) if answers]
    # answers commit synced (once their linger ends, with the next commit, whatever it is),
    # and every few calls, not all at the end: a linger (20 ms) ends within the first
    # commit after it began (50 ms), so at most three write-aheads come between two
    assert all(seen[index][2] for index in answered)
    assert answered[0] < write_aheads[-1], seen
    between = [b - a - 1 for a, b in itertools.pairwise([-1, *answered])]
    assert max(between) <= 3, seen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("durability", ["process", "power"])
async def test_postgres_keeps_answers_out_of_write_aheads_under_either_durability(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    # (the server flushes its WAL for each synced commit, "process" or not)
    from lionexec.journal import PostgresJournal

    seen = _spy_batches(monkeypatch)
    url = postgres_server.create_database()
    async with PostgresJournal(url, durability=durability) as journal:  # type: ignore[arg-type]
        journal.linger = 60.0
        await _sequential(journal, "_pure", 4)
    assert [batch[:2] for batch in seen] == [(1, 0), (1, 0), (1, 0), (1, 0), (0, 4)]
    assert [synced for _, answers, synced in seen if answers] == [True]


def test_answers_are_left_out_only_where_no_request_follows_them() -> None:
    one, two = ActionRequest.create("f", call_id="a"), ActionRequest.create("f", call_id="b")
    answer = ActionResponse.create(one, output=1)
    note = Instruction(content="go on")
    assert before_answers(()) == ()
    assert before_answers((one, two)) == (one, two)
    assert before_answers((answer,)) == ()
    assert before_answers((two, answer, note)) == (two,)  # (what follows an answer waits too)
    # a request after an answer is staged, and everything before it: the answer too
    assert before_answers((answer, two)) == (answer, two)
    assert before_answers((one, answer, note, two)) == (one, answer, note, two)
