"""How commits are made: outcomes share the next call's commit, the SQLite writer thread, and
the bound on a group commit (``commit_timeout``)."""

from __future__ import annotations

import collections
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec.conversation import ActionOutcome, Instruction
from lionexec.errors import NotDurableError
from lionexec.journal import Journal, JournalConnectionError, MemoryJournal, SqliteJournal
from lionexec.journal.backends import MemoryBackend, SqliteBackend
from lionexec.tools import Tool

from .conftest import JournalFactory


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calls(n: int) -> list[dict[str, Any]]:
    return [{"function": "add", "arguments": {"a": i, "b": 1}} for i in range(n)]


# -- outcomes ride along with the next commit --------------------------------------------------


async def test_a_sequential_batch_pays_one_commit_per_call(journals: JournalFactory) -> None:
    n = 20
    with trio.fail_after(30):  # real clock: a lingering outcome would wait 1e6 s
        async with journals.new() as journal:
            journal.linger = 1e6  # only a commit led by someone else, or a waiter, ends it
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                responses = await branch.act(calls(n), strategy="sequential")
                # act() returned: every outcome is committed (seen by another journal object)
                async with journals.new() as other:
                    done = await other.calls(branch.id)
            assert [r.output for r in responses] == [i + 1 for i in range(n)]
            assert [c.done for c in done] == [True] * n
            # each write-ahead carried the outcome before it; the last one came with act()
            assert journal.commits <= n + 1, journal.commits


async def boom(x: int) -> int:
    """Fail (an async tool)."""
    raise RuntimeError(f"boom {x}")


@pytest.mark.parametrize(
    ("shape", "strategy"),
    [("one", "concurrent"), ("batch", "concurrent"), ("batch", "sequential")],
)
async def test_a_failure_raised_by_act_is_committed_before_it_is_raised(
    journals: JournalFactory, shape: str, strategy: str
) -> None:
    """``suppress_errors=False``: the failed call's exception leaves act() only once the
    journal holds what the act recorded (the failure, the calls cancelled or never started
    because of it), as a returning act() does. Another journal object sees it at once."""
    failing = {"function": "boom", "arguments": {"x": 1}}
    proposals: Any = (
        failing if shape == "one" else [calls(1)[0], failing, *calls(3)]  # (add, boom, add...)
    )
    with trio.fail_after(30):  # real clock: a lingering outcome would wait 1e6 s
        async with journals.new() as journal:
            journal.linger = 1e6  # only a commit led by someone else, or a waiter, ends it
            branch = await journal.branch()
            branch.register_tools([add, Tool.from_function(boom, effect="pure")])
            async with branch:
                with pytest.raises(RuntimeError, match="boom 1"):
                    await branch.act(proposals, strategy=strategy, suppress_errors=False)
                sink = journal._engine.sinks[branch.name]
                assert sink.committed == branch.messages.appended
                async with journals.new() as other:
                    done = await other.calls(branch.id)
                    stored = await other.history(branch.id)
            assert [m.id for m in stored] == [m.id for m in branch.messages]
            assert all(c.done for c in done)
            assert ActionOutcome.FAILED.value in {c.outcome for c in done}


async def test_small_sqlite_commits_run_on_the_trio_thread_and_large_ones_on_the_writer(
    tmp_path: Path,
) -> None:
    async with SqliteJournal(tmp_path / "j.db") as journal:
        backend = journal.backend
        assert isinstance(backend, SqliteBackend)
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            with trio.fail_after(30):
                await branch.act(calls(10), strategy="sequential")
            inline, total = backend.transactions_now, backend.transactions
            assert inline >= 10, (inline, total)  # each write-ahead, with an outcome along
            with trio.fail_after(30):
                responses = await branch.act(calls(200))  # one group: too big to run inline
            commits = backend.transactions - total
            assert commits <= 20  # grouped (200 calls)
            # the 200 write-aheads' commit went to the writer thread (only small groups of
            # outcomes, if any, ran on the trio thread)
            assert commits - (backend.transactions_now - inline) >= 1
        assert [r.output for r in responses] == [i + 1 for i in range(200)]
        assert [c.done for c in await journal.calls(branch.id)] == [True] * 210


async def test_power_durability_never_commits_on_the_trio_thread(tmp_path: Path) -> None:
    async with SqliteJournal(tmp_path / "j.db", durability="power") as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            with trio.fail_after(30):
                await branch.act(calls(5), strategy="sequential")
        backend = journal.backend
        assert isinstance(backend, SqliteBackend)
        assert backend.transactions >= 5
        assert backend.transactions_now == 0  # (each commit fsyncs: on the writer thread)


