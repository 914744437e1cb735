"""Hostile arguments (NaN, deep, long, huge, cyclic) end the call invalid; nothing crashes."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionexec import Branch
from lionexec.act import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    Proposal,
    read_batch,
    read_proposal,
)
from lionexec.conversation import ActionRequest


def nested(depth: int) -> dict[str, Any]:
    """An arguments object *depth* levels deep (the object itself is level 1)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_json_nan_and_infinity_literals_are_invalid(literal: str) -> None:
    proposal = read_proposal(
        {
            "type": "function",
            "id": "c",
            "function": {"name": "f", "arguments": f'{{"a": {literal}}}'},
        }
    )
    assert proposal.arguments is None
    assert proposal.problem is not None and literal in proposal.problem
    assert proposal.raw_arguments == f'{{"a": {literal}}}'


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_floats_in_an_object_are_invalid(value: float) -> None:
    proposal = read_proposal(
        {"type": "tool_use", "id": "t", "name": "f", "input": {"deep": [{"v": value}]}}
    )
    assert proposal.arguments is None
    assert proposal.problem is not None and "non-finite" in proposal.problem


def test_nesting_up_to_the_limit_is_read_and_one_more_level_is_invalid() -> None:
    assert (
        read_proposal({"function": "f", "arguments": nested(MAX_ARGUMENT_DEPTH)}).problem is None
    )
    too_deep = read_proposal({"function": "f", "arguments": nested(MAX_ARGUMENT_DEPTH + 1)})
    assert too_deep.problem is not None and str(MAX_ARGUMENT_DEPTH) in too_deep.problem
    text = json.dumps(nested(MAX_ARGUMENT_DEPTH + 1))
    assert read_proposal({"function": "f", "arguments": text}).problem == too_deep.problem


def test_nesting_deeper_than_the_interpreter_can_parse_is_invalid_not_a_recursion_error() -> None:
    text = '{"x": ' * 100_000 + "1" + "}" * 100_000
    proposal = read_proposal({"function": "f", "arguments": text})
    assert proposal.arguments is None and proposal.problem is not None
    assert proposal.raw_arguments == text  # kept exactly as sent
    deep: dict[str, Any] = {}
    for _ in range(100_000):  # a Python object as deep, passed directly
        deep = {"x": deep}
    assert read_proposal({"function": "f", "arguments": deep}).problem is not None


def test_a_cyclic_arguments_object_is_invalid_not_a_hang() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    loop["again"] = loop
    problem = read_proposal({"function": "f", "arguments": loop}).problem
    assert problem is not None and "cycle" in problem


def test_shared_containers_are_walked_once_and_measured_by_their_height() -> None:
    shared: list[Any] = []
    for _ in range(60):  # 2**60 paths if every path were walked
        shared = [shared, shared]
    assert read_proposal({"function": "f", "arguments": {"v": shared}}).problem is None
    deeper = {"a": {"b": {"c": {"d": {"e": shared}}}}}  # the same list, 5 levels lower
    assert read_proposal({"function": "f", "arguments": {"v": shared, "w": deeper}}).problem


def test_an_argument_string_over_the_size_limit_is_invalid() -> None:
    text = json.dumps({"x": "a" * MAX_ARGUMENT_CHARS})
    proposal = read_proposal({"function": "f", "arguments": text})
    assert proposal.problem is not None and str(MAX_ARGUMENT_CHARS) in proposal.problem


def test_an_int_too_long_to_print_is_invalid() -> None:
    assert read_proposal({"function": "f", "arguments": '{"n": ' + "9" * 5000 + "}"}).problem
    assert read_proposal({"function": "f", "arguments": {"n": 10**5000}}).problem


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ('{"path": "/tmp/ok", "path": "/etc/passwd"}', "'path'"),
        ('{"a": 1, "b": {"x": 1, "x": 2}}', "'x'"),
        ('{"a": [{"k": 1}, {"k": 2, "k": 3}]}', "'k'"),
    ],
)
def test_a_name_repeated_within_one_object_is_invalid(arguments: str, name: str) -> None:
    """JSON readers disagree on which value of a repeated name counts (the first, the
    last): a policy, a log line and the tool must never see different arguments."""
    proposal = read_proposal({"function": "f", "arguments": arguments})
    assert proposal.arguments is None
    assert proposal.problem == f"arguments repeat the name {name} within one object"


def test_the_same_name_in_different_objects_is_fine() -> None:
    proposal = read_proposal({"function": "f", "arguments": '{"a": {"k": 1}, "b": {"k": 2}}'})
    assert proposal.arguments == {"a": {"k": 1}, "b": {"k": 2}}


async def test_hostile_calls_end_invalid_and_export_strict_json(
    branch: Branch, kit: SimpleNamespace
) -> None:
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    calls = [
        ("n", "add", '{"a": NaN, "b": 1}'),
        ("i", "add", '{"a": 1, "b": Infinity}'),
        ("d", "add", deep),
        ("h", "add", '{"a": ' + "1" * 5000 + ', "b": 1}'),
        ("r", "add", '{"a": 1, "b": 2, "a": 3}'),
    ]
    responses = await branch.act(kit.chat_completion(None, *calls).choices[0].message)
    assert kit.outcomes(responses) == ["invalid"] * 5
    kit.check_all(branch)
    replayed = [c["function"]["arguments"] for c in branch.messages.to_openai()[0]["tool_calls"]]
    assert replayed == [arguments for _, _, arguments in calls]


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=30,
    )
)
def test_any_value_is_read_without_raising_and_accepted_only_if_strict_json(value: Any) -> None:
    proposal = read_proposal({"function": "f", "arguments": {"v": value}})
    if proposal.problem is None:
        assert proposal.arguments == {"v": value}
        json.dumps(proposal.arguments, allow_nan=False)
    text = json.dumps({"v": value})  # Python writes NaN and Infinity; a model might too
    from_text = read_proposal({"function": "f", "arguments": text})
    assert (from_text.problem is None) == (proposal.problem is None)


def test_a_proposal_read_is_an_ordinary_frozen_proposal() -> None:
    proposal = read_proposal(
        {"type": "function", "id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}
    )
    assert type(proposal) is Proposal
    assert proposal == Proposal(
        function="f", arguments={"a": 1}, call_id="c1", raw_arguments='{"a": 1}'
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        proposal.function = "g"  # type: ignore[misc]


async def test_act_records_shared_argument_containers_without_walking_every_path() -> None:
    shared: list[Any] = []
    for _ in range(60):
        shared = [shared, shared]
    branch = Branch()

    async def keep(v: list[Any]) -> int:
        return 1

    branch.register_tools([keep])
    with trio.fail_after(10):
        [response] = await branch.act({"function": "keep", "arguments": {"v": shared}})
    assert response.success
    recorded = branch.messages[response.content.action_request_id]
    assert isinstance(recorded, ActionRequest)
    assert recorded.arguments["v"] is not shared  # a private copy, sharing as the original
    assert recorded.arguments["v"][0] is recorded.arguments["v"][1]


def test_an_unhashable_item_type_in_a_batch_is_read_as_a_call_not_a_crash() -> None:
    batch = read_batch([{"type": {"no": "hash"}, "function": "f", "arguments": {}}])
    assert batch.turn is None
    assert [p.function for p in batch.proposals] == ["f"]
