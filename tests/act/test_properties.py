"""Random batches and injected faults: the evidence invariants hold whatever happens."""

from __future__ import annotations

from typing import Any

import trio
import trio.lowlevel
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from lionexec import (
    ActionOutcome,
    AlcallParams,
    Branch,
    FunctionCalling,
    HookPoint,
    PermissionPolicy,
    SessionObserver,
    Tool,
)
from lionexec.testing import assert_consistent, tool_call

KINDS = ["ok", "none", "raises", "denied_gate", "denied_policy", "invalid", "unknown", "slow"]


async def ok(x: int) -> int:
    return x


async def none(x: int) -> None:
    return None


async def raises(x: int) -> None:
    raise ValueError(f"bad {x}")


async def slow(x: int) -> int:
    await trio.sleep(x)
    return x


def make_branch() -> Branch:
    branch = Branch(
        policy=PermissionPolicy(mode="rules", allow={"*": ["*"]}, deny={"policy_denied": ["*"]})
    )
    branch.register_tools([ok, none, raises, Tool.from_function(slow, idempotent=True)])
    branch.register_tools(Tool.from_function(ok, name="gate_denied"))
    branch.register_tools(Tool.from_function(ok, name="policy_denied"))
    branch.observer = SessionObserver()
    branch.observer.gate(lambda inv: inv.function != "gate_denied")
    return branch


def proposal(kind: str, x: int) -> dict[str, Any]:
    return {
        "ok": tool_call("ok", x=x),
        "none": tool_call("none", x=x),
        "raises": tool_call("raises", x=x),
        "denied_gate": tool_call("gate_denied", x=x),
        "denied_policy": tool_call("policy_denied", x=x),
        "invalid": tool_call("ok", x="not a number"),
        "unknown": tool_call("no_such_tool", x=x),
        "slow": tool_call("slow", x=x),
    }[kind]


EXPECTED = {
    "ok": ActionOutcome.COMPLETED,
    "none": ActionOutcome.COMPLETED,
    "raises": ActionOutcome.FAILED,
    "denied_gate": ActionOutcome.DENIED,
    "denied_policy": ActionOutcome.DENIED,
    "invalid": ActionOutcome.INVALID,
    "unknown": ActionOutcome.INVALID,
}

batches = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 6)), max_size=12)
params = st.builds(
    AlcallParams,
    max_concurrent=st.none() | st.integers(1, 4),
    throttle_period=st.none() | st.sampled_from([0.0, 0.5]),
    timeout=st.none() | st.sampled_from([1.0, 3.0, 10.0]),
    retry_attempts=st.integers(0, 2),
    retry_initial_delay=st.sampled_from([0.0, 1.0]),
)


def run(afn: Any) -> None:
    trio.run(afn, clock=trio.testing.MockClock(autojump_threshold=0))


@given(
    batches,
    st.sampled_from(["concurrent", "sequential"]),
    params,
    st.none() | st.integers(0, 20),
    st.booleans(),
)
def test_random_batches_keep_every_invariant(
    batch: list[tuple[str, int]],
    strategy: Any,
    call_params: AlcallParams,
    cancel_after: int | None,
    suppress: bool,
) -> None:
    branch = make_branch()
    result: list[Any] = []
    raised: list[BaseException] = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            if cancel_after is not None:
                scope.deadline = trio.current_time() + cancel_after + 0.25
            try:
                result.extend(
                    await branch.act(
                        [proposal(kind, x) for kind, x in batch],
                        strategy=strategy,
                        suppress_errors=suppress,
                        call_params=call_params,
                    )
                )
            except* ValueError as group:  # one or several tool failures, unsuppressed
                raised.append(group)

    run(main)
    assert_consistent(branch)
    responses = branch.messages.responses()
    assert len(responses) == len(batch)
    if result:
        assert len(result) == len(batch)
        for (kind, x), response in zip(batch, result, strict=True):
            content = response.content
            if kind == "slow":
                timeout = call_params.timeout
                assert content.outcome is (
                    ActionOutcome.TIMED_OUT
                    if timeout is not None and x >= timeout
                    else ActionOutcome.COMPLETED
                )
            else:
                assert content.outcome is EXPECTED[kind]
            if content.outcome is ActionOutcome.FAILED:
                expected_attempts = 1  # "raises" is not idempotent: never retried
                assert content.attempts == expected_attempts
    if raised:
        assert not suppress
        assert any(kind == "raises" for kind, _ in batch)


SEAMS = [
    "gate",
    "policy_escalation",
    "pre_hook",
    "post_hook",
    "error_hook",
    "observer",
    "callback",
]


@given(st.sets(st.sampled_from(SEAMS)), batches, st.sampled_from(["concurrent", "sequential"]))
def test_faults_at_every_seam_keep_the_invariants(
    seams: set[str], batch: list[tuple[str, int]], strategy: Any
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected")

    async def explode_async(*args: Any, **kwargs: Any) -> Any:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("injected")

    branch = make_branch()
    if "gate" in seams:
        branch.observer.gate(explode)  # type: ignore[union-attr]
    if "policy_escalation" in seams:
        branch.policy = PermissionPolicy(
            mode="rules", escalate={"*": ["*"]}, on_escalate=explode_async
        )
    if "pre_hook" in seams:
        branch.hooks.on(HookPoint.TOOL_PRE, explode_async)
    if "post_hook" in seams:
        branch.hooks.on(HookPoint.TOOL_POST, explode)
    if "error_hook" in seams:
        branch.hooks.on(HookPoint.TOOL_ERROR, explode_async)
    if "observer" in seams:
        branch.observer.subscribe(FunctionCalling, explode)  # type: ignore[union-attr]
    if "callback" in seams:
        branch.messages.on_message_added.append(explode_async)

    async def main() -> None:
        with trio.move_on_after(50):
            await branch.act([proposal(kind, x) for kind, x in batch], strategy=strategy)

    run(main)
    assert_consistent(branch)
    assert len(branch.messages.responses()) == len(batch)
    governance_broken = seams & {"gate", "policy_escalation", "pre_hook"}
    for response in branch.messages.responses():
        if governance_broken and response.content.outcome is not ActionOutcome.INVALID:
            assert response.content.outcome is ActionOutcome.DENIED
    for failure in branch.failures:
        assert str(failure.error) == "injected"
