"""Requests the loop sends, from the history or from OpenAI chat messages, for every API.

``build_payload`` builds a request from the history's own exports (what ``models.run``
passes) or converts OpenAI chat messages; both must give requests the SDKs' types accept,
in strict JSON, whatever a model sent before: arguments holding NaN or 1e400, nesting past
the stack, call ids Anthropic refuses, whitespace-only text, rich tool results.
"""

from __future__ import annotations

import base64
import hashlib
import re
from types import SimpleNamespace
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st

from lionexec import Branch
from lionexec.act import read_batch
from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    FilePart,
    ImagePart,
    Instruction,
    MessageManager,
    System,
)
from lionexec.conversation.formats import anthropic_tool_id
from lionexec.models import build_payload

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'
DEEP = '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"
HOSTILE_ARGUMENTS = ['{"x": NaN}', '{"x": Infinity}', '{"x": -1e400}', '{"x": 1e400}', DEEP]


def anthropic_request(payload: dict[str, Any]) -> dict[str, Any]:
    """The conversation part of an Anthropic request (what ``check_anthropic`` reads)."""
    return {key: payload[key] for key in ("messages", "system") if key in payload}


def history_with_raw(raw: str) -> MessageManager:
    """A model proposed a call with the *raw* argument string; act() answered it invalid."""
    batch = read_batch(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": raw}}
            ],
        }
    )
    [proposal] = batch.proposals
    assert proposal.problem is not None  # read as invalid
    history = MessageManager([Instruction(content="hi")])
    history.add_message(batch.turn)
    request = proposal.request
    history.add_message(request)
    error = ErrorInfo("InvalidArguments", proposal.problem)
    history.add_message(ActionResponse.create(request, outcome=ActionOutcome.INVALID, error=error))
    return history


def history_with_output(output: Any, call_id: str = "call_1") -> MessageManager:
    """One call of ``shot`` that returned *output*."""
    request = ActionRequest.create("shot", {}, call_id=call_id)
    history = MessageManager([System(content="be brief"), Instruction(content="look")])
    history.add_message(AssistantResponse(content="", tool_calls=[request]))
    history.add_message(request)
    history.add_message(ActionResponse.create(request, output=output))
    return history


def as_source(history: MessageManager, source: str) -> Any:
    """What build_payload is given: the history itself, or its OpenAI chat messages."""
    return history if source == "history" else history.to_openai()


