"""Anthropic Messages (``"anthropic"``, ``POST /messages``): requests, responses, streams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from lionexec._jsonable import jsonable as strict_json
from lionexec.act._envelope import read_arguments
from lionexec.conversation._parts import ContentPart, TextPart
from lionexec.conversation.formats import anthropic_part, anthropic_tool_id, provider_format

from .._errors import ProviderError, UnknownFinishReasonError
from .._response import ModelResponse, Usage
from .base import (
    _Assembler,
    _ImageUrl,
    _int,
    _PartialCall,
    _parts,
    _shape,
    _str_or_none,
    _text,
    _tool_call,
    _usage,
)

if TYPE_CHECKING:
    from lionexec.conversation.formats import FormatName, ProviderFormat

__all__ = ["ANTHROPIC", "ANTHROPIC_MAX_TOKENS", "ANTHROPIC_VERSION", "parse_anthropic"]

_ANTHROPIC_FINISH: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
#: The ``anthropic-version`` header sent to an Anthropic Messages endpoint.
ANTHROPIC_VERSION: Final = "2023-06-01"
#: ``max_tokens`` sent to an Anthropic Messages endpoint when the parameters name none.
ANTHROPIC_MAX_TOKENS: Final = 4096


def parse_anthropic(body: Mapping[str, Any]) -> ModelResponse:
    """Read an Anthropic Messages response object."""
    if body.get("type") == "error":
        raise ProviderError(200, dict(body))
    content: Any = body.get("content")
    _shape(isinstance(content, list), "content list", body)
    texts: list[str] = []
    tool_calls = []
    for block in content:
        _shape(isinstance(block, Mapping), "content block object", body)
        kind = block.get("type")
        if kind == "text":
            text: Any = block.get("text")
            _shape(isinstance(text, str), "text", body)
            texts.append(text)
        elif kind == "tool_use":
            tool_calls.append(
                _tool_call(block.get("id"), block.get("name"), block.get("input"), body)
            )
    finish = body.get("stop_reason")
    _shape(finish is None or isinstance(finish, str), "stop reason string", body)
    if finish not in _ANTHROPIC_FINISH:
        raise UnknownFinishReasonError(finish)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(tool_calls),
        finish_reason=_ANTHROPIC_FINISH[finish],
        usage=_usage(body.get("usage")),
        model=_str_or_none(body.get("model")),
        id=_str_or_none(body.get("id")),
    )


@attrs.define
class _AnthropicAssembler(_Assembler):
    """An Anthropic stream: ``message_start`` (input usage), content block events,
    ``message_delta`` (stop reason, output usage), ``message_stop``."""

    input_tokens: int = 0

    def _read(self, chunk: Mapping[str, Any]) -> None:
        kind = chunk.get("type")
        if kind == "message_start":
            message = chunk.get("message")
            if isinstance(message, Mapping):
                self.model = _str_or_none(message.get("model"))
                self.id = _str_or_none(message.get("id"))
                usage = message.get("usage")
                if isinstance(usage, Mapping):
                    self.input_tokens = _int(usage.get("input_tokens"))
        elif kind == "content_block_start":
            block: Any = chunk.get("content_block")
            _shape(isinstance(block, Mapping), "content block", chunk)
            if block.get("type") == "tool_use":
                partial = self.calls.setdefault(_int(chunk.get("index")), _PartialCall())
                partial.id = _str_or_none(block.get("id"))
                partial.name = str(block.get("name") or "")
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                self.text.append(block["text"])
        elif kind == "content_block_delta":
            delta: Any = chunk.get("delta")
            _shape(isinstance(delta, Mapping), "delta object", chunk)
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                self.text.append(delta["text"])
            elif delta.get("type") == "input_json_delta":
                partial = self.calls.setdefault(_int(chunk.get("index")), _PartialCall())
                if isinstance(delta.get("partial_json"), str):
                    partial.arguments.append(delta["partial_json"])
        elif kind == "message_delta":
            delta = chunk.get("delta")
            if isinstance(delta, Mapping) and "stop_reason" in delta:
                self.finish = delta.get("stop_reason")
            usage = chunk.get("usage")
            if isinstance(usage, Mapping):
                self.usage = Usage(self.input_tokens, _int(usage.get("output_tokens")))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise ProviderError(200, dict(chunk))

    def result(self) -> ModelResponse:
        """The assembled response (see :class:`~lionexec.abc.StreamAssembler`)."""
        return self._assembled(_ANTHROPIC_FINISH, "message_stop")


# -- requests ---------------------------------------------------------------------------------


def _anthropic_messages(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``messages`` (and ``system``, if any) for Anthropic, from OpenAI chat *messages*."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def put(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append(_text(content))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            result = {
                "type": "tool_result",
                "tool_use_id": anthropic_tool_id(call_id) if isinstance(call_id, str) else call_id,
                "content": _text(content),
            }
            put("user", [result])
        elif role == "assistant":
            blocks = _anthropic_blocks([TextPart(_text(content))])
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                call_id = call.get("id")
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": anthropic_tool_id(call_id) if isinstance(call_id, str) else call_id,
                        "name": function.get("name"),
                        "input": _arguments_object(function.get("arguments")),
                    }
                )
            put("assistant", blocks)
        else:
            put("user", _anthropic_blocks(_parts(content)))
    if system:
        return {"messages": out, "system": "\n\n".join(system)}
    return {"messages": out}


def _anthropic_blocks(parts: list[ContentPart | _ImageUrl]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, _ImageUrl):
            blocks.append({"type": "image", "source": {"type": "url", "url": part.url}})
        else:
            block = anthropic_part(part)
            if block is not None:
                blocks.append(block)
    return blocks


def _arguments_object(raw: object) -> dict[str, Any]:
    """A replayed call's arguments as strict JSON for ``tool_use.input``: ``{}`` unless
    ``act()`` could read them (``read_arguments`` of the act layer: not NaN, Infinity, a
    number past the float range, a repeated name, nesting too deep: a model may send any of
    those, and ``act()`` answered the call ``invalid``)."""
    arguments, _ = read_arguments(raw)
    converted = strict_json(arguments or {})
    return converted if isinstance(converted, dict) else {}


def _anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, Mapping):
        spec = {"name": function.get("name"), "input_schema": function.get("parameters") or {}}
        if function.get("description"):
            spec["description"] = function["description"]
        if function.get("strict") is True:
            spec["strict"] = True
        return spec
    return dict(tool)


class _AnthropicModelFormat:
    """Anthropic Messages, as a :class:`~lionexec.abc.ModelFormat`."""

    __slots__ = ()

    @property
    def name(self) -> FormatName:
        """``"anthropic"``."""
        return "anthropic"

    @property
    def provider(self) -> ProviderFormat:
        """The Anthropic :class:`~lionexec.abc.ProviderFormat`."""
        return _PROVIDER

    @property
    def path(self) -> str:
        """``"/messages"``."""
        return "/messages"

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """``anthropic-version`` (:data:`ANTHROPIC_VERSION`), then ``x-api-key``."""
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def convert_messages(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``{"messages": [...]}``, and ``"system"`` (system messages joined by a blank line):
        assistant tool calls become ``tool_use`` blocks (arguments that are not a strict JSON
        object are sent as ``{}``; call ids as
        :func:`~lionexec.conversation.formats.anthropic_tool_id` maps them), tool results
        ``tool_result`` blocks of a user turn, a user message's content parts ``text``,
        ``image`` and ``document`` blocks; blank text is left out."""
        return _anthropic_messages(messages)

    def tool(self, tool: Mapping[str, Any]) -> dict[str, Any]:
        """A function tool as ``{"name", "input_schema", "description"?, "strict"?}``
        (``"strict": true`` kept from a strict function)."""
        return _anthropic_tool(tool)

    def defaults(self) -> dict[str, Any]:
        """``max_tokens``: :data:`ANTHROPIC_MAX_TOKENS` (the API requires one)."""
        return {"max_tokens": ANTHROPIC_MAX_TOKENS}

    def stream_fields(self) -> dict[str, Any]:
        """None."""
        return {}

    def parse(self, body: Mapping[str, Any]) -> ModelResponse:
        """:func:`parse_anthropic`."""
        return parse_anthropic(body)

    def assembler(self) -> _AnthropicAssembler:
        """An Anthropic stream's assembler (the end marker is ``message_stop``)."""
        return _AnthropicAssembler()

    def text_delta(self, chunk: Mapping[str, Any]) -> str | None:
        """A ``content_block_delta`` event's ``text_delta`` text."""
        if chunk.get("type") != "content_block_delta":
            return None
        block = chunk.get("delta")
        if isinstance(block, Mapping) and block.get("type") == "text_delta":
            text = block.get("text")
            return text if isinstance(text, str) else ""
        return ""

    def __repr__(self) -> str:
        return "<ModelFormat 'anthropic'>"


_PROVIDER: Final = provider_format("anthropic")
#: The Anthropic Messages format.
ANTHROPIC: Final = _AnthropicModelFormat()
