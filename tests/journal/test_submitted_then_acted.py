"""A call id submitted to workers, then passed to the branch's own ``act()``: the tool runs once.

``journal.submit`` refuses a call id the branch's ``act()`` ran, is running or answered. The
reverse was not checked: ``act()``'s write-ahead did not consult the queue, so a call
submitted and then acted ran twice, once in this process and once in a worker. Now the
write-ahead sees, in the transaction of its claim, that the call is queued: it claims
nothing, waits for the workers' answer and records it as the call's outcome. The race with a
concurrent ``submit`` is closed on both backends (SQLite: one writer at a time; PostgreSQL: a
transaction-scoped advisory lock per branch, taken by both).

Side effects are counted outside the journal: each tool appends where it ran to a list.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome, ActionRequest, ActionResponse, MessageManager
from lionexec.errors import DuplicateCallError
from lionexec.journal import Journal
from lionexec.journal.backends._sql import SqlStore
from lionexec.journal.workers import Worker
from lionexec.journal.workers import _queue as queue
from lionexec.tools import ActionManager, Tool

from .conftest import JournalFactory

pytestmark = pytest.mark.timeout(90)

#: Seconds a paused transaction waits for the other side to go on (it cannot, once the race
#: is closed: it waits for this transaction's lock). Bounds a wait, asserts nothing.
PAUSE = 2.0


class Runs:
    """Where the tool ``ship`` ran: ``"branch"`` (the journaled branch's act()) or
    ``"worker"``, in order."""

    def __init__(self) -> None:
        self.where: list[str] = []
        self.ran_here = threading.Event()

    def tool(self, where: str) -> Tool:
        def ship(n: int) -> int:
            """Ship."""
            self.where.append(where)
            if where == "branch":
                self.ran_here.set()
            return n * 10 if where == "worker" else -n

        return Tool.from_function(ship, effect="unsafe")

    def registry(self, where: str) -> ActionManager:
        registry = ActionManager()
        registry.register_tool(self.tool(where))
        return registry


def ship(call_id: str, n: int = 1) -> dict[str, Any]:
    return {"function": "ship", "arguments": {"n": n}, "call_id": call_id}


async def committed(journal: Journal, branch_id: Any, call_id: str) -> bool:
    """Whether the journal holds the request of *call_id* (its write-ahead committed)."""
    history = await journal.history(branch_id)
    return history.request_for_call_id(call_id) is not None


async def until(probe: Callable[[], Any]) -> None:
    """Await *probe* until it is true (the test's own ``fail_after`` bounds it)."""
    while True:
        if await probe():
            return
        await trio.sleep(0.02)


def one_pair(
    responses: Sequence[ActionResponse], history: MessageManager, call_id: str
) -> ActionResponse:
    """The history holds one request of *call_id*, answered once; return its response."""
    requests = [r for r in history.requests() if r.call_id == call_id]
    assert len(requests) == 1
    response = history.response_for(requests[0])
    assert response is not None
    assert [r.id for r in responses] == [response.id]
    return response


@pytest.mark.parametrize("turn", [False, True], ids=["new request", "recorded turn"])
async def test_act_on_a_submitted_call_waits_for_the_workers_answer(
    durable: JournalFactory, turn: bool
) -> None:
    """Submitted, then acted (a new request with the same call id, or the very request a
    recorded turn holds): act() does not run the tool; it returns, and records, the
    workers' answer once they gave it. No call row is claimed for it."""
    runs = Runs()
    with trio.fail_after(60):
        async with durable.new() as journal:
            branch = await journal.branch(registry=runs.registry("branch"))
            worker = Worker(journal, [runs.tool("worker")], poll=0.02)
            async with branch, trio.open_nursery() as nursery:
                if turn:
                    request = ActionRequest.create("ship", {"n": 4}, call_id="c1")
                    branch.messages.add_message(request)
                    await journal.flush()
                    assert await journal.submit(branch.id, [request]) == ["c1"]
                    proposal: Any = request
                else:
                    assert await journal.submit(branch.id, [ship("c1", 4)]) == ["c1"]
                    proposal = ship("c1", 4)
                acted: list[ActionResponse] = []
                returned = trio.Event()

                async def act() -> None:
                    acted.extend(await branch.act(proposal))
                    runs.where.append("act returned")
                    returned.set()

                nursery.start_soon(act)
                await until(lambda: committed(journal, branch.id, "c1"))
                await nursery.start(worker.run)
                await returned.wait()
                nursery.cancel_scope.cancel()
            assert runs.where == ["worker", "act returned"]
            [response] = acted
            assert response.outcome is ActionOutcome.COMPLETED and response.output == 40
            one_pair(acted, branch.messages, "c1")
            assert [c.call_id for c in await journal.calls(branch.id)] == []  # nothing claimed
            [row] = await journal.queued(branch.id)
            assert (row.state, row.worker) == ("done", worker.name)
        async with durable.new() as reopened:  # what the journal holds, after a restart
            history = await reopened.history(branch.id)
            assert one_pair(acted, history, "c1").output == 40
            assert (await reopened.recover([runs.tool("branch")])).resolutions == ()
    assert runs.where == ["worker", "act returned"]


async def test_act_on_a_call_the_workers_answered_records_their_answer(
    durable: JournalFactory,
) -> None:
    """The workers answered the call before act() proposed it: act() records their answer
    (a failure too) without running anything, in the transaction of its write-ahead."""
    runs = Runs()

    def ship(n: int) -> int:  # the worker's: fails
        """Ship."""
        runs.where.append("worker")
        raise RuntimeError(f"no ship for {n}")

    with trio.fail_after(60):
        async with durable.new() as journal:
            branch = await journal.branch(registry=runs.registry("branch"))
            worker = Worker(journal, [Tool.from_function(ship)], poll=0.02)
            [call_id] = await journal.submit(
                branch.id, [{"function": "ship", "arguments": {"n": 2}}]
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                [answer] = await journal.wait([call_id])
                nursery.cancel_scope.cancel()
            assert answer.outcome is ActionOutcome.FAILED
            async with branch:
                acted = await branch.act(
                    {"function": "ship", "arguments": {"n": 2}, "call_id": call_id}
                )
            [response] = acted
            assert response.outcome is ActionOutcome.FAILED
            assert response.content.error == answer.content.error
            one_pair(acted, branch.messages, call_id)
            assert await journal.calls(branch.id) == []
    assert runs.where == ["worker"]


async def test_cancelling_act_while_it_waits_for_the_workers(durable: JournalFactory) -> None:
    """Cancelled while it waits for the workers, act() records the call ``cancelled`` (as a
    call waiting for an idempotency key in flight); nothing ran here and nothing is claimed.
    The workers still answer the queued call, once; the branch keeps its own answer."""
    runs = Runs()
    with trio.fail_after(60):
        async with durable.new() as journal:
            branch = await journal.branch(registry=runs.registry("branch"))
            await journal.submit(branch.id, [ship("c1")])
            async with branch, trio.open_nursery() as nursery:
                acted: list[ActionResponse] = []
                scope = trio.CancelScope()

                async def act() -> None:
                    with scope:
                        await branch.act(ship("c1"))
                    acted.extend(branch.messages.responses())

                nursery.start_soon(act)
                await until(lambda: committed(journal, branch.id, "c1"))
                scope.cancel()
            [response] = acted
            assert response.outcome is ActionOutcome.CANCELLED
            assert runs.where == []
            assert await journal.calls(branch.id) == []
            [row] = await journal.queued(branch.id)
            assert row.state == "queued"
            worker = Worker(journal, [runs.tool("worker")], poll=0.02)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                [answer] = await journal.wait(["c1"], into=branch)
                nursery.cancel_scope.cancel()
            assert answer.output == 10
            one_pair(acted, await journal.history(branch.id), "c1")  # still cancelled
    assert runs.where == ["worker"]


async def test_recovery_leaves_a_call_act_waits_for_to_the_workers(
    durable: JournalFactory,
) -> None:
    """A process waiting in act() for a submitted call holds no call row: recovery (a
    restarted process, here a second journal object) leaves the call to the workers
    (``queued``), and runs nothing."""
    runs = Runs()
    with trio.fail_after(60):
        async with durable.new() as journal:
            branch = await journal.branch(registry=runs.registry("branch"))
            await journal.submit(branch.id, [ship("c1", 3)])
            async with branch, trio.open_nursery() as nursery:
                acted: list[ActionResponse] = []
                returned = trio.Event()

                async def act() -> None:
                    acted.extend(await branch.act(ship("c1", 3)))
                    returned.set()

                nursery.start_soon(act)
                await until(lambda: committed(journal, branch.id, "c1"))
                async with durable.new() as restarted:
                    report = await restarted.recover([runs.tool("branch")])
                assert [(r.call_id, r.action) for r in report.resolutions] == [("c1", "queued")]
                assert runs.where == []
                worker = Worker(journal, [runs.tool("worker")], poll=0.02)
                await nursery.start(worker.run)
                await returned.wait()
                nursery.cancel_scope.cancel()
            assert [r.output for r in acted] == [30]
    assert runs.where == ["worker"]


class _PausingTx:
    """A transaction that calls *pause* before it inserts into the queue."""

    def __init__(self, tx: Any, pause: Callable[[], None]) -> None:
        self.tx = tx
        self.pause = pause

    def _check(self, sql: str) -> None:
        if sql.lstrip().startswith("INSERT INTO lionexec_queue"):
            self.pause()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._check(sql)
        return self.tx.execute(sql, params)  # type: ignore[no-any-return]

    def executemany(self, sql: str, rows: Any) -> int:
        self._check(sql)
        return self.tx.executemany(sql, rows)  # type: ignore[no-any-return]

    def execute_count(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._check(sql)
        return self.tx.execute_count(sql, params)  # type: ignore[no-any-return]


class _PausingStore:
    """A store whose queue insert pauses (see :class:`_PausingTx`)."""

    def __init__(self, store: Any, pause: Callable[[], None]) -> None:
        self._store = store
        self.tx = _PausingTx(store.tx, pause)
        self.bulk = store.bulk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_write_ahead_racing_a_submit_after_its_checks(durable: JournalFactory) -> None:
    """Two processes: one submits a call id and, its checks passed, has not inserted the
    queue row yet when the other's act() of that id commits its write-ahead. The write-ahead
    waits for the submit (SQLite: its write lock; PostgreSQL: the branch's advisory lock),
    then sees the call queued: the workers run it, once. Before, on both backends, the
    write-ahead (or the submit's insert) went on unseen and the tool ran in both places."""
    runs = Runs()
    checked = threading.Event()

    def pause() -> None:  # (in the submitter's database thread, after its checks)
        checked.set()
        runs.ran_here.wait(PAUSE)

    with trio.fail_after(60):
        async with durable.new() as submitter, durable.new() as journal:
            branch = await journal.branch(registry=runs.registry("branch"))
            worker = Worker(submitter, [runs.tool("worker")], poll=0.02)
            request = ActionRequest.create("ship", {"n": 5}, call_id="r1", sender=branch.name)
            acted: list[ActionResponse] = []
            returned = trio.Event()
            async with branch, trio.open_nursery() as nursery:

                async def submit() -> None:
                    await submitter._run(
                        lambda store: queue.submit(
                            _PausingStore(store, pause),
                            branch.name,
                            [request],
                        )
                    )

                async def act() -> None:
                    acted.extend(await branch.act(ship("r1", 5)))
                    returned.set()

                nursery.start_soon(submit)
                await trio.to_thread.run_sync(checked.wait, 20)
                nursery.start_soon(act)
                await nursery.start(worker.run)
                await returned.wait()
                await submitter.wait(["r1"], branch_id=branch.id)
                nursery.cancel_scope.cancel()
            assert [r.output for r in acted] == [50]
            assert await journal.calls(branch.id) == []
    assert runs.where == ["worker"]


async def test_a_submit_racing_a_write_ahead_after_its_claim(
    durable: JournalFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes: act()'s write-ahead has claimed a call (not committed yet) when the
    other submits its id. The submit waits for the write-ahead's transaction (SQLite: its
    write lock; PostgreSQL: the branch's advisory lock), then sees the call claimed and is
    refused. Before, on PostgreSQL, the submit's check did not see the uncommitted claim:
    queued, and run by a worker too."""
    runs = Runs()
    claimed = threading.Event()
    submitted = threading.Event()
    original = SqlStore.commit

    def commit(self: SqlStore, batch: Any) -> Any:  # (in the journal's database thread)
        # PostgreSQL: the long way, each result read (a commit sent whole, unread, claims and
        # commits at one sync: no moment between for the submit to come in)
        self._unread = None
        claims = original(self, batch)
        if batch.requests and not claimed.is_set():
            claimed.set()
            submitted.wait(PAUSE)
        return claims

    monkeypatch.setattr(SqlStore, "commit", commit)
    with trio.fail_after(60):
        async with durable.new() as submitter, durable.new() as journal:
            branch = await journal.branch(registry=runs.registry("branch"))
            refused: list[DuplicateCallError] = []
            async with branch, trio.open_nursery() as nursery:
                acted: list[ActionResponse] = []

                async def act() -> None:
                    acted.extend(await branch.act(ship("r1", 5)))

                nursery.start_soon(act)
                await trio.to_thread.run_sync(claimed.wait, 20)
                try:
                    await submitter.submit(branch.id, [ship("r1", 5)])
                except DuplicateCallError as exc:
                    refused.append(exc)
                finally:
                    submitted.set()
            assert [r.output for r in acted] == [-5]
            assert len(refused) == 1 and "already run or answered" in str(refused[0])
            assert await submitter.queued(branch.id) == []
    assert runs.where == ["branch"]


@pytest.mark.parametrize(
    "proposal",
    [
        {"function": "ship", "arguments": {"n": 5}, "call_id": "c1"},
        {"function": "scrap", "arguments": {"n": 4}, "call_id": "c1"},
    ],
    ids=["other arguments", "other tool"],
)
async def test_act_on_a_submitted_call_id_with_another_call_is_a_conflict(
    durable: JournalFactory, proposal: dict[str, Any]
) -> None:
    """The same call id proposed as another call fails it (``IdempotencyKeyConflict``
    naming both): the workers' answer to ``ship(n=4)`` is not this call's outcome, and
    neither tool runs here."""
    runs = Runs()
    scrapped: list[int] = []

    def scrap(n: int) -> int:
        """Scrap."""
        scrapped.append(n)
        return n

    registry = runs.registry("branch")
    registry.register_tool(Tool.from_function(scrap, effect="unsafe"))
    with trio.fail_after(60):
        async with durable.new() as journal:
            branch = await journal.branch(registry=registry)
            async with branch:
                await journal.submit(branch.id, [ship("c1", 4)])
                [response] = await branch.act(proposal)
            assert response.outcome is ActionOutcome.FAILED
            assert response.error is not None
            assert response.error.type == "IdempotencyKeyConflict"
            assert "submitted to workers" in response.error.message
            assert runs.where == [] and scrapped == []
            [row] = await journal.queued(branch.id)
            assert row.state == queue.QUEUED  # still the workers' to run