# -- hostile arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["history", "chat"])
@pytest.mark.parametrize("raw", HOSTILE_ARGUMENTS, ids=["nan", "inf", "-1e400", "1e400", "deep"])
def test_hostile_arguments_replayed_to_anthropic_are_strict_json(
    kit: SimpleNamespace, raw: str, source: str
) -> None:
    history = history_with_raw(raw)
    payload = build_payload("anthropic", "claude", as_source(history, source))
    kit.check_anthropic(anthropic_request(payload))  # strict JSON, the SDK's types
    [use] = [b for m in payload["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert use["input"] == {}


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("raw", HOSTILE_ARGUMENTS[:4], ids=["nan", "inf", "-1e400", "1e400"])
def test_hostile_arguments_replayed_to_openai_are_the_raw_text(
    kit: SimpleNamespace, raw: str, api: str
) -> None:
    payload = build_payload(api, "gpt", history_with_raw(raw))  # type: ignore[arg-type]
    kit.strict(payload)
    if api == "chat":
        [call] = payload["messages"][1]["tool_calls"]
        arguments = call["function"]["arguments"]
    else:
        [arguments] = [
            i["arguments"] for i in payload["input"] if i.get("type") == "function_call"
        ]
    assert arguments == raw  # a string to OpenAI: replayed as the model sent it


# -- the history's own exports -----------------------------------------------------------------


def test_a_history_is_sent_as_its_own_exports(kit: SimpleNamespace) -> None:
    history = history_with_output([kit.PNG, "a caption"])
    tools = [{"type": "function", "function": {"name": "shot", "parameters": {}}}]
    chat = build_payload("chat", "gpt", history, tools=tools)
    assert chat["messages"] == history.to_openai() and chat["tools"] == tools
    responses = build_payload("responses", "gpt", history, tools=tools)
    assert responses["input"] == history.to_responses()
    assert responses["tools"] == [
        {"type": "function", "name": "shot", "parameters": {}, "strict": False}
    ]
    anthropic = build_payload("anthropic", "claude", history, temperature=0)
    exported = history.to_anthropic()
    assert anthropic_request(anthropic) == exported and exported["system"] == "be brief"
    assert anthropic["max_tokens"] > 0 and anthropic["temperature"] == 0


def test_a_failed_call_sent_from_the_history_is_an_anthropic_error() -> None:
    request = ActionRequest.create("f", {}, call_id="call_1")
    history = MessageManager([Instruction(content="go")])
    history.add_message(AssistantResponse(content="", tool_calls=[request]))
    history.add_message(request)
    error = ErrorInfo("RuntimeError", "boom")
    history.add_message(ActionResponse.create(request, outcome=ActionOutcome.FAILED, error=error))
    payload = build_payload("anthropic", "claude", history)
    [result] = [b for m in payload["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True


# -- rich content ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["history", "chat"])
def test_an_image_result_sent_to_responses_is_an_input_image(
    kit: SimpleNamespace, source: str
) -> None:
    payload = build_payload("responses", "gpt", as_source(history_with_output(kit.PNG), source))
    kit.check_responses(payload["input"])
    parts = [p for item in payload["input"] for p in _listed(item) if isinstance(p, dict)]
    assert any(p["type"] == "input_image" for p in parts), payload["input"]


@pytest.mark.parametrize("source", ["history", "chat"])
def test_an_image_result_sent_to_anthropic_is_an_image_block(
    kit: SimpleNamespace, source: str
) -> None:
    history = history_with_output(kit.PNG)
    payload = build_payload("anthropic", "claude", as_source(history, source))
    kit.check_anthropic(anthropic_request(payload))
    blocks = [b for m in payload["messages"] for b in _blocks(m["content"])]
    [image] = [b for b in blocks if b["type"] == "image"]
    assert base64.b64decode(image["source"]["data"]) == kit.PNG


def _listed(item: dict[str, Any]) -> list[Any]:
    content = item.get("content", item.get("output"))
    return content if isinstance(content, list) else []


def _blocks(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks, and the blocks inside tool results."""
    out = []
    for block in content:
        out.append(block)
        if block["type"] == "tool_result" and isinstance(block["content"], list):
            out.extend(block["content"])
    return out


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def user_message(png: bytes) -> dict[str, Any]:
    """A chat user message with every kind of content part."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "look at these"},
            {"type": "text", "text": "  \n"},
            {"type": "image_url", "image_url": {"url": _data_url("image/png", png)}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            {"type": "image_url", "image_url": {"url": _data_url("image/svg+xml", SVG)}},
            {
                "type": "file",
                "file": {
                    "file_data": _data_url("application/pdf", b"%PDF-1.4"),
                    "filename": "r.pdf",
                },
            },
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        ],
    }


def test_user_content_parts_are_converted_for_responses_part_by_part(
    kit: SimpleNamespace,
) -> None:
    payload = build_payload("responses", "gpt", [user_message(kit.PNG)])
    kit.check_responses(payload["input"])
    [message] = payload["input"]
    kinds = [part["type"] for part in message["content"]]
    assert kinds == [
        "input_text",
        "input_text",
        "input_image",
        "input_image",
        "input_text",  # svg: OpenAI takes png, jpeg, gif, webp only
        "input_file",
        "input_text",  # audio: named, not dropped
    ]
    assert message["content"][2]["image_url"] == _data_url("image/png", kit.PNG)
    assert message["content"][3]["image_url"] == "https://example.com/cat.png"
    assert "image/svg+xml image: not sent" in message["content"][4]["text"]
    assert message["content"][5]["filename"] == "r.pdf"
    assert "input_audio" in message["content"][6]["text"]


def test_user_content_parts_are_converted_for_anthropic_part_by_part(
    kit: SimpleNamespace,
) -> None:
    payload = build_payload("anthropic", "claude", [user_message(kit.PNG)])
    kit.check_anthropic(anthropic_request(payload))
    [message] = payload["messages"]
    blocks = message["content"]
    # the whitespace-only text is left out (Anthropic refuses it)
    assert [b["type"] for b in blocks] == ["text", "image", "image", "text", "document", "text"]
    assert blocks[1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(kit.PNG).decode(),
    }
    assert blocks[2]["source"] == {"type": "url", "url": "https://example.com/cat.png"}
    assert "not sent" in blocks[3]["text"] and "input_audio" in blocks[5]["text"]


def test_chat_text_parts_are_sent_as_text(kit: SimpleNamespace) -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "calling"}],
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "42"}]},
    ]
    responses = build_payload("responses", "gpt", messages)
    kit.check_responses(responses["input"])
    assert responses["input"][0] == {"role": "system", "content": "be brief"}
    assert responses["input"][-1]["output"] == "42"
    anthropic = build_payload("anthropic", "claude", messages)
    kit.check_anthropic(anthropic_request(anthropic))
    assert anthropic["system"] == "be brief"
    assert anthropic["messages"][-1]["content"][0]["content"] == "42"


# -- whitespace-only text, for Anthropic -------------------------------------------------------


def _blank_text(exported: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in exported["messages"]
        for block in _blocks(message["content"])
        if block["type"] == "text" and not block["text"].strip()
    ]


def test_a_whitespace_only_answer_is_not_sent_to_anthropic(kit: SimpleNamespace) -> None:
    history = MessageManager(
        [
            Instruction(content="hi"),
            AssistantResponse(content="\n\n"),
            Instruction(content=" "),
            Instruction(content="again"),
        ]
    )
    exported = history.to_anthropic()
    kit.check_anthropic(exported)
    assert _blank_text(exported) == []
    assert exported["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}],
        }
    ]
    payload = build_payload("anthropic", "claude", history.to_openai())
    assert anthropic_request(payload) == exported


