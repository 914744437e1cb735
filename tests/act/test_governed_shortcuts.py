"""What a governed call may skip, and what it never may.

A branch keeps the policy's decision for a tool whose decision depends on the tool alone (no
subject argument, rules of :class:`PermissionPolicy` itself, not an escalation), and builds
a hook keyword that costs something (an argument or result summary, an error copy, the call
context) only when a handler at that point may read it. These tests hold both to what the
call would see without them: a kept decision never outlives the policy or the tool it was
made for, a decision that reads the arguments is made for every call, and every handler that
may read a keyword gets it, with the value it always had.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from lionexec import (
    ActionOutcome,
    Branch,
    CallContext,
    HookPoint,
    PermissionPolicy,
    SessionObserver,
)
from lionexec.act import _announce, _transaction
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call
from lionexec.tools import ActionManager, Tool

pytestmark = pytest.mark.timeout(30)


async def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: one.
        b: two.
    """
    return a + b


async def read(path: str) -> str:
    """Read a file (pretend).

    Args:
        path: the file.
    """
    return f"contents of {path}"


async def fail(message: str) -> None:
    """Fail.

    Args:
        message: what to raise.
    """
    raise RuntimeError(message)


def branch(*tools: Any, **options: Any) -> Branch:
    made = Branch(**options)
    made.register_tools(list(tools) or [add])
    return made


def outcomes(responses: list[Any]) -> list[ActionOutcome]:
    return [response.outcome for response in responses]


# -- kept decisions --------------------------------------------------------------------------


async def test_a_replaced_policy_decides_the_next_call_of_a_kept_tool() -> None:
    b = branch(policy=PermissionPolicy(allow={"add": ["*"]}))
    assert outcomes(await b.act(call("add", a=1, b=2))) == [ActionOutcome.COMPLETED]
    b.policy = PermissionPolicy(deny={"add": ["*"]})
    assert outcomes(await b.act(call("add", a=1, b=2))) == [ActionOutcome.DENIED]
    b.policy = PermissionPolicy(allow={"add": ["*"]})
    assert outcomes(await b.act(call("add", a=1, b=2))) == [ActionOutcome.COMPLETED]
    assert_consistent(b)


async def test_a_tool_registered_again_with_a_subject_is_judged_by_its_arguments() -> None:
    # Without a subject, the rules match the tool's name: "read" is allowed. Registered
    # again with a subject, they match the path, which "read" does not: denied. A decision
    # kept for the first tool must not decide for the second.
    b = branch(read, policy=PermissionPolicy(allow={"read": ["read", "/data/*"]}))
    assert outcomes(await b.act(call("read", path="/etc/passwd"))) == [ActionOutcome.COMPLETED]
    b.register_tools([Tool.from_function(read, subject="path")], update=True)
    responses = await b.act(
        [call("read", path="/etc/passwd"), call("read", path="/data/a")], strategy="sequential"
    )
    assert outcomes(responses) == [ActionOutcome.DENIED, ActionOutcome.COMPLETED]
    assert_consistent(b)


async def test_a_replaced_registry_is_judged_afresh() -> None:
    b = branch(read, policy=PermissionPolicy(allow={"read": ["read"]}))
    assert outcomes(await b.act(call("read", path="/x"))) == [ActionOutcome.COMPLETED]
    b.registry = ActionManager([Tool.from_function(read, subject="path")])
    assert outcomes(await b.act(call("read", path="/x"))) == [ActionOutcome.DENIED]


async def test_a_tool_unregistered_and_registered_again_is_judged_afresh() -> None:
    b = branch(read, policy=PermissionPolicy(allow={"read": ["read"]}))
    assert outcomes(await b.act(call("read", path="/x"))) == [ActionOutcome.COMPLETED]
    b.registry.unregister("read")
    b.register_tools([Tool.from_function(read, subject="path")])
    assert outcomes(await b.act(call("read", path="/x"))) == [ActionOutcome.DENIED]


async def test_a_rule_on_a_subject_argument_is_matched_for_every_call() -> None:
    b = branch(
        Tool.from_function(read, subject="path"),
        policy=PermissionPolicy(allow={"read": ["/data/*"]}),
    )
    paths = ["/data/a", "/etc/passwd", "/data/b", "/etc/shadow", "/data/c"]
    for strategy in ("sequential", "concurrent"):
        responses = await b.act([call("read", path=p) for p in paths], strategy=strategy)
        assert outcomes(responses) == [
            ActionOutcome.COMPLETED,
            ActionOutcome.DENIED,
            ActionOutcome.COMPLETED,
            ActionOutcome.DENIED,
            ActionOutcome.COMPLETED,
        ]
    assert_consistent(b)


async def test_a_policy_subclass_reading_the_arguments_decides_each_call() -> None:
    class PositiveOnly(PermissionPolicy):
        def check(self, tool_name: str, action: str, args: Any, **kw: Any) -> Any:
            decision = super().check(tool_name, action, args, **kw)
            if args["a"] < 0:
                return PermissionPolicy(deny={"*": ["*"]}).check(tool_name, action, args, **kw)
            return decision

    b = branch(policy=PositiveOnly(allow={"add": ["*"]}))
    responses = await b.act([call("add", a=a, b=1) for a in (1, -1, 2, -2)], strategy="sequential")
    assert outcomes(responses) == [
        ActionOutcome.COMPLETED,
        ActionOutcome.DENIED,
        ActionOutcome.COMPLETED,
        ActionOutcome.DENIED,
    ]


