"""Limits per tool and per branch: rates (deferred, never lost), concurrent calls (not
started until a slot frees) and cost budgets (denied with the reason).

Three places, one judge (:func:`lionexec.limits.judge`): in process
(:class:`LocalLimiter`, on trio's ``MockClock``), in the claim transaction of the queue
(SQLite and PostgreSQL, two workers by name), and across two real worker processes on one
real PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from lionexec.conversation import ActionOutcome, ActionResponse
from lionexec.errors import ConfigurationError
from lionexec.journal import SqliteJournal, open_journal
from lionexec.journal.workers import Completion, Worker
from lionexec.journal.workers import _queue as queue
from lionexec.limits import (
    Busy,
    Deferred,
    Denied,
    Granted,
    Limit,
    LimitDeniedError,
    LocalLimiter,
    limits_by_key,
)
from lionexec.tools import Tool

from .conftest import Workers, call


def cost_of(arguments: Any) -> float:
    return float(arguments["n"])


async def submit_spread(journal, calls: list[tuple[str, int]], branches: int):  # type: ignore[no-untyped-def]
    """Submit *calls* round-robin over *branches* new branches: ``(branch, call_id, tool, n)``."""
    ids = [uuid.uuid4() for _ in range(branches)]
    submitted = []
    for i, branch in enumerate(ids):
        part = calls[i::branches]
        call_ids = await journal.submit(branch, [call(tool, n) for tool, n in part])
        submitted += [(branch, c, tool, n) for c, (tool, n) in zip(call_ids, part, strict=True)]
    return submitted


def within_allowance(starts: list[float], burst: int, rate: float) -> bool:
    """No window of the sorted *starts* holds more than ``burst + w * rate`` grants."""
    return all(
        j - i + 1 <= burst + (starts[j] - starts[i]) * rate + 1e-6
        for i in range(len(starts))
        for j in range(i, len(starts))
    )


# -- in process: LocalLimiter on trio's clock ------------------------------------------------


async def test_in_process_a_rate_defers_every_call_and_loses_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalLimiter({"t": Limit(rate=10, burst=2), "branch:*": Limit(rate=2, burst=1)})
    starts: dict[str, list[float]] = defaultdict(list)

    async def one(branch: str) -> None:
        async with limiter.hold("t", branch):
            starts[branch].append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for i in range(24):
            nursery.start_soon(one, f"b{i % 12}")  # 12 branches, 2 calls each
    everything = sorted(t for ts in starts.values() for t in ts)
    assert len(everything) == 24  # deferred, never lost
    assert within_allowance(everything, 2, 10)  # the tool's schedule
    for branch_starts in starts.values():  # each branch's own schedule
        assert len(branch_starts) == 2 and within_allowance(sorted(branch_starts), 1, 2)
    assert everything[-1] == pytest.approx((24 - 2) / 10, abs=0.6)  # not slower than needed


async def test_in_process_a_concurrency_limit_waits_for_a_free_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalLimiter({"t": Limit(concurrency=3), "branch:*": Limit(concurrency=2)})
    running: dict[str, int] = defaultdict(int)
    most: dict[str, int] = defaultdict(int)
    done = 0

    async def one(branch: str) -> None:
        nonlocal done
        async with limiter.hold("t", branch):
            for key in ("t", branch):
                running[key] += 1
                most[key] = max(most[key], running[key])
            await trio.sleep(1)
            for key in ("t", branch):
                running[key] -= 1
        done += 1

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(one, f"b{i % 3}")
    assert done == 12
    # (which branches shared the tool's three slots depends on trio's scheduling order)
    assert most["t"] == 3 and max(most[f"b{i}"] for i in range(3)) <= 2
    assert 4.0 <= trio.current_time() <= 6.0  # 12 calls, 3 at a time, 1 s each
    most.clear()
    async with trio.open_nursery() as nursery:  # one branch: its own limit binds
        for _ in range(3):
            nursery.start_soon(one, "b9")
    assert (most["t"], most["b9"]) == (2, 2)
    assert isinstance(limiter.try_acquire("t", "b0", now=10.0), Granted)
    assert isinstance(limiter.try_acquire("t", "b0", now=10.0), Granted)
    assert limiter.try_acquire("t", "b0", now=10.0) == Busy("branch:b0")


async def test_in_process_a_budget_denies_with_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalLimiter(
        {
            "priced": Limit(budget=10, cost=cost_of),
            "often": Limit(budget=2, budget_period=60),
        }
    )
    for n in (4, 5):
        async with limiter.hold("priced", None, {"n": n}):
            pass
    with pytest.raises(LimitDeniedError, match="has 1 left; this call costs 2") as caught:
        async with limiter.hold("priced", None, {"n": 2}):
            raise AssertionError("a denied call never runs")  # pragma: no cover
    assert caught.value.key == "tool:priced"
    assert "the cost budget of 10 of tool 'priced' (in total)" in caught.value.reason
    async with limiter.hold("priced", None, {"n": 1}):
        pass
    for hostile in ({}, {"n": "NaN"}, {"n": float("inf")}, {"n": -1}):
        verdict = limiter.try_acquire("priced", None, hostile)
        assert isinstance(verdict, Denied) and "cannot admit this call" in verdict.reason
    # a budget per period is renewed at the end of each window
    assert [type(limiter.try_acquire("often")) for _ in range(3)] == [Granted, Granted, Denied]
    denied = limiter.try_acquire("often")
    assert isinstance(denied, Denied) and "per 60 s (renewed in 60 s)" in denied.reason
    await trio.sleep(60)
    assert isinstance(limiter.try_acquire("often"), Granted)


async def test_hold_is_a_checkpoint_and_a_cancelled_wait_takes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalLimiter({"t": Limit(concurrency=1)})
    with trio.testing.assert_checkpoints():
        async with limiter.hold("t"):
            with trio.move_on_after(5) as waited:
                async with limiter.hold("t"):
                    raise AssertionError("a second call while one runs")  # pragma: no cover
            assert waited.cancelled_caught
    assert isinstance(limiter.try_acquire("t"), Granted)  # the cancelled wait took no slot


def test_a_budget_is_judged_before_a_rate_or_a_free_slot() -> None:
    limiter = LocalLimiter({"t": Limit(rate=1, burst=1, concurrency=1, budget=1)})
    assert limiter.try_acquire("t", now=0.0) == Granted(0.0)
    verdict = limiter.try_acquire("t", now=0.0)  # busy and over the rate, but spent: denied
    assert isinstance(verdict, Denied) and "budget of 1 calls of tool 't'" in verdict.reason
    other = LocalLimiter({"t": Limit(rate=1, burst=1, concurrency=1)})
    other.try_acquire("t", now=0.0)
    assert other.try_acquire("t", now=0.0) == Busy("tool:t")  # busy before the rate
    other.release("t")
    assert other.try_acquire("t", now=0.0) == Deferred(1.0, "tool:t")


@pytest.mark.parametrize(
    ("limits", "match"),
    [
        ({"": Limit()}, "key"),
        ({"branch:": Limit()}, "key"),
        ({"f": 3}, "must be a Limit"),
        ({"f": Limit(), "tool:f": Limit()}, "two limits"),
    ],
)
def test_limit_keys_are_checked(limits: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        limits_by_key(limits)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"concurrency": 1.5},
        {"budget": float("nan")},
        {"budget_period": 10},
        {"budget": 1, "budget_period": 0},
        {"cost": -1},
        {"cost": "1"},
    ],
)
def test_the_new_limit_fields_are_checked(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Limit(**kwargs)


# -- in the claim transaction (SQLite, PostgreSQL), two workers by name ------------------------


def done(claimed: queue.Claimed, output: int = 0) -> Completion:
    request = queue.load_request(claimed.request)
    return Completion(
        branch_id=claimed.branch_id,
        call_id=claimed.call_id,
        fence=claimed.fence,
        outcome="completed",
        response=queue.response_record(ActionResponse.create(request, output=output)),
    )


async def test_a_concurrency_limit_holds_across_workers_and_loses_nothing(target: str) -> None:
    limits = {"t": Limit(concurrency=2), "branch:*": Limit(concurrency=3)}
    async with open_journal(target) as journal:
        one, two = uuid.uuid4(), uuid.uuid4()
        await journal.submit(one, [call("t", n) for n in range(5)])
        await journal.submit(two, [call("u", n) for n in range(5)])
        a = await journal._run(lambda s: queue.claim(s, "a", 20, 60.0, limits))
        # two of tool t (its limit); three of branch two (its branch limit)
        assert sorted(c.function for c in a.run) == ["t", "t", "u", "u", "u"]
        assert (a.deferred, a.denied, a.busy, a.next) == (0, 0, 5, None)
        b = await journal._run(lambda s: queue.claim(s, "b", 20, 60.0, limits))
        assert (b.run, b.busy, b.next) == ([], 0, None)  # not even claimed: nothing is ready
        rows = [r for r in await journal.queued() if r.state == "queued"]
        assert len(rows) == 5 and all((r.attempts, r.deferrals) == (0, 0) for r in rows)
        first_t = next(c for c in a.run if c.function == "t")
        await journal._run(lambda s: queue.complete(s, "a", [done(first_t)], wake=True))
        b = await journal._run(lambda s: queue.claim(s, "b", 20, 60.0, limits))
        assert [c.function for c in b.run] == ["t"]  # the slot it freed, and no more
        assert b.busy == 2
        ran = [c for c in a.run + b.run if c.function == "t"]
        assert len({c.call_id for c in ran}) == 3


async def test_a_branch_rate_defers_each_branch_on_its_own_schedule(target: str) -> None:
    limits = {"branch:*": Limit(rate=1, period=60)}
    async with open_journal(target) as journal:
        one, two = uuid.uuid4(), uuid.uuid4()
        await journal.submit(one, [call("t", n) for n in range(3)])
        await journal.submit(two, [call("t", n) for n in range(3)])
        a = await journal._run(lambda s: queue.claim(s, "a", 20, 60.0, limits))
        assert sorted(c.branch_id for c in a.run) == sorted([str(one), str(two)])
        assert a.deferred == 4 and a.next is not None and 55 < a.next <= 61
        b = await journal._run(lambda s: queue.claim(s, "b", 20, 60.0, limits))
        assert (b.run, b.deferred) == ([], 0)  # deferred calls wait for their slot
        rows = [r for r in await journal.queued() if r.state == "queued"]
        assert len(rows) == 4 and all(r.deferrals == 1 for r in rows)  # queued, not lost
        # each branch's deferred calls come back one slot apart (60 s, 120 s)
        by_branch: dict[str, list[float]] = defaultdict(list)
        for row in await journal._run(
            lambda s: s.tx.execute(  # type: ignore[attr-defined]
                "SELECT branch_id, not_before FROM lionexec_queue WHERE state = 'queued'"
            )
        ):
            by_branch[row[0]].append(float(row[1]))
        for slots in by_branch.values():
            first, second = sorted(slots)
            assert second - first == pytest.approx(60.0, abs=1.0)


async def test_a_budget_denies_with_the_reason_across_workers(target: str) -> None:
    limits = {"priced": Limit(budget=10, cost=cost_of), "branch:*": Limit(budget=4)}
    async with open_journal(target) as journal:
        one, two = uuid.uuid4(), uuid.uuid4()
        priced = await journal.submit(one, [call("priced", 5) for _ in range(3)])
        counted = await journal.submit(two, [call("t", n) for n in range(6)])
        a = await journal._run(lambda s: queue.claim(s, "a", 2, 60.0, limits))
        b = await journal._run(lambda s: queue.claim(s, "b", 20, 60.0, limits))
        ran = a.run + b.run
        assert a.denied + b.denied == 3
        await journal._run(lambda s: queue.complete(s, "a", [done(c) for c in ran]))
        with trio.fail_after(10):
            responses = await journal.wait(priced + counted)
    outcomes = [r.outcome for r in responses]  # in any order the workers claimed them
    assert sorted(outcomes[:3]) == sorted([ActionOutcome.COMPLETED] * 2 + [ActionOutcome.DENIED])
    assert sorted(outcomes[3:]) == sorted(
        [ActionOutcome.COMPLETED] * 4 + [ActionOutcome.DENIED] * 2
    )
    denied = [r for r in responses if not r.success]
    assert "the cost budget of 10 of tool 'priced' (in total) is spent" in str(
        denied[0].content.error
    )
    assert all(
        f"the budget of 4 calls of branch {two} (in total) is spent" in str(r.content.error)
        for r in denied[1:]
    )
    assert all(r.content.attempts == 0 for r in responses if not r.success)


# -- attempts across reclaims ----------------------------------------------------------------


async def test_a_reclaimed_calls_response_counts_every_workers_run(target: str) -> None:
    def double(n: int) -> int:
        return n * 2

    async with open_journal(target) as journal:
        [call_id] = await journal.submit(uuid.uuid4(), [call("double", 1)])
        # two workers claimed it and died: their leases ran out (-1 s)
        [first], *_ = await journal._run(lambda s: queue.claim(s, "dead1", 1, -1.0, {}))
        swept = await journal._run(lambda s: queue.reclaim(s, "x", lambda _f: "pure"))
        [second], *_ = await journal._run(lambda s: queue.claim(s, "dead2", 1, -1.0, {}))
        assert (first.attempts, swept, second.attempts) == (1, (1, 0), 2)
        worker = Worker(journal, [Tool.from_function(double, effect="pure")], poll=0.02)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            with trio.fail_after(10):
                [response] = await journal.wait([call_id])
            nursery.cancel_scope.cancel()
        [row] = await journal.queued()
    assert (response.output, response.content.attempts) == (2, 3)
    assert (row.attempts, row.fence) == (3, 5)


# -- two worker processes on one PostgreSQL ---------------------------------------------------


@pytest.mark.timeout(90)
async def test_worker_processes_keep_each_branchs_rate(workers: Workers) -> None:
    async with trio.open_nursery() as nursery:
        for name in ("r1", "r2"):
            nursery.start_soon(lambda name=name: workers.start(name, limits="branch_rates"))
    async with open_journal(workers.target) as journal:
        submitted = await submit_spread(journal, [("safe", n) for n in range(40)], branches=2)
        with trio.fail_after(40):
            responses = await journal.wait([c for _, c, _, _ in submitted])
        rows = await journal.queued()
    assert all(r.outcome is ActionOutcome.COMPLETED for r in responses)  # deferred, not lost
    assert workers.ran() == {("safe", n): 1 for n in range(40)}
    assert sum(row.deferrals for row in rows) > 0
    by_branch: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        assert row.claimed_at is not None
        by_branch[row.branch_id].append(row.claimed_at)
    assert len(by_branch) == 2
    for starts in by_branch.values():  # branch:* rate 20/s, burst 2, on the database's clock
        assert within_allowance(sorted(starts), 2, 20)
    stats = [await workers.stop(w) for w in workers.started]
    assert all(s["recorded"] > 0 for s in stats) or sum(s["recorded"] for s in stats) == 40


@pytest.mark.timeout(90)
async def test_worker_processes_keep_the_concurrency_limits(workers: Workers) -> None:
    async with trio.open_nursery() as nursery:
        for name in ("c1", "c2"):
            nursery.start_soon(lambda name=name: workers.start(name, limits="concurrent"))
    async with open_journal(workers.target) as journal:
        submitted = await submit_spread(journal, [("held", n) for n in range(36)], branches=3)
        with trio.fail_after(40):
            responses = await journal.wait([c for _, c, _, _ in submitted])
    assert all(r.outcome is ActionOutcome.COMPLETED for r in responses)  # none lost
    branch_of = {n: branch for branch, _, _, n in submitted}
    events = []
    for line in workers.effects.read_text().splitlines():
        kind, n, _pid, at = line.split()
        events.append((float(at), kind == "held+", int(n)))
    events.sort(key=lambda e: (e[0], e[1]))  # at equal times, an end before a start
    running, most = 0, 0
    per_branch: dict[uuid.UUID, int] = defaultdict(int)
    most_per_branch = 0
    for _, starting, n in events:
        step = 1 if starting else -1
        running += step
        per_branch[branch_of[n]] += step
        most = max(most, running)
        most_per_branch = max(most_per_branch, per_branch[branch_of[n]])
    assert sum(1 for e in events if e[1]) == 36
    assert most <= 3 and most_per_branch <= 2  # tool "held": 3 at once; each branch: 2
    stats = [await workers.stop(w) for w in workers.started]
    assert sum(s["recorded"] for s in stats) == 36


@pytest.mark.timeout(90)
async def test_worker_processes_deny_over_budget_with_the_reason(workers: Workers) -> None:
    async with trio.open_nursery() as nursery:
        for name in ("d1", "d2"):
            nursery.start_soon(lambda name=name: workers.start(name, limits="budgets"))
    async with open_journal(workers.target) as journal:
        # five branches of priced calls costing 10 each (the tool's budget: 50 in all) and
        # one branch of eight calls (each branch's budget: 6 calls)
        priced = await submit_spread(journal, [("priced", 10) for _ in range(10)], branches=5)
        counted = await submit_spread(journal, [("safe", n) for n in range(8)], branches=1)
        with trio.fail_after(40):
            responses = await journal.wait([c for _, c, _, _ in priced + counted])
    outcomes = [r.outcome for r in responses]
    assert outcomes[:10].count(ActionOutcome.COMPLETED) == 5
    assert outcomes[:10].count(ActionOutcome.DENIED) == 5
    assert outcomes[10:].count(ActionOutcome.COMPLETED) == 6
    assert outcomes[10:].count(ActionOutcome.DENIED) == 2
    denied = [r for r in responses if r.outcome is ActionOutcome.DENIED]
    assert all(r.content.attempts == 0 for r in denied)
    reasons = {str(r.content.error) for r in denied[:5]}
    assert all("the cost budget of 50 of tool 'priced' (in total)" in why for why in reasons)
    assert all("budget of 6 calls of branch" in str(r.content.error) for r in denied[5:])
    ran = workers.ran()
    assert ran[("priced", 10)] == 5 and sum(ran[("safe", n)] for n in range(8)) == 6
    stats = [await workers.stop(w) for w in workers.started]
    assert sum(s["denied"] for s in stats) == 7


# -- an embedded worker (SQLite): per-branch rate and concurrency ----------------------------


async def test_an_embedded_worker_keeps_branch_limits(tmp_path: Path) -> None:
    most = running = 0

    async def slow(n: int) -> int:
        nonlocal most, running
        running += 1
        most = max(most, running)
        await trio.sleep(0.05)
        running -= 1
        return n

    limits = {"branch:*": Limit(concurrency=1, rate=50, burst=2)}
    async with SqliteJournal(tmp_path / "j.db") as journal:
        worker = Worker(
            journal, [Tool.from_function(slow, effect="pure")], poll=0.02, limits=limits
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            ids = await journal.submit(uuid.uuid4(), [call("slow", n) for n in range(6)])
            with trio.fail_after(20):
                responses = await journal.wait(ids)
            nursery.cancel_scope.cancel()
    assert [r.output for r in responses] == list(range(6))
    assert most == 1


# -- the judge's invariants (hypothesis) -------------------------------------------------------

_steps = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=2, allow_nan=False),  # time since the last step
        st.sampled_from(["b0", "b1", "b2"]),  # branch
        st.integers(min_value=0, max_value=4),  # cost argument
        st.booleans(),  # release a running call first
    ),
    max_size=60,
)


@given(
    steps=_steps,
    rate=st.sampled_from([None, 1.0, 5.0]),
    burst=st.integers(min_value=1, max_value=3),
    concurrency=st.sampled_from([None, 1, 2]),
    budget=st.sampled_from([None, 0, 5, 12]),
    branch_concurrency=st.sampled_from([None, 1]),
)
def test_the_judge_never_grants_past_a_limit(
    steps: list[tuple[float, str, int, bool]],
    rate: float | None,
    burst: int,
    concurrency: int | None,
    budget: int | None,
    branch_concurrency: int | None,
) -> None:
    limiter = LocalLimiter(
        {
            "t": Limit(
                rate=rate, burst=burst, concurrency=concurrency, budget=budget, cost=cost_of
            ),
            "branch:*": Limit(concurrency=branch_concurrency),
        }
    )
    now, spent = 0.0, 0.0
    running: list[str] = []
    grants: list[float] = []
    for gap, branch, n, release in steps:
        now += gap
        if release and running:
            limiter.release("t", running.pop(0))
        verdict = limiter.try_acquire("t", branch, {"n": n}, now=now)
        busy_tool = concurrency is not None and len(running) >= concurrency
        busy_branch = branch_concurrency is not None and running.count(branch) >= 1
        if budget is not None and spent + n > budget:
            assert isinstance(verdict, Denied)  # a budget is judged first
            continue
        if isinstance(verdict, Granted):
            assert not busy_tool and not busy_branch
            running.append(branch)
            grants.append(now)
            spent += n
        elif isinstance(verdict, Busy):
            assert busy_tool or busy_branch
        else:
            assert isinstance(verdict, Deferred) and rate is not None and verdict.wait > 0
    if rate is not None:
        assert within_allowance(grants, burst, rate)
    assert budget is None or spent <= budget


async def test_a_deferred_call_cancelled_while_it_waits_gives_its_slot_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalLimiter({"t": Limit(rate=1, period=10, burst=1)})
    async with limiter.hold("t"):
        pass  # the burst is used: the next call may start at 10
    with trio.move_on_after(1):
        async with limiter.hold("t"):  # deferred to 10, then cancelled at 1
            raise AssertionError("not reached")
    verdict = limiter.try_acquire("t")
    assert isinstance(verdict, Deferred)
    assert verdict.wait == pytest.approx(9)  # the slot at 10 is free again, not 20