async def test_the_trio_thread_never_waits_for_another_connections_write_lock(
    tmp_path: Path,
) -> None:
    # Another connection holds the write lock: a commit that would have run on the trio
    # thread goes to the writer thread, which waits; the trio thread runs other tasks meanwhile.
    path = tmp_path / "j.db"
    async with SqliteJournal(path) as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                async with trio.open_nursery() as nursery:
                    done = trio.Event()
                    result: list[Any] = []

                    async def act() -> None:
                        result.extend(await branch.act(calls(1)))
                        done.set()

                    nursery.start_soon(act)
                    with trio.fail_after(30):  # the trio thread is free: every task parks
                        await trio.testing.wait_all_tasks_blocked()
                    assert not done.is_set()  # its write-ahead waits for the lock
                    holder.execute("ROLLBACK")
                    with trio.fail_after(30):
                        await done.wait()
            finally:
                holder.close()
        assert [r.outcome for r in result] == [ActionOutcome.COMPLETED]
        backend = journal.backend
        assert isinstance(backend, SqliteBackend)
        assert backend.transactions > backend.transactions_now  # (that one on the writer)


async def test_a_call_waiting_for_a_key_does_not_wait_for_a_lingering_outcome(
    journals: JournalFactory,
) -> None:
    runs: list[int] = []

    def once(n: int) -> int:
        runs.append(n)
        return n

    tool = Tool.from_function(once, effect="keyed", idempotency_key=lambda args: "one")
    with trio.fail_after(30):
        async with journals.new() as journal:
            journal.linger = 1e6
            branch = await journal.branch()
            branch.register_tools(tool)
            async with branch:
                # two calls of one key in one batch: the second waits for the first's outcome
                # (which lingers, and act() cannot return before the second is answered)
                first, second = await branch.act([{"function": "once", "arguments": {"n": 5}}] * 2)
    assert runs == [5]
    assert (first.output, second.output) == (5, 5)


async def test_an_outcome_write_lingers_at_most_linger_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryJournal() as journal:
        journal.linger = 5.0
        branch = await journal.branch()
        sink = journal._engine.sinks[branch.name]
        start = trio.current_time()
        await sink.write([])  # nobody else commits: it commits itself after 5 s
        assert trio.current_time() - start == pytest.approx(5.0)
        assert journal.commits == 1


async def test_a_commit_led_by_another_caller_carries_a_lingering_outcome(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryJournal() as journal:
        journal.linger = 5.0
        branch = await journal.branch()
        sink = journal._engine.sinks[branch.name]
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.write, [])
            await trio.testing.wait_all_tasks_blocked()
            await journal.flush()  # an eager commit: takes the lingering one along
        assert trio.current_time() == start
        assert journal.commits == 1


async def test_a_write_of_records_already_committed_commits_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from lionexec.act import EvidenceRecord

    async with MemoryJournal() as journal:
        journal.linger = 5.0
        branch = await journal.branch()
        branch.register_tools(add)
        sink = journal._engine.sinks[branch.name]
        async with branch:
            await branch.act(calls(2))
            [request, _] = branch.messages.requests()
            record = EvidenceRecord(request, branch.messages.responses()[0], None, None)
            before, start = journal.commits, trio.current_time()
            await sink.write([record])  # (act() returned: its commits carried the records)
            assert (journal.commits, trio.current_time()) == (before, start)
            branch.messages.add_message(Instruction(content="by hand"))
            await sink.write([record])  # the history holds more: it commits
            assert journal.commits == before + 1
            assert sink.committed == branch.messages.appended


async def test_expedite_ends_the_lingering(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryJournal() as journal:
        journal.linger = 5.0
        branch = await journal.branch()
        sink = journal._engine.sinks[branch.name]
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.write, [])
            await trio.testing.wait_all_tasks_blocked()
            sink.expedite()
        assert trio.current_time() == start
        assert journal.commits == 1


# -- the caller's trips through the scheduler --------------------------------------------------


async def echo(x: int) -> int:
    """Return *x* (an async tool: no worker thread, no schedule point of its own)."""
    return x


