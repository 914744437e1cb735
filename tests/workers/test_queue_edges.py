"""Edges of the work queue: a worker that takes back its own call after its
lease ran out there (a stall), a branch's own limit against ``branch:*``, a stale and a fresh
write of one call in one group write, one call id submitted to two branches."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio

from lionexec.conversation import ActionResponse
from lionexec.journal import JournalError, SqliteJournal, open_journal
from lionexec.journal.workers import Completion, Worker
from lionexec.journal.workers import _queue as queue
from lionexec.limits import Limit
from lionexec.tools import Tool


def _call(function: str, n: int) -> dict[str, object]:
    return {"function": function, "arguments": {"n": n}}


async def test_a_call_taken_back_by_its_own_worker_runs_once_at_a_time(tmp_path: Path) -> None:
    """The worker stalled past its own lease; its next claim round takes the (safe) call back
    and runs it again. The first run is cancelled as a lost lease, and the second starts only
    once it has ended (a worker overwrote its record of the first run: never cancelled, two
    runs at once past `Limit(concurrency=1)`)."""
    running = peak = starts = cancelled = 0
    go = trio.Event()
    started = [trio.Event(), trio.Event()]

    async def slow(n: int) -> int:
        nonlocal running, peak, starts, cancelled
        started[starts].set()
        starts += 1
        running += 1
        peak = max(peak, running)
        try:
            await go.wait()
        except trio.Cancelled:
            cancelled += 1
            raise
        finally:
            running -= 1
        return n

    async with SqliteJournal(tmp_path / "j.db") as journal:
        worker = Worker(
            journal,
            [Tool.from_function(slow, effect="idempotent")],
            lease=0.9,
            poll=0.02,
            limits={"slow": Limit(concurrency=1)},
        )
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                [call_id] = await journal.submit(uuid.uuid4(), [_call("slow", 1)])
                await started[0].wait()
                # the lease runs out while the call runs here (the process stalled)
                await journal._run(
                    lambda store: store.tx.execute("UPDATE lionexec_queue SET lease_until = 0")
                )
                await started[1].wait()
                go.set()
                [response] = await journal.wait([call_id])
                nursery.cancel_scope.cancel()
    assert response.output == 1
    assert (starts, cancelled, peak) == (2, 1, 1)
    assert worker.statistics().leases_lost == 1


async def test_a_branchs_own_limit_replaces_branch_star(tmp_path: Path) -> None:
    """ "branch:<id>" applies to that branch instead of "branch:*": without a concurrency
    cap of its own, the branch is not capped by "branch:*"'s."""
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = uuid.uuid4()
        limits = {"branch:*": Limit(concurrency=1), f"branch:{branch}": Limit(rate=1000, burst=10)}
        await journal.submit(branch, [_call("f", 1), _call("f", 2)])
        first = await journal._run(lambda store: queue.claim(store, "w", 1, 60.0, limits))
        second = await journal._run(lambda store: queue.claim(store, "w", 1, 60.0, limits))
        other = uuid.uuid4()
        await journal.submit(other, [_call("f", 1), _call("f", 2)])
        third = await journal._run(lambda store: queue.claim(store, "w", 1, 60.0, limits))
        fourth = await journal._run(lambda store: queue.claim(store, "w", 1, 60.0, limits))
    assert (len(first.run), len(second.run)) == (1, 1)
    assert (len(third.run), len(fourth.run)) == (1, 0)  # another branch: capped by "*"


async def test_a_stale_and_a_fresh_write_of_one_call_in_one_group(tmp_path: Path) -> None:
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = uuid.uuid4()
        [call_id] = await journal.submit(branch, [_call("f", 1)])
        [old], *_ = await journal._run(lambda store: queue.claim(store, "w", 1, -1.0, {}))
        reclaimed = await journal._run(lambda store: queue.reclaim(store, "w", lambda f: "pure"))
        assert reclaimed == (1, 0)
        [new], *_ = await journal._run(lambda store: queue.claim(store, "w", 1, 60.0, {}))
        request = queue.load_request(new.request)
        body = queue.response_record(ActionResponse.create(request, output=1))

        def completion(fence: int) -> Completion:
            return Completion(
                branch_id=str(branch),
                call_id=call_id,
                fence=fence,
                outcome="completed",
                response=body,
            )

        fresh, stale = completion(new.fence), completion(old.fence)
        result = await journal._run(lambda store: queue.complete(store, "w", [fresh, stale]))
        rejected = await journal._run(queue.rejected_writes)
    assert (result.recorded, result.rejected) == ((fresh,), (stale,))
    assert [(row[1], row[3]) for row in rejected] == [(call_id, old.fence)]


async def test_a_call_id_submitted_to_two_branches_needs_a_branch_id_to_wait(
    tmp_path: Path,
) -> None:
    async with SqliteJournal(tmp_path / "j.db") as journal:
        a, b = uuid.uuid4(), uuid.uuid4()
        for branch in (a, b):
            call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            await journal.submit(branch, [call])
        with trio.fail_after(5), pytest.raises(JournalError, match="more than one branch"):
            await journal.wait(["c1"])


