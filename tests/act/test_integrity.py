"""Evidence integrity, duplicates and re-entry, and the transaction's smaller defects.

Each test here pins a defect an earlier transaction had.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from lionexec import (
    ActionOutcome,
    ActionRequest,
    AlcallParams,
    Branch,
    ConfigurationError,
    DuplicateCallError,
    EventStatus,
    FunctionCalling,
    HookPoint,
    Instruction,
    SessionObserver,
    Tool,
    alcall,
)
from lionexec.act import read_batch
from lionexec.act._envelope import read_arguments
from lionexec.errors import NotInTrioError
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

Outcome = ActionOutcome


# -- evidence nothing can rewrite ---------------------------------------------------------------


async def test_a_tool_mutating_its_arguments_does_not_rewrite_the_record() -> None:
    async def save(record: dict[str, Any]) -> str:
        record["email"] = "attacker@example.com"
        record["tags"].append("pwned")
        return "saved"

    branch = Branch()
    branch.register_tools(Tool.from_function(save))
    proposed = {"email": "ann@example.com", "tags": ["a"]}
    [response] = await branch.act(call("save", record=proposed))
    assert response.content.outcome is Outcome.COMPLETED
    [request] = branch.messages.requests()
    assert request.arguments == {"record": {"email": "ann@example.com", "tags": ["a"]}}
    [record] = list(branch.log)
    assert record.event.arguments == {"record": {"email": "ann@example.com", "tags": ["a"]}}
    assert proposed == {"email": "ann@example.com", "tags": ["a"]}  # the caller's dict too
    exported = branch.messages.to_openai()
    assert "attacker" not in repr(exported)


async def test_a_flat_call_that_validation_left_unchanged_keeps_one_arguments_dict() -> None:
    async def touch(a: int, b: str, c: float = 0.5) -> str:
        return "ok"

    branch = Branch()
    branch.register_tools(Tool.from_function(touch))
    await branch.act(
        [
            call("touch", a=1, b="x", c=2.5),  # nothing to change: one dict, shared
            call("touch", a="4", b="x"),  # coerced: the event keeps what the tool got
            call("touch", a=True, b="x"),  # refused or coerced, never mistaken for 1
        ]
    )
    requests = branch.messages.requests()
    events = {record.call_id: record.event for record in branch.log}
    shared, coerced, boolean = (events.get(r.call_id) for r in requests)
    assert shared is not None and coerced is not None
    assert shared.arguments is requests[0].arguments
    assert coerced.arguments == {"a": 4, "b": "x"}
    assert requests[1].arguments == {"a": "4", "b": "x"}
    if boolean is not None:
        assert boolean.arguments is not requests[2].arguments
    assert_consistent(branch)


async def test_the_callers_dict_mutated_after_act_does_not_rewrite_the_record() -> None:
    async def echo(record: dict[str, Any]) -> dict[str, Any]:
        return record

    branch = Branch()
    branch.register_tools(Tool.from_function(echo))
    proposed: dict[str, Any] = {"record": {"n": 1}}
    [response] = await branch.act({"function": "echo", "arguments": proposed})
    proposed["record"]["n"] = 666
    assert branch.messages.requests()[0].arguments == {"record": {"n": 1}}
    assert response.output == {"n": 1}


@pytest.mark.parametrize(
    "seam", ["tool.error", "observer", "observer.records", "callback", "message.add"]
)
async def test_announcements_get_copies_and_cannot_rewrite_the_record(seam: str) -> None:
    shared: list[Any] = []

    async def produce(fail: bool = False) -> dict[str, Any]:
        if fail:
            try:
                raise KeyError("cause")
            except KeyError:
                raise ValueError("original")  # noqa: B904 (the chain is under test)
        value = {"items": [1, 2]}
        shared.append(value)
        return value

    branch = Branch(observer=SessionObserver())
    branch.register_tools(Tool.from_function(produce))

    contexts: list[object] = []  # what the copies given to the seams were chained to

    def vandalize_error(error: BaseException, **_: Any) -> None:
        contexts.append(error.__context__)
        error.args = ("rewritten",)
        error.add_note("pwned")

    def vandalize_payload(payload: Any) -> None:
        payload.metadata["pwned"] = True
        if payload.execution.error is not None:
            vandalize_error(payload.execution.error)
        else:
            payload.execution.response["items"].append("pwned")

    def vandalize_message(message: Any) -> None:
        output = getattr(message.content, "output", None)
        if isinstance(output, dict):
            output["items"].append("pwned")
        arguments = message.content.arguments
        if isinstance(arguments, dict):
            arguments["fail"] = "pwned"

    if seam == "tool.error":
        branch.hooks.on(HookPoint.TOOL_ERROR, vandalize_error)
    elif seam == "observer":
        assert branch.observer is not None
        branch.observer.subscribe(lambda payload: True, vandalize_payload)
    elif seam == "callback":
        branch.messages.on_message_added.append(vandalize_message)
    else:
        branch.hooks.on(HookPoint.MESSAGE_ADD, lambda message, **_: vandalize_message(message))
    ok, failed = await branch.act([call("produce"), call("produce", fail=True)])
    if seam == "observer.records":  # stored as recorded, copied on each read
        assert branch.observer is not None
        for payload in branch.observer.by_type(FunctionCalling):
            vandalize_payload(payload)
        records = branch.observer.records
        [completed] = [r for r in records if r.execution.error is None]
        assert completed.metadata == {} and completed.execution.response == {"items": [1, 2]}
        assert records[0] is not branch.observer.records[0]  # a copy of its own, each read
        assert [r.event.id for r in branch.log] == [r.id for r in records]
    assert ok.output == {"items": [1, 2]}
    assert failed.error is not None and failed.error.message == "original"
    records = {r.response_id: r for r in branch.log}
    assert records[ok.id].event.response == {"items": [1, 2]}
    recorded_error = records[failed.id].event.execution.error
    assert str(recorded_error) == "original" and not getattr(recorded_error, "__notes__", [])
    if seam in ("tool.error", "observer", "observer.records"):  # their copies keep the chain
        assert len(contexts) == 1 and isinstance(contexts[0], KeyError)
    assert all(r.event.metadata == {} for r in branch.log)
    assert all("pwned" not in repr(r.arguments) for r in branch.messages.requests())
    assert "pwned" not in repr(branch.messages.to_openai())
    assert_consistent(branch)


async def test_gates_policies_and_pre_hooks_see_a_copy_of_nested_arguments() -> None:
    async def save(record: dict[str, Any]) -> str:
        return record["email"]

    observer = SessionObserver()

    def gate(invocation: Any) -> bool:
        invocation.arguments["record"]["email"] = "gate@evil"
        return True

    observer.gate(gate)
    branch = Branch(observer=observer)
    branch.register_tools(Tool.from_function(save))

    def pre(context: Any, **_: Any) -> None:
        context.arguments["record"]["email"] = "hook@evil"

    branch.hooks.on(HookPoint.TOOL_PRE, pre)
    [response] = await branch.act(call("save", record={"email": "ann@example.com"}))
    assert response.output == "ann@example.com"  # the tool got what was authorized
    assert branch.log[0].event.arguments == {"record": {"email": "ann@example.com"}}
    assert "evil" not in repr(branch.messages.to_openai())


async def test_output_is_snapshotted_when_recorded() -> None:
    kept: list[dict[str, Any]] = []

    async def leaky() -> dict[str, Any]:
        value: dict[str, Any] = {"n": 1}
        kept.append(value)
        return value

    branch = Branch()
    branch.register_tools(Tool.from_function(leaky))
    [response] = await branch.act(call("leaky"))
    kept[0]["n"] = 2  # the tool keeps a reference and changes it later
    assert response.output == {"n": 1}
    assert branch.log[0].event.response == {"n": 1}


# -- duplicates and re-entry --------------------------------------------------------------------


async def test_the_same_request_in_two_overlapping_acts_is_refused_before_it_runs(
    autojump_clock: trio.abc.Clock,
) -> None:
    runs: list[int] = []

    async def slow() -> str:
        runs.append(1)
        await trio.sleep(1)
        return "done"

    branch = Branch()
    branch.register_tools(Tool.from_function(slow))
    request = ActionRequest.create("slow", {})
    errors: list[BaseException] = []

    async def second() -> None:
        await trio.testing.wait_all_tasks_blocked()
        try:
            await branch.act(request)
        except DuplicateCallError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        [response] = await branch.act(request)
    assert response.content.outcome is Outcome.COMPLETED
    assert runs == [1]
    [error] = errors
    assert "already running" in str(error)
    assert_consistent(branch)


async def test_a_call_id_already_in_the_history_is_refused_naming_it() -> None:
    async def add(a: int, b: int) -> int:
        return a + b

    branch = Branch()
    branch.register_tools(Tool.from_function(add))
    batch = [{"type": "function", "id": "call_1", "function": {"name": "add", "arguments": "{}"}}]
    batch[0]["function"]["arguments"] = '{"a": 1, "b": 2}'  # type: ignore[index]
    await branch.act(batch)
    before = len(branch.messages)
    with pytest.raises(DuplicateCallError, match="call_1") as caught:
        await branch.act(batch)  # a client retrying a POST
    assert caught.value.call_id == "call_1"
    assert len(branch.messages) == before
    assert_consistent(branch)


async def test_duplicate_call_ids_in_one_batch_are_refused_before_anything_is_recorded() -> None:
    branch = Branch()
    item = {"function": "x", "arguments": {}, "call_id": "dup"}
    with pytest.raises(ValueError, match="dup"):
        await branch.act([item, dict(item)])
    assert len(branch.messages) == 0


async def test_a_message_id_collision_refuses_the_whole_batch_before_any_request() -> None:
    async def add(a: int, b: int) -> int:
        return a + b

    branch = Branch()
    branch.register_tools(Tool.from_function(add))
    taken = ActionRequest.create("add", {"a": 1, "b": 2}, call_id="c0")
    branch.messages.add_message(taken)
    impostor = ActionRequest(id=taken.id, content=ActionRequest.create("add", {}).content)
    before = list(branch.messages)
    with pytest.raises(DuplicateCallError):
        await branch.act([call("add", a=1, b=1), impostor])
    assert list(branch.messages) == before  # the first request was not added either


# -- bad values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1.0, float("-inf")]])
async def test_a_non_finite_number_from_the_model_is_invalid(value: Any) -> None:
    ran: list[Any] = []

    async def measure(x: Any) -> None:
        ran.append(x)

    branch = Branch()
    branch.register_tools(Tool.from_function(measure))
    [response] = await branch.act(call("measure", x=value))
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None
    assert "non-finite" in response.content.error.message
    assert ran == []


async def test_a_string_nan_coerced_to_float_is_invalid() -> None:
    async def scale(factor: float) -> float:
        return factor

    branch = Branch()
    branch.register_tools(Tool.from_function(scale))
    results = await branch.act([call("scale", factor="nan"), call("scale", factor="inf")])
    assert [r.content.outcome for r in results] == [Outcome.INVALID] * 2


@pytest.mark.parametrize(
    "arguments",
    [
        {"text": "a\ud800b"},  # a flat string: the fast path
        {"items": [{"text": "\udfff"}]},  # nested
        {"items": {"\ud800": 1}},  # a nested key
        '{"text": "\\ud800"}',  # valid JSON text that decodes to a lone surrogate
    ],
)
async def test_a_string_that_is_not_valid_unicode_is_invalid_and_records_as_utf8(
    arguments: Any,
) -> None:
    ran: list[Any] = []

    async def echo(text: str = "", items: Any = None) -> None:
        ran.append((text, items))

    branch = Branch()
    branch.register_tools(Tool.from_function(echo))
    envelope = {"function": "echo", "arguments": arguments}
    [response] = await branch.act(envelope)
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None
    assert "lone surrogate" in response.content.error.message
    assert ran == []
    exported = json.dumps(branch.messages.to_openai(), allow_nan=False)
    exported.encode("utf-8")  # raises on a lone surrogate
    assert_consistent(branch)


@pytest.mark.parametrize(
    "arguments",
    [
        {"a\ud800": 1},  # a top-level name, flat value
        {"ok": "x", "\udfff": [1]},  # a top-level name, nested value
        '{"a\\ud800": 1}',  # the same from JSON text
    ],
)
async def test_an_argument_name_that_is_not_valid_unicode_is_invalid(arguments: Any) -> None:
    # A **kwargs tool takes any name, so only the Unicode check can refuse these.
    ran: list[Any] = []

    async def anything(**kwargs: Any) -> None:
        ran.append(kwargs)

    branch = Branch()
    branch.register_tools(Tool.from_function(anything))
    [response] = await branch.act({"function": "anything", "arguments": arguments})
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None
    assert "lone surrogate" in response.content.error.message
    assert ran == []
    assert_consistent(branch)


_LONE = "\ud800"
_TURNS: dict[str, Any] = {
    "chat": {
        "role": "assistant",
        "content": f"calling {_LONE}",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
        ],
    },
    "anthropic": {
        "role": "assistant",
        "content": [
            {"type": "text", "text": f"calling {_LONE}"},
            {"type": "tool_use", "id": "c1", "name": "echo", "input": {}},
        ],
    },
    "responses": [
        {"type": "message", "id": "m1", "content": [{"type": "output_text", "text": _LONE}]},
        {"type": "function_call", "call_id": "c1", "name": "echo", "arguments": "{}"},
    ],
}


@pytest.mark.parametrize(
    ("turn", "output"),
    [
        (_TURNS["chat"], f"text {_LONE}"),
        (_TURNS["anthropic"], {"type": "text", "text": _LONE}),
        (_TURNS["responses"], [f"caption {_LONE}", {"type": "text", "text": "ok"}]),
    ],
)
async def test_text_that_is_not_valid_unicode_is_kept_and_exported_as_valid_utf8(
    turn: Any, output: Any
) -> None:
    # A turn's text and a tool's text output are recorded as sent; the exports, which an SDK
    # sends as UTF-8 (httpx: ensure_ascii=False), carry U+FFFD in place of a lone surrogate.
    async def echo() -> Any:
        return output

    branch = Branch()
    branch.register_tools(Tool.from_function(echo))
    branch.messages.add_message(Instruction(content=f"system {_LONE}"))
    [response] = await branch.act(turn)
    assert response.content.outcome is Outcome.COMPLETED
    assert _LONE in str(list(branch.messages)[1].content)  # the turn, as sent
    for export in (
        branch.messages.to_openai(),
        branch.messages.to_anthropic(),
        branch.messages.to_responses(),
    ):
        text = json.dumps(export, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # raises on a lone surrogate
        assert "\ufffd" in text
    assert_consistent(branch)


@attrs.define
class _Fields:
    value: Any
    other: Any = None


def _cycle() -> _Fields:
    fields = _Fields(None)
    fields.value = [fields]
    return fields


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (_Fields(math.nan), "non-finite"),  # an attrs instance: the same rules as a mapping
        (_Fields("\ud800"), "lone surrogate"),
        (_Fields(10**5000), "too long"),
        (_cycle(), "nested more than"),  # attrs.asdict recursed into a RecursionError
        ({"value": frozenset({math.nan})}, "non-finite"),  # a set's members are checked
        ({"value": {"\ud800"}}, "lone surrogate"),
        ({"value": {(1, 2): 1}}, "argument names must be strings, got (1, 2)"),  # nested
        ({"value": {math.nan: 1}}, "argument names must be strings, got nan"),
    ],
)
async def test_arguments_from_python_objects_are_held_to_the_same_rules(
    arguments: Any, problem: str
) -> None:
    ran: list[Any] = []

    async def take(value: Any = None, other: Any = None) -> None:
        ran.append(value)

    branch = Branch()
    branch.register_tools(Tool.from_function(take))
    [response] = await branch.act({"function": "take", "arguments": arguments})
    assert response.content.outcome is Outcome.INVALID
    assert response.content.error is not None and problem in response.content.error.message
    assert ran == []
    assert_consistent(branch)


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("envelope", "message"),
    [
        ({"role": "assistant", "content": _BadRepr()}, "content must be text, got <_BadRepr"),
        ({"function": _BadRepr(), "arguments": {}}, "function name, got <_BadRepr"),
        ({"function": _deep(100_000), "arguments": {}}, "function name, got <list"),
        ({"function": "f", "arguments": {}, "call_id": _deep(100_000)}, "must be a string"),
        ({_BadRepr(): 1}, "a mapping with keys ['<_BadRepr"),
        ({f"k{i}": i for i in range(1000)}, "and 980 more"),
    ],
)
async def test_an_unreadable_proposal_is_a_value_error_even_when_its_parts_are_hostile(
    envelope: Any, message: str
) -> None:
    branch = Branch()
    with pytest.raises(ValueError) as caught:
        await branch.act(envelope)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 1000
    assert list(branch.messages) == []


_CALL_ITEM = {"type": "function_call", "call_id": "c1", "name": "echo", "arguments": "{}"}


@pytest.mark.parametrize("content", [5, True, "text"])
async def test_a_responses_message_whose_content_is_not_a_list_is_refused(content: Any) -> None:
    branch = Branch()
    turn = [{"type": "message", "id": "m1", "content": content}, _CALL_ITEM]
    with pytest.raises(ValueError, match="content must be a list, got"):
        await branch.act(turn)
    assert list(branch.messages) == []  # nothing recorded


@pytest.mark.parametrize(
    "reasoning",
    [
        {"type": "reasoning", "id": "r1", "summary": 5},
        {"type": "reasoning", "id": "r1", "summary": True},
        {"type": "reasoning", "id": "r1", "summary": [], "content": 5},
        {"type": "reasoning", "id": "r1", "summary": "not a list"},
    ],
)
async def test_a_reasoning_item_with_odd_fields_is_kept_and_still_exports(
    reasoning: dict[str, Any],
) -> None:
    async def echo() -> str:
        return "ok"

    branch = Branch()
    branch.register_tools(Tool.from_function(echo))
    [response] = await branch.act([reasoning, _CALL_ITEM])
    assert response.content.outcome is Outcome.COMPLETED
    [item, call_item, _] = branch.messages.to_responses()
    assert item["type"] == "reasoning" and item["summary"] == []  # nothing to send there
    assert call_item["call_id"] == "c1"
    json.dumps(branch.messages.to_responses(), allow_nan=False)
    assert_consistent(branch)


@pytest.mark.parametrize("field", ["function", "call_id"])
async def test_a_function_name_or_call_id_that_is_not_valid_unicode_is_refused(
    field: str,
) -> None:
    branch = Branch()
    envelope: dict[str, Any] = {"function": "echo", "arguments": {}, "call_id": "c1"}
    envelope[field] = "x\ud800"
    with pytest.raises(ValueError, match="lone surrogate"):
        await branch.act(envelope)
    assert list(branch.messages) == []  # nothing recorded


# -- bad values: envelopes and arguments that cannot be read --------------------------------------


class BadMap(Mapping[str, Any]):
    """A mapping whose values cannot be read."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        return iter(["x"])

    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("choice", [None, 1, "text", {"message": None}])