class _Suspended(trio.abc.Instrument):
    """The functions the coroutine chain of *task* is suspended in, at each of its steps."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps: list[set[str]] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            names: set[str] = set()
            coro: Any = task.coro
            while coro is not None and getattr(coro, "cr_frame", None) is not None:
                names.add(coro.cr_frame.f_code.co_name)
                coro = coro.cr_await
            self.steps.append(names)


async def test_the_write_ahead_point_is_no_schedule_point_of_its_own(tmp_path: Path) -> None:
    """A call has passed a schedule point just before its write-ahead (act()'s own, the one
    before each call of a sequential batch): the act layer adds none at the write-ahead point
    (the journal's group commit may still yield to tasks ready to share it), nor, once it
    has waited, at the end of the wait for the outcome's commit. A one-call act resumes its
    task twice: after its checkpoint, and once its outcome is committed."""
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(echo, effect="pure"))
        async with branch:
            await branch.act({"function": "echo", "arguments": {"x": 0}})  # (opens it all)
            one = [{"function": "echo", "arguments": {"x": 1}}]
            ten = [{"function": "echo", "arguments": {"x": i}} for i in range(2, 12)]
            seen: list[list[set[str]]] = []
            for batch in (one, ten):
                suspended = _Suspended(trio.lowlevel.current_task())
                trio.lowlevel.add_instrument(suspended)
                try:
                    with trio.fail_after(30):
                        responses = await branch.act(batch, strategy="sequential")
                finally:
                    trio.lowlevel.remove_instrument(suspended)
                assert [r.outcome for r in responses] == [ActionOutcome.COMPLETED] * len(batch)
                assert journal._engine.sinks[branch.name].committed == branch.messages.appended
                seen.append(suspended.steps)
    for steps in seen:
        assert steps, "act() is always a checkpoint"
        assert not any("wait_writable" in names for names in steps), steps
    assert len(seen[0]) == 2, seen[0]


# -- who is woken when a commit ends -----------------------------------------------------------


class _Steps(trio.abc.Instrument):
    """Counts the scheduler steps of each task spawned while it is installed."""

    def __init__(self) -> None:
        self.steps: dict[trio.lowlevel.Task, int] = {}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.steps[task] = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self.steps:
            self.steps[task] += 1


def _gated(journal: Journal) -> trio.Event:
    """Make *journal*'s backend wait, in every transaction, for the event returned."""
    gate = trio.Event()
    run = journal.backend.run

    async def held(fn: Any, *, cancellable: bool = True) -> Any:
        await gate.wait()
        return await run(fn, cancellable=cancellable)

    journal.backend.run = held  # type: ignore[method-assign]
    return gate


async def test_a_commit_wakes_its_own_waiters_and_one_leader_not_every_waiter() -> None:
    n = 50
    async with MemoryJournal() as journal:
        branch = await journal.branch()
        sink = journal._engine.sinks[branch.name]
        gate = _gated(journal)
        steps = _Steps()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sink.flush)  # leads the first commit, which waits at the gate
                await trio.testing.wait_all_tasks_blocked()
                branch.messages.add_message(Instruction(content="hello"))
                trio.lowlevel.add_instrument(steps)
                for _ in range(n):
                    nursery.start_soon(sink.flush)  # queued behind it
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
            trio.lowlevel.remove_instrument(steps)
        assert journal.commits == 2  # the first, then one for all the queued writes
        waiters = list(steps.steps.values())
        assert len(waiters) == n
        # each: its start, and its wake-up once the second commit took it; one of them (more
        # steps) was woken to lead that commit. (Every waiter was woken after each commit.)
        assert sorted(waiters)[:-1] == [2] * (n - 1), collections.Counter(waiters)


async def test_a_waiter_cancelled_in_the_queue_leaves_it_and_the_others_commit() -> None:
    async with MemoryJournal() as journal:
        branch = await journal.branch()
        sink = journal._engine.sinks[branch.name]
        gate = _gated(journal)
        done: list[str] = []

        async def flush(
            name: str, task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED
        ) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await sink.flush()
                done.append(name)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                try:
                    nursery.start_soon(flush, "leader")
                    await trio.testing.wait_all_tasks_blocked()
                    branch.messages.add_message(Instruction(content="hello"))
                    first = await nursery.start(flush, "first")
                    await nursery.start(flush, "second")
                    await trio.testing.wait_all_tasks_blocked()
                    assert len(journal._engine._pending) == 2
                    first.cancel()  # it was next in line to lead
                    await trio.testing.wait_all_tasks_blocked()
                    assert len(journal._engine._pending) == 1
                finally:
                    gate.set()
        assert sorted(done) == ["leader", "second"]
        assert journal._engine._pending == [] and not journal._engine._committing
        assert journal.commits == 2
        assert [m.content for m in await journal.history(branch.id)] == ["hello"]


