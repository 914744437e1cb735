"""Governance seams add no scheduler steps to a call; subclasses' overrides still run.

When a call is announced, a seam's own method a subclass overrides that raises is reported,
never raised (nor over a cancellation), and a recorded error that does not copy is passed as
it is.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from lionexec import (
    ActionOutcome,
    Branch,
    HookBus,
    HookPoint,
    PermissionPolicy,
    SessionObserver,
    Tool,
)
from lionexec.act._transaction import CallTransaction
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call


async def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: one.
        b: two.
    """
    return a + b


class StepCounter(trio.abc.Instrument):
    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def steps_of_act(branch: Branch, calls: list[dict[str, Any]]) -> int:
    counter = StepCounter(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(counter)
    try:
        await branch.act(calls, strategy="sequential")
    finally:
        trio.lowlevel.remove_instrument(counter)
    return counter.steps


def governed(hooks: HookBus | None = None, **options: Any) -> Branch:
    observer = options.pop("observer", None) or SessionObserver()
    observer.gate(lambda invocation: True)
    policy = options.pop("policy", None) or PermissionPolicy(mode="rules", allow={"add": ["*"]})
    branch = Branch(observer=observer, policy=policy, hooks=hooks or HookBus())
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **_: None)
    branch.hooks.on(HookPoint.TOOL_POST, lambda **_: None)
    branch.register_tools(Tool.from_function(add))
    return branch


async def test_a_governed_call_takes_as_many_scheduler_steps_as_an_ungoverned_one() -> None:
    with trio.fail_after(5):
        plain = Branch()
        plain.register_tools(Tool.from_function(add))
        calls = [call("add", a=i, b=1) for i in range(10)]
        bare = await steps_of_act(plain, calls)
        ruled = await steps_of_act(governed(), [call("add", a=i, b=1) for i in range(10)])
    assert bare >= 10  # a sequential batch still yields between calls
    assert ruled == bare


async def test_a_sequential_batch_of_denied_calls_still_yields() -> None:
    with trio.fail_after(5):
        branch = governed(policy=PermissionPolicy(mode="rules", deny={"add": ["*"]}))
        steps = await steps_of_act(branch, [call("add", a=i, b=1) for i in range(5)])
    assert steps >= 5
    assert all(m.content.outcome == "denied" for m in branch.messages.responses())
    assert_consistent(branch)


async def test_overridden_governance_methods_are_still_called() -> None:
    seen: list[str] = []

    class Hooks(HookBus):
        async def run_pre(self, **kwargs: Any) -> Any:
            seen.append("run_pre")
            return await super().run_pre(**kwargs)

        async def emit(self, point: Any, **kwargs: Any) -> Any:
            seen.append(f"emit {HookPoint(point).value}")
            return await super().emit(point, **kwargs)

    class Observer(SessionObserver):
        async def authorize(self, invocation: Any) -> bool:
            seen.append("authorize")
            return await super().authorize(invocation)

        async def emit(self, payload: Any, *, call_id: str | None = None) -> Any:
            seen.append("observe")
            return await super().emit(payload, call_id=call_id)

    class Policy(PermissionPolicy):
        async def decide(self, ctx: Any) -> Any:
            seen.append("decide")
            return await super().decide(ctx)

    with trio.fail_after(5):
        branch = governed(
            Hooks(), observer=Observer(), policy=Policy(mode="rules", allow={"add": ["*"]})
        )
        [response] = await branch.act(call("add", a=1, b=2))
    assert response.content.output == 3
    assert seen == ["authorize", "decide", "run_pre", "emit tool.post", "observe"]


class SpawnedSteps(trio.abc.Instrument):
    """Counts the scheduler steps of every task but one."""

    def __init__(self, apart: trio.lowlevel.Task) -> None:
        self.apart = apart
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is not self.apart:
            self.steps += 1


async def test_a_call_of_a_concurrent_batch_takes_one_scheduler_step() -> None:
    # Its task's start is the call's schedule point: the event adds none after the tool
    # returns (one scheduler step fewer per concurrent call).
    for branch in (Branch(), governed()):
        branch.register_tools(Tool.from_function(add), update=True)
        counter = SpawnedSteps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(5):
                responses = await branch.act([call("add", a=i, b=1) for i in range(10)])
        finally:
            trio.lowlevel.remove_instrument(counter)
        assert [r.content.output for r in responses] == list(range(1, 11))
        assert counter.steps == 10
        assert_consistent(branch)


async def test_an_observer_is_asked_only_once_it_has_a_gate_set_at_any_time() -> None:
    # Without a gate the observer allows everything, so the act path does not ask it (nor
    # build the call's context for it); a gate set later, between acts, is asked at once.
    observer = SessionObserver()
    branch = Branch(observer=observer)
    branch.register_tools(Tool.from_function(add))
    asked: list[str] = []

    def gate(invocation: Any) -> bool:
        asked.append(invocation.call_id)
        return False

    with trio.fail_after(5):
        [first] = await branch.act(call("add", a=1, b=2))
        observer.gate(gate)
        [second] = await branch.act(call("add", a=1, b=2))
        observer.clear_gate()
        [third] = await branch.act(call("add", a=1, b=2))
    assert [r.content.outcome for r in (first, second, third)] == [
        "completed",
        "denied",
        "completed",
    ]
    assert asked == [branch.messages[second.action_request_id].call_id]
    assert len(observer.denials) == 1
    assert_consistent(branch)


