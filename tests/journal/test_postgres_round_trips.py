"""PostgreSQL transactions run pipelined: a group commit is one round trip to the server, its
checks made there; a commit whose check fails runs again the long way, with the same result
as before the pipeline."""

from __future__ import annotations

import time
import uuid
from typing import Any

import attrs
import pytest
import trio

from lionexec.journal import Journal, JournalError, open_journal
from lionexec.journal.backends import Batch, Claim, MessageRow, Queued, RequestOp
from lionexec.tools import Tool

from ..support.postgres import (
    WAITING_FOR_A_LOCK,
    PostgresServer,
    terminate_sessions,
    until_sessions,
)

pytestmark = pytest.mark.timeout(60)


class Syncs:
    """Counts the round trips of the journal's pipelines: each sync, and each end of a
    pipeline (it syncs), by wrapping the real ``psycopg.Pipeline`` methods; and each
    pipeline sent from the trio thread (its results are read up to its one sync)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import psycopg

        from lionexec.journal.backends._postgres_trio import TrioConnection

        self.count = 0
        self.from_trio = 0
        sync, leave = psycopg.Pipeline.sync, psycopg.Pipeline.__exit__
        results = TrioConnection._results

        async def counted_results(pgconn: Any) -> Any:
            self.count += 1
            self.from_trio += 1
            return await results(pgconn)

        monkeypatch.setattr(TrioConnection, "_results", staticmethod(counted_results))

        def counted_sync(pipeline: Any) -> None:
            self.count += 1
            sync(pipeline)

        def counted_exit(pipeline: Any, *args: Any) -> None:
            self.count += 1
            leave(pipeline, *args)

        monkeypatch.setattr(psycopg.Pipeline, "sync", counted_sync)
        monkeypatch.setattr(psycopg.Pipeline, "__exit__", counted_exit)


async def double(x: int) -> int:
    return 2 * x


@pytest.mark.parametrize("strategy", ["sequential", "concurrent"])
async def test_a_group_commit_is_one_round_trip(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    syncs = Syncs(monkeypatch)
    async with open_journal(postgres_server.create_database()) as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(double, effect="pure"))
        async with branch:
            before, commits = syncs.count, journal.commits
            responses = await branch.act(
                [{"function": "double", "arguments": {"x": i}} for i in range(20)],
                strategy=strategy,  # type: ignore[arg-type]
            )
            trips, commits = syncs.count - before, journal.commits - commits
        assert [r.output for r in responses] == [2 * i for i in range(20)]
        assert commits >= 1 and trips == commits
        assert syncs.from_trio == trips  # every one sent from the trio thread
        # (before the pipeline: BEGIN, each statement and COMMIT were a round trip each)
        rows = await journal.backend.run(lambda store: store.calls(str(branch.id), False))
        assert [(r.state, r.attempts) for r in rows] == [("done", 1)] * 20


def _batch(branch_id: str, call_ids: list[str], *, seq: int = 0, tag: str = "") -> Batch:
    now = time.time()
    batch = Batch(branches=[(branch_id, now)])
    for offset, call_id in enumerate(call_ids):
        request_id = f"{tag}{call_id}-request"
        batch.messages.append(
            MessageRow(branch_id, seq + offset, request_id, "action_request", "{}", call_id)
        )
        batch.requests.append(
            RequestOp(
                key=f"{branch_id}/{call_id}",
                branch_id=branch_id,
                call_id=call_id,
                request_id=request_id,
                function="double",
                arguments="{}",
                effect="unsafe",
                at=now,
            )
        )
    return batch


async def _commit(journal: Journal, batch: Batch) -> list[Claim | Queued]:
    """*batch* committed by *journal*'s backend, as the group commit sends it."""
    return await journal.backend.run(lambda store: store.commit(batch), cancellable=False)


def _summary(claims: list[Claim | Queued]) -> list[tuple[str, bool, int]]:
    return [
        (c.row.call_id, c.mine, c.prior_attempts)
        for c in claims
        if isinstance(c, Claim)  # (no call of these tests is queued)
    ]