async def test_an_outcome_lingering_through_a_commit_lingers_afresh_once_it_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryJournal() as journal:
        journal.linger = 5.0
        branch = await journal.branch()
        sink = journal._engine.sinks[branch.name]
        gate = _gated(journal)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sink.flush)  # leads a commit, held at the gate
                await trio.testing.wait_all_tasks_blocked()
                branch.messages.add_message(Instruction(content="hello"))
                nursery.start_soon(sink.write, [])  # lingers while that commit runs
                await trio.sleep(1.0)
                ended = trio.current_time()
                gate.set()
        # nobody else led a commit: it committed itself a whole linger after the first ended
        assert trio.current_time() - ended == pytest.approx(5.0)
        assert journal.commits == 2
        assert [m.content for m in await journal.history(branch.id)] == ["hello"]


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["flush", "write", "cancel", "expedite", "sleep"]), st.integers(0, 3)
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_the_commit_queue_under_random_arrivals_cancellations_and_expedites(
    ops: list[tuple[str, int]],
) -> None:
    """Eager writes (``flush``) and lingering ones (``write``) arrive while commits of varied
    length run; some waiters are cancelled, some lingering is cut short. Nothing deadlocks,
    every write that was not cancelled returns only once a commit took what it queued, and
    the queue ends empty."""

    async def scenario() -> None:
        async with MemoryJournal() as journal:
            journal.linger = 0.5
            branch = await journal.branch()
            sink = journal._engine.sinks[branch.name]
            run = journal.backend.run
            lengths = iter([k for op, k in ops if op == "flush"] * 3)

            async def slow(fn: Any, *, cancellable: bool = True) -> Any:
                await trio.sleep(0.01 * next(lengths, 1))  # a commit of some length
                return await run(fn, cancellable=cancellable)

            journal.backend.run = slow  # type: ignore[method-assign]
            scopes: list[trio.CancelScope] = []
            outcomes: list[str] = []

            async def write(eager: bool, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                queued = branch.messages.appended  # what this write must see committed
                with trio.CancelScope() as scope:
                    task_status.started(scope)
                    await (sink.flush() if eager else sink.write([]))
                    assert sink._mirrored >= queued, (sink._mirrored, queued)
                    outcomes.append("done")
                    return
                outcomes.append("cancelled")

            with trio.fail_after(1_000):  # (trio's clock: a deadlock jumps straight to it)
                async with trio.open_nursery() as nursery:
                    for op, k in ops:
                        if op in ("flush", "write"):
                            branch.messages.add_message(Instruction(content=f"m{len(scopes)}"))
                            scopes.append(await nursery.start(write, op == "flush"))
                        elif op == "cancel" and scopes:
                            scopes[k % len(scopes)].cancel()
                        elif op == "expedite":
                            sink.expedite()
                        else:
                            await trio.sleep(0.01 * k)
            assert len(outcomes) == len(scopes)
            assert journal._engine._pending == [] and not journal._engine._committing
            journal.backend.run = run  # type: ignore[method-assign]
            await journal.flush()
            committed = [m.content for m in await journal.history(branch.id)]
            assert committed == [f"m{i}" for i in range(len(scopes))]

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))


# -- the SQLite writer thread --------------------------------------------------------------------


