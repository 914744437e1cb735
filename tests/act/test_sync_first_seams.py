"""Governance seams that run synchronously when they can, and await only what must be.

A gate, rules and hooks of the classes themselves are called without a coroutine each; the
first handler (or gate, or escalation) whose result must be awaited is awaited and the rest
run after it, in order, with the verdicts, denials and failure records of the awaited path.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from lionexec import (
    ActionOutcome,
    Branch,
    HookPoint,
    PermissionPolicy,
    SessionObserver,
    StopHook,
)
from lionexec.governance import GateDenied
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

pytestmark = pytest.mark.timeout(30)


async def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: one.
        b: two.
    """
    return a + b


def branch(**options: Any) -> Branch:
    made = Branch(**options)
    made.register_tools([add])
    return made


async def test_sync_and_async_pre_handlers_run_in_order_and_an_async_denial_denies() -> None:
    ran: list[str] = []
    b = branch()

    def first(**_: Any) -> None:
        ran.append("sync")

    async def second(**_: Any) -> bool:
        await trio.lowlevel.checkpoint()
        ran.append("async")
        return False

    def third(**_: Any) -> None:
        ran.append("never")

    b.hooks.on(HookPoint.TOOL_PRE, first)
    b.hooks.on(HookPoint.TOOL_PRE, second)
    b.hooks.on(HookPoint.TOOL_PRE, third)
    [response] = await b.act(call("add", a=1, b=2))
    assert ran == ["sync", "async"]
    assert response.outcome is ActionOutcome.DENIED
    assert response.content.error is not None
    assert "returned False" in response.content.error.message
    assert_consistent(b)


async def test_handlers_after_an_awaited_pre_handler_run_and_stophook_allows() -> None:
    ran: list[str] = []
    b = branch()

    async def first(**_: Any) -> None:
        await trio.lowlevel.checkpoint()
        ran.append("async")

    def second(**_: Any) -> None:
        ran.append("sync after")

    async def stop(**_: Any) -> None:
        await trio.lowlevel.checkpoint()
        raise StopHook

    def never(**_: Any) -> bool:
        ran.append("never")
        return False

    for handler in (first, second, stop, never):
        b.hooks.on(HookPoint.TOOL_PRE, handler)
    [response] = await b.act(call("add", a=1, b=2))
    assert ran == ["async", "sync after"]
    assert response.outcome is ActionOutcome.COMPLETED
    assert response.content.output == 3


async def test_an_awaited_pre_handler_that_raises_denies_naming_it() -> None:
    b = branch()

    async def broken(**_: Any) -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("pre broke")

    b.hooks.on(HookPoint.TOOL_PRE, broken)
    [response] = await b.act(call("add", a=1, b=2))
    assert response.outcome is ActionOutcome.DENIED
    assert response.content.error is not None
    assert "broken raised RuntimeError: pre broke" in response.content.error.message


async def test_post_handlers_sync_then_async_each_run_and_failures_are_reported() -> None:
    seen: list[tuple[str, Any]] = []
    b = branch()

    def sync_post(**kwargs: Any) -> None:
        seen.append(("sync", kwargs["result"]))
        raise ValueError("sync post broke")

    async def async_post(**kwargs: Any) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(("async", kwargs["result"]))
        raise KeyError("async post broke")

    def last(**kwargs: Any) -> None:
        seen.append(("last", kwargs["call_id"]))

    for handler in (sync_post, async_post, last):
        b.hooks.on(HookPoint.TOOL_POST, handler)
    [response] = await b.act({"function": "add", "arguments": {"a": 1, "b": 2}, "call_id": "c1"})
    assert response.outcome is ActionOutcome.COMPLETED
    assert seen == [("sync", "3"), ("async", "3"), ("last", "c1")]
    failures = [(f.where, f.call_id, type(f.error).__name__) for f in b.failures]
    assert failures == [
        ("hook:tool.post", "c1", "ValueError"),
        ("hook:tool.post", "c1", "KeyError"),
    ]


async def test_an_async_gate_that_says_no_denies_and_is_recorded() -> None:
    observer = SessionObserver()

    async def gate(invocation: Any) -> bool:
        await trio.lowlevel.checkpoint()
        return invocation.arguments["a"] != 13

    observer.gate(gate)
    b = branch(observer=observer)
    responses = await b.act([call("add", a=1, b=2), call("add", a=13, b=2)])
    assert [r.outcome for r in responses] == [ActionOutcome.COMPLETED, ActionOutcome.DENIED]
    [denial] = observer.denials
    assert isinstance(denial, GateDenied)
    assert denial.invocation.arguments["a"] == 13


async def test_a_sync_gate_whose_verdict_cannot_be_read_denies() -> None:
    class Unreadable:
        def __bool__(self) -> bool:
            raise RuntimeError("no truth here")

    observer = SessionObserver()
    observer.gate(lambda invocation: Unreadable())
    b = branch(observer=observer)
    [response] = await b.act(call("add", a=1, b=2))
    assert response.outcome is ActionOutcome.DENIED
    [denial] = observer.denials
    assert "RuntimeError: no truth here" in denial.reason


async def test_a_policy_subclass_is_asked_for_every_call() -> None:
    asked: list[str] = []

    class Counting(PermissionPolicy):
        def check(self, tool_name: str, action: str, args: Any, **kw: Any) -> Any:
            asked.append(tool_name)
            return super().check(tool_name, action, args, **kw)

    b = branch(policy=Counting(mode="rules", allow={"add": ["*"]}))
    responses = await b.act([call("add", a=i, b=1) for i in range(3)])
    assert all(r.outcome is ActionOutcome.COMPLETED for r in responses)
    assert asked == ["add", "add", "add"]


async def test_rules_decide_the_same_for_every_call_of_a_subjectless_tool() -> None:
    b = branch(policy=PermissionPolicy(mode="rules", deny={"add": ["*"]}))
    for _ in range(3):
        [response] = await b.act(call("add", a=1, b=2))
        assert response.outcome is ActionOutcome.DENIED
        assert response.content.error is not None
        assert "denied by rule '*' for 'add'" in response.content.error.message


async def test_the_call_deadline_counts_the_time_a_synchronous_gate_took(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A synchronous gate runs before anything is awaited; the whole-call deadline still
    # runs from the call's start, so a slow gate leaves the tool less time, not more.
    from lionexec.act import AlcallParams

    ran: list[float] = []

    async def slow(a: int, b: int) -> int:
        await trio.sleep(3)
        ran.append(trio.current_time())
        return a + b

    observer = SessionObserver()

    def gate(invocation: Any) -> bool:
        autojump_clock.jump(4)  # a gate that blocks for 4 s (a slow check on the trio thread)
        return True

    observer.gate(gate)
    b = Branch(observer=observer)
    b.register_tools([slow])
    [response] = await b.act(call("slow", a=1, b=2), call_params=AlcallParams(call_timeout=5))
    assert response.outcome is ActionOutcome.TIMED_OUT
    assert ran == []
    assert trio.current_time() == pytest.approx(5)