async def test_an_overridden_authorize_is_asked_even_without_a_gate() -> None:
    class Refusing(SessionObserver):
        async def authorize(self, invocation: Any) -> bool:
            return False

    class RefusingQuietly(SessionObserver):
        async def _authorize(self, invocation: Any) -> bool:
            return False

    for observer in (Refusing(), RefusingQuietly()):
        assert not observer.has_gate
        branch = Branch(observer=observer)
        branch.register_tools(Tool.from_function(add))
        with trio.fail_after(5):
            [response] = await branch.act(call("add", a=1, b=2))
        assert response.content.outcome == "denied"
        assert_consistent(branch)


# -- announcing: a seam a subclass overrides fails alone ------------------------------------------


class AuditObserver(SessionObserver):
    async def emit(self, payload: Any, *, call_id: str | None = None) -> None:
        raise ConnectionError("audit service down")


async def test_an_observer_whose_emit_raises_is_reported_not_raised(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def quick() -> int:
        return 1

    async def slow() -> int:
        await trio.sleep(10)
        return 2

    branch = Branch(observer=AuditObserver())
    branch.register_tools([quick, slow])
    responses = await branch.act([call("quick"), call("slow")])
    assert [r.content.outcome for r in responses] == [ActionOutcome.COMPLETED] * 2
    failures = list(branch.failures)
    assert [f.where for f in failures] == ["observer", "observer"]
    assert {f.call_id for f in failures} == {record.call_id for record in branch.log}
    assert_consistent(branch)


async def test_an_observer_whose_emit_raises_does_not_replace_a_cancellation(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def slow() -> int:
        await trio.sleep(10)
        return 2

    branch = Branch(observer=AuditObserver())
    branch.register_tools(slow)
    with trio.move_on_after(1) as scope:
        await branch.act(call("slow"))
    assert scope.cancelled_caught
    [response] = branch.messages.responses()
    assert response.content.outcome is ActionOutcome.CANCELLED
    [failure] = list(branch.failures)
    assert failure.where == "observer"


async def test_a_hook_bus_whose_emit_raises_is_reported_at_each_point() -> None:
    class BrokenBus(HookBus):
        async def emit(self, point: HookPoint, **kwargs: Any) -> Any:
            raise RuntimeError(f"bus broke at {point.value}")

    async def ok() -> int:
        return 1

    hooks = BrokenBus()
    for point in (HookPoint.TOOL_POST, HookPoint.MESSAGE_ADD):
        hooks.on(point, lambda **kwargs: None)
    branch = Branch(hooks=hooks)
    branch.register_tools(ok)
    [response] = await branch.act(call("ok"))
    assert response.content.outcome is ActionOutcome.COMPLETED
    assert [f.where for f in list(branch.failures)] == [
        "hook:tool.post",
        "hook:message.add",
        "hook:message.add",
    ]


async def test_announcing_an_interrupted_call_never_replaces_the_cancellation(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_announce(self: CallTransaction) -> None:
        raise RuntimeError("announce broke")

    monkeypatch.setattr(CallTransaction, "announce", broken_announce)
    branch = Branch(observer=SessionObserver())
    branch.register_tools(slow_tool)
    with trio.move_on_after(1) as scope:
        await branch.act(call("slow_tool"))
    assert scope.cancelled_caught
    [failure] = list(branch.failures)
    assert failure.where == "announce"


async def slow_tool() -> None:
    await trio.sleep(10)


# -- announcing: a recorded error that does not copy ----------------------------------------------


class CopiesToText(Exception):
    def __reduce__(self) -> Any:  # copy.copy() of it is a str
        return (str, ("odd",))


class Frozen(Exception):
    def __setattr__(self, name: str, value: Any) -> None:  # its copy refuses __cause__
        if name == "__cause__":
            raise AttributeError(f"{name} is frozen")
        super().__setattr__(name, value)


@pytest.mark.parametrize("error", [CopiesToText("tool failed"), Frozen("tool failed")])
async def test_a_tool_error_that_does_not_copy_is_rebuilt_or_stood_in_for_never_shared(
    autojump_clock: trio.abc.Clock, error: Exception
) -> None:
    async def bad() -> None:
        raise error

    async def slow() -> str:
        await trio.sleep(10)
        return "done"

    seen: list[Any] = []
    branch = Branch()
    branch.register_tools([bad, slow])
    branch.hooks.on(HookPoint.TOOL_ERROR, lambda **kwargs: seen.append(kwargs["error"]))
    responses = await branch.act([call("bad"), call("slow")], suppress_errors=True)
    assert [r.content.outcome for r in responses] == [
        ActionOutcome.FAILED,
        ActionOutcome.COMPLETED,
    ]
    [given] = seen
    assert given is not error  # (a hook changing it would change the record)
    assert isinstance(given, type(error) | RuntimeError) and "tool failed" in str(given)
    assert branch.failures.statistics().total == 0
    assert_consistent(branch)


class WithDetails(Exception):
    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message, [1, 2])
        self.details = details


async def test_a_hook_cannot_change_the_recorded_errors_attributes_or_args() -> None:
    async def bad() -> None:
        raise WithDetails("tool failed", {"path": "/data/a", "tries": [1]})

    def tamper(**kwargs: Any) -> None:
        error = kwargs["error"]
        error.details["path"] = "/etc/shadow"
        error.details["tries"].append(2)
        error.args[1].append(3)

    branch = Branch()
    branch.register_tools(bad)
    branch.hooks.on(HookPoint.TOOL_ERROR, tamper)
    (response,) = await branch.act(call("bad"), suppress_errors=True)
    assert response.content.outcome == ActionOutcome.FAILED
    [record] = list(branch.log)
    recorded = record.event.execution.error
    assert isinstance(recorded, WithDetails)
    assert recorded.details == {"path": "/data/a", "tries": [1]}
    assert recorded.args == ("tool failed", [1, 2])
    assert branch.failures.statistics().total == 0
    assert_consistent(branch)