async def test_sqlite_runs_every_transaction_on_one_writer_thread(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with SqliteJournal(tmp_path / "j.db", checkpoint_commits=1) as journal:
            seen = {await journal._run(lambda store: threading.get_ident()) for _ in range(5)}
            branch = await journal.branch()
            branch.register_tools(add)
            async with branch:
                await branch.act(calls(10), strategy="sequential")
            seen.add(await journal._run(lambda store: threading.get_ident()))
        async with SqliteJournal(tmp_path / "j.db") as reopened:
            assert len(await reopened.calls(branch.id)) == 10
    assert len(seen) == 1
    assert threading.get_ident() not in seen


async def test_a_cancelled_sqlite_read_is_abandoned_at_once(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteJournal(path, busy_timeout=60) as journal:
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the write lock: the journal's next transaction waits
        try:
            with trio.move_on_after(0.2) as scope:  # real clock: the writer thread is blocked
                await journal.calls()
            assert scope.cancelled_caught
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        with trio.fail_after(30):
            assert await journal.calls() == []  # the writer is free again


# -- commit_timeout: a group commit is bounded ----------------------------------------------


def test_commit_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="commit_timeout"):
        Journal(MemoryBackend(), commit_timeout=0)


async def test_a_hung_sqlite_commit_fails_past_commit_timeout(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    ran: list[int] = []

    def record(n: int) -> int:
        """Record n."""
        ran.append(n)
        return n

    async with SqliteJournal(path, busy_timeout=3600, commit_timeout=0.5) as journal:
        branch = await journal.branch()
        branch.register_tools(record)
        async with branch:
            await branch.act({"function": "record", "arguments": {"n": 0}})
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            try:
                # (the bound is on the wall clock) The outcome commit times out too: act()
                # raises, its response is not one the journal holds.
                with trio.fail_after(30), pytest.raises(NotDurableError) as caught:
                    await branch.act({"function": "record", "arguments": {"n": 1}})
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert isinstance(caught.value.__cause__, JournalConnectionError)
            [response] = caught.value.responses
            assert response.outcome is ActionOutcome.FAILED
            assert response.error is not None
            assert "did not answer within 0.5 s" in response.error.message
            assert "may or may not have landed" in response.error.message
            assert ran == [0]  # the tool did not run
            [again] = await branch.act({"function": "record", "arguments": {"n": 2}})
            assert again.outcome is ActionOutcome.COMPLETED
    assert ran == [0, 2]
    async with SqliteJournal(path) as journal:  # the next commit carried the failed call
        history = await journal.history(branch.id)
        assert [r.outcome for r in history.responses()] == [
            ActionOutcome.COMPLETED,
            ActionOutcome.FAILED,
            ActionOutcome.COMPLETED,
        ]


async def test_a_group_commit_past_commit_timeout_is_a_named_connection_error() -> None:
    async with MemoryJournal() as journal:
        journal.commit_timeout = 0.2
        never = trio.Event()
        abandoned: list[bool] = []

        async def hung(fn: Any, *, cancellable: bool = True) -> Any:
            abandoned.append(cancellable)  # a bounded commit lets the backend abandon it
            await never.wait()

        branch = await journal.branch()
        branch.messages.add_message(Instruction(content="hello"))
        journal.backend.run = hung  # type: ignore[method-assign]
        with trio.fail_after(30), pytest.raises(JournalConnectionError) as caught:
            await journal._engine.sinks[branch.name].flush()
        assert "did not answer within 0.2 s" in str(caught.value)
        assert abandoned == [True]
        # nothing was lost: the message is committed by the next commit that works
        del journal.backend.run
        await journal.flush()
        assert [m.content for m in await journal.history(branch.id)] == ["hello"]


def _lock_waiters(url: str) -> int:
    """Sessions of *url*'s database waiting for a lock, once the count reaches 0 (or after
    500 looks): a cancelled query leaves its wait soon after the cancel request."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        count = -1
        for _ in range(500):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            count = int(row[0]) if row is not None else 0
            if count == 0:
                break
        return count


async def test_a_hung_postgres_commit_is_cancelled_on_the_server_past_commit_timeout(
    postgres_server: Any,
) -> None:
    import psycopg

    from lionexec.journal import PostgresJournal

    url = postgres_server.create_database()
    async with PostgresJournal(url, commit_timeout=0.5) as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            await branch.act(calls(1))
            holder = psycopg.connect(url)  # another session locks the calls table
            holder.execute("LOCK TABLE lionexec_calls IN ACCESS EXCLUSIVE MODE")
            try:
                # (the bound is on the wall clock) The outcome commit times out too: act()
                # raises, its response is not one the journal holds.
                with trio.fail_after(30), pytest.raises(NotDurableError) as caught:
                    await branch.act(calls(1)[0] | {"call_id": "call_hung"})
                [response] = caught.value.responses
                assert response.outcome is ActionOutcome.FAILED
                assert response.error is not None
                assert "did not answer within 0.5 s" in response.error.message
                # the abandoned commit's query was cancelled on the server: nothing waits
                assert _lock_waiters(url) == 0
            finally:
                holder.rollback()
                holder.close()
            [again] = await branch.act(calls(1)[0] | {"call_id": "call_after"})
            assert again.outcome is ActionOutcome.COMPLETED
        journaled = {c.call_id for c in await journal.calls(branch.id)}
    assert "call_hung" not in journaled  # it did not land
    assert "call_after" in journaled


async def test_a_mock_clock_jumping_while_a_commit_runs_does_not_time_it_out(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # the autojump clock jumps to the next deadline whenever trio waits for the writer
    # thread: a bound on trio's clock would fail these commits at once
    async with SqliteJournal(tmp_path / "j.db", commit_timeout=1.0) as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch, trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 3600)  # a far deadline for the clock to jump to
            responses = await branch.act(calls(20), strategy="sequential")
            nursery.cancel_scope.cancel()
    assert [r.outcome for r in responses] == [ActionOutcome.COMPLETED] * 20


async def test_a_commit_that_landed_past_commit_timeout_leaves_its_branches_writable(
    journals: JournalFactory,
) -> None:
    # the commit lands, then its answer comes too late: its waiters are told it failed and
    # the next commit writes the same messages again (at the same positions)
    journal = journals.new()
    journal.commit_timeout = 0.2
    async with journal:
        one, two = await journal.branch(), await journal.branch()
        one.register_tools(add)
        two.register_tools(add)
        real = journal.backend.run
        late: list[bool] = []

        async def landed_late(fn: Any, *, cancellable: bool = True) -> Any:
            result = await real(fn, cancellable=cancellable)
            if late:
                late.pop()
                await trio.sleep_forever()  # (the watchdog ends it, on the wall clock)
            return result

        journal.backend.run = landed_late  # type: ignore[method-assign]
        journal._engine._run_now = None  # (every commit through run: none on the trio thread)
        async with one, two:
            one.messages.add_message(Instruction(content="first"))
            late.append(True)
            with trio.fail_after(30), pytest.raises(JournalConnectionError):
                await journal._engine.sinks[one.name].flush()
            assert late == []
            [response] = await one.act(calls(1))
            two.messages.add_message(Instruction(content="other"))
            await journal.flush()
        assert response.outcome is ActionOutcome.COMPLETED
        history = await journal.history(one.id)
        assert [m.kind for m in history][0:1] == ["instruction"]
        assert len(history) == len(one.messages)
        assert [m.content for m in await journal.history(two.id)] == ["other"]
        [call] = await journal.calls(one.id)
        assert call.done


async def test_a_write_ahead_that_landed_past_commit_timeout_is_harmless_again(
    journals: JournalFactory,
) -> None:
    journal = journals.new()
    journal.commit_timeout = 0.2
    ran: list[int] = []

    def record(n: int) -> int:
        """Record n."""
        ran.append(n)
        return n

    async with journal:
        branch = await journal.branch()
        branch.register_tools(record)
        real = journal.backend.run
        late: list[bool] = []

        async def landed_late(fn: Any, *, cancellable: bool = True) -> Any:
            result = await real(fn, cancellable=cancellable)
            if late:
                late.pop()
                await trio.sleep_forever()
            return result

        journal.backend.run = landed_late  # type: ignore[method-assign]
        journal._engine._run_now = None  # (every commit through run: none on the trio thread)
        async with branch:
            late.append(True)
            with trio.fail_after(30):
                [lost] = await branch.act({"function": "record", "arguments": {"n": 1}})
            assert lost.outcome is ActionOutcome.FAILED  # its write-ahead "failed"
            with trio.fail_after(30):
                [again] = await branch.act({"function": "record", "arguments": {"n": 2}})
            assert again.outcome is ActionOutcome.COMPLETED
        assert ran == [2]
        assert len(await journal.history(branch.id)) == len(branch.messages)


async def test_abandoning_a_transaction_as_it_ends_does_not_interrupt_the_next(
    tmp_path: Path,
) -> None:
    # The interrupt of an abandoned transaction races with the writer moving on: it must not
    # reach the next transaction's statement.
    from lionexec.journal.backends import SqliteBackend

    backend = SqliteBackend(tmp_path / "j.db")
    await backend.open()
    conn = backend._conn
    assert conn is not None
    a_inside, release_a = threading.Event(), threading.Event()
    b_running, release_b = threading.Event(), threading.Event()

    def slow(value: int) -> int:  # (in the next transaction's statement)
        b_running.set()
        release_b.wait(10)
        return value

    conn.create_function("slow", 1, slow)

    class Racing:
        """The connection, whose interrupt lets the writer move on to the next job first."""

        def __getattr__(self, name: str) -> Any:
            return getattr(conn, name)

        def interrupt(self) -> None:
            release_a.set()  # the abandoned transaction ends now
            b_running.wait(1)  # (times out once the writer waits for the interrupt)
            assert conn is not None
            conn.interrupt()
            release_b.set()

    backend._conn = Racing()  # type: ignore[assignment]

    def job_a(store: Any) -> None:
        a_inside.set()
        release_a.wait(10)

    results: list[Any] = []
    scopes: list[trio.CancelScope] = []

    async def run_a() -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await backend.run(job_a)

    async def run_b() -> None:
        results.append(await backend.run(lambda store: store.tx.execute("SELECT slow(7)")))

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_a)
                await trio.to_thread.run_sync(a_inside.wait)
                nursery.start_soon(run_b)
                await trio.testing.wait_all_tasks_blocked()
                scopes[0].cancel()  # abandoned: interrupted, as the writer moves on
        assert results == [[(7,)]]
    finally:
        release_a.set()
        release_b.set()
        backend._conn = conn
        await backend.aclose()


def test_the_threads_of_a_journal_never_closed_end_with_its_trio_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionexec.journal.backends import _sqlite as sqlite_module

    monkeypatch.setattr(sqlite_module, "_ORPHAN_PROBE", 0.01)
    threads: list[threading.Thread] = []

    async def forget_to_close() -> None:
        journal = SqliteJournal(tmp_path / "j.db")
        await journal.open()
        branch = await journal.branch()
        branch.messages.add_message(Instruction(content="hello"))
        await journal._engine.sinks[branch.name].flush()
        backend = journal.backend
        assert isinstance(backend, sqlite_module.SqliteBackend)
        assert backend._writer is not None and backend._checkpointer is not None
        threads.extend([backend._writer._thread, backend._checkpointer._thread])

    trio.run(forget_to_close)
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive(), thread.name


async def test_a_memory_journal_has_no_commit_timeout_and_no_watchdog_thread() -> None:
    async with MemoryJournal() as journal:
        assert journal.commit_timeout is None
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            await branch.act(calls(2))
        assert journal._engine._watchdog is None


async def test_a_commit_after_the_journal_closed_starts_no_watchdog() -> None:
    from lionexec.journal import JournalError
    from lionexec.journal.backends import Batch

    journal = Journal(MemoryBackend(), commit_timeout=5.0)
    async with journal:
        pass
    with pytest.raises(JournalError, match="not open"):
        await journal._engine._commit_batch(Batch())
    assert journal._engine._watchdog is None


def test_sqlite_retries_the_begin_on_every_kind_of_busy(tmp_path: Path) -> None:
    from lionexec.journal.backends._sqlite import SqliteBackend, _Job

    backend = SqliteBackend(tmp_path / "j.db", busy_timeout=60)
    answers: list[int] = [sqlite3.SQLITE_BUSY_RECOVERY, sqlite3.SQLITE_BUSY_SNAPSHOT]

    class Busy:
        def execute(self, sql: str) -> None:
            if answers:
                error = sqlite3.OperationalError("database is locked")
                error.sqlite_errorcode = answers.pop(0)
                raise error

    job: _Job[None] = _Job(lambda job: None, None)
    backend._begin(Busy(), job)  # type: ignore[arg-type]
    assert answers == []


async def test_an_expedite_is_not_lost_to_another_branch_leading_meanwhile(
    mock_clock: trio.testing.MockClock,
) -> None:
    # trio's clock stands still: an outcome left lingering would wait forever, so act()
    # returning at all says that every outcome it waited for was expedited
    stuck = 0
    async with MemoryJournal() as journal:

        async def inc(a: int) -> int:  # (async: a tool in a thread would look like a stall)
            """Increment a."""
            return a + 1

        branches = [await journal.branch() for _ in range(3)]
        for branch in branches:
            branch.register_tools(inc)
        done = trio.Event()

        async def act_all() -> None:
            async with trio.open_nursery() as nursery:
                for branch in branches:
                    nursery.start_soon(act_each, branch)
            done.set()

        async def act_each(branch: Any) -> None:
            async with branch:
                for i in range(30):
                    await branch.act({"function": "inc", "arguments": {"a": i}})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(act_all)
            while not done.is_set():
                await trio.testing.wait_all_tasks_blocked()
                if not done.is_set():
                    stuck += 1  # everything waits for the clock
                    mock_clock.jump(1)
    assert stuck == 0


# -- statements per commit (SQLite) --------------------------------------------------------------


def _journal_file(tmp_path: Path) -> sqlite3.Connection:
    path = tmp_path / "journal.db"

    async def create() -> None:
        async with SqliteJournal(path):
            pass

    trio.run(create)
    return sqlite3.connect(path, isolation_level=None)


def _batch(n: int) -> Any:
    from lionexec.journal.backends import Batch, MessageRow, OutcomeOp, RequestOp

    batch = Batch(branches=[("b", 0.0)])
    for i in range(n):
        batch.messages.append(MessageRow("b", i, f"m{i}", "action_request", f'{{"i":{i}}}'))
        batch.requests.append(
            RequestOp(
                key=f"b/c{i}",
                branch_id="b",
                call_id=f"c{i}",
                request_id=f"r{i}",
                function="f",
                arguments="{}",
                effect="pure",
                at=1.0,
            )
        )
        batch.outcomes.append(
            OutcomeOp(
                branch_id="b",
                call_id=f"c{i}",
                outcome="completed",
                response=f'{{"o":{i}}}',
                at=2.0,
            )
        )
    return batch


@pytest.mark.parametrize(
    ("max_params", "update_from"), [(32_766, True), (7, True), (13, False), (1, True)]
)
def test_a_commit_writes_rows_in_few_statements_and_every_row(
    tmp_path: Path, max_params: int, update_from: bool
) -> None:
    """Rows go in multi-row statements (``sqlite3`` gives up the GIL around each statement,
    and a busy trio thread makes taking it back cost up to 5 ms): a commit of 100 calls is a
    handful of statements, not one per row; chunked by the parameter limit, every row lands."""
    from lionexec.journal.backends._sql import SqlStore
    from lionexec.journal.backends._sqlite import _Tx

    conn = _journal_file(tmp_path)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    conn.execute("BEGIN IMMEDIATE")
    claims = SqlStore(_Tx(conn), max_params=max_params, update_from=update_from).commit(
        _batch(100)
    )
    conn.execute("COMMIT")
    conn.set_trace_callback(None)
    assert [c.mine for c in claims] == [True] * 100
    assert [c.row.attempts for c in claims] == [1] * 100
    rows = conn.execute(
        "SELECT call_id, state, outcome, response, attempts FROM lionexec_calls ORDER BY rowid"
    ).fetchall()
    assert rows == [(f"c{i}", "done", "completed", f'{{"o":{i}}}', 1) for i in range(100)]
    assert conn.execute("SELECT count(*) FROM lionexec_messages").fetchone() == (100,)
    if max_params == 32_766:
        assert len(statements) <= 10, statements


def test_a_claim_on_a_taken_key_takes_the_long_way_and_counts_attempts(tmp_path: Path) -> None:
    """The fast claim (every key new) falls back, whole, when one key already has a row."""
    from lionexec.journal.backends import Batch
    from lionexec.journal.backends._sql import SqlStore
    from lionexec.journal.backends._sqlite import _Tx

    conn = _journal_file(tmp_path)
    first = _batch(3)
    first.outcomes.clear()
    for batch in (Batch(requests=first.requests[1:2]), first):  # c1 first, then c0..c2
        conn.execute("BEGIN IMMEDIATE")
        claims = SqlStore(_Tx(conn)).commit(batch)
        conn.execute("COMMIT")
    assert [(c.mine, c.row.attempts, c.prior_attempts) for c in claims] == [
        (True, 1, 0),
        (True, 2, 1),  # the same request again: a second attempt
        (True, 1, 0),
    ]


async def test_retain_keeps_what_a_failed_outcome_commit_left_for_the_next_one(
    journals: JournalFactory,
) -> None:
    """A branch with ``retain=`` trims only what its journal holds: the responses of a
    failed outcome commit stay in memory and go with the next commit, none is lost and the
    branch keeps journaling (it trimmed them before, and every later commit was refused)."""

    def work(n: int) -> int:
        """Work."""
        return n

    failing = True
    failed: list[Exception] = []
    async with journals.new() as journal:
        commit_batch = journal._engine._commit_batch

        async def outcomes_fail(batch: Any, **options: Any) -> Any:
            if failing and batch.outcomes and not batch.requests:
                failed.append(JournalConnectionError("the outcome commit failed (test)"))
                raise failed[-1]
            return await commit_batch(batch, **options)

        journal._engine._commit_batch = outcomes_fail  # type: ignore[method-assign]
        branch = await journal.branch(retain=1)
        branch.register_tools(Tool.from_function(work, effect="pure"))
        with trio.fail_after(10):
            async with branch:
                batch = [{"function": "work", "arguments": {"n": i}} for i in range(3)]
                with pytest.raises(NotDurableError) as caught:
                    await branch.act(batch)
                assert caught.value.__cause__.__cause__ is failed[-1]  # (the group's, then ours)
                assert [r.output for r in caught.value.responses] == [0, 1, 2]
                failing = False
                assert failed  # the batch's outcome commits failed
                assert len(branch.messages.responses()) == 3  # not trimmed: not journaled
                for n in (10, 11):
                    [response] = await branch.act({"function": "work", "arguments": {"n": n}})
                    assert response.content.outcome is ActionOutcome.COMPLETED
                assert branch.messages.calls <= 2  # trimmed once journaled
        branch_id = branch.id
    async with journals.new() as journal:
        history = await journal.history(branch_id)
        assert sorted(r.output for r in history.responses()) == [0, 1, 2, 10, 11]
        assert history.unanswered() == []


async def test_tasks_runnable_agrees_with_trio_statistics() -> None:
    from lionexec.journal._commit import _tasks_runnable

    seen: list[tuple[bool, bool]] = []

    def look() -> None:
        statistics = trio.lowlevel.current_statistics()
        seen.append((_tasks_runnable(), statistics.tasks_runnable > 0))

    async def step() -> None:
        look()
        await trio.lowlevel.checkpoint()
        look()

    look()  # (nothing else is ready)
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(step)
        look()  # three tasks ready to run
        await trio.testing.wait_all_tasks_blocked()
    assert seen[0] == (False, False)
    assert seen[1] == (True, True)
    assert all(mine == theirs for mine, theirs in seen)
