"""The queue and an embedded Worker, in one process: fencing, reclaim, shared limits,
graceful shutdown, bad input.

The queue transactions run on SQLite and PostgreSQL; the embedded-worker tests on SQLite
(real time, short bounds: a worker's lease and limits are wall-clock by design).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio
import trio.testing

from lionexec.conversation import ActionOutcome, ActionResponse
from lionexec.errors import ConfigurationError, DuplicateCallError
from lionexec.journal import JournalError, MemoryJournal, SqliteJournal, open_journal
from lionexec.journal.workers import Completion, Worker
from lionexec.journal.workers import _queue as queue
from lionexec.limits import Limit
from lionexec.tools import Tool

from .conftest import call


@pytest.mark.parametrize("effect", ["idempotent", "unsafe"])
async def test_a_stale_fence_cannot_write_and_an_expired_lease_is_resolved_by_effect(
    target: str, effect: str
) -> None:
    async with open_journal(target) as journal:
        branch = uuid.uuid4()
        [call_id] = await journal.submit(branch, [call("work", 1)])
        # "a" claims with a lease that has already run out: it stalled
        [a], *_ = await journal._run(lambda s: queue.claim(s, "a", 10, -1.0, {}))
        assert (a.call_id, a.fence, a.attempts) == (call_id, 1, 1)
        swept = await journal._run(lambda s: queue.reclaim(s, "b", lambda _f: effect))
        late = Completion(
            branch_id=str(branch), call_id=call_id, fence=1, outcome="completed", response="{}"
        )
        if effect == "idempotent":
            assert swept == (1, 0)
            [b], *_ = await journal._run(lambda s: queue.claim(s, "b", 10, 60.0, {}))
            assert (b.fence, b.attempts) == (3, 2)
            refused = await journal._run(lambda s: queue.complete(s, "a", [late]))
            assert (refused.recorded, refused.rejected) == ((), (late,))
            request = queue.load_request(b.request)  # b's own response, as a worker builds it
            body = queue.response_record(ActionResponse.create(request, output=2))
            mine = Completion(
                branch_id=str(branch), call_id=call_id, fence=3, outcome="completed", response=body
            )
            written = await journal._run(lambda s: queue.complete(s, "b", [mine]))
            assert written.recorded == (mine,)
            [response] = await journal.wait([call_id])
            assert (response.outcome, response.output) == (ActionOutcome.COMPLETED, 2)
        else:
            assert swept == (0, 1)
            refused = await journal._run(lambda s: queue.complete(s, "a", [late]))
            assert refused.rejected == (late,)
            [response] = await journal.wait([call_id])
            assert response.outcome is ActionOutcome.INTERRUPTED
            assert "may or may not have taken effect" in str(response.content.error)
        [row] = await journal.queued()
        assert row.worker == "b" and row.effect == effect
        assert await journal._run(queue.rejected_writes) == [
            (str(branch), call_id, "a", 1, "completed")
        ]


async def test_a_heartbeat_keeps_only_the_leases_still_held(target: str) -> None:
    async with open_journal(target) as journal:
        branch = uuid.uuid4()
        await journal.submit(branch, [call("work", 1), call("work", 2)])
        claimed, *_ = await journal._run(lambda s: queue.claim(s, "a", 10, 60.0, {}))
        held = [(c.branch_id, c.call_id, c.fence) for c in claimed]
        stale = [(held[0][0], held[0][1], held[0][2] + 5), held[1]]
        kept = await journal._run(lambda s: queue.heartbeat(s, stale, 60.0))
        assert kept == {(held[1][0], held[1][1])}


def test_gcra_is_the_in_process_limiters_arithmetic() -> None:
    from lionexec.limits import RateLimiter
    from lionexec.limits._gcra import gcra

    limiter = RateLimiter(requests=10, period=1.0, burst=3)
    tat = -1e300
    for now in [0.0, 0.0, 0.0, 0.0, 0.05, 0.1, 0.1, 0.25, 0.26, 1.0, 1.0, 1.0, 1.0, 1.0]:
        wait, new = gcra(tat, now, 0.1, 3)
        expected = limiter.try_acquire(now=now)
        assert wait == pytest.approx(expected, abs=1e-9)
        if wait <= 0:
            tat = new


# -- an embedded worker (SQLite) ---------------------------------------------------------


async def test_a_rate_limit_defers_and_a_budget_denies(tmp_path: Path) -> None:
    async def limited(n: int) -> int:
        return n

    async def budgeted(n: int) -> int:
        return n

    tools = [
        Tool.from_function(limited, effect="pure"),
        Tool.from_function(budgeted, effect="pure"),
    ]
    limits = {"limited": Limit(rate=20, burst=2), "budgeted": Limit(budget=3)}
    async with SqliteJournal(tmp_path / "j.db") as journal:
        worker = Worker(journal, tools, lease=5, poll=0.02, limits=limits, concurrency=4)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            branch = uuid.uuid4()
            ids = await journal.submit(branch, [call("limited", n) for n in range(12)])
            more = await journal.submit(branch, [call("budgeted", n) for n in range(6)])
            with trio.fail_after(20):
                responses = await journal.wait(ids + more)
            nursery.cancel_scope.cancel()
        rows = await journal.queued()
    limited_rs, budget_rs = responses[:12], responses[12:]
    assert [r.output for r in limited_rs] == list(range(12))  # deferred, never lost
    assert sum(row.deferrals for row in rows) > 0
    assert worker.statistics().denied == 3
    # when each call was granted (its last claim): never more than the burst allowance
    starts = sorted(r.claimed_at for r in rows if r.function == "limited" and r.claimed_at)
    assert len(starts) == 12
    for i in range(len(starts)):
        for j in range(i, len(starts)):
            assert j - i + 1 <= 2 + (starts[j] - starts[i]) * 20 + 1e-6
    outcomes = sorted(r.outcome.value for r in budget_rs)
    assert outcomes == ["completed"] * 3 + ["denied"] * 3
    denied = [r for r in budget_rs if r.outcome is ActionOutcome.DENIED]
    assert all(
        "budget of 3 calls of tool 'budgeted' (in total) is spent" in str(r.content.error)
        for r in denied
    )
    assert all(r.content.attempts == 0 for r in denied)


async def test_shutdown_finishes_within_grace_then_releases_or_answers(tmp_path: Path) -> None:
    started = {name: trio.Event() for name in ("finisher", "again", "once")}
    go = trio.Event()

    async def finisher(n: int) -> int:
        started["finisher"].set()
        await go.wait()
        return n

    async def again(n: int) -> int:
        started["again"].set()
        await trio.sleep_forever()
        return n  # pragma: no cover

    async def once(n: int) -> int:
        started["once"].set()
        await trio.sleep_forever()
        return n  # pragma: no cover

    tools = [
        Tool.from_function(finisher, effect="pure"),
        Tool.from_function(again, effect="idempotent"),
        Tool.from_function(once),
    ]
    async with SqliteJournal(tmp_path / "j.db") as journal:
        worker = Worker(journal, tools, lease=5, poll=0.02, grace=0.3)
        branch = uuid.uuid4()
        ids = await journal.submit(
            branch, [call("finisher", 1), call("again", 2), call("once", 3)]
        )
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                for event in started.values():
                    await event.wait()
                nursery.cancel_scope.cancel()
                go.set()  # the finisher ends within the grace period
        rows = {row.call_id: row for row in await journal.queued()}
    fin, rerun, unsafe = (rows[c] for c in ids)
    assert (fin.state, fin.outcome) == ("done", "completed")
    assert (rerun.state, rerun.fence, rerun.attempts) == ("queued", 2, 1)  # another may run it
    assert (unsafe.state, unsafe.outcome) == ("done", "cancelled")
    assert worker.statistics().released == 1 and worker.statistics().running == 0


async def test_governance_runs_in_the_worker(tmp_path: Path) -> None:
    from lionexec.governance import PermissionPolicy

    def secret(n: int) -> int:
        return n

    policy = PermissionPolicy.deny_all()
    async with SqliteJournal(tmp_path / "j.db") as journal:
        worker = Worker(
            journal, [Tool.from_function(secret, effect="pure")], poll=0.02, policy=policy
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            hostile = [
                {"function": "secret", "arguments": '{"n": NaN}'},
                {"function": "secret", "arguments": {"n": float("nan")}},
                {"function": "secret", "arguments": {"n": [[[[[[1]]]]]] * 1000}},
            ]
            ids = await journal.submit(
                uuid.uuid4(), [call("secret", 1), call("nope", 2), *hostile]
            )
            with trio.fail_after(10):
                responses = await journal.wait(ids)
            nursery.cancel_scope.cancel()
    # validation and policy ran in the worker: denied by its policy, invalid by its registry
    assert [r.outcome for r in responses] == [ActionOutcome.DENIED] + [ActionOutcome.INVALID] * 4


async def test_bad_submissions_are_refused_by_name(tmp_path: Path) -> None:
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = uuid.uuid4()
        first = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        await journal.submit(branch, [first])
        again = {**first, "id": "call_2"}
        with pytest.raises(DuplicateCallError, match="call_1"):
            await journal.submit(branch, [again, first])
        assert [row.call_id for row in await journal.queued()] == ["call_1"]
        with pytest.raises(JournalError, match="nowhere"):
            await journal.wait(["nowhere"])
        with pytest.raises(JournalError, match="nowhere"):
            await journal.wait(["nowhere"], branch_id=branch)
    async with MemoryJournal() as memory:
        with pytest.raises(JournalError, match="SQL journal"):
            await memory.submit(uuid.uuid4(), [first])


async def test_a_worker_needs_an_open_sql_journal(tmp_path: Path) -> None:
    async with MemoryJournal() as memory:
        with pytest.raises(JournalError, match="SQL journal"):
            await Worker(memory, []).run()
    with pytest.raises(JournalError, match="not open"):
        await Worker(SqliteJournal(tmp_path / "j.db"), []).run()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"lease": float("nan")}, "lease"),
        ({"limits": {"f": 3}}, "limits"),
    ],
)
def test_worker_configuration_is_checked(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Worker(MemoryJournal(), [], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs", [{"rate": 0}, {"rate": float("inf")}, {"burst": 0}, {"budget": -1}, {"period": -1}]
)
def test_a_limit_is_checked(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        Limit(**kwargs)  # type: ignore[arg-type]


async def test_a_lease_taken_over_cancels_the_call_and_its_write_is_refused(
    tmp_path: Path,
) -> None:
    started = trio.Event()

    async def slow(n: int) -> int:
        started.set()
        await trio.sleep_forever()
        return n  # pragma: no cover

    async with SqliteJournal(tmp_path / "j.db") as journal:
        worker = Worker(
            journal, [Tool.from_function(slow, effect="idempotent")], lease=0.3, poll=0.02
        )
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                [call_id] = await journal.submit(uuid.uuid4(), [call("slow", 1)])
                await started.wait()
                # another worker takes the call over (its claim bumps the fence)
                await journal._run(
                    lambda s: s.tx.execute(  # type: ignore[attr-defined]
                        "UPDATE lionexec_queue SET fence = fence + 1, owner = 'other'"
                    )
                )
                while True:  # the heartbeat runs every lease / 3
                    if worker.statistics().rejected:
                        break
                    await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
        [row] = await journal.queued()
    stats = worker.statistics()
    assert (stats.leases_lost, stats.rejected, stats.recorded) == (1, 1, 0)
    assert (row.state, row.owner, row.fence) == ("claimed", "other", 2)
    refused = await _rejected(tmp_path / "j.db")
    assert [(r[1], r[2], r[4]) for r in refused] == [(call_id, worker.name, "cancelled")]


async def _rejected(path: Path) -> list[tuple[str, str, str, int, str]]:
    async with SqliteJournal(path) as journal:
        return await journal._run(queue.rejected_writes)


async def test_submit_wait_and_queued_are_checkpoints(tmp_path: Path) -> None:
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = uuid.uuid4()
        with trio.testing.assert_checkpoints():
            await journal.submit(branch, [])
        with trio.testing.assert_checkpoints():
            [call_id] = await journal.submit(branch, [call("f", 1)])
        with trio.testing.assert_checkpoints():
            await journal.queued(branch)
        [claimed], *_ = await journal._run(lambda s: queue.claim(s, "w", 1, 60.0, {}))
        request = queue.load_request(claimed.request)
        done = Completion(
            branch_id=str(branch),
            call_id=call_id,
            fence=claimed.fence,
            outcome="completed",
            response=queue.response_record(ActionResponse.create(request, output=1)),
        )
        await journal._run(lambda s: queue.complete(s, "w", [done]))
        with trio.testing.assert_checkpoints():
            [response] = await journal.wait([call_id])
        assert response.output == 1


async def test_wait_into_records_the_pairs_in_the_submitting_branch(tmp_path: Path) -> None:
    def double(n: int) -> int:
        return n * 2

    path = tmp_path / "j.db"
    async with SqliteJournal(path) as journal:
        worker = Worker(journal, [Tool.from_function(double, effect="pure")], poll=0.02)
        branch = await journal.branch()
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            async with branch:
                ids = await journal.submit(branch.id, [call("double", 1), call("double", 2)])
                with trio.fail_after(10):
                    responses = await journal.wait(ids, into=branch)
                    again = await journal.wait(ids, branch_id=branch.id, into=branch)
                with pytest.raises(ValueError, match="belongs to branch"):
                    await journal.wait(ids, branch_id=branch.id, into=await journal.branch())
            nursery.cancel_scope.cancel()
        assert [r.id for r in again] == [r.id for r in responses]
        assert [m.kind for m in branch.messages] == ["action_request", "action_response"] * 2
        assert [r.output for r in branch.messages.responses()] == [2, 4]
    async with SqliteJournal(path) as reopened:  # committed with the branch's history
        history = await reopened.history(branch.id)
        assert [r.output for r in history.responses()] == [2, 4]
        assert history.unanswered() == []


async def test_a_worker_answers_calls_whose_output_or_error_holds_a_lone_surrogate(
    target: str,
) -> None:
    import json

    def echo(n: int) -> str:
        """Echo n after a lone surrogate."""
        return f"\ud800{n}"

    def boom(n: int) -> str:
        """Fail with a lone surrogate in the message."""
        raise ValueError(f"\udfff{n}")

    async with open_journal(target) as journal:
        tools = [Tool.from_function(echo, effect="pure"), Tool.from_function(boom, effect="pure")]
        worker = Worker(journal, tools, poll=0.02)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            ids = await journal.submit(uuid.uuid4(), [call("echo", 1), call("boom", 2)])
            with trio.fail_after(20):
                responses = await journal.wait(ids)
            nursery.cancel_scope.cancel()
        assert [r.outcome for r in responses] == [ActionOutcome.COMPLETED, ActionOutcome.FAILED]
        for row in await journal.queued():
            json.dumps(row.response, allow_nan=False, ensure_ascii=False).encode("utf-8")