def test_a_chat_completion_whose_choice_has_no_message_is_a_value_error(choice: Any) -> None:
    with pytest.raises(ValueError, match="choice of a ChatCompletion"):
        read_batch({"object": "chat.completion", "choices": [choice]})


@pytest.mark.parametrize(
    ("raw", "kind"), [(BadMap(), "BadMap"), ({"x": BadMap()}, "dict")], ids=["top", "nested"]
)
async def test_arguments_that_cannot_be_read_make_the_call_invalid(raw: Any, kind: str) -> None:
    assert read_arguments(raw) == (
        None,
        f"arguments could not be read from {kind}: RuntimeError('boom')",
    )

    async def f(x: Any = None) -> int:
        return 1

    branch = Branch()
    branch.register_tools(f)
    [response] = await branch.act({"function": "f", "arguments": raw})
    assert response.content.outcome is ActionOutcome.INVALID
    assert response.content.error is not None
    assert response.content.error.message.startswith(f"arguments could not be read from {kind}")
    assert_consistent(branch)


# -- smaller defects ----------------------------------------------------------------------------


async def test_context_param_receives_the_call_context_under_act() -> None:
    async def whoami(ctx: Any = None) -> str:
        return f"{ctx.function} {ctx.call_id}"

    branch = Branch()
    branch.register_tools(Tool.from_function(whoami, context_param="ctx"))
    [response] = await branch.act({"function": "whoami", "arguments": {}, "call_id": "c9"})
    assert response.output == "whoami c9"


