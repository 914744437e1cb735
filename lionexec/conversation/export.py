"""Render a history in the OpenAI and Anthropic chat formats.

Both exports follow the same plan, so they agree on what the model is shown:

* A tool call is placed in the assistant turn that proposed it (the first
  :class:`AssistantResponse` whose ``tool_calls`` names it). A run of requests no assistant
  turn claims becomes one assistant turn of its own, where the first of them stands.
* Each call's result comes right after that assistant turn, in the order of the calls, even
  if the response was recorded later: both providers require it.
* Every request yields exactly one call and exactly one result. A request with no recorded
  response gets an error result saying so; it is never dropped.
* A completed call's result is its output: a string as it is, anything else as JSON (so
  ``None`` is ``null``). A call that did not complete gets
  ``{"error": <type>, "message": <text>, "outcome": <outcome>}`` and, for Anthropic,
  ``is_error: true``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import attrs

from .._jsonable import jsonable
from .messages import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    Message,
    System,
)

__all__ = ["NO_RESPONSE", "result_text", "to_anthropic", "to_openai"]

#: The error type of the result exported for a request that has no recorded response.
NO_RESPONSE = "NoResponseRecorded"


@attrs.frozen
class _Text:
    role: str  # "system" | "user" | "assistant"
    text: str


@attrs.frozen
class _ToolTurn:
    text: str
    calls: tuple[ActionRequest, ...]
    results: tuple[ActionResponse | None, ...]


def _dumps(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False)


def result_text(response: ActionResponse | None) -> tuple[str, bool]:
    """The text a model is shown for *response*, and whether it is an error.

    ``None`` stands for a request that has no recorded response.
    """
    if response is None:
        record = {"error": NO_RESPONSE, "message": "no response was recorded for this call"}
        return _dumps(record), True
    content = response.content
    if content.success:
        output = content.output
        return (output if isinstance(output, str) else _dumps(output)), False
    error = content.error
    record = {
        "error": error.type if error is not None else "UnknownError",
        "message": error.message if error is not None else "",
        "outcome": content.outcome.value,
    }
    return _dumps(record), True


def _plan(history: Iterable[Message]) -> list[_Text | _ToolTurn]:
    messages = list(history)
    by_id = {m.id: m for m in messages}
    answers = {
        m.content.action_request_id: m
        for m in messages
        if isinstance(m, ActionResponse) and m.content.action_request_id is not None
    }
    owner: dict[uuid.UUID, uuid.UUID] = {}  # request id -> the assistant turn that proposed it
    for m in messages:
        if isinstance(m, AssistantResponse):
            for request_id in m.tool_calls:
                if isinstance(by_id.get(request_id), ActionRequest):
                    owner.setdefault(request_id, m.id)

    def tool_turn(text: str, calls: list[ActionRequest]) -> _ToolTurn:
        return _ToolTurn(text, tuple(calls), tuple(answers.get(c.id) for c in calls))

    plan: list[_Text | _ToolTurn] = []
    run: list[ActionRequest] = []  # unclaimed requests waiting to become one assistant turn
    for m in messages:
        if isinstance(m, ActionResponse):
            continue  # placed with its request
        if isinstance(m, ActionRequest):
            if m.id not in owner:
                run.append(m)
            continue
        if run:
            plan.append(tool_turn("", run))
            run = []
        if isinstance(m, System):
            plan.append(_Text("system", m.content))
        elif isinstance(m, Instruction):
            plan.append(_Text("user", m.content))
        elif isinstance(m, AssistantResponse):
            calls: list[ActionRequest] = []
            for request_id in dict.fromkeys(m.tool_calls):
                request = by_id.get(request_id)
                if isinstance(request, ActionRequest) and owner[request_id] == m.id:
                    calls.append(request)
            plan.append(tool_turn(m.content, calls))
    if run:
        plan.append(tool_turn("", run))
    return plan


def to_openai(history: Iterable[Message]) -> list[dict[str, Any]]:
    """The history as an OpenAI Chat Completions ``messages`` list."""
    out: list[dict[str, Any]] = []
    for item in _plan(history):
        if isinstance(item, _Text):
            out.append({"role": item.role, "content": item.text})
            continue
        if not item.calls:
            out.append({"role": "assistant", "content": item.text})
            continue
        out.append(
            {
                "role": "assistant",
                "content": item.text or None,
                "tool_calls": [
                    {
                        "id": call.content.call_id,
                        "type": "function",
                        "function": {
                            "name": call.content.function,
                            "arguments": _dumps(call.content.arguments),
                        },
                    }
                    for call in item.calls
                ],
            }
        )
        for call, response in zip(item.calls, item.results, strict=True):
            text, _ = result_text(response)
            out.append({"role": "tool", "tool_call_id": call.content.call_id, "content": text})
    return out


def to_anthropic(history: Iterable[Message]) -> dict[str, Any]:
    """The history as keyword arguments for Anthropic's Messages API.

    Returns ``{"messages": [...]}``, plus ``"system"`` (every system message's text, joined by
    a blank line) when there is any. Consecutive messages of one role are merged, so results
    precede the next user text in one user turn. Empty text blocks are left out, and so is a
    message left with no blocks.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def put(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    def text_blocks(text: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": text}] if text else []

    for item in _plan(history):
        if isinstance(item, _Text):
            if item.role == "system":
                system.append(item.text)
            else:
                put(item.role, text_blocks(item.text))
            continue
        uses = [
            {
                "type": "tool_use",
                "id": call.content.call_id,
                "name": call.content.function,
                "input": jsonable(call.content.arguments),
            }
            for call in item.calls
        ]
        put("assistant", text_blocks(item.text) + uses)
        results: list[dict[str, Any]] = []
        for call, response in zip(item.calls, item.results, strict=True):
            text, is_error = result_text(response)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call.content.call_id,
                    "content": text,
                    "is_error": is_error,
                }
            )
        put("user", results)
    exported: dict[str, Any] = {"messages": turns}
    if system:
        exported["system"] = "\n\n".join(system)
    return exported