@pytest.mark.parametrize("started", [False, True])
async def test_a_call_released_before_it_started_is_not_charged_twice(
    tmp_path: Path, started: bool
) -> None:
    """A worker shutting down gives back a call it claimed but did not start: the claim's
    charge of the budget and the rate is given back too (with `Limit(budget=1)` the call
    was then answered `denied`, "the budget is spent", though it never ran). A call that
    started keeps its charge."""
    limits = {"f": Limit(budget=1), "g": Limit(rate=1, period=3600, burst=1)}
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = uuid.uuid4()
        await journal.submit(branch, [_call("f", 1), _call("g", 1)])
        first = await journal._run(lambda store: queue.claim(store, "a", 2, 60.0, limits))
        assert len(first.run) == 2
        held = [(job.branch_id, job.call_id, job.fence, started) for job in first.run]
        released = await journal._run(lambda store: queue.release(store, held, limits))
        second = await journal._run(lambda store: queue.claim(store, "b", 2, 60.0, limits))
    assert released == 2
    if started:  # the budget is spent, the rate's one place an hour is taken
        assert (len(second.run), second.denied, second.deferred) == (0, 1, 1)
    else:
        assert (len(second.run), second.denied, second.deferred) == (2, 0, 0)


async def test_a_call_id_the_branch_answered_is_not_submitted(target: str) -> None:
    """A call id whose call the branch's history already answered (through act(), any
    outcome) is refused at submit: a worker would run it, and wait(into=...) would leave
    the branch's answer as it was. An id whose request the history holds unanswered (a turn
    recorded for workers to answer) may be submitted."""
    from lionexec.conversation import ActionRequest
    from lionexec.errors import DuplicateCallError

    def f(n: int) -> int:
        """F."""
        return n

    def tool_call(call_id: str, n: object = 1) -> dict[str, object]:
        return {"function": "f", "arguments": {"n": n}, "call_id": call_id}

    with trio.fail_after(20):
        async with open_journal(target) as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(f, effect="pure"))
            async with branch:
                await branch.act([tool_call("done"), tool_call("bad", n="x")])
                waiting = ActionRequest.create("f", {"n": 2}, call_id="waiting")
                branch.messages.add_message(waiting)
            for call_id in ("done", "bad"):
                with pytest.raises(DuplicateCallError, match=f"'{call_id}'"):
                    await journal.submit(branch.id, [tool_call("new"), tool_call(call_id)])
            assert await journal.queued(branch.id) == []  # all or nothing
            assert await journal.submit(branch.id, [tool_call("waiting", 2)]) == ["waiting"]


async def test_a_call_id_act_is_running_is_not_submitted(target: str) -> None:
    """act() journals a call's request and its key before the tool runs: a submit of its id
    meanwhile is refused (a worker runs calls in a branch of its own, with no key to stop
    it running the tool a second time)."""
    from lionexec.errors import DuplicateCallError

    release = trio.Event()
    started = trio.Event()

    async def slow(n: int) -> int:
        """Slow."""
        started.set()
        await release.wait()
        return n

    call = {"function": "slow", "arguments": {"n": 1}, "call_id": "busy"}
    with trio.fail_after(20):
        async with open_journal(target) as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(slow))
            async with branch, trio.open_nursery() as nursery:
                nursery.start_soon(branch.act, call)
                await started.wait()
                with pytest.raises(DuplicateCallError, match="'busy'"):
                    await journal.submit(branch.id, [call])
                release.set()
            assert await journal.queued(branch.id) == []


@pytest.mark.parametrize("effect", ["pure", "unsafe"])
async def test_recovery_leaves_a_submitted_request_to_the_workers(
    target: str, effect: str
) -> None:
    """A request the history holds unanswered and that was submitted (a turn recorded for
    workers): recovery after a restart neither runs it (safe) nor answers it ``cancelled``
    (unsafe) while a worker runs it; it is ``queued``, and once the workers answered it,
    their answer is recorded in the history (``from_queue``). Before, the tool ran twice or
    the history said it never ran."""
    from lionexec.conversation import ActionRequest

    runs: list[int] = []

    def ship(n: int) -> int:
        """Ship."""
        runs.append(n)
        return n

    tools = [Tool.from_function(ship, effect=effect)]
    with trio.fail_after(30):
        async with open_journal(target) as journal:
            branch = await journal.branch()
            request = ActionRequest.create("ship", {"n": 1}, call_id="w1")
            branch.messages.add_message(request)
            async with branch:
                await journal.flush()
            await journal.submit(branch.id, [request])
        async with open_journal(target) as restarted:  # the process restarted
            report = await restarted.recover(tools)
            assert [(r.call_id, r.action, r.outcome) for r in report.resolutions] == [
                ("w1", "queued", None)
            ]
            assert runs == []
            worker = Worker(restarted, tools, poll=0.02)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                [answer] = await restarted.wait(["w1"], branch_id=branch.id)
                nursery.cancel_scope.cancel()
        async with open_journal(target) as again:  # restarted before wait(into=...) ran
            report = await again.recover(tools)
            assert [(r.action, r.outcome) for r in report.resolutions] == [
                ("from_queue", answer.outcome)
            ]
            [response] = (await again.history(branch.name)).responses()
            assert response.output == 1 and response.id == answer.id
    assert runs == [1]
