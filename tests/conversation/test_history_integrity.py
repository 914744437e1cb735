"""The history's invariants hold for every way in: loading, adding, recording and trimming.

Each test here is a bug found once and fixed: a loaded history whose links cross, a
second request with a used call id, a trim that left a repeated id out of the index, and a
trim that split an assistant turn from its calls.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionexec import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Branch,
    Instruction,
    MessageManager,
    System,
)
from lionexec.errors import DuplicateCallError, HistoryError
from lionexec.serialization import converter
from lionexec.testing import assert_linked


def answered(
    function: str = "f", call_id: str | None = None
) -> tuple[ActionRequest, ActionResponse]:
    request = ActionRequest.create(function, {}, call_id=call_id)
    return request, ActionResponse.create(request, output=1)


def saved(*pairs: tuple[ActionRequest, ActionResponse]) -> dict:
    """The saved form of a history of *pairs*, each recorded in a history of its own (so
    two may share a call id, as a history written before the rule could)."""
    data: dict = {"messages": []}
    for request, response in pairs:
        history = MessageManager()
        history.record_action(request, response)
        data["messages"] += converter.unstructure(history)["messages"]
    return data


# -- loading -----------------------------------------------------------------------------------


def test_loading_refuses_a_request_that_names_another_requests_response() -> None:
    r1 = ActionRequest.create("f", {"a": 1}, call_id="c1")
    r2, x = answered(call_id="c2")
    data = saved((r2, x))
    crossed = converter.unstructure(r1)
    crossed["content"]["action_response_id"] = str(x.id)  # x answers r2, not r1
    data["messages"].insert(0, crossed)
    with pytest.raises(HistoryError, match=f"{x.id}, which answers request {r2.id}"):
        converter.structure(data, MessageManager)


def test_loading_refuses_a_response_for_another_function() -> None:
    data = saved(answered("f"))
    data["messages"][1]["content"]["function"] = "g"
    with pytest.raises(HistoryError, match="for function 'g'"):
        converter.structure(data, MessageManager)


# -- one call id, one request --------------------------------------------------------------------


def test_a_second_request_with_a_used_call_id_is_refused_and_nothing_changes() -> None:
    history = MessageManager()
    first, first_answer = answered(call_id="dup")
    history.record_action(first, first_answer)
    before = list(history)
    again, again_answer = answered(call_id="dup")
    with pytest.raises(HistoryError, match="call id 'dup'"):
        history.add_message(again)
    with pytest.raises(HistoryError, match="call id 'dup'"):
        history.record_action(again, again_answer)
    assert list(history) == before
    assert again.content.action_response_id is None  # not half-linked
    assert [m["tool_calls"][0]["id"] for m in history.to_openai() if "tool_calls" in m] == ["dup"]


def test_the_same_request_may_be_added_again_and_answered() -> None:
    history = MessageManager()
    request, response = answered(call_id="c")
    history.add_message(request)
    history.add_message(request)  # the same object: nothing changes
    history.record_action(request, response)
    assert history.response_for(request) is response


def test_a_loaded_repeated_call_id_stays_indexed_through_a_trim() -> None:
    # written before the rule: kept as loaded, and the id still points at a request here
    r1, a1 = answered(call_id="dup")
    r2, a2 = answered(call_id="dup")
    r3, a3 = answered(call_id="other")
    history = converter.structure(saved((r1, a1), (r2, a2), (r3, a3)), MessageManager)
    assert history.request_for_call_id("dup").id == r1.id
    assert history.calls == 2  # distinct call ids
    history.trim_calls(1)
    assert [r.id for r in history.requests()] == [r2.id, r3.id]
    assert history.request_for_call_id("dup").id == r2.id
    assert history.calls == 2


async def test_act_refuses_a_call_id_that_a_trim_left_behind_in_a_loaded_history() -> None:
    r1, a1 = answered("add", call_id="dup")
    r2, a2 = answered("add", call_id="dup")
    r3, a3 = answered("add", call_id="other")
    loaded = converter.structure(saved((r1, a1), (r2, a2), (r3, a3)), MessageManager)
    branch = Branch(messages=loaded)
    branch.messages.trim_calls(1)  # r1 goes; r2 (call id "dup") stays
    assert [r.id for r in branch.messages.requests()] == [r2.id, r3.id]

    async def add(a: int, b: int) -> int:
        return a + b

    branch.register_tools([add])
    with pytest.raises(DuplicateCallError, match="'dup'"):
        await branch.act({"function": "add", "arguments": {"a": 1, "b": 2}, "call_id": "dup"})
    assert branch.messages.calls == 2


# -- trimming keeps assistant turns whole --------------------------------------------------------


def build(plan: list[tuple[str, int]]) -> MessageManager:
    """('i', _) an instruction; ('t', k) an assistant turn proposing k calls, each answered
    at once; ('b', k) a bare batch of k calls; ('o', _) one call left open."""
    history = MessageManager([System(content="s")])
    for step, size in plan:
        if step == "i":
            history.add_message(Instruction(content="u"))
        elif step in "tb":
            requests = [ActionRequest.create("f", {"n": n}) for n in range(size)]
            if step == "t":
                history.add_message(
                    AssistantResponse(content="thinking aloud", tool_calls=requests)
                )
            for request in requests:
                history.add_message(request)
            for request in requests:
                history.add_message(ActionResponse.create(request, output=1))
        else:
            history.add_message(ActionRequest.create("f", {}))
    return history


steps = st.one_of(
    st.tuples(st.sampled_from("io"), st.just(0)),
    st.tuples(st.sampled_from("tb"), st.integers(0, 4)),
)


@given(st.lists(steps, max_size=25), st.integers(0, 10))
def test_trim_never_splits_an_assistant_turn_from_its_calls(
    plan: list[tuple[str, int]], keep: int
) -> None:
    history = build(plan)
    before = list(history)
    removed = history.trim_calls(keep)
    assert_linked(history)
    assert [m for m in before if m not in removed] == list(history)
    gone = {m.id for m in removed}
    for message in before:
        if isinstance(message, AssistantResponse):
            calls_gone = {request_id in gone for request_id in message.tool_calls}
            assert calls_gone <= {message.id in gone}, "a turn and its calls go together"
    json.dumps(history.to_anthropic(), allow_nan=False)


def test_a_turn_of_more_calls_than_retain_stays_whole() -> None:
    history = build([("t", 3), ("t", 3)])
    removed = history.trim_calls(1)
    assert [type(m) for m in removed] == [AssistantResponse] + [ActionRequest] * 3 + [
        ActionResponse
    ] * 3
    assert history.calls == 3  # the newest turn's three calls, with their turn
    assert isinstance(list(history)[1], AssistantResponse)


# -- one history per request ---------------------------------------------------------------------


def test_a_copy_is_a_history_of_its_own() -> None:
    history = MessageManager([System(content="s")])
    request = ActionRequest.create("f", {"a": 1}, call_id="c1")
    history.add_message(request)
    fork = history.copy()
    assert fork == history and fork.messages[0] is history.messages[0]  # System: shared
    history.record_action(request, ActionResponse.create(request, output=1))
    # answered in the original: still open in the copy, which can answer it itself
    (open_,) = fork.unanswered()
    assert open_.call_id == "c1" and open_ is not request
    fork.record_action(open_, ActionResponse.create(open_, output=2))
    assert_linked(history)
    assert_linked(fork)
    for saved_history in (history, fork):
        assert converter.structure(converter.unstructure(saved_history), MessageManager) == (
            saved_history
        )
    assert [r.output for r in history.responses()] == [1]
    assert [r.output for r in fork.responses()] == [2]
