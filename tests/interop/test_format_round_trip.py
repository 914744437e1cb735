"""Each registered provider format round-trips a turn.

A turn built with the SDK's own classes is read by its format; the turn, its calls and their
results are recorded; the same format exports the history (the SDK's request types accept
it), and the turn it exports reads back as the turn it read: the same text, the same calls,
the same blocks (reasoning with its signature or encrypted content, in order). ``act()``
reads the SDK's object into the very record the format reads.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lionexec.act import read_batch, read_proposal
from lionexec.conversation import ActionResponse, Instruction, MessageManager
from lionexec.conversation.formats import FORMAT_NAMES, ProviderTurn, provider_format

ADD = '{"a": 1, "b": 2}'
MORE = '{"a": 5, "b": 5}'


def sdk_turn(kit: SimpleNamespace, name: str) -> Any:
    """A turn of the API *name*, as its SDK returns it: text, reasoning, two tool calls."""
    if name == "chat":
        completion = kit.chat_completion(
            "Adding.", ("call_1", "add", ADD), ("call_2", "add", MORE)
        )
        return completion.choices[0].message
    if name == "anthropic":
        return kit.anthropic_message(
            {"type": "thinking", "thinking": "two sums", "signature": "c2lnbmF0dXJl"},
            {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
            {"type": "text", "text": "Adding."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
            {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {"a": 5, "b": 5}},
        )
    return kit.response(
        kit.reasoning("rs_1", "two sums", "ZW5jcnlwdGVk"),
        kit.output_message("Adding.", "msg_1"),
        kit.function_call("call_1", "add", ADD),
        kit.function_call("call_2", "add", MORE),
    )


def exported_turn(name: str, exported: Any) -> Any:
    """The assistant turn in a history's export (one user message, one turn, its results)."""
    if name == "chat":
        [assistant] = [m for m in exported if m["role"] == "assistant"]
        return assistant
    if name == "anthropic":
        [assistant] = [m for m in exported["messages"] if m["role"] == "assistant"]
        return assistant
    return [i for i in exported if i.get("type") in ("reasoning", "message", "function_call")]


_FIELDS = (
    "type",
    "id",
    "call_id",
    "name",
    "arguments",
    "input",
    "text",
    "thinking",
    "signature",
    "data",
    "encrypted_content",
)


def shown(block: Any) -> dict[str, Any]:
    """What a block says (the fields a provider reads back), not how an SDK pads it."""
    fields = {key: block[key] for key in _FIELDS if block.get(key) is not None}
    for key in ("content", "summary"):
        if isinstance(block.get(key), list):
            fields[key] = [part.get("text") for part in block[key]]
    return fields


def calls(turn: ProviderTurn) -> list[tuple[str, str, dict[str, Any] | None]]:
    read = [read_proposal(call) for call in turn.calls]
    return [(p.call_id, p.function, p.arguments) for p in read]


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_registered_format_round_trips_a_turn(name: str, kit: SimpleNamespace) -> None:
    fmt = provider_format(name)
    sdk = sdk_turn(kit, name)
    turn = fmt.read_turn(sdk.model_dump())
    assert (turn.api, turn.text) == (name, "Adding.")
    ids = ("toolu_1", "toolu_2") if name == "anthropic" else ("call_1", "call_2")
    assert calls(turn) == [(ids[0], "add", {"a": 1, "b": 2}), (ids[1], "add", {"a": 5, "b": 5})]

    batch = read_batch(sdk)  # act() reads the SDK object into the record the format reads
    assert batch.turn is not None
    recorded = turn.message([p.request for p in batch.proposals if p.request is not None])
    assert (batch.turn.api, batch.turn.content, batch.turn.blocks) == (
        recorded.api,
        recorded.content,
        recorded.blocks,
    )
    assert batch.turn.tool_calls == recorded.tool_calls

    history = MessageManager([Instruction(content="Add twice.")])
    history.add_message(recorded)
    for proposal, total in zip(batch.proposals, (3, 10), strict=True):
        request = proposal.to_request()
        history.record_action(request, ActionResponse.create(request, output=total))
    exported = fmt.export(history)
    check = {"chat": kit.check_chat, "anthropic": kit.check_anthropic}
    check.get(name, kit.check_responses)(exported)
    assert fmt.request_fields(history) in ({"messages": exported}, {"input": exported}, exported)

    again = fmt.read_turn(exported_turn(name, exported))
    assert (again.api, again.text) == (turn.api, turn.text)
    assert calls(again) == calls(turn)
    assert [shown(b) for b in again.blocks] == [shown(b) for b in turn.blocks]
    if name != "chat":
        assert len(again.blocks) == len(turn.blocks) == (5 if name == "anthropic" else 4)