def test_a_whitespace_text_block_of_an_anthropic_turn_is_not_replayed(
    kit: SimpleNamespace,
) -> None:
    batch = read_batch({"role": "assistant", "content": [{"type": "text", "text": "\n\n"}]})
    history = MessageManager([Instruction(content="hi"), batch.turn, Instruction(content="again")])
    exported = history.to_anthropic()
    kit.check_anthropic(exported)
    assert _blank_text(exported) == []


def test_whitespace_text_among_result_parts_is_not_sent_to_anthropic(
    kit: SimpleNamespace,
) -> None:
    history = history_with_output(["  ", kit.PNG])
    for exported in (
        history.to_anthropic(),
        anthropic_request(build_payload("anthropic", "claude", history.to_openai())),
    ):
        kit.check_anthropic(exported)
        assert _blank_text(exported) == []


# -- call ids ----------------------------------------------------------------------------------


async def add(a: int, b: int) -> int:
    return a + b


@pytest.mark.parametrize("call_id", ["functions.add:0", "call 1/é", "aaa:"])
async def test_a_foreign_call_id_exports_to_anthropic_as_a_valid_linked_id(
    kit: SimpleNamespace, call_id: str
) -> None:
    branch = Branch()
    branch.register_tools([add])
    call = {"id": call_id, "type": "function", "function": {"name": "add", "arguments": "{}"}}
    await branch.act({"role": "assistant", "content": None, "tool_calls": [call]})
    kit.check_all(branch)
    for exported in (
        branch.messages.to_anthropic(),
        anthropic_request(build_payload("anthropic", "c", branch.messages.to_openai())),
    ):
        kit.check_anthropic(exported)  # tool_result answers the tool_use by the same id
        ids = [
            block.get("id") or block.get("tool_use_id")
            for message in exported["messages"]
            for block in message["content"]
            if block["type"] in ("tool_use", "tool_result")
        ]
        assert ids == [anthropic_tool_id(call_id)] * 2 and ANTHROPIC_ID.match(ids[0])
    # OpenAI takes any id: sent as recorded
    assert branch.messages.to_openai()[0]["tool_calls"][0]["id"] == call_id
    assert branch.messages.to_responses()[0]["call_id"] == call_id


def test_anthropic_tool_ids_are_kept_when_valid_and_kept_apart_otherwise() -> None:
    assert anthropic_tool_id("toolu_01-AbC") == "toolu_01-AbC"
    mapped = {anthropic_tool_id(i) for i in ("a.b", "a:b", "a b", "a_b")}
    assert len(mapped) == 4 and all(ANTHROPIC_ID.match(i) for i in mapped)
    # deterministic across processes (a pinned digest, not hash(), which is salted per process)
    assert anthropic_tool_id("a.b") == "a_b__" + hashlib.sha256(b"a.b").hexdigest()[:32]
    # lionexec's own ids and the providers' are valid: kept
    for kept in ("call_" + "0123456789abcdef" * 2, "toolu_01A09q90qw90lq917835lq9", "call_abc"):
        assert anthropic_tool_id(kept) == kept


def test_a_model_cannot_make_two_call_ids_share_an_anthropic_id() -> None:
    # A valid id spelled as another's mapped form is mapped too, never equal to it
    crafted = anthropic_tool_id("a.b")
    assert anthropic_tool_id(crafted) != crafted
    assert ANTHROPIC_ID.match(anthropic_tool_id(crafted))
    # and the digest is long enough that no model can search for a collision
    assert len(crafted) - len("a_b") >= 33


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.lists(st.text(min_size=1, max_size=12), min_size=2, max_size=8, unique=True))
def test_distinct_call_ids_keep_distinct_anthropic_ids(call_ids: list[str]) -> None:
    # a model may also send the mapped forms themselves as ids
    ids = set(call_ids) | {anthropic_tool_id(call_id) for call_id in call_ids}
    mapped = {anthropic_tool_id(call_id) for call_id in ids}
    assert len(mapped) == len(ids)
    assert all(ANTHROPIC_ID.match(m) for m in mapped)


# -- image and file types OpenAI refuses -------------------------------------------------------


def test_an_unsupported_image_type_is_named_not_sent_to_responses(kit: SimpleNamespace) -> None:
    history = history_with_output(
        [ImagePart(SVG, "image/svg+xml"), FilePart(b"RIFF", "audio/wav")]
    )
    chat = history.to_openai()
    assert "not sent" in chat[-1]["content"]  # chat refuses both
    items = history.to_responses()
    kit.check_responses(items)
    [output] = [item["output"] for item in items if item.get("type") == "function_call_output"]
    assert [part["type"] for part in output] == ["input_text", "input_text"]
    assert "image/svg+xml image: not sent" in output[0]["text"]
    assert "audio/wav file: not sent" in output[1]["text"]
