"""CallContext and ToolInvocation: one frozen, normalized view of a call for every phase."""

from __future__ import annotations

import attrs
import pytest

from lionexec.governance import CallContext, ToolInvocation
from lionexec.serialization import converter
from lionexec.tools import Tool


def run(command: str, timeout: int = 10) -> str:
    """Run a command."""
    return command


def test_arguments_are_a_read_only_copy() -> None:
    given = {"command": "ls"}
    ctx = CallContext(function="run", arguments=given, call_id="c")
    given["command"] = "rm -rf /"
    assert ctx.arguments == {"command": "ls"}
    with pytest.raises(TypeError):
        ctx.arguments["command"] = "rm -rf /"  # type: ignore[index]


def test_the_context_is_frozen() -> None:
    ctx = CallContext(function="run", arguments={}, call_id="c")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ctx.function = "other"  # type: ignore[misc]


def test_argument_names_must_be_strings() -> None:
    with pytest.raises(TypeError, match="argument names"):
        CallContext(function="run", arguments={1: "x"}, call_id="c")  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="mapping"):
        ToolInvocation("run", ["x"])  # type: ignore[arg-type]


def test_the_gate_sees_the_same_normalized_arguments_as_every_other_phase() -> None:
    # The gate must not see raw arguments while later phases see normalized ones.
    ctx = CallContext(function="run", arguments={"command": "ls"}, call_id="c", branch_id="b")
    invocation = ctx.invocation()
    assert invocation == ToolInvocation("run", {"command": "ls"}, call_id="c", branch_id="b")
    assert invocation.arguments == ctx.arguments
    with pytest.raises(TypeError):
        invocation.arguments["command"] = "x"  # type: ignore[index]


def test_with_arguments_returns_a_new_context_for_the_phases_after_a_transform() -> None:
    ctx = CallContext(function="run", arguments={"command": "ls"}, call_id="c")
    changed = ctx.with_arguments({"command": "ls -la"})
    assert changed.arguments == {"command": "ls -la"}
    assert ctx.arguments == {"command": "ls"}
    assert (changed.function, changed.call_id) == (ctx.function, ctx.call_id)


def test_invocations_are_values_that_can_be_hashed() -> None:
    a = ToolInvocation("run", {"command": ["ls"]}, call_id="c")
    b = ToolInvocation("run", {"command": ["ls"]}, call_id="c")
    assert a == b and hash(a) == hash(b)
    assert a != ToolInvocation("run", {"command": ["pwd"]}, call_id="c")


def test_the_subject_argument_comes_from_the_tool() -> None:
    tool = Tool.from_function(run, subject="command")
    assert CallContext(function="run", call_id="c", tool=tool).subject_argument == "command"
    assert (
        CallContext(function="run", call_id="c", tool=Tool.from_function(run)).subject_argument
        is None
    )
    assert CallContext(function="run", call_id="c").subject_argument is None


def test_a_context_serializes_for_logs_without_its_tool() -> None:
    ctx = CallContext(
        function="run",
        arguments={"command": "ls"},
        call_id="c",
        tool=Tool.from_function(run, subject="command"),
    )
    assert converter.unstructure(ctx) == {
        "function": "run",
        "arguments": {"command": "ls"},
        "call_id": "c",
        "branch_id": None,
        "subject_argument": "command",
        "idempotency_key": None,
    }


def test_the_act_layers_trusted_constructor_builds_what_the_constructor_builds() -> None:
    arguments = {"a": 1, "b": [2]}
    fast = CallContext._for_call("f", dict(arguments), "c1", "b1", None, "b1/c1")
    slow = CallContext(
        function="f", arguments=arguments, call_id="c1", branch_id="b1", idempotency_key="b1/c1"
    )
    assert type(fast) is CallContext
    assert fast == slow
    assert dict(fast.arguments) == arguments
    with pytest.raises(TypeError):
        fast.arguments["a"] = 2  # type: ignore[index]  # read-only
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.call_id = "c2"  # type: ignore[misc]
