"""Interop with the providers' own SDKs: their objects in, their request types out.

The SDKs (``openai``, ``anthropic``) are test dependencies only. Their pydantic models build
what a model "returns" (``model_validate``, no network), and ``pydantic.TypeAdapter`` over
their request types checks every export. The ``check_*`` functions add the providers'
conversation rules that the types cannot express.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest
import trio
from pydantic import TypeAdapter

from lionexec import Branch, PermissionPolicy
from lionexec.serialization import converter

CHAT_MESSAGES = TypeAdapter(list[openai.types.chat.ChatCompletionMessageParam])
ANTHROPIC_MESSAGES = TypeAdapter(list[anthropic.types.MessageParam])
RESPONSES_INPUT = TypeAdapter(list[openai.types.responses.ResponseInputItemParam])

#: The smallest valid PNG (1x1, transparent).
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def strict(value: object) -> str:
    """``json.dumps`` that refuses NaN and Infinity; fails the test if *value* is not JSON."""
    return json.dumps(value, allow_nan=False)


def check_chat(messages: list[Any]) -> None:
    """Chat Completions: the SDK's types, strict JSON, and every tool call answered in order.

    After an assistant message with ``tool_calls`` come exactly one ``tool`` message per call,
    in the calls' order (then, optionally, one ``user`` message of attachments); no ``tool``
    message elsewhere; call ids unique in the conversation.
    """
    strict(messages)
    CHAT_MESSAGES.validate_python(messages)
    seen: set[str] = set()
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool message without its call at {index}"
        index += 1
        calls = message.get("tool_calls") or []
        ids = [call["id"] for call in calls]
        assert not seen & set(ids), f"call ids reused: {seen & set(ids)}"
        assert len(set(ids)) == len(ids)
        seen.update(ids)
        for call_id in ids:
            assert messages[index]["role"] == "tool", f"call {call_id} unanswered"
            assert messages[index]["tool_call_id"] == call_id
            index += 1


def check_anthropic(exported: Mapping[str, Any]) -> None:
    """Anthropic Messages: the SDK's types, strict JSON, roles alternating, tool use answered.

    Each assistant message's ``tool_use`` blocks are answered by the next (user) message,
    whose first blocks are the ``tool_result`` blocks for exactly those ids, in order;
    ``thinking`` blocks come first in their message; tool-use ids unique.
    """
    strict(exported)
    assert set(exported) <= {"messages", "system"}
    messages = exported["messages"]
    ANTHROPIC_MESSAGES.validate_python(messages)
    seen: set[str] = set()
    for index, message in enumerate(messages):
        if index:
            assert message["role"] != messages[index - 1]["role"], "roles must alternate"
        blocks = message["content"]
        kinds = [block["type"] for block in blocks]
        thinking = [k in ("thinking", "redacted_thinking") for k in kinds]
        assert thinking == sorted(thinking, reverse=True), f"thinking not first: {kinds}"
        uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
        assert not seen & set(uses) and len(set(uses)) == len(uses)
        seen.update(uses)
        if message["role"] == "user":
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            assert kinds[: len(results)] == ["tool_result"] * len(results)
            previous = messages[index - 1] if index else {"content": []}
            asked = [b["id"] for b in previous["content"] if b["type"] == "tool_use"]
            assert results == asked, f"results {results} do not answer {asked}"
        elif uses:
            assert index + 1 < len(messages), f"tool use {uses} unanswered"


def check_responses(items: list[Any]) -> None:
    """Responses API: the SDK's types, strict JSON, every call answered once, in order."""
    strict(items)
    RESPONSES_INPUT.validate_python(items)
    calls: list[str] = []
    outputs: list[str] = []
    for item in items:
        if item.get("type") == "function_call":
            assert item["call_id"] not in calls, f"call id {item['call_id']} reused"
            calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in calls, f"output for unknown call {item['call_id']}"
            outputs.append(item["call_id"])
    assert outputs == calls, "every call answered exactly once, in the order of the calls"


def check_all(branch: Branch) -> None:
    """Every export of *branch*'s history is valid, and so is its serialized form."""
    check_chat(branch.messages.to_openai())
    check_anthropic(branch.messages.to_anthropic())
    check_responses(branch.messages.to_responses())
    strict(converter.unstructure(branch.messages))


# -- tools ---------------------------------------------------------------------------------


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def fail(message: str = "kaput") -> None:
    """Always raise."""
    raise RuntimeError(message)


async def delete_all() -> str:
    """Denied by the branch's policy."""
    return "deleted"


async def slow(seconds: float = 10.0) -> str:
    """Sleep on trio's clock, then answer."""
    await trio.sleep(seconds)
    return "late"


async def screenshot() -> bytes:
    """A PNG image."""
    return PNG


async def measure() -> dict[str, Any]:
    """Values strict JSON cannot hold as they are."""
    return {"nan": float("nan"), "inf": float("inf"), "huge": 10**5000}


@pytest.fixture
def branch() -> Branch:
    b = Branch(
        policy=PermissionPolicy(mode="rules", allow={"*": ["*"]}, deny={"delete_all": ["*"]})
    )
    b.register_tools([add, fail, delete_all, slow, screenshot, measure])
    return b


# -- what a model returns, built with the SDKs' own classes ------------------------------------


def chat_completion(text: str | None, *calls: tuple[str, str, str]) -> Any:
    """An OpenAI ``ChatCompletion`` whose message has *text* and *calls* (id, name, args)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return openai.types.chat.ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "message": message,
                }
            ],
        }
    )


def anthropic_message(*blocks: Mapping[str, Any]) -> anthropic.types.Message:
    """An Anthropic ``Message`` holding *blocks*."""
    uses = any(block["type"] == "tool_use" for block in blocks)
    return anthropic.types.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": list(blocks),
            "stop_reason": "tool_use" if uses else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


def response(*items: Mapping[str, Any]) -> openai.types.responses.Response:
    """A Responses API ``Response`` whose output is *items*."""
    return openai.types.responses.Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-test",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": list(items),
        }
    )


def function_call(call_id: str, name: str, arguments: str, item_id: str = "") -> dict[str, Any]:
    """A Responses API ``function_call`` output item."""
    return {
        "type": "function_call",
        "id": item_id or f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def output_message(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    """A Responses API assistant ``message`` output item."""
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def reasoning(item_id: str, summary: str, encrypted: str) -> dict[str, Any]:
    """A Responses API ``reasoning`` output item with encrypted content."""
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": encrypted,
    }


def outcomes(responses: Iterable[Any]) -> list[str]:
    return [r.outcome.value for r in responses]


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above, for the test modules (conftest is not importable by name)."""
    return SimpleNamespace(
        PNG=PNG,
        strict=strict,
        check_chat=check_chat,
        check_anthropic=check_anthropic,
        check_responses=check_responses,
        check_all=check_all,
        chat_completion=chat_completion,
        anthropic_message=anthropic_message,
        response=response,
        function_call=function_call,
        output_message=output_message,
        reasoning=reasoning,
        outcomes=outcomes,
    )