@pytest.mark.parametrize("grace", [float("nan"), "1", -1, float("inf")])
def test_cancel_grace_is_validated(grace: Any) -> None:
    with pytest.raises(ConfigurationError, match="cancel_grace"):
        Branch(cancel_grace=grace)


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_a_tools_exception_group_is_not_wrapped_again(strategy: Any) -> None:
    async def grouped() -> None:
        raise ExceptionGroup("tool's own", [ValueError("a"), KeyError("b")])

    async def ok() -> int:
        return 1

    branch = Branch()
    branch.register_tools([Tool.from_function(grouped), Tool.from_function(ok)])
    with pytest.raises(ExceptionGroup) as caught:
        await branch.act([call("grouped"), call("ok")], strategy=strategy, suppress_errors=False)
    assert caught.value.message == "tool's own"
    assert_consistent(branch)


@pytest.mark.parametrize("verdict", ["deny", 0, "", object()])
async def test_a_pre_hook_returning_an_unexpected_value_denies(verdict: Any) -> None:
    ran: list[bool] = []

    async def act_() -> None:
        ran.append(True)

    branch = Branch()
    branch.register_tools(Tool.from_function(act_, name="act_"))
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **_: verdict)
    [response] = await branch.act(call("act_"))
    assert response.content.outcome is Outcome.DENIED
    assert response.content.error is not None
    assert "only True or None allow" in response.content.error.message
    assert ran == []