async def test_an_escalation_is_asked_about_every_call() -> None:
    asked: list[int] = []

    def every_other(decision: Any, context: CallContext) -> bool:
        asked.append(context.arguments["a"])
        return len(asked) % 2 == 1

    policy = PermissionPolicy(escalate={"add": ["*"]}, on_escalate=every_other)
    b = branch(policy=policy)
    responses = await b.act([call("add", a=a, b=1) for a in range(4)], strategy="sequential")
    assert asked == [0, 1, 2, 3]
    assert outcomes(responses) == [
        ActionOutcome.COMPLETED,
        ActionOutcome.DENIED,
        ActionOutcome.COMPLETED,
        ActionOutcome.DENIED,
    ]


async def test_one_policy_on_two_branches_keeps_each_branchs_tools_apart() -> None:
    policy = PermissionPolicy(allow={"read": ["read"]})
    plain = branch(read, policy=policy)
    ruled = branch(Tool.from_function(read, subject="path"), policy=policy)
    for _ in range(2):
        assert outcomes(await plain.act(call("read", path="/x"))) == [ActionOutcome.COMPLETED]
        assert outcomes(await ruled.act(call("read", path="/x"))) == [ActionOutcome.DENIED]


async def test_a_kept_denial_is_recorded_as_the_rules_gave_it() -> None:
    b = branch(policy=PermissionPolicy(allow={"other": ["*"]}))
    errors = []
    for _ in range(3):
        [response] = await b.act(call("add", a=1, b=2))
        assert response.outcome is ActionOutcome.DENIED
        errors.append(response.content.error)
    assert errors[0] is not None
    assert (errors[0].type, errors[0].message) == (
        "PermissionDenied",
        "no rule matched; denied by default",
    )
    assert errors[1:] == errors[:1] * 2


# -- hook keywords ---------------------------------------------------------------------------


async def test_a_pre_handler_naming_a_keyword_gets_it_beside_a_catch_all_one() -> None:
    seen: list[tuple[str, Any]] = []
    observer = SessionObserver()
    observer.gate(lambda invocation: True)
    b = branch(observer=observer, policy=PermissionPolicy(allow={"add": ["*"]}))
    b.hooks.on(HookPoint.TOOL_PRE, lambda **_: None)

    def named(*, arguments: str, context: CallContext, **_: Any) -> None:
        seen.append((arguments, context))

    b.hooks.on(HookPoint.TOOL_PRE, named)
    b.hooks.on(HookPoint.TOOL_PRE, lambda **_: None)
    [response] = await b.act(call("add", a=1, b=2))
    assert response.outcome is ActionOutcome.COMPLETED
    [(arguments, context)] = seen
    assert arguments == str({"a": 1, "b": 2})
    assert isinstance(context, CallContext)
    assert (context.function, dict(context.arguments)) == ("add", {"a": 1, "b": 2})
    assert context.call_id == b.messages.requests()[0].call_id


async def test_a_handler_whose_catch_all_is_used_gets_every_keyword() -> None:
    pre: list[dict[str, Any]] = []
    post: list[dict[str, Any]] = []
    error: list[dict[str, Any]] = []
    b = branch(add, fail)
    b.hooks.on(HookPoint.TOOL_PRE, lambda **kwargs: pre.append(kwargs))
    b.hooks.on(HookPoint.TOOL_POST, lambda **kwargs: post.append(kwargs))
    b.hooks.on(HookPoint.TOOL_ERROR, lambda **kwargs: error.append(kwargs))
    await b.act([call("add", a=1, b=2), call("fail", message="kaput")], strategy="sequential")
    every_pre = ["tool_name", "call_id", "arguments", "context"]
    assert [list(kwargs) for kwargs in pre] == [every_pre, every_pre]
    assert pre[0]["arguments"] == str({"a": 1, "b": 2})
    assert isinstance(pre[1]["context"], CallContext)
    assert [list(post[0])] == [["tool_name", "call_id", "result", "duration"]]
    assert post[0]["result"] == "3"
    assert [list(error[0])] == [["tool_name", "call_id", "error", "status", "duration"]]
    assert isinstance(error[0]["error"], RuntimeError)
    assert str(error[0]["error"]) == "kaput"


async def test_a_handler_reading_its_locals_gets_every_keyword() -> None:
    got: list[set[str]] = []
    b = branch()

    def peeking(**_: Any) -> None:
        got.append(set(locals()["_"]))

    b.hooks.on(HookPoint.TOOL_PRE, peeking)
    b.hooks.on(HookPoint.TOOL_POST, peeking)
    await b.act(call("add", a=1, b=2))
    assert got == [
        {"tool_name", "call_id", "arguments", "context"},
        {"tool_name", "call_id", "result", "duration"},
    ]


