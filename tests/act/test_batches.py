"""Batches: call parameters, retries inside one transaction, summaries total over the statuses."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
import trio
import trio.testing

from lionexec import (
    ActionOutcome,
    AlcallParams,
    BatchSummary,
    Branch,
    ConfigurationError,
    EventStatus,
    HookPoint,
    Tool,
    alcall,
)
from lionexec.act import RetryPolicy
from lionexec.act._batch import fan_out
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

Outcome = ActionOutcome
S = EventStatus


def outcomes(responses: list[Any]) -> list[ActionOutcome]:
    return [r.content.outcome for r in responses]


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_a_single_request_is_wrapped_in_a_list(branch: Branch, strategy: Any) -> None:
    responses = await branch.act(call("add", a=1, b=2), strategy=strategy)
    assert isinstance(responses, list)
    assert [r.content.output for r in responses] == [3]


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_empty_batch_returns_empty_and_records_nothing(
    branch: Branch, strategy: Any
) -> None:
    fired: list[Any] = []
    for point in (HookPoint.TOOL_PRE, HookPoint.TOOL_POST, HookPoint.TOOL_ERROR):
        branch.hooks.on(point, lambda **kw: fired.append(kw))
    assert await branch.act([], strategy=strategy) == []
    assert fired == []
    assert len(branch.messages) == 0
    assert len(branch.log) == 0


async def test_invalid_strategy_raises_configuration_error(branch: Branch) -> None:
    with pytest.raises(ConfigurationError, match="'parallel'"):
        await branch.act(call("add", a=1, b=2), strategy="parallel")  # type: ignore[arg-type]
    assert len(branch.messages) == 0


async def test_concurrent_results_are_in_input_order_not_completion_order(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    responses = await branch.act([call("slow", seconds=s) for s in (3, 1, 2)])
    assert [r.content.arguments["seconds"] for r in responses] == [3, 1, 2]
    completion = [r.content.arguments["seconds"] for r in branch.messages.responses()]
    assert completion == [1, 2, 3]


async def test_default_concurrent_batch_starts_every_call_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    running = 0
    peak = 0

    async def work(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return i

    branch = Branch()
    branch.register_tools(work)
    responses = await branch.act([call("work", i=i) for i in range(25)])
    assert peak == 25
    assert [r.content.output for r in responses] == list(range(25))


async def test_max_concurrent_caps_running_calls(autojump_clock: trio.abc.Clock) -> None:
    running = 0
    peak = 0

    async def work() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1

    branch = Branch()
    branch.register_tools(work)
    start = trio.current_time()
    await branch.act([call("work")] * 10, call_params=AlcallParams(max_concurrent=3))
    assert peak == 3
    assert trio.current_time() - start == pytest.approx(4.0)


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_throttle_period_spaces_the_starts(
    autojump_clock: trio.abc.Clock, strategy: Any
) -> None:
    starts: list[float] = []

    async def stamp() -> None:
        starts.append(trio.current_time())

    branch = Branch()
    branch.register_tools(stamp)
    t0 = trio.current_time()
    await branch.act(
        [call("stamp")] * 4, strategy=strategy, call_params=AlcallParams(throttle_period=0.5)
    )
    assert [round(t - t0, 6) for t in starts] == [0.0, 0.5, 1.0, 1.5]


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_timeout_gives_a_timed_out_response(
    branch: Branch, autojump_clock: trio.abc.Clock, strategy: Any
) -> None:
    responses = await branch.act(
        [call("slow", seconds=5), call("slow", seconds=1)],
        strategy=strategy,
        call_params=AlcallParams(timeout=2),
    )
    assert outcomes(responses) == [Outcome.TIMED_OUT, Outcome.COMPLETED]
    timed_out = responses[0].content
    assert timed_out.status is S.CANCELLED
    assert timed_out.error is not None
    assert timed_out.error.type == "TimeoutError"
    assert "2s" in timed_out.error.message
    assert_consistent(branch)


def flaky_tool(failures: int, *, idempotent: bool) -> tuple[Tool, list[float]]:
    attempts: list[float] = []

    async def flaky() -> str:
        attempts.append(trio.current_time())
        if len(attempts) <= failures:
            raise ConnectionError(f"attempt {len(attempts)} failed")
        return "ok"

    return Tool.from_function(flaky, idempotent=idempotent), attempts


async def test_retries_run_inside_one_transaction_for_idempotent_tools(
    autojump_clock: trio.abc.Clock,
) -> None:
    tool, attempts = flaky_tool(2, idempotent=True)
    branch = Branch()
    branch.register_tools(tool)
    params = AlcallParams(retry_attempts=3, retry_initial_delay=1, retry_backoff=2)
    [response] = await branch.act(call("flaky"), call_params=params)
    assert response.content.outcome is Outcome.COMPLETED
    assert response.content.attempts == 3
    t0 = attempts[0]
    assert [t - t0 for t in attempts] == pytest.approx([0, 1, 3])
    assert len(branch.messages.requests()) == 1
    assert len(branch.messages.responses()) == 1
    [record] = list(branch.log)
    assert record.attempts == 3
    assert_consistent(branch)


async def test_retries_give_up_after_the_last_attempt_and_record_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    tool, attempts = flaky_tool(10, idempotent=True)
    branch = Branch()
    branch.register_tools(tool)
    [response] = await branch.act(call("flaky"), call_params=AlcallParams(retry_attempts=2))
    assert response.content.outcome is Outcome.FAILED
    assert response.content.attempts == 3
    assert response.content.error is not None
    assert response.content.error.message == "attempt 3 failed"
    assert len(attempts) == 3


async def test_non_idempotent_tools_are_not_retried_unless_forced(
    autojump_clock: trio.abc.Clock,
) -> None:
    tool, attempts = flaky_tool(1, idempotent=False)
    branch = Branch()
    branch.register_tools(tool)
    [once] = await branch.act(call("flaky"), call_params=AlcallParams(retry_attempts=3))
    assert once.content.outcome is Outcome.FAILED
    assert len(attempts) == 1

    tool, attempts = flaky_tool(1, idempotent=False)
    forced_branch = Branch()
    forced_branch.register_tools(tool)
    params = AlcallParams(retry_attempts=3, force_retry=True)
    [forced] = await forced_branch.act(call("flaky"), call_params=params)
    assert forced.content.outcome is Outcome.COMPLETED
    assert forced.content.attempts == 2
    assert len(attempts) == 2


async def test_denied_invalid_and_timed_out_calls_are_never_retried(
    autojump_clock: trio.abc.Clock,
) -> None:
    calls = 0

    async def counted(seconds: float = 0) -> None:
        nonlocal calls
        calls += 1
        await trio.sleep(seconds)

    branch = Branch()
    branch.register_tools(Tool.from_function(counted, idempotent=True))
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: kw["context"].arguments.get("seconds") != 1)
    params = AlcallParams(retry_attempts=5, timeout=3)
    responses = await branch.act(
        [call("counted", seconds=1), call("counted", seconds="x"), call("counted", seconds=9)],
        call_params=params,
    )
    assert outcomes(responses) == [Outcome.DENIED, Outcome.INVALID, Outcome.TIMED_OUT]
    assert [r.content.attempts for r in responses] == [0, 0, 1]
    assert calls == 1


async def test_cancellation_is_never_retried(autojump_clock: trio.abc.Clock) -> None:
    calls = 0

    async def hang() -> None:
        nonlocal calls
        calls += 1
        await trio.sleep_forever()

    branch = Branch()
    branch.register_tools(Tool.from_function(hang, idempotent=True))
    with trio.move_on_after(1):
        await branch.act(call("hang"), call_params=AlcallParams(retry_attempts=5))
    assert calls == 1
    [response] = branch.messages.responses()
    assert response.content.outcome is Outcome.CANCELLED


async def test_cancellation_between_retries_records_the_last_failure(
    autojump_clock: trio.abc.Clock,
) -> None:
    tool, attempts = flaky_tool(10, idempotent=True)
    branch = Branch()
    branch.register_tools(tool)
    params = AlcallParams(retry_attempts=5, retry_initial_delay=10)
    with trio.move_on_after(1):
        await branch.act(call("flaky"), call_params=params)
    assert len(attempts) == 1
    [response] = branch.messages.responses()
    assert response.content.outcome is Outcome.FAILED
    assert_consistent(branch)


async def test_unsuppressed_failure_in_a_concurrent_batch_cancels_and_records_siblings(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    with pytest.raises(RuntimeError, match="kaput"):
        await branch.act(
            [call("slow", seconds=5), call("fail"), call("add", a=1, b=2)],
            suppress_errors=False,
        )
    by_function = {r.content.function: r.content.outcome for r in branch.messages.responses()}
    # "add" and "fail" both reach the write-ahead checkpoint before invoking; trio may resume
    # either first, so "add" has either completed or been cancelled there, never run twice.
    assert by_function.pop("add") in {Outcome.COMPLETED, Outcome.CANCELLED}
    assert by_function == {"slow": Outcome.CANCELLED, "fail": Outcome.FAILED}
    assert_consistent(branch)


async def test_return_exceptions_keeps_each_failure_in_its_slot(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    results = await branch.act(
        [call("fail", message="one"), call("slow", seconds=1), call("fail", message="two")],
        suppress_errors=False,
        call_params=AlcallParams(return_exceptions=True),
    )
    assert isinstance(results[0], RuntimeError) and str(results[0]) == "one"
    assert results[1].content.outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    assert isinstance(results[2], RuntimeError) and str(results[2]) == "two"
    assert_consistent(branch)


async def test_sequential_runs_in_order_and_an_unsuppressed_failure_stops_the_loop(
    branch: Branch,
) -> None:
    order: list[str] = []
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: order.append(kw["tool_name"]))
    with pytest.raises(RuntimeError):
        await branch.act(
            [call("add", a=1, b=1), call("fail"), call("nothing")],
            strategy="sequential",
            suppress_errors=False,
        )
    assert order == ["add", "fail"]
    by_function = {r.content.function: r.content for r in branch.messages.responses()}
    assert by_function["nothing"].outcome is Outcome.CANCELLED
    assert by_function["nothing"].attempts == 0
    assert_consistent(branch)


async def test_sequential_suppressed_failures_do_not_stop_the_loop(branch: Branch) -> None:
    responses = await branch.act(
        [call("fail"), call("add", a=1, b=1), call("fail")], strategy="sequential"
    )
    assert outcomes(responses) == [Outcome.FAILED, Outcome.COMPLETED, Outcome.FAILED]


async def test_each_call_in_a_batch_has_its_own_lifecycle(branch: Branch) -> None:
    pre_ids: list[str] = []
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: pre_ids.append(kw["call_id"]))
    responses = await branch.act([call("add", a=1, b=1)] * 3)
    assert len(set(pre_ids)) == 3
    assert len({r.id for r in responses}) == 3
    assert len({rec.event.id for rec in branch.log}) == 3
    assert_consistent(branch)


async def test_sync_tools_are_offloaded_so_a_batch_really_runs_concurrently() -> None:
    barrier = threading.Barrier(3, timeout=5)

    def meet(i: int) -> int:
        barrier.wait()  # deadlocks (then times out) if the tools ran inline, one by one
        return i

    branch = Branch()
    branch.register_tools(meet)
    with trio.fail_after(10):
        responses = await branch.act([call("meet", i=i) for i in range(3)])
    assert [r.content.output for r in responses] == [0, 1, 2]


# -- summaries are total over the terminal statuses -------------------------------------------


async def test_batch_summary_counts_all_five_terminal_statuses_and_only_completed_succeeds(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: kw["tool_name"] != "nothing")
    responses = await branch.act(
        [
            call("add", a=1, b=1),
            call("fail"),
            call("nothing"),
            call("missing"),
            call("slow", seconds=9),
        ],
        call_params=AlcallParams(timeout=1),
    )
    summary = BatchSummary.of(responses)
    assert dict(summary.by_status) == {
        S.COMPLETED: 1,
        S.FAILED: 1,
        S.SKIPPED: 1,
        S.ABORTED: 1,
        S.CANCELLED: 1,
    }
    assert summary.succeeded == 1
    assert summary.unsuccessful == 4
    assert not summary.all_succeeded
    assert summary.by_outcome[Outcome.TIMED_OUT] == 1


def test_batch_summary_of_nothing_has_every_status_at_zero() -> None:
    summary = BatchSummary.of([])
    assert set(summary.by_status) == {S.COMPLETED, S.FAILED, S.SKIPPED, S.CANCELLED, S.ABORTED}
    assert all(v == 0 for v in summary.by_status.values())
    assert summary.all_succeeded


# -- alcall, the generic fan-out ---------------------------------------------------------------


@pytest.mark.parametrize("limited", [False, True], ids=["plain", "limiter"])
async def test_a_sequential_fan_out_can_be_cancelled_between_calls_that_never_wait(
    limited: bool,
) -> None:
    ran: list[int] = []
    limiter = trio.CapacityLimiter(1) if limited else None  # its token is the checkpoint

    async def never_waits(_index: int, item: int) -> int:
        ran.append(item)
        if item == 2:
            scope.cancel()
        return item

    with trio.fail_after(5), trio.CancelScope() as scope:
        await fan_out(never_waits, list(range(10)), max_concurrent=1, limiter=limiter)
    assert scope.cancelled_caught
    assert ran == [0, 1, 2]  # stopped at the checkpoint before the fourth call


async def test_alcall_returns_results_in_input_order(autojump_clock: trio.abc.Clock) -> None:
    async def later(x: int) -> int:
        await trio.sleep(10 - x)
        return x * x

    assert await alcall(later, range(5)) == [0, 1, 4, 9, 16]


async def test_alcall_retries_and_times_out(autojump_clock: trio.abc.Clock) -> None:
    tries = 0

    async def flaky(x: int) -> int:
        nonlocal tries
        tries += 1
        if tries < 3:
            await trio.sleep(5)
        return x

    params = AlcallParams(timeout=1, retry_attempts=2)
    assert await alcall(flaky, [7], params) == [7]
    assert tries == 3


async def test_alcall_raises_the_single_failure_unwrapped() -> None:
    async def bad(x: int) -> int:
        raise KeyError(x)

    with pytest.raises(KeyError):
        await alcall(bad, [1])
    results = await alcall(bad, [1, 2], AlcallParams(return_exceptions=True))
    assert [type(r) for r in results] == [KeyError, KeyError]


async def test_max_concurrent_starts_calls_in_input_order(autojump_clock: trio.abc.Clock) -> None:
    started: list[int] = []

    async def work(i: int) -> None:
        started.append(i)
        await trio.sleep(1 + (i % 3))

    branch = Branch()
    branch.register_tools(work)
    await branch.act(
        [call("work", i=i) for i in range(12)], call_params=AlcallParams(max_concurrent=2)
    )
    assert started == list(range(12))


# -- retry delays and throttles -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backoff", "initial", "retry", "expected"),
    [(2.0, 0.0, 1024, 0.0), (10.0, 0.001, 309, 1.0), (2, 0.0, 1024, 0.0), (2, 1.0, 5000, 1.0)],
)
def test_a_retry_delay_is_capped_never_an_overflow(
    backoff: float, initial: float, retry: int, expected: float
) -> None:
    policy = RetryPolicy(attempts=6000, backoff=backoff, initial_delay=initial, max_delay=1.0)
    assert policy.delay(retry) == expected


async def test_alcall_makes_every_attempt_past_an_overflowing_backoff(
    autojump_clock: trio.abc.Clock,
) -> None:
    attempts = 0

    async def flaky(x: int) -> int:
        nonlocal attempts
        attempts += 1
        raise ValueError("transient")

    params = AlcallParams(
        retry_attempts=400, retry_backoff=10.0, retry_initial_delay=0.001, retry_max_delay=0.01
    )
    with pytest.raises(ValueError, match="transient"):  # the tool's own error, not Overflow
        await alcall(flaky, [1], params)
    assert attempts == 401


@pytest.mark.parametrize("shape", ["max_concurrent", "limiter"])
async def test_a_throttle_spaces_real_starts_when_a_call_waits_for_capacity(
    shape: str, autojump_clock: trio.abc.Clock
) -> None:
    durations = [10.0, 9.5, 1.0, 1.0]
    starts: list[float] = []

    async def work(i: int) -> None:
        starts.append(trio.current_time())
        await trio.sleep(durations[i])

    if shape == "max_concurrent":
        await alcall(work, range(4), AlcallParams(max_concurrent=2, throttle_period=1.0))
    else:  # two at a time through a shared limiter: its token is the wait

        async def run(_: int, i: int) -> None:
            await work(i)

        limiter = trio.CapacityLimiter(2)
        await fan_out(run, list(range(4)), throttle_period=1.0, limiter=limiter)
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(starts) == 4 and min(gaps) >= 1.0 - 1e-9, gaps


async def test_a_call_cancelled_before_it_starts_gives_its_tokens_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = trio.CapacityLimiter(2)

    async def work(i: int, item: int) -> None:
        await trio.sleep(5)

    with trio.move_on_after(0.5):  # the second start waits on the throttle, holding tokens
        await fan_out(work, [1, 2], max_concurrent=2, throttle_period=1.0, limiter=limiter)
    assert limiter.borrowed_tokens == 0
