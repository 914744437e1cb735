"""Property tests: random histories round-trip through JSON and export with one result per call."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    Instruction,
    Message,
    MessageManager,
    System,
    result_text,
)
from lionexec.errors import HistoryError
from lionexec.serialization import converter
from lionexec.testing import assert_linked

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
texts = st.text(max_size=12)
names = st.text(alphabet="abcxyz_", min_size=1, max_size=6)
parties = st.none() | st.sampled_from(["user", "assistant", "tool"])
errors = st.builds(ErrorInfo, type=names, message=texts)
_unique = itertools.count()


@st.composite
def requests(draw: st.DrawFn) -> ActionRequest:
    call_id = draw(st.none() | st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True))
    if call_id is not None:
        call_id = f"{call_id}-{next(_unique)}"  # provider ids are unique within a conversation
    return ActionRequest.create(
        draw(names),
        draw(st.dictionaries(names, json_values, max_size=3)),
        call_id=call_id,
        sender=draw(parties),
        recipient=draw(parties),
    )


@st.composite
def responses(draw: st.DrawFn, request: ActionRequest) -> ActionResponse:
    outcome = draw(st.sampled_from(list(ActionOutcome)))
    completed = outcome is ActionOutcome.COMPLETED
    return ActionResponse.create(
        request,
        output=draw(json_values),
        error=None if completed else draw(errors),
        outcome=outcome,
        attempts=draw(st.integers(0, 3)),
    )


@st.composite
def histories(draw: st.DrawFn) -> MessageManager:
    """Histories built only through the public writing API, in many shapes."""
    history = MessageManager()
    steps = draw(
        st.lists(
            st.sampled_from(["system", "user", "assistant", "request", "answer"]), max_size=12
        )
    )
    for step in steps:
        if step == "system":
            history.add_message(System(content=draw(texts)))
        elif step == "user":
            history.add_message(Instruction(content=draw(texts), sender=draw(parties)))
        elif step in ("assistant", "request"):
            proposed = draw(st.lists(requests(), max_size=3)) if step == "assistant" else []
            if step == "request":
                proposed = [draw(requests())]
            else:
                history.add_message(AssistantResponse(content=draw(texts), tool_calls=proposed))
            for request in proposed:
                fate = draw(st.sampled_from(["answered", "pending", "absent"]))
                if fate == "answered":
                    history.record_action(request, draw(responses(request)))
                elif fate == "pending" or step == "request":
                    history.add_message(request)
        elif step == "answer" and history.unanswered():
            request = draw(st.sampled_from(history.unanswered()))
            history.record_action(request, draw(responses(request)))
    return history


@given(histories())
def test_random_histories_round_trip_through_json(history: MessageManager) -> None:
    text = json.dumps(converter.unstructure(history))
    loaded = converter.structure(json.loads(text), MessageManager)
    assert loaded == history
    assert_linked(loaded)
    assert json.dumps(converter.unstructure(loaded)) == text


@given(histories())
def test_openai_export_has_one_call_and_one_following_result_per_request(
    history: MessageManager,
) -> None:
    exported = history.to_openai()
    json.dumps(exported)
    expected = {r.call_id: result_text(history.response_for(r))[0] for r in history.requests()}
    calls: list[str] = []
    results: dict[str, str] = {}
    index = 0
    while index < len(exported):
        message = exported[index]
        assert message["role"] != "tool", "a tool result that follows no tool call"
        index += 1
        if message["role"] == "assistant" and "tool_calls" in message:
            ids = [call["id"] for call in message["tool_calls"]]
            assert ids
            following = exported[index : index + len(ids)]
            assert [m["role"] for m in following] == ["tool"] * len(ids)
            assert [m["tool_call_id"] for m in following] == ids
            calls.extend(ids)
            results.update({m["tool_call_id"]: m["content"] for m in following})
            index += len(ids)
    assert sorted(calls) == sorted(expected)
    assert results == expected


@given(histories())
def test_anthropic_export_has_one_tool_use_and_one_following_result_per_request(
    history: MessageManager,
) -> None:
    exported = history.to_anthropic()
    json.dumps(exported)
    messages = exported["messages"]
    expected = {r.call_id: result_text(history.response_for(r)) for r in history.requests()}
    uses: list[str] = []
    results: dict[str, tuple[str, bool]] = {}
    for index, message in enumerate(messages):
        assert message["content"], "no empty messages"
        if index:
            assert message["role"] != messages[index - 1]["role"], "roles alternate"
        blocks: list[dict[str, Any]] = message["content"]
        if message["role"] == "user":
            previous = messages[index - 1]["content"] if index else []
            called = [b["id"] for b in previous if b["type"] == "tool_use"]
            answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            assert answered == called
            assert [b["type"] for b in blocks[: len(answered)]] == ["tool_result"] * len(called)
            results.update(
                {b["tool_use_id"]: (b["content"], b["is_error"]) for b in blocks[: len(called)]}
            )
        else:
            uses.extend(b["id"] for b in blocks if b["type"] == "tool_use")
            if index + 1 == len(messages):
                assert not any(b["type"] == "tool_use" for b in blocks)
    assert sorted(uses) == sorted(expected)
    assert results == expected


@given(histories())
def test_every_request_gets_exactly_one_result_even_if_unanswered(
    history: MessageManager,
) -> None:
    openai_results = [m for m in history.to_openai() if m["role"] == "tool"]
    assert len(openai_results) == len(history.requests())
    is_error = [
        b["is_error"]
        for m in history.to_anthropic()["messages"]
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    answers = [history.response_for(r) for r in history.requests()]
    assert sorted(is_error) == sorted(a is None or not a.success for a in answers)


# -- callback failure modes ---------------------------------------------------------------------


class Boom(Exception):
    pass


def callback(mode: str) -> Any:
    if mode == "ok":
        return lambda message: None
    if mode == "sync_raise":

        def sync_raise(message: Message) -> None:
            raise Boom(mode)

        return sync_raise

    async def async_callback(message: Message) -> None:
        await trio.lowlevel.checkpoint()
        if mode == "async_raise":
            raise Boom(mode)

    return async_callback


operations = st.lists(
    st.tuples(
        st.sampled_from(["instruction", "request", "pair", "answer", "orphan", "readd"]),
        st.integers(0, 10),
    ),
    max_size=15,
)


@given(
    st.lists(st.sampled_from(["ok", "sync_raise", "async_raise", "async_ok"]), max_size=4),
    operations,
)
async def test_no_callback_failure_mode_leaves_the_history_inconsistent(
    modes: list[str], ops: list[tuple[str, int]]
) -> None:
    history = MessageManager(on_message_added=[callback(m) for m in modes])
    raising = sum(m.endswith("raise") for m in modes)
    expected: list[uuid.UUID] = []
    for op, pick in ops:
        failures: list[Any] = []
        if op == "instruction":
            message = Instruction(content=str(pick))
            failures = await history.a_add_message(message)
            expected.append(message.id)
        elif op == "request":
            request = ActionRequest.create("f")
            failures = await history.a_add_message(request)
            expected.append(request.id)
        elif op == "pair":
            request = ActionRequest.create("f")
            response = ActionResponse.create(request, output=pick)
            history.record_action(request, response)
            failures = await history.notify(request, response)
            expected += [request.id, response.id]
            assert len(failures) == 2 * raising
        elif op == "answer" and history.unanswered():
            open_requests = history.unanswered()
            request = open_requests[pick % len(open_requests)]
            response = ActionResponse.create(request, output=None)
            failures = await history.a_add_message(response)
            expected.append(response.id)
        elif op == "orphan":
            with pytest.raises(HistoryError):
                await history.a_add_message(ActionResponse.create(ActionRequest.create("f")))
        elif op == "readd" and len(history):
            assert await history.a_add_message(history.messages[pick % len(history)]) == []
        assert all(isinstance(f.error, Boom) for f in failures)
        assert [m.id for m in history] == expected
        assert_linked(history)