async def test_a_handler_added_or_removed_later_changes_what_is_built() -> None:
    results: list[str] = []
    b = branch()
    b.hooks.on(HookPoint.TOOL_POST, lambda **_: None)
    await b.act(call("add", a=1, b=2))

    def reader(*, result: str, **_: Any) -> None:
        results.append(result)

    b.hooks.on(HookPoint.TOOL_POST, reader)
    await b.act(call("add", a=2, b=2))
    b.hooks.off(HookPoint.TOOL_POST, reader)
    await b.act(call("add", a=3, b=2))
    b.hooks.on(HookPoint.TOOL_POST, reader)
    await b.act(call("add", a=4, b=2))
    assert results == ["4", "6"]


async def test_error_and_result_keywords_reach_a_bound_method_naming_them() -> None:
    class Audit:
        def __init__(self) -> None:
            self.seen: list[Any] = []

        def post(self, *, result: str, **_: Any) -> None:
            self.seen.append(result)

        def error(self, *, error: BaseException, status: Any, **_: Any) -> None:
            self.seen.append((type(error).__name__, str(error), status.value))

    audit = Audit()
    b = branch(add, fail)
    b.hooks.on(HookPoint.TOOL_POST, audit.post)
    b.hooks.on(HookPoint.TOOL_ERROR, audit.error)
    await b.act([call("add", a=1, b=2), call("fail", message="no")], strategy="sequential")
    assert audit.seen == ["3", ("RuntimeError", "no", "failed")]


async def test_a_handler_without_a_catch_all_is_refused_a_keyword_it_lacks_as_before() -> None:
    # Every keyword still reaches a handler that has no ** parameter: one that does not
    # take ``context`` fails with the TypeError it always had (a pre handler: the call is
    # denied; a post handler: a failure is reported).
    b = branch()

    def pre(tool_name: str, call_id: str, arguments: str) -> None:
        pass

    b.hooks.on(HookPoint.TOOL_PRE, pre)
    [response] = await b.act(call("add", a=1, b=2))
    assert response.outcome is ActionOutcome.DENIED
    assert response.content.error is not None
    assert "TypeError" in response.content.error.message
    assert "context" in response.content.error.message
    b.hooks.off(HookPoint.TOOL_PRE, pre)

    def post(tool_name: str, call_id: str, duration: float) -> None:
        pass

    b.hooks.on(HookPoint.TOOL_POST, post)
    [response] = await b.act(call("add", a=1, b=2))
    assert response.outcome is ActionOutcome.COMPLETED
    [failure] = [f for f in b.failures if f.where == "hook:tool.post"]
    assert isinstance(failure.error, TypeError)
    assert "result" in str(failure.error)
    assert failure.call_id == b.messages.requests()[-1].call_id


async def test_no_summary_is_made_when_no_handler_may_read_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []
    summarize = _transaction.summarize

    def counting(value: object, *args: Any) -> str:
        made.append(value)
        return summarize(value, *args)

    # the pre hooks' summary is made by the transaction, the post hooks' when it announces
    monkeypatch.setattr(_transaction, "summarize", counting)
    monkeypatch.setattr(_announce, "summarize", counting)
    b = branch()
    b.hooks.on(HookPoint.TOOL_PRE, lambda **_: None)
    b.hooks.on(HookPoint.TOOL_POST, lambda *, duration, **_: None)
    await b.act(call("add", a=1, b=2))
    assert made == []
    b.hooks.on(HookPoint.TOOL_POST, lambda *, result, **_: None)
    await b.act(call("add", a=1, b=2))
    assert made == [3]
    b.hooks.on(HookPoint.TOOL_PRE, lambda *, arguments, **_: None)
    await b.act(call("add", a=2, b=2))
    assert made == [3, {"a": 2, "b": 2}, 4]


# -- the phase a call's deadline names ---------------------------------------------------------


@pytest.mark.parametrize("phase", ["gate", "policy", "tool.pre", "invoke"])
async def test_a_call_deadline_names_the_phase_that_was_waiting(
    phase: str, autojump_clock: Any
) -> None:
    from lionexec.act import AlcallParams

    async def wait(*_: Any, **__: Any) -> bool:
        await trio.sleep(10)
        return True

    async def slow_add(a: int, b: int) -> int:
        await trio.sleep(10 if phase == "invoke" else 0)
        return a + b

    observer = SessionObserver()
    observer.gate(wait if phase == "gate" else (lambda invocation: True))
    policy = PermissionPolicy(
        allow={"slow_add": ["*"]} if phase != "policy" else {},
        escalate={"slow_add": ["*"]} if phase == "policy" else {},
        on_escalate=wait,
    )
    b = Branch(observer=observer, policy=policy)
    b.register_tools([slow_add])
    b.hooks.on(HookPoint.TOOL_PRE, wait if phase == "tool.pre" else (lambda **_: None))
    [response] = await b.act(call("slow_add", a=1, b=2), call_params=AlcallParams(call_timeout=5))
    assert response.outcome is ActionOutcome.TIMED_OUT
    assert response.content.error is not None
    assert response.content.error.message.endswith(f"in phase {phase}")
