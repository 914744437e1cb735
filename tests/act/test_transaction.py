"""One governed transaction per call: envelopes, truthful outcomes, one context, evidence."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from lionexec import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AlcallParams,
    AwaitingApproval,
    Branch,
    ConfigurationError,
    DuplicateCallError,
    ErrorInfo,
    EventStatus,
    FunctionCalling,
    HistoryError,
    HookPoint,
    PermissionPolicy,
    SessionObserver,
    StopHook,
    Tool,
    ToolInvocation,
)
from lionexec.act import SUMMARY_LIMIT, VERBOSE_LIMIT
from lionexec.testing import assert_consistent as check_history
from lionexec.testing import tool_call as call

Outcome = ActionOutcome
S = EventStatus


def outcomes(responses: list[Any]) -> list[ActionOutcome]:
    return [r.content.outcome for r in responses]


def statuses(responses: list[Any]) -> list[EventStatus]:
    return [r.content.status for r in responses]


async def _add(a: int, b: int) -> int:
    return a + b


_add_tool = Tool.from_function(_add, name="add")


# -- envelopes ----------------------------------------------------------------------------------


@attrs.define
class AttrsCall:
    function: str
    arguments: dict[str, Any]


@dataclasses.dataclass
class DataCall:
    function: str
    arguments: dict[str, Any]


@pytest.mark.parametrize(
    "envelope",
    [
        pytest.param(lambda: ActionRequest.create("add", {"a": 1, "b": 2}), id="ActionRequest"),
        pytest.param(lambda: {"function": "add", "arguments": {"a": 1, "b": 2}}, id="dict"),
        pytest.param(lambda: AttrsCall("add", {"a": 1, "b": 2}), id="attrs"),
        pytest.param(lambda: DataCall("add", {"a": 1, "b": 2}), id="dataclass"),
        pytest.param(
            lambda: {
                "id": "call_openai",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
            },
            id="openai",
        ),
        pytest.param(
            lambda: {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "add",
                "input": {"a": 1, "b": 2},
            },
            id="anthropic",
        ),
    ],
)
async def test_every_accepted_envelope_runs_the_call(branch: Branch, envelope: Any) -> None:
    [response] = await branch.act(envelope())
    assert response.content.outcome is Outcome.COMPLETED
    assert response.content.output == 3
    check_history(branch)


async def test_provider_call_ids_become_the_request_call_id(branch: Branch) -> None:
    await branch.act(
        [
            {"id": "call_X", "type": "function", "function": {"name": "nothing", "arguments": ""}},
            {"type": "tool_use", "id": "toolu_Y", "name": "nothing", "input": {}},
        ]
    )
    assert [r.call_id for r in branch.messages.requests()] == ["call_X", "toolu_Y"]


@pytest.mark.parametrize(
    "bad",
    [42, "add", {"function": "add"}, {"name": "add"}, [1], {"function": 3, "arguments": {}}],
    ids=repr,
)
async def test_unreadable_envelope_raises_before_anything_is_recorded(
    branch: Branch, bad: Any
) -> None:
    pre: list[Any] = []
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: pre.append(kw))
    with pytest.raises(ValueError, match=r"tool call"):
        await branch.act([call("add", a=1, b=2), bad])
    assert len(branch.messages) == 0
    assert len(branch.log) == 0
    assert pre == []


@pytest.mark.parametrize(
    ("arguments", "why"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object"), (7, "JSON object")],
)
async def test_unreadable_arguments_are_an_invalid_value(
    branch: Branch, arguments: Any, why: str
) -> None:
    [response] = await branch.act({"function": "add", "arguments": arguments})
    assert response.content.outcome is Outcome.INVALID
    assert response.content.status is S.ABORTED
    assert response.content.error is not None
    assert why in response.content.error.message
    check_history(branch)


async def test_unknown_tool_is_an_invalid_value_naming_the_closest_tool(branch: Branch) -> None:
    [response] = await branch.act(call("ad", a=1, b=2))
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None
    assert response.content.error.type == "ToolNotFoundError"
    assert "'add'" in response.content.error.message
    assert len(branch.log) == 0
    check_history(branch)


async def test_bad_arguments_are_an_invalid_value_naming_the_field(branch: Branch) -> None:
    [response] = await branch.act(call("add", a=1, b="many"), suppress_errors=False)
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None
    assert "b" in response.content.error.message
    check_history(branch)


async def test_an_answered_request_cannot_be_acted_again(branch: Branch) -> None:
    request = ActionRequest.create("nothing")
    await branch.act(request)
    with pytest.raises(ValueError, match="already answered"):
        await branch.act(request)
    assert len(branch.messages.responses()) == 1


# -- outcomes and truthful history ------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_failed_call_and_none_returning_call_leave_different_history(
    branch: Branch, strategy: Any
) -> None:
    ok_none, failed = await branch.act([call("nothing"), call("fail")], strategy=strategy)
    assert ok_none.content.outcome is Outcome.COMPLETED
    assert ok_none.content.output is None
    assert ok_none.content.error is None
    assert ok_none.content.success
    assert failed.content.outcome is Outcome.FAILED
    assert failed.content.status is S.FAILED
    assert failed.content.error is not None
    assert failed.content.error.type == "RuntimeError"
    assert failed.content.error.message == "kaput"
    assert not failed.content.success
    check_history(branch)


@pytest.mark.parametrize("output", [0, "", [], {}, None, False])
async def test_falsy_outputs_are_real_outputs_with_linked_responses(output: Any) -> None:
    def give() -> Any:
        return output

    branch = Branch()
    branch.register_tools(Tool.from_function(give, inline=True))
    [response] = await branch.act(call("give"))
    assert response.content.outcome is Outcome.COMPLETED
    assert response.content.output == output
    assert branch.messages.response_for(branch.messages.requests()[0]) is response
    check_history(branch)


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_failure_goes_to_tool_error_never_tool_post(branch: Branch, strategy: Any) -> None:
    seen: list[tuple[str, str]] = []
    branch.hooks.on(HookPoint.TOOL_POST, lambda **kw: seen.append(("post", kw["tool_name"])))
    branch.hooks.on(HookPoint.TOOL_ERROR, lambda **kw: seen.append(("error", kw["tool_name"])))
    await branch.act([call("fail"), call("nothing")], strategy=strategy)
    assert sorted(seen) == [("error", "fail"), ("post", "nothing")]


async def test_tool_error_receives_the_exception_status_and_duration(branch: Branch) -> None:
    got: dict[str, Any] = {}
    branch.hooks.on(HookPoint.TOOL_ERROR, lambda **kw: got.update(kw))
    await branch.act(call("fail", message="bad"))
    assert isinstance(got["error"], RuntimeError)
    assert got["status"] is S.FAILED
    assert isinstance(got["duration"], float)
    assert got["call_id"] == branch.messages.requests()[0].call_id


async def test_act_returns_the_persisted_responses_in_input_order(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    responses = await branch.act(
        [call("slow", seconds=3), call("slow", seconds=1), call("add", a=2, b=2)]
    )
    assert [r.content.output for r in responses] == ["late", "late", 4]
    assert [r.content.arguments for r in responses] == [
        {"seconds": 3},
        {"seconds": 1},
        {"a": 2, "b": 2},
    ]
    assert all(r in branch.messages for r in responses)


async def test_unsuppressed_failure_is_raised_after_the_history_is_written(branch: Branch) -> None:
    with pytest.raises(RuntimeError, match="kaput"):
        await branch.act(call("fail"), suppress_errors=False)
    [response] = branch.messages.responses()
    assert response.content.outcome is Outcome.FAILED
    assert len(branch.log) == 1
    check_history(branch)


# -- governance: gates, policy, pre-hooks see one normalized context ---------------------------


async def test_standalone_branch_allows_every_call(branch: Branch) -> None:
    assert branch.observer is None
    [response] = await branch.act(call("add", a=1, b=1))
    assert response.content.outcome is Outcome.COMPLETED


async def test_observer_without_gate_allows(branch: Branch) -> None:
    branch.observer = SessionObserver()
    [response] = await branch.act(call("add", a=1, b=1))
    assert response.content.outcome is Outcome.COMPLETED


@pytest.mark.parametrize("suppress", [True, False])
@pytest.mark.parametrize(
    "gate", [lambda inv: False, lambda inv: 0, lambda inv: 1 / 0], ids=["false", "falsy", "raises"]
)
async def test_gate_denial_is_a_value_and_nothing_runs(
    branch: Branch, gate: Any, suppress: bool
) -> None:
    ran: list[str] = []
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: ran.append("pre"))
    observer = SessionObserver()
    observer.gate(gate)
    branch.observer = observer
    [response] = await branch.act(call("fail"), suppress_errors=suppress)
    assert response.content.outcome is Outcome.DENIED
    assert response.content.status is S.SKIPPED
    assert response.content.error is not None
    assert response.content.error.type == "GateDenied"
    assert ran == []
    assert len(branch.log) == 0
    assert len(observer.denials) == 1
    check_history(branch)


async def test_every_phase_sees_the_same_normalized_arguments() -> None:
    seen: dict[str, Any] = {}

    def gate(invocation: ToolInvocation) -> bool:
        seen["gate"] = dict(invocation.arguments)
        seen["gate_type"] = type(invocation)
        return True

    async def escalate(decision: Any, ctx: Any) -> bool:
        seen["policy"] = dict(ctx.arguments)
        return True

    def pre(**kw: Any) -> None:
        seen["pre"] = dict(kw["context"].arguments)

    async def tool(a: int, b: int) -> int:
        seen["tool"] = {"a": a, "b": b}
        return a + b

    branch = Branch(
        policy=PermissionPolicy(mode="rules", escalate={"*": ["*"]}, on_escalate=escalate)
    )
    branch.observer = SessionObserver()
    branch.observer.gate(gate)
    branch.hooks.on(HookPoint.TOOL_PRE, pre)
    branch.register_tools(Tool.from_function(tool, name="tool"))
    [response] = await branch.act(call("tool", a="1", b=2.0))
    assert response.content.output == 3
    normalized = {"a": 1, "b": 2}
    assert seen == {
        "gate": normalized,
        "gate_type": ToolInvocation,
        "policy": normalized,
        "pre": normalized,
        "tool": normalized,
    }


async def test_gate_receives_call_id_and_branch_id(branch: Branch) -> None:
    got: list[ToolInvocation] = []
    branch.observer = SessionObserver()
    branch.observer.gate(lambda inv: got.append(inv) or True)
    await branch.act(
        {"id": "call_7", "type": "function", "function": {"name": "nothing", "arguments": "{}"}}
    )
    assert got[0].call_id == "call_7"
    assert got[0].branch_id == str(branch.id)


async def test_gate_is_fed_only_tool_invocations(branch: Branch) -> None:
    kinds: list[type] = []
    branch.observer = SessionObserver()
    branch.observer.gate(lambda inv: kinds.append(type(inv)) or True)
    await branch.act([call("nothing"), call("fail"), call("add", a=1, b=2)])
    assert kinds == [ToolInvocation] * 3


async def test_policy_denial_is_a_denied_value_not_a_captured_failure() -> None:
    async def run_shell(command: str) -> str:
        return command

    branch = Branch(policy=PermissionPolicy(mode="rules", allow={"run_shell": ["ls*"]}))
    branch.register_tools(Tool.from_function(run_shell, subject="command"))
    ok, denied = await branch.act(
        [call("run_shell", command="ls -l"), call("run_shell", command="rm -rf /")]
    )
    assert ok.content.outcome is Outcome.COMPLETED
    assert denied.content.outcome is Outcome.DENIED
    assert denied.content.status is S.SKIPPED
    assert denied.content.error is not None
    assert denied.content.error.type == "PermissionDenied"
    assert len(branch.log) == 1
    check_history(branch)


async def test_escalation_handler_settles_escalated_calls() -> None:
    async def rm(path: str) -> str:
        return path

    async def approve(decision: Any, ctx: Any) -> bool:
        return bool(ctx.arguments["path"].startswith("/tmp/"))

    policy = PermissionPolicy(mode="rules", escalate={"rm": ["*"]}, on_escalate=approve)
    branch = Branch(policy=policy)
    branch.register_tools(Tool.from_function(rm, subject="path"))
    responses = await branch.act([call("rm", path="/tmp/x"), call("rm", path="/etc/passwd")])
    assert outcomes(responses) == [Outcome.COMPLETED, Outcome.DENIED]


@pytest.mark.parametrize("suppress", [True, False])
async def test_raising_pre_hook_is_a_denied_value(branch: Branch, suppress: bool) -> None:
    def guard(**kw: Any) -> None:
        raise PermissionError("not today")

    errors: list[Any] = []
    branch.hooks.on(HookPoint.TOOL_PRE, guard)
    branch.hooks.on(HookPoint.TOOL_ERROR, lambda **kw: errors.append(kw))
    [response] = await branch.act(call("fail"), suppress_errors=suppress)
    assert response.content.outcome is Outcome.DENIED
    assert response.content.error is not None
    assert "not today" in response.content.error.message
    assert errors == []
    assert len(branch.log) == 0
    check_history(branch)


async def test_stop_hook_stops_remaining_pre_handlers_but_not_the_call(branch: Branch) -> None:
    order: list[str] = []

    def first(**kw: Any) -> None:
        order.append("first")
        raise StopHook

    branch.hooks.on(HookPoint.TOOL_PRE, first)
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: order.append("second"))
    [response] = await branch.act(call("add", a=1, b=2))
    assert order == ["first"]
    assert response.content.outcome is Outcome.COMPLETED


async def test_pre_hook_gets_name_call_id_and_a_capped_argument_summary() -> None:
    got: dict[str, Any] = {}

    async def echo(text: str) -> str:
        return text

    branch = Branch()
    branch.register_tools(echo)
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: got.update(kw))
    await branch.act(
        {
            "id": "call_9",
            "type": "function",
            "function": {"name": "echo", "arguments": {"text": "x" * 1000}},
        }
    )
    assert got["tool_name"] == "echo"
    assert got["call_id"] == "call_9"
    assert isinstance(got["arguments"], str)
    assert len(got["arguments"]) == SUMMARY_LIMIT


async def test_post_hook_gets_a_capped_result_summary_and_duration(
    autojump_clock: trio.abc.Clock,
) -> None:
    got: dict[str, Any] = {}

    async def big() -> str:
        await trio.sleep(2)
        return "y" * 1000

    branch = Branch()
    branch.register_tools(big)
    branch.hooks.on(HookPoint.TOOL_POST, lambda **kw: got.update(kw))
    [response] = await branch.act(call("big"))
    assert response.content.output == "y" * 1000
    assert len(got["result"]) == SUMMARY_LIMIT
    assert got["duration"] == pytest.approx(2.0)


async def test_verbose_previews_are_capped(
    branch: Branch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lionexec.act")
    await branch.act(call("add", a=10**80, b=1), verbose_action=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "lionexec.act"]
    assert len(lines) == 2
    assert "'add'(" in lines[0]  # model-controlled names are logged as repr (no line forging)
    preview = lines[0].split("'add'(", 1)[1].rsplit(")", 1)[0]
    assert len(preview) == VERBOSE_LIMIT


async def test_transform_is_always_revalidated_against_the_schema() -> None:
    async def double(n: int) -> int:
        return 2 * n

    def breaks(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"n": "not a number"}

    branch = Branch()
    branch.register_tools(Tool.from_function(double, preprocessor=breaks))
    [response] = await branch.act(call("double", n=2))
    assert response.content.outcome is Outcome.INVALID
    assert response.content.status is S.ABORTED
    assert response.content.error is not None
    assert "after transform" in response.content.error.message
    [record] = list(branch.log)
    assert record.status is S.ABORTED
    check_history(branch)


async def test_transform_is_always_rechecked_by_the_policy() -> None:
    async def run_shell(command: str) -> str:
        return command

    def sneaky(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"command": "rm -rf /"}

    branch = Branch(policy=PermissionPolicy(mode="rules", allow={"run_shell": ["ls*"]}))
    branch.register_tools(Tool.from_function(run_shell, subject="command", preprocessor=sneaky))
    [response] = await branch.act(call("run_shell", command="ls"))
    assert response.content.outcome is Outcome.DENIED
    assert response.content.status is S.SKIPPED
    check_history(branch)


async def test_transform_result_is_what_the_tool_receives() -> None:
    async def greet(name: str) -> str:
        return f"hi {name}"

    branch = Branch()
    branch.register_tools(
        Tool.from_function(greet, preprocessor=lambda a: {"name": a["name"].upper()})
    )
    [response] = await branch.act(call("greet", name="ann"))
    assert response.content.output == "hi ANN"


# -- evidence and isolated observers ----------------------------------------------------------


async def test_log_record_and_history_pair_are_written_for_each_invoked_call(
    branch: Branch,
) -> None:
    responses = await branch.act([call("add", a=1, b=2), call("fail"), call("nope")])
    assert len(branch.log) == 2
    records = {r.response_id: r for r in branch.log}
    for response in responses[:2]:
        record = records[response.id]
        assert record.function == response.content.function
        assert record.event.function == response.content.function
        assert record.event.arguments == response.content.arguments
        assert record.branch_id == branch.id
    check_history(branch)


async def test_observer_receives_the_invoked_event(branch: Branch) -> None:
    branch.observer = SessionObserver()
    await branch.act(call("add", a=1, b=2))
    events = branch.observer.by_type(FunctionCalling)
    assert len(events) == 1
    assert events[0].status is S.COMPLETED


@pytest.mark.parametrize("seam", ["observer", "post_hook", "error_hook", "callback"])
async def test_failures_after_evidence_are_reported_never_split_the_record(
    branch: Branch, seam: str
) -> None:
    def explode(*args: Any, **kw: Any) -> None:
        raise RuntimeError(f"{seam} broke")

    observer = SessionObserver()
    branch.observer = observer
    if seam == "observer":
        observer.subscribe(lambda payload: True, explode)
    elif seam == "post_hook":
        branch.hooks.on(HookPoint.TOOL_POST, explode)
    elif seam == "error_hook":
        branch.hooks.on(HookPoint.TOOL_ERROR, explode)
    else:
        branch.messages.on_message_added.append(explode)
    responses = await branch.act([call("add", a=1, b=2), call("fail")], suppress_errors=True)
    assert outcomes(responses) == [Outcome.COMPLETED, Outcome.FAILED]
    assert len(branch.log) == 2
    check_history(branch)
    assert branch.failures
    assert all(str(f.error) == f"{seam} broke" for f in branch.failures)


async def test_event_log_file_gets_one_json_line_per_invoked_call(tmp_path: Any) -> None:
    import json

    path = tmp_path / "events.jsonl"
    async with Branch.with_log_file(path) as branch:
        branch.register_tools([_add_tool])
        await branch.act([call("add", a=1, b=2), call("add", a=3, b=4)])
        await branch.act(call("add", a=5, b=6))
    lines = path.read_text().splitlines()  # drained and closed on exit
    outputs = sorted(json.loads(line)["event"]["execution"]["response"] for line in lines)
    assert outputs == [3, 7, 11]
    assert [r.call_id for r in branch.log] == [json.loads(line)["call_id"] for line in lines]


async def test_unwritable_log_file_is_reported_and_the_record_kept(tmp_path: Any) -> None:
    async with Branch.with_log_file(tmp_path / "missing-dir" / "events.jsonl") as branch:
        branch.register_tools([_add_tool])
        [response] = await branch.act(call("add", a=1, b=2))
        assert response.content.outcome is Outcome.COMPLETED
    assert len(branch.log) == 1
    assert [f.where for f in branch.failures] == ["sink"]
    assert branch.statistics().sinks[0].failed == 1
    check_history(branch)


async def test_a_branch_with_sinks_refuses_to_act_unless_running(tmp_path: Any) -> None:
    branch = Branch.with_log_file(tmp_path / "events.jsonl")
    branch.register_tools([_add_tool])
    with pytest.raises(ConfigurationError, match="async with branch"):
        await branch.act(call("add", a=1, b=2))
    assert len(branch.messages) == 0  # refused before anything was recorded


# -- cancellation -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_cancellation_records_cancelled_for_every_unanswered_call(
    branch: Branch, strategy: Any, autojump_clock: trio.abc.Clock
) -> None:
    with trio.move_on_after(5):
        await branch.act(
            [call("add", a=1, b=1), call("slow", seconds=10), call("slow", seconds=20)],
            strategy=strategy,
        )
    responses = [branch.messages.response_for(r) for r in branch.messages.requests()]
    assert all(r is not None for r in responses)
    by_function = sorted((r.content.function, r.content.outcome) for r in responses if r)
    assert by_function == [
        ("add", Outcome.COMPLETED),
        ("slow", Outcome.CANCELLED),
        ("slow", Outcome.CANCELLED),
    ]
    check_history(branch)


async def test_cancelled_response_is_written_before_cancellation_propagates(
    branch: Branch,
) -> None:
    seen_after: list[bool] = []

    async def runner() -> None:
        try:
            await branch.act(call("slow"))
        except trio.Cancelled:
            seen_after.append(len(branch.messages.responses()) == 1)
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert seen_after == [True]
    [response] = branch.messages.responses()
    assert response.content.outcome is Outcome.CANCELLED
    assert response.content.status is S.CANCELLED
    [record] = list(branch.log)
    assert record.event.status is S.CANCELLED


async def test_cancellation_while_a_gate_decides_records_cancelled(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    async def slow_gate(inv: ToolInvocation) -> bool:
        await trio.sleep_forever()
        raise AssertionError

    branch.observer = SessionObserver()
    branch.observer.gate(slow_gate)
    with trio.move_on_after(0.01):
        await branch.act(call("add", a=1, b=1))
    [response] = branch.messages.responses()
    assert response.content.outcome is Outcome.CANCELLED
    assert response.content.attempts == 0
    assert len(branch.log) == 0
    check_history(branch)


# -- direct paths -----------------------------------------------------------------------------


async def test_hand_built_function_calling_skips_governance_and_history(branch: Branch) -> None:
    branch.observer = SessionObserver()
    branch.observer.gate(lambda inv: False)
    event = branch.registry.match_tool("add", {"a": 2, "b": 3})
    await event.invoke()
    assert event.response == 5
    assert len(branch.messages) == 0
    assert len(branch.log) == 0


def test_registry_has_no_governed_invoke_path() -> None:
    from lionexec import ActionManager

    assert not hasattr(ActionManager, "invoke")


async def test_call_params_validation_names_the_bad_value() -> None:
    from lionexec import ConfigurationError

    with pytest.raises(ConfigurationError, match="timeout"):
        AlcallParams(timeout=-1)
    with pytest.raises(ConfigurationError, match="max_concurrent"):
        AlcallParams(max_concurrent=0)


async def test_statuses_helper_matches_outcome_mapping(branch: Branch) -> None:
    responses = await branch.act([call("add", a=1, b=2), call("fail"), call("zzz")])
    assert statuses(responses) == [S.COMPLETED, S.FAILED, S.ABORTED]


# -- announcing cancelled calls ----------------------------------------------------------------


async def test_a_cancelled_call_is_announced_to_hooks_observer_and_callbacks(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    seen: list[str] = []
    branch.observer = SessionObserver()
    branch.observer.subscribe(
        FunctionCalling, lambda event: seen.append(f"observer {event.status}")
    )
    branch.hooks.on(HookPoint.TOOL_ERROR, lambda **kw: seen.append(f"tool.error {kw['status']}"))
    branch.hooks.on(
        HookPoint.MESSAGE_ADD, lambda message: seen.append(f"message.add {type(message).__name__}")
    )

    async def callback(message: Any) -> None:
        await trio.sleep(0.1)  # needs the shield: the call is being cancelled
        seen.append(f"callback {type(message).__name__}")

    branch.messages.on_message_added.append(callback)
    with trio.move_on_after(1):
        await branch.act(call("slow"))
    assert seen == [
        "tool.error cancelled",
        "observer cancelled",
        "callback ActionRequest",
        "callback ActionResponse",
        "message.add ActionRequest",
        "message.add ActionResponse",
    ]


async def test_announcing_a_cancelled_call_is_bounded_by_cancel_grace(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    async def stuck(message: Any) -> None:
        await trio.sleep_forever()

    branch.cancel_grace = 3.0
    branch.messages.on_message_added.append(stuck)
    start = trio.current_time()
    with trio.move_on_after(1):
        await branch.act(call("slow"))
    assert trio.current_time() - start == pytest.approx(4.0)
    [response] = branch.messages.responses()
    assert response.content.outcome is Outcome.CANCELLED
    check_history(branch)


async def test_calls_that_never_started_are_announced_when_the_batch_is_cancelled(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    announced: list[str] = []
    branch.messages.on_message_added.append(
        lambda m: (
            announced.append(m.content.outcome.value) if hasattr(m.content, "outcome") else None
        )
    )
    with trio.move_on_after(1):
        await branch.act([call("slow")] * 3, call_params=AlcallParams(max_concurrent=1))
    assert announced == ["cancelled"] * 3
    assert [r.content.attempts for r in branch.messages.responses()] == [1, 0, 0]
    check_history(branch)


async def test_cancelled_responses_have_a_stable_message(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    with trio.move_on_after(0.01):
        await branch.act([call("slow"), call("slow")])
    responses = branch.messages.responses()
    assert len(responses) == 2
    for response in responses:
        assert response.content.error is not None
        assert response.content.error.type == "Cancelled"
        assert "0x" not in response.content.error.message


async def test_message_add_hook_sees_each_recorded_message(branch: Branch) -> None:
    added: list[Any] = []
    branch.hooks.on(HookPoint.MESSAGE_ADD, lambda message: added.append(message))
    [response] = await branch.act(call("add", a=1, b=2))
    assert added == [branch.messages.requests()[0], response]


async def test_requests_are_in_the_history_in_proposal_order_before_any_call_runs(
    branch: Branch, autojump_clock: trio.abc.Clock
) -> None:
    seen: list[int] = []
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: seen.append(len(branch.messages.requests())))
    await branch.act([call("slow", seconds=3), call("slow", seconds=1), call("add", a=1, b=1)])
    assert seen == [3, 3, 3]
    assert [r.content.function for r in branch.messages.requests()] == ["slow", "slow", "add"]
    assert [r.content.arguments.get("seconds") for r in branch.messages.responses()] == [
        None,
        1,
        3,
    ]
    exported = branch.messages.to_openai()[0]["tool_calls"]
    assert [c["id"] for c in exported] == [r.call_id for r in branch.messages.requests()]


async def test_a_history_or_log_set_on_the_branch_between_acts_gets_whole_calls() -> None:
    branch = Branch()
    branch.register_tools(_add_tool)
    with trio.fail_after(5):
        await branch.act(call("add", a=1, b=2))
        first_history, first_log = branch.messages, branch.log
        branch.messages = type(branch.messages)()
        branch.log = type(branch.log)()
        [response] = await branch.act(call("add", a=2, b=2))
    # the new call's request and response (and its log record) went to the new ones
    assert [type(m).__name__ for m in branch.messages] == ["ActionRequest", "ActionResponse"]
    assert response.content.output == 4 and response.id in branch.messages
    assert [record.response_id for record in branch.log] == [response.id]
    assert len(first_history) == 2 and len(first_log) == 1  # the old ones kept what they had
    check_history(branch)


@pytest.mark.parametrize("transformed", [False, True])
async def test_an_approval_to_wait_for_on_a_branch_without_a_journal_is_a_denial(
    transformed: bool,
) -> None:
    # Nothing could ever answer a parked call here: it would stay unanswered for good.
    async def copy_file(path: str) -> str:
        return path

    def elsewhere(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"path": "/secret/x"}

    policy = PermissionPolicy(
        mode="rules",
        allow={"copy_file": ["/tmp/*"]},
        escalate={"copy_file": ["/secret/*"]},
        on_escalate=lambda decision, context: AwaitingApproval("approval-1"),
    )
    branch = Branch(policy=policy)
    tool = Tool.from_function(
        copy_file, subject="path", preprocessor=elsewhere if transformed else None
    )
    branch.register_tools(tool)
    with trio.fail_after(5):
        [response] = await branch.act(
            call("copy_file", path="/tmp/x" if transformed else "/secret/x")
        )
    assert response.content.outcome is Outcome.DENIED
    error = response.content.error
    assert error is not None and "no durable journal" in error.message
    assert "approval-1" in error.message
    assert error.message.startswith("after transform") is transformed
    assert [record.event.status for record in branch.log] == [S.SKIPPED] * transformed
    assert branch.messages.unanswered() == []
    check_history(branch)


async def test_only_the_act_running_a_request_may_answer_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A message callback answering a request another call of the batch still runs would
    # replace the call's real outcome and drop its log record: the history refuses it.
    async def fast() -> str:
        return "fast"

    async def slow() -> str:
        await trio.sleep(10)
        return "slow"

    branch = Branch()
    branch.register_tools([Tool.from_function(fast), Tool.from_function(slow)])
    refused: list[str] = []

    def watchdog(message: Any) -> None:
        if isinstance(message, ActionResponse) and message.content.function == "fast":
            for request in branch.messages.unanswered():
                try:
                    branch.messages.add_message(
                        ActionResponse.create(
                            request,
                            outcome=Outcome.CANCELLED,
                            attempts=0,
                            error=ErrorInfo("Cancelled", "watchdog"),
                        )
                    )
                except HistoryError as exc:
                    refused.append(str(exc))
                with pytest.raises(HistoryError, match="being run by act"):
                    branch.messages.record_action(
                        request, ActionResponse.create(request, output="forged")
                    )

    branch.messages.on_message_added.append(watchdog)
    with trio.fail_after(30):
        results = await branch.act([call("fast"), call("slow")])
    assert [r.content.output for r in results] == ["fast", "slow"]
    assert len(refused) == 1 and "being run by act()" in refused[0]
    assert [record.function for record in branch.log] == ["fast", "slow"]
    check_history(branch)
    # once answered, the history is free again: nothing stays reserved
    [request] = [r for r in branch.messages.requests() if r.function == "slow"]
    with pytest.raises(HistoryError, match="already answered"):
        branch.messages.record_action(request, ActionResponse.create(request, output="x"))


async def test_a_request_running_in_one_branch_cannot_run_in_another(
    autojump_clock: trio.abc.Clock,
) -> None:
    runs: list[int] = []

    async def slow(a: int) -> int:
        runs.append(a)
        await trio.sleep(10)
        return a

    first, second = Branch(), Branch()
    for branch in (first, second):
        branch.register_tools(Tool.from_function(slow))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.act, call("slow", a=1))
            await trio.sleep(1)
            [request] = first.messages.unanswered()
            with pytest.raises(DuplicateCallError, match="already running in another act"):
                await second.act(request)
    assert runs == [1] and list(second.messages) == []
    check_history(first)


def test_sinks_are_set_at_construction_only() -> None:
    branch = Branch()
    # their feeds are made with the branch: an assignment would be silently ignored
    with pytest.raises(attrs.exceptions.FrozenAttributeError):
        branch.sinks = ()
    with pytest.raises(attrs.exceptions.FrozenAttributeError):
        branch.sink_capacity = 10
    assert branch.sinks == () and branch.statistics().sinks == ()


async def test_governance_set_on_the_branch_between_acts_governs_the_next_act() -> None:
    branch = Branch()
    branch.register_tools(_add_tool)
    denied_by_hook: list[str] = []
    with trio.fail_after(5):
        assert outcomes(await branch.act(call("add", a=1, b=2))) == [Outcome.COMPLETED]
        branch.policy = PermissionPolicy(mode="rules", deny={"add": ["*"]})
        assert outcomes(await branch.act(call("add", a=1, b=2))) == [Outcome.DENIED]
        branch.policy = None
        branch.observer = SessionObserver()
        branch.observer.gate(lambda invocation: False)
        assert outcomes(await branch.act(call("add", a=1, b=2))) == [Outcome.DENIED]
        branch.observer = None
        branch.hooks = type(branch.hooks)()
        branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: denied_by_hook.append("pre") or False)
        assert outcomes(await branch.act(call("add", a=1, b=2))) == [Outcome.DENIED]
        branch.registry = type(branch.registry)()
        assert outcomes(await branch.act(call("add", a=1, b=2))) == [Outcome.INVALID]
    assert denied_by_hook == ["pre"]
    check_history(branch)
