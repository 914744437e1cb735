"""The transform phase: a tool's preprocessor, then revalidation (schema, policy), always.

Moved here from the FunctionCalling tests when the transform left the event and became a
phase of the governed transaction: what they proved still holds, through act().
"""

from __future__ import annotations

from typing import Any

import pytest

from lionexec import ActionOutcome as Outcome
from lionexec import Branch, EventStatus, PermissionPolicy, Tool
from lionexec.governance import CallContext
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call


async def find(text: str, limit: int = 3) -> str:
    return text * limit


async def test_preprocessor_result_replaces_the_arguments() -> None:
    def shout(arguments: dict[str, Any], *, suffix: str) -> dict[str, Any]:
        return {"text": arguments["text"].upper() + suffix}

    branch = Branch()
    branch.register_tools(
        Tool.from_function(find, preprocessor=shout, preprocessor_kwargs={"suffix": "!"})
    )
    [response] = await branch.act(call("find", text="a", limit=1))
    assert response.content.output == "A!A!A!"
    [record] = list(branch.log)
    assert record.event.arguments == {"text": "A!"}
    assert response.content.arguments == {"text": "a", "limit": 1}  # what the model proposed
    assert_consistent(branch)


async def test_preprocessed_arguments_are_revalidated_and_coerced() -> None:
    called: list[Any] = []

    def loosen(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"text": "a", "limit": "2", "rm": "-rf"}

    async def spy(text: str, limit: int = 3) -> None:
        called.append((text, limit))

    branch = Branch()
    branch.register_tools(Tool.from_function(spy, preprocessor=loosen))
    [response] = await branch.act(call("spy", text="a"))
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None and "'rm'" in response.content.error.message
    assert called == []

    coercing = Branch()
    coercing.register_tools(Tool.from_function(spy, preprocessor=lambda a: {**a, "limit": "2"}))
    [response] = await coercing.act(call("spy", text="a"))
    assert response.content.outcome is Outcome.COMPLETED
    assert called == [("a", 2)]
    [record] = list(coercing.log)
    assert record.event.arguments == {"text": "a", "limit": 2}


async def test_policy_recheck_after_transform_stops_the_call_before_the_tool_runs() -> None:
    ran: list[str] = []

    async def run_shell(command: str) -> None:
        ran.append(command)

    branch = Branch(policy=PermissionPolicy(mode="rules", allow={"run_shell": ["ls*"]}))
    branch.register_tools(
        Tool.from_function(
            run_shell, subject="command", preprocessor=lambda a: {"command": "rm -rf /"}
        )
    )
    [response] = await branch.act(call("run_shell", command="ls"))
    assert response.content.outcome is Outcome.DENIED
    assert response.content.error is not None
    assert "after transform" in response.content.error.message
    assert ran == []
    [record] = list(branch.log)
    assert record.event.status is EventStatus.SKIPPED  # built, never invoked
    assert_consistent(branch)


@pytest.mark.parametrize("returned", ["raise", ["not", "a", "mapping"]])
async def test_a_broken_preprocessor_fails_the_call_without_running_the_tool(
    returned: object,
) -> None:
    ran: list[bool] = []

    def pre(arguments: dict[str, Any]) -> object:
        if returned == "raise":
            raise RuntimeError("preprocessor broke")
        return returned

    async def body(text: str) -> None:
        ran.append(True)

    branch = Branch()
    branch.register_tools(Tool.from_function(body, preprocessor=pre))
    [response] = await branch.act(call("body", text="a"))
    assert response.content.outcome is Outcome.FAILED
    assert response.content.attempts == 1
    [record] = list(branch.log)
    assert record.event.status is EventStatus.FAILED
    assert ran == []
    assert_consistent(branch)


async def test_a_tool_without_preprocessor_gets_exactly_the_validated_arguments() -> None:
    seen: list[Any] = []

    async def body(text: str, limit: int = 1) -> None:
        seen.append((text, limit))

    branch = Branch()
    branch.register_tools(Tool.from_function(body))
    await branch.act(call("body", text="x", limit="4"))
    assert seen == [("x", 4)]


async def test_a_policy_that_raises_while_rechecking_a_transform_fails_the_call_consistently() -> (
    None
):
    class Flaky(PermissionPolicy):
        calls = 0

        async def decide(self, ctx: Any) -> Any:
            Flaky.calls += 1
            if Flaky.calls > 1:
                raise RuntimeError("policy bug")
            return await super().decide(ctx)

    branch = Branch(policy=Flaky())
    branch.register_tools(Tool.from_function(find, preprocessor=lambda a: a))
    [response] = await branch.act(call("find", text="a"))
    assert response.content.outcome is Outcome.FAILED
    [record] = list(branch.log)
    assert record.event.status is EventStatus.FAILED
    assert_consistent(branch)


async def test_a_tool_taking_its_context_gets_the_transformed_arguments_in_it() -> None:
    seen: dict[str, Any] = {}

    async def write(path: str, ctx: CallContext | None = None) -> str:
        assert ctx is not None
        seen["kwarg"], seen["context"] = path, dict(ctx.arguments)
        return "ok"

    def sandbox(arguments: dict[str, Any]) -> dict[str, Any]:
        return {**arguments, "path": "/sandbox/" + arguments["path"].lstrip("/")}

    branch = Branch()
    branch.register_tools(Tool.from_function(write, preprocessor=sandbox, context_param="ctx"))
    [response] = await branch.act(call("write", path="/etc/passwd"))
    assert response.content.outcome is Outcome.COMPLETED
    assert seen == {"kwarg": "/sandbox/etc/passwd", "context": {"path": "/sandbox/etc/passwd"}}
    [record] = list(branch.log)
    assert record.event.context.arguments == {"path": "/sandbox/etc/passwd"}
    assert_consistent(branch)
