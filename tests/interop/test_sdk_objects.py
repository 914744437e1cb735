"""Branch.act takes what the SDKs return: their tool-call objects, and whole assistant turns."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from lionexec import ActionRequest, AssistantResponse, Branch
from lionexec.act import read_batch, read_proposal

ADD = '{"a": 1, "b": 2}'


# -- tool-call objects ---------------------------------------------------------------------


async def test_openai_chat_tool_call_objects(branch: Branch, kit: SimpleNamespace) -> None:
    completion = kit.chat_completion(
        None, ("call_1", "add", ADD), ("call_2", "add", '{"a":2,"b":2}')
    )
    calls = completion.choices[0].message.tool_calls
    assert type(calls[0]).__name__ == "ChatCompletionMessageFunctionToolCall"
    responses = await branch.act(calls)
    assert [r.output for r in responses] == [3, 4]
    assert [r.call_id for r in branch.messages.requests()] == ["call_1", "call_2"]
    kit.check_all(branch)


async def test_bare_calls_keep_the_raw_argument_string(
    branch: Branch, kit: SimpleNamespace
) -> None:
    spaced = '{ "a" : 1 ,  "b" : 2 }'
    completion = kit.chat_completion(None, ("call_1", "add", spaced))
    await branch.act(completion.choices[0].message.tool_calls)
    assert branch.messages.requests()[0].raw_arguments == spaced
    (call,) = branch.messages.to_openai()[0]["tool_calls"]
    assert call["function"]["arguments"] == spaced


async def test_anthropic_tool_use_blocks(branch: Branch, kit: SimpleNamespace) -> None:
    message = kit.anthropic_message(
        {"type": "text", "text": "adding"},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
    )
    uses = [block for block in message.content if block.type == "tool_use"]
    assert type(uses[0]).__name__ == "ToolUseBlock"
    (done,) = await branch.act(uses)
    assert (done.output, branch.messages.requests()[0].call_id) == (3, "toolu_1")
    kit.check_all(branch)


async def test_responses_function_call_items(branch: Branch, kit: SimpleNamespace) -> None:
    output = kit.response(kit.function_call("call_7", "add", ADD)).output
    assert type(output[0]).__name__ == "ResponseFunctionToolCall"
    (done,) = await branch.act(output[0])
    assert (done.output, branch.messages.requests()[0].call_id) == (3, "call_7")
    kit.check_all(branch)


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
async def test_the_plain_dict_forms_are_read_the_same(
    api: str, branch: Branch, kit: SimpleNamespace
) -> None:
    call = {
        "chat": {"id": "c1", "type": "function", "function": {"name": "add", "arguments": ADD}},
        "anthropic": {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1, "b": 2}},
        "responses": kit.function_call("c1", "add", ADD),
    }[api]
    (done,) = await branch.act([call])
    assert (done.output, branch.messages.requests()[0].call_id) == (3, "c1")


# -- whole turns -----------------------------------------------------------------------------


async def test_a_chat_completion_message_is_one_turn_with_its_text(
    branch: Branch, kit: SimpleNamespace
) -> None:
    completion = kit.chat_completion("Adding now.", ("call_1", "add", ADD))
    (done,) = await branch.act(completion.choices[0].message)
    assert done.output == 3
    turn, request, response = branch.messages.messages
    assert isinstance(turn, AssistantResponse) and turn.api == "chat"
    assert (turn.content, turn.tool_calls) == ("Adding now.", (request.id,))
    assert response.action_request_id == request.id
    assert branch.messages.to_openai() == [
        {
            "role": "assistant",
            "content": "Adding now.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": ADD}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    ]
    kit.check_all(branch)


async def test_a_whole_chat_completion_is_its_first_choice(
    branch: Branch, kit: SimpleNamespace
) -> None:
    (done,) = await branch.act(kit.chat_completion("hi", ("call_1", "add", ADD)))
    assert done.output == 3
    assert branch.messages.messages[0].content == "hi"


async def test_an_anthropic_message_keeps_thinking_blocks_with_signatures(
    branch: Branch, kit: SimpleNamespace
) -> None:
    blocks = [
        {"type": "thinking", "thinking": "1 + 2 needs the tool", "signature": "EqQBCkYIARgC..."},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "text", "text": "Let me add."},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
    ]
    (done,) = await branch.act(kit.anthropic_message(*blocks))
    assert done.output == 3
    turn = branch.messages.messages[0]
    assert isinstance(turn, AssistantResponse)
    assert (turn.api, turn.content) == ("anthropic", "Let me add.")
    exported = branch.messages.to_anthropic()
    assert exported["messages"] == [
        {"role": "assistant", "content": blocks},  # replayed verbatim, in order
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "3",
                    "is_error": False,
                }
            ],
        },
    ]
    kit.check_all(branch)


async def test_a_responses_output_keeps_reasoning_and_item_ids(
    branch: Branch, kit: SimpleNamespace
) -> None:
    reply = kit.response(
        kit.reasoning("rs_1", "needs the tool", "gAAAAB-encrypted"),
        kit.output_message("Adding.", "msg_9"),
        kit.function_call("call_1", "add", ADD, "fc_1"),
    )
    (done,) = await branch.act(reply)
    assert done.output == 3
    assert branch.messages.to_responses() == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "needs the tool"}],
            "encrypted_content": "gAAAAB-encrypted",
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_9",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Adding.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "add",
            "arguments": ADD,
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "3"},
    ]
    kit.check_all(branch)
    # The output list itself (response.output) is the same turn.
    batch = read_batch(reply.output)
    assert batch.turn is not None and batch.turn.api == "responses"
    assert [p.call_id for p in batch.proposals] == ["call_1"]


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
async def test_a_final_answer_is_recorded_as_a_turn_without_calls(
    api: str, branch: Branch, kit: SimpleNamespace
) -> None:
    reply = {
        "chat": lambda: kit.chat_completion("The answer is 3.").choices[0].message,
        "anthropic": lambda: kit.anthropic_message({"type": "text", "text": "The answer is 3."}),
        "responses": lambda: kit.response(kit.output_message("The answer is 3.")),
    }[api]()
    assert await branch.act(reply) == []
    (turn,) = branch.messages.messages
    assert isinstance(turn, AssistantResponse) and turn.content == "The answer is 3."
    kit.check_all(branch)


async def test_consecutive_act_batches_are_separate_turns(
    branch: Branch, kit: SimpleNamespace
) -> None:
    for n in range(3):
        await branch.act([{"function": "add", "arguments": {"a": n, "b": 1}, "call_id": f"c{n}"}])
    exported = branch.messages.to_openai()
    assistants = [m for m in exported if m["role"] == "assistant"]
    assert [[c["id"] for c in m["tool_calls"]] for m in assistants] == [["c0"], ["c1"], ["c2"]]
    kit.check_all(branch)


async def test_a_malformed_argument_string_is_replayed_exactly(
    branch: Branch, kit: SimpleNamespace
) -> None:
    broken = '{"a": 1, "b": '
    completion = kit.chat_completion(None, ("call_1", "add", broken))
    (invalid,) = await branch.act(completion.choices[0].message)
    assert invalid.outcome.value == "invalid"
    (call,) = branch.messages.to_openai()[0]["tool_calls"]
    assert call["function"]["arguments"] == broken
    (item,) = [i for i in branch.messages.to_responses() if i.get("type") == "function_call"]
    assert item["arguments"] == broken
    # Anthropic's tool_use input is an object: the unreadable arguments are sent as {}.
    uses = [b for b in branch.messages.to_anthropic()["messages"][0]["content"]]
    assert uses[0]["input"] == {}
    kit.check_all(branch)


# -- refused before anything is recorded -------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses", "bare"])
async def test_duplicate_call_ids_in_one_batch_are_refused(
    api: str, branch: Branch, kit: SimpleNamespace
) -> None:
    reply = {
        "chat": lambda: kit.chat_completion(None, ("dup", "add", ADD), ("dup", "add", ADD)),
        "anthropic": lambda: kit.anthropic_message(
            {"type": "tool_use", "id": "dup", "name": "add", "input": {"a": 1, "b": 2}},
            {"type": "tool_use", "id": "dup", "name": "add", "input": {"a": 1, "b": 2}},
        ),
        "responses": lambda: kit.response(
            kit.output_message("x"),
            kit.function_call("dup", "add", ADD, "fc_1"),
            kit.function_call("dup", "add", ADD, "fc_2"),
        ),
        "bare": lambda: [kit.function_call("dup", "add", ADD)] * 2,
    }[api]()
    with pytest.raises(ValueError, match="'dup'"):
        await branch.act(reply)
    assert len(branch.messages) == 0


def test_unreadable_shapes_name_the_type_and_the_accepted_shapes() -> None:
    with pytest.raises(ValueError, match=r"cannot read a tool call from int; expected .*tool_use"):
        read_proposal(3)
    with pytest.raises(ValueError, match="choices is not one turn"):
        read_batch({"object": "chat.completion", "choices": [{}, {}]})


def test_a_turn_names_the_requests_its_proposals_carry(kit: SimpleNamespace) -> None:
    batch = read_batch(
        kit.chat_completion("t", ("c1", "add", ADD), ("c2", "fail", "{}")).choices[0].message,
        sender="branch-1",
    )
    assert batch.turn is not None
    requests = [p.request for p in batch.proposals]
    assert all(isinstance(r, ActionRequest) for r in requests)
    assert batch.turn.tool_calls == tuple(r.id for r in requests if r is not None)
    assert [(r.sender, r.recipient, r.raw_arguments) for r in requests if r is not None] == [
        ("branch-1", "add", ADD),
        ("branch-1", "fail", "{}"),
    ]


def test_importing_lionexec_imports_no_sdk() -> None:
    code = (
        "import sys, lionexec, lionexec.act, lionexec.conversation\n"
        "loaded = {'openai', 'anthropic', 'pydantic'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