async def test_a_commit_whose_check_fails_runs_again_the_long_way(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same batch committed again (a commit that landed but was reported failed): its
    messages are there already and its keys are taken, so the commit's checks fail on the
    server and it runs the long way: nothing written twice, one more attempt per key. A
    position held by another message is refused, and the connection goes on working."""
    syncs = Syncs(monkeypatch)
    branch_id = str(uuid.uuid4())
    batch = _batch(branch_id, ["c1", "c2"])
    async with open_journal(postgres_server.create_database()) as journal:
        backend = journal.backend

        async def commit(batch: Batch) -> tuple[list[Claim | Queued], int]:
            before = syncs.count
            claims = await backend.run(lambda store: store.commit(batch), cancellable=False)
            return claims, syncs.count - before

        claims, trips = await commit(batch)
        assert _summary(claims) == [("c1", True, 0), ("c2", True, 0)] and trips == 1
        claims, trips = await commit(batch)  # again: the long way
        assert _summary(claims) == [("c1", True, 1), ("c2", True, 1)] and trips > 1
        rows = await backend.run(lambda store: store.messages(branch_id))
        assert [(r.seq, r.message_id) for r in rows] == [(0, "c1-request"), (1, "c2-request")]
        calls = await journal.calls(branch_id)
        assert [(c.call_id, c.attempts) for c in calls] == [("c1", 2), ("c2", 2)]

        # a new call and a taken key in one batch: the taken one is not this op's
        mixed = _batch(branch_id, ["c3"], seq=2)
        mixed.requests.append(_batch(branch_id, ["c1"], tag="other-").requests[0])
        claims, _ = await commit(mixed)
        assert _summary(claims) == [("c3", True, 0), ("c1", False, 2)]

        with pytest.raises(JournalError, match="another writer holds this branch's next"):
            await commit(_batch(branch_id, ["c9"], seq=1, tag="other-"))
        # nothing of the refused commit was written, and the next transactions run
        assert [c.call_id for c in await journal.calls(branch_id)] == ["c1", "c2", "c3"]
        claims, trips = await commit(_batch(branch_id, ["c4"], seq=3))
        assert _summary(claims) == [("c4", True, 0)] and trips == 1


async def test_a_commit_that_fails_half_way_leaves_nothing(
    postgres_server: PostgresServer,
) -> None:
    """A commit fails in its second statement before it is sent (here a value psycopg cannot
    send) once its first (the branch, the messages) was sent, unread: nothing of it is
    committed (the pipeline still ends with a sync), and the connection goes on working."""
    branch_id = str(uuid.uuid4())
    batch = _batch(branch_id, ["c1"])
    batch.requests[0] = attrs.evolve(batch.requests[0], arguments=object())
    async with open_journal(postgres_server.create_database()) as journal:
        backend = journal.backend
        with pytest.raises(JournalError, match="cannot adapt type 'object'"):
            await backend.run(lambda store: store.commit(batch), cancellable=False)
        assert await backend.run(lambda store: store.branches()) == []
        assert await backend.run(lambda store: store.messages(branch_id)) == []
        good = _batch(branch_id, ["c1"])
        claims = await backend.run(lambda store: store.commit(good), cancellable=False)
        assert _summary(claims) == [("c1", True, 0)]
        assert [m.message_id for m in await backend.run(lambda s: s.messages(branch_id))] == [
            "c1-request"
        ]


@pytest.mark.parametrize("n", [0, 1, 2, 8, 9, 40])
def test_rows_as_a_values_list_or_as_arrays_read_back_the_same(
    postgres_server: PostgresServer, n: int
) -> None:
    """A few rows go as a ``VALUES`` list, more as one array per column: the server reads
    the same rows either way (NULLs, text UTF-8 can hold, extreme floats included)."""
    import psycopg

    from lionexec.journal.backends._bulk import LISTED_ROWS, rows_from
    from lionexec.journal.backends._postgres import _placeholders

    types = ("text", "bigint", "text", "double precision", "integer")
    rows = [
        (f"b{i}", 2**62 - i, None if i % 3 else "é\u2028{}\"'\\", [1e308, -0.0, 5e-324][i % 3], i)
        for i in range(n)
    ]
    source, params = rows_from(types, rows)
    assert ("VALUES" in source) == (0 < n <= LISTED_ROWS)
    with psycopg.connect(postgres_server.create_database(), autocommit=True) as conn:
        read = conn.execute(_placeholders(f"SELECT * FROM {source}"), params).fetchall()
    assert read == rows


_SESSION = "pid = %s"
_WAITING = f"{_SESSION} AND {WAITING_FOR_A_LOCK}"


async def test_the_commit_connection_opens_with_the_journal_and_closes_with_it(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection group commits go over is opened with the journal (its first commit
    pays for no connection) and closed with it."""
    syncs = Syncs(monkeypatch)
    url = postgres_server.create_database()
    async with open_journal(url) as journal:
        backend: Any = journal.backend
        native = backend._native
        assert native is not None and native.usable()
        pid = native.conn.info.backend_pid
        await until_sessions(url, _SESSION, (pid,), some=True)
        branch_id = str(uuid.uuid4())
        assert _summary(await _commit(journal, _batch(branch_id, ["c1"]))) == [("c1", True, 0)]
        assert syncs.from_trio == 1 and backend._native is native
    assert native.closed
    await until_sessions(url, _SESSION, (pid,), some=False)


async def test_a_commit_connection_lost_between_commits_is_replaced_before_the_next(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commits go from the trio thread over a connection of their own: one the server
    ended while it was idle is found lost before the next commit is sent, which goes over a
    new connection (no commit fails for it)."""

    syncs = Syncs(monkeypatch)
    branch_id = str(uuid.uuid4())
    url = postgres_server.create_database()
    async with open_journal(url) as journal:
        backend: Any = journal.backend

        assert _summary(await _commit(journal, _batch(branch_id, ["c1"]))) == [("c1", True, 0)]
        assert syncs.from_trio == 1
        lost = backend._native
        pid = lost.conn.info.backend_pid
        terminate_sessions(url, _SESSION, (pid,))
        await until_sessions(url, _SESSION, (pid,), some=False)
        assert _summary(await _commit(journal, _batch(branch_id, ["c2"], seq=1))) == [
            ("c2", True, 0)
        ]
        assert syncs.from_trio == 2 and lost.closed
        assert backend._native.conn.info.backend_pid != pid
        calls = await journal.calls(branch_id)
        assert [(c.call_id, c.attempts) for c in calls] == [("c1", 1), ("c2", 1)]


async def test_a_commit_connection_the_server_said_it_ends_is_not_used_again(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server sends its ``FATAL`` message before it closes the socket, and the close may
    come later than the next commit: the message alone makes the connection unusable. (The
    close is made to look late: the socket is seen readable once, for the message.)"""
    import select
    import types

    from lionexec.journal.backends import _postgres_trio

    url = postgres_server.create_database()
    async with open_journal(url) as journal:
        backend: Any = journal.backend
        await _commit(journal, _batch(str(uuid.uuid4()), ["c1"]))
        native = backend._native
        native.conn.execute("DO $$ BEGIN RAISE WARNING 'only a warning'; END $$")
        assert native.usable()  # (a notice of another severity ends nothing)
        pid = native.conn.info.backend_pid
        terminate_sessions(url, _SESSION, (pid,))
        await until_sessions(url, _SESSION, (pid,), some=False)
        looks: list[bool] = []

        def once_readable(r: Any, w: Any, x: Any, timeout: float) -> Any:
            looks.append(True)
            return select.select(r, w, x, timeout) if len(looks) == 1 else ([], [], [])

        monkeypatch.setattr(_postgres_trio, "select", types.SimpleNamespace(select=once_readable))
        assert not native.usable()
        assert native.closed and len(looks) == 2


async def test_a_commit_whose_connection_is_lost_under_way_fails_and_the_next_opens_another(
    postgres_server: PostgresServer,
) -> None:
    """A connection lost while a commit waits on the server fails that commit as a
    connection error (it did not land: the server rolled it back); the next commit opens a
    new connection."""
    import psycopg

    from lionexec.journal import JournalConnectionError

    branch_id = str(uuid.uuid4())
    url = postgres_server.create_database()
    async with open_journal(url) as journal:
        backend: Any = journal.backend

        await _commit(journal, _batch(branch_id, ["c1"]))
        pid = backend._native.conn.info.backend_pid
        holder = psycopg.connect(url)  # another session holds the calls table
        holder.execute("LOCK TABLE lionexec_calls IN ACCESS EXCLUSIVE MODE")
        try:
            async with trio.open_nursery() as nursery:

                async def terminate_when_waiting() -> None:
                    await until_sessions(url, _WAITING, (pid,), some=True)
                    terminate_sessions(url, _SESSION, (pid,))

                nursery.start_soon(terminate_when_waiting)
                with pytest.raises(JournalConnectionError, match="PostgreSQL at "):
                    await _commit(journal, _batch(branch_id, ["c2"], seq=1))
        finally:
            holder.rollback()
            holder.close()
        claims = await _commit(journal, _batch(branch_id, ["c2"], seq=1))
        assert _summary(claims) == [("c2", True, 0)]
        assert backend._native.conn.info.backend_pid != pid
        calls = await journal.calls(branch_id)
        assert [(c.call_id, c.attempts) for c in calls] == [("c1", 1), ("c2", 1)]


async def test_a_commit_the_server_refuses_is_rolled_back_and_its_connection_goes_on(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement sent from the trio thread that fails (here a NUL character, which no
    PostgreSQL text holds) fails its commit alone: nothing of it is written, and the next
    commit goes over the same connection."""
    syncs = Syncs(monkeypatch)
    branch_id = str(uuid.uuid4())
    async with open_journal(postgres_server.create_database()) as journal:
        backend: Any = journal.backend

        await _commit(journal, _batch(branch_id, ["c1"]))
        pid = backend._native.conn.info.backend_pid
        bad = _batch(branch_id, ["c2"], seq=1)
        bad.messages[0] = attrs.evolve(bad.messages[0], body='"\x00"')
        refused = r"CharacterNotInRepertoire: invalid byte sequence .*0x00"
        with pytest.raises(JournalError, match=refused):
            await _commit(journal, bad)
        assert [c.call_id for c in await journal.calls(branch_id)] == ["c1"]
        assert _summary(await _commit(journal, _batch(branch_id, ["c2"], seq=1))) == [
            ("c2", True, 0)
        ]
        assert backend._native.conn.info.backend_pid == pid and syncs.from_trio >= 3
        rows = await backend.run(lambda store: store.messages(branch_id))
        assert [(r.seq, r.message_id) for r in rows] == [(0, "c1-request"), (1, "c2-request")]


@pytest.mark.parametrize("n", [0, 1, 9, 40])
async def test_rows_sent_from_the_trio_thread_read_back_the_same(
    postgres_server: PostgresServer, n: int
) -> None:
    """The trio-driven connection sends rows as the thread-driven one does (psycopg's
    dumpers, arrays in binary): the server reads the same rows, unnamed and then prepared.
    A value not of its column's type is refused, and the connection goes on."""
    import psycopg

    from lionexec.journal.backends._bulk import rows_from
    from lionexec.journal.backends._postgres_trio import TrioConnection

    types = ("text", "bigint", "text", "double precision", "integer")
    rows = [
        (
            f"b{i}",
            2**62 - i if i % 2 else -(2**63),
            None if i % 3 else "é\u2028{}\"'\\\U0001f600",
            [1e308, -0.0, 5e-324, float("inf")][i % 4],
            -(2**31) + i,
        )
        for i in range(n)
    ]
    source, params = rows_from(types, rows)
    with psycopg.connect(postgres_server.create_database(), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (a text, b bigint, c text, d double precision, e integer)")
        sending = TrioConnection(conn)
        for _ in range(3):  # (prepared the second time)
            await sending.transact([(f"INSERT INTO t SELECT * FROM {source}", params)])
        assert conn.execute("SELECT * FROM t").fetchall() == rows * 3
        if n > 8:
            wrong = [params[0], ["not a number"] * n, *params[2:]]
            with pytest.raises(psycopg.DataError):
                await sending.transact([(f"INSERT INTO t SELECT * FROM {source}", wrong)])
            await sending.transact([(f"INSERT INTO t SELECT * FROM {source}", params)])
            assert len(conn.execute("SELECT * FROM t").fetchall()) == 4 * n


async def test_a_commit_interrupted_mid_pipeline_never_leaves_its_connection_in_use(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt while a commit's pipeline is under way (sent, not read) reaches
    the caller; the connection, whose state is unknown then, is closed, and the next commit
    opens another."""
    from lionexec.journal.backends._postgres_trio import TrioConnection

    branch_id = str(uuid.uuid4())
    async with open_journal(postgres_server.create_database()) as journal:
        backend: Any = journal.backend

        await _commit(journal, _batch(branch_id, ["c1"]))
        interrupted = backend._native
        results = TrioConnection._results

        async def interrupt(pgconn: Any) -> Any:
            raise KeyboardInterrupt

        monkeypatch.setattr(TrioConnection, "_results", staticmethod(interrupt))
        with pytest.raises(KeyboardInterrupt):
            await _commit(journal, _batch(branch_id, ["c2"], seq=1))
        assert interrupted.closed and not interrupted.busy
        monkeypatch.setattr(TrioConnection, "_results", staticmethod(results))
        claims = await _commit(journal, _batch(branch_id, ["c3"], seq=2))
        assert _summary(claims) == [("c3", True, 0)] and backend._native is not interrupted
        assert "c3" in [c.call_id for c in await journal.calls(branch_id)]