async def test_model_controlled_ids_are_logged_as_repr(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lionexec.act")
    branch = Branch()
    evil = "c1\nINFO forged line"
    await branch.act(
        {"function": "nope\nforged", "arguments": {}, "call_id": evil}, verbose_action=True
    )
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "lionexec.act")
    assert "\nINFO forged line" not in text
    assert "\nforged" not in text


async def test_alcall_runs_plain_functions_like_tools() -> None:
    import threading

    trio_thread = threading.get_ident()
    seen: list[int] = []

    def double(x: int) -> int:
        seen.append(threading.get_ident())
        return 2 * x

    assert await alcall(double, [1, 2, 3]) == [2, 4, 6]
    assert trio_thread not in seen  # offloaded, as sync tools are (A4)


async def test_register_tools_takes_one_callable_and_skips_none() -> None:
    async def one() -> int:
        return 1

    async def two() -> int:
        return 2

    branch = Branch()
    branch.register_tools(one)
    branch.register_tools([None, two, None])
    assert sorted(branch.registry.names) == ["one", "two"]


async def test_call_timeout_bounds_a_hung_gate_and_names_the_phase(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def add(a: int, b: int) -> int:
        return a + b

    observer = SessionObserver()

    async def hung_gate(invocation: Any) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    observer.gate(hung_gate)
    branch = Branch(observer=observer)
    branch.register_tools(Tool.from_function(add))
    [response] = await branch.act(call("add", a=1, b=2), call_params=AlcallParams(call_timeout=5))
    assert response.content.outcome is Outcome.TIMED_OUT
    assert response.content.error is not None
    assert "phase gate" in response.content.error.message
    assert trio.current_time() == pytest.approx(5)
    assert_consistent(branch)


async def test_call_timeout_during_invoke_records_timed_out_with_the_event(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def hang() -> None:
        await trio.sleep_forever()

    branch = Branch()
    branch.register_tools(Tool.from_function(hang))
    [response] = await branch.act(call("hang"), call_params=AlcallParams(call_timeout=2))
    assert response.content.outcome is Outcome.TIMED_OUT
    [record] = list(branch.log)
    assert record.event.status is EventStatus.CANCELLED
    assert_consistent(branch)


async def test_call_timeout_while_waiting_to_retry_records_failed_and_raises_it_unsuppressed(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def flaky(a: int) -> int:
        raise ValueError(f"boom {a}")

    params = AlcallParams(call_timeout=5, retry_attempts=1, retry_initial_delay=10)
    branch = Branch()
    branch.register_tools(Tool.from_function(flaky, idempotent=True))
    [response] = await branch.act(call("flaky", a=1), call_params=params)
    assert response.content.outcome is Outcome.FAILED  # the failure, not the deadline
    assert response.content.attempts == 1
    with pytest.raises(ValueError, match="boom 2"):  # raised after recording, as without
        await branch.act(call("flaky", a=2), call_params=params, suppress_errors=False)
    assert [r.content.outcome for r in branch.messages.responses()] == [Outcome.FAILED] * 2
    assert_consistent(branch)


def test_act_outside_trio_names_trio_and_records_nothing() -> None:
    branch = Branch()

    async def add(a: int, b: int) -> int:
        return a + b

    branch.register_tools(Tool.from_function(add))
    with pytest.raises(NotInTrioError, match=r"trio\.run.*anyio\.run"):
        asyncio.run(branch.act(call("add", a=1, b=2)))
    assert len(branch.messages) == 0
    with pytest.raises(NotInTrioError, match="alcall"):
        asyncio.run(alcall(add, [1]))  # type: ignore[arg-type]


def one_second_of_work() -> tuple[Tool, list[int]]:
    """A tool ``work`` that runs for 1 s, and ``[running, most running at once]``."""
    counts = [0, 0]

    async def work() -> None:
        counts[0] += 1
        counts[1] = max(counts[1], counts[0])
        await trio.sleep(1)
        counts[0] -= 1

    return Tool.from_function(work), counts


async def test_a_shared_limiter_caps_calls_across_acts(autojump_clock: trio.abc.Clock) -> None:
    work, counts = one_second_of_work()
    limiter = trio.CapacityLimiter(3)
    branches = [Branch() for _ in range(3)]
    for b in branches:
        b.register_tools(work)
    async with trio.open_nursery() as nursery:
        for b in branches:
            nursery.start_soon(lambda b=b: b.act([call("work")] * 4, limiter=limiter))
    assert counts[1] == 3
    assert trio.current_time() == pytest.approx(4)  # 12 calls, 3 at a time
    for b in branches:
        assert_consistent(b)


async def test_one_call_acts_hold_a_shared_limiter_token_while_they_run(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A one-call act runs inline (not through fan_out): it still takes one token of the
    shared limiter for its call, and gives it back however the call ends."""
    work, counts = one_second_of_work()

    async def fail() -> None:
        raise ValueError("no")

    limiter = trio.CapacityLimiter(2)
    branches = [Branch() for _ in range(6)]
    for b in branches:
        b.register_tools([work, Tool.from_function(fail)])
    async with trio.open_nursery() as nursery:
        for b in branches:
            nursery.start_soon(lambda b=b: b.act(call("work"), limiter=limiter))
    assert counts[1] == 2
    assert trio.current_time() == pytest.approx(3)  # 6 one-call acts, 2 at a time
    [failed] = await branches[0].act(call("fail"), limiter=limiter)
    assert failed.outcome is ActionOutcome.FAILED
    with trio.move_on_after(0.5):
        await branches[1].act(call("work"), limiter=limiter)  # cancelled while running
    assert limiter.borrowed_tokens == 0
    for b in branches:
        assert_consistent(b)
    assert [r.outcome for r in branches[1].messages.responses()][-1] is ActionOutcome.CANCELLED


# -- retention -----------------------------------------------------------------------


async def test_retain_bounds_a_long_lived_branch_by_whole_pairs() -> None:
    from lionexec import Instruction, System

    async def add(a: int, b: int) -> int:
        return a + b

    branch = Branch(retain=20)
    branch.register_tools(Tool.from_function(add))
    branch.messages.add_message(System(content="be careful"))
    for batch in range(30):
        branch.messages.add_message(Instruction(content=f"batch {batch}"))
        await branch.act([call("add", a=batch, b=i) for i in range(5)])
        assert branch.messages.calls <= 22
    assert 20 <= branch.messages.calls <= 22
    assert isinstance(branch.messages.messages[0], System)  # kept
    assert_consistent(branch)  # every remaining request answered, log in step
    assert len(branch.log) == branch.messages.calls
    exported = branch.messages.to_openai()
    assert exported[0]["role"] == "system" and exported[1]["role"] in ("user", "assistant")
    last = [m for m in branch.messages.requests()][-1]
    assert last.arguments == {"a": 29, "b": 4}


async def test_trimming_never_takes_a_call_in_flight(autojump_clock: trio.abc.Clock) -> None:
    async def slow() -> str:
        await trio.sleep(10)
        return "late"

    async def fast() -> str:
        return "fast"

    branch = Branch(retain=1)
    branch.register_tools([Tool.from_function(slow), Tool.from_function(fast)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(branch.act, call("slow"))
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(5):
            await branch.act(call("fast"))
        assert branch.messages.requests()[0].function == "slow"  # in flight: kept
    assert_consistent(branch)


def test_retain_is_validated() -> None:
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ConfigurationError, match="retain"):
            Branch(retain=bad)  # type: ignore[arg-type]
