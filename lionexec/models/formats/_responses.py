"""OpenAI Responses (``"responses"``, ``POST /responses``): requests, responses, streams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from lionexec.conversation._parts import ContentPart
from lionexec.conversation.formats import dumps, provider_format, responses_part

from .._errors import ProviderError, StreamTruncatedError, UnknownFinishReasonError
from .._response import ModelResponse
from .base import (
    _Assembler,
    _ImageUrl,
    _parts,
    _shape,
    _str_or_none,
    _text,
    _tool_call,
    _usage,
)

if TYPE_CHECKING:
    from lionexec.conversation.formats import FormatName, ProviderFormat

__all__ = ["RESPONSES", "parse_responses"]


def parse_responses(body: Mapping[str, Any]) -> ModelResponse:
    """Read a Responses API response object."""
    output: Any = body.get("output")
    _shape(isinstance(output, list), "output list", body)
    texts: list[str] = []
    tool_calls = []
    for item in output:
        _shape(isinstance(item, Mapping), "output item object", body)
        kind = item.get("type")
        if kind == "message":
            content: Any = item.get("content")
            content = [] if content is None else content
            _shape(isinstance(content, list), "message content list", body)
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    text: Any = part.get("text")
                    _shape(isinstance(text, str), "output text", body)
                    texts.append(text)
        elif kind == "function_call":
            tool_calls.append(
                _tool_call(item.get("call_id"), item.get("name"), item.get("arguments"), body)
            )
    status = body.get("status")
    if status == "completed":
        finish = "tool_calls" if tool_calls else "stop"
    elif status == "incomplete":
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        if reason == "max_output_tokens":
            finish = "length"
        elif reason == "content_filter":
            finish = "content_filter"
        else:
            raise UnknownFinishReasonError(reason)
    else:
        raise UnknownFinishReasonError(status)
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(tool_calls),
        finish_reason=finish,
        usage=_usage(body.get("usage")),
        model=_str_or_none(body.get("model")),
        id=_str_or_none(body.get("id")),
    )


@attrs.define
class _ResponsesAssembler(_Assembler):
    """A Responses stream: the final event (``response.completed`` or
    ``response.incomplete``) carries the whole response."""

    final: ModelResponse | None = None

    def _read(self, chunk: Mapping[str, Any]) -> None:
        kind = chunk.get("type")
        if kind in ("response.completed", "response.incomplete"):
            response: Any = chunk.get("response")
            _shape(isinstance(response, Mapping), "response in the final event", chunk)
            self.final = parse_responses(response)
            self.done = True
        elif kind in ("error", "response.failed"):
            raise ProviderError(200, dict(chunk))

    def result(self) -> ModelResponse:
        """The final event's response (see :class:`~lionexec.abc.StreamAssembler`)."""
        if self.final is None:
            raise StreamTruncatedError(
                f"stream ended after {self.chunks} chunks without response.completed",
                chunks=self.chunks,
            )
        return self.final


# -- requests ---------------------------------------------------------------------------------


def _responses_input(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id"),
                    "output": _text(content),
                }
            )
            continue
        if role == "user" and isinstance(content, list):
            items.append({"role": role, "content": [_responses_part(p) for p in _parts(content)]})
        elif content:
            items.append({"role": role, "content": _text(content)})
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            arguments = function.get("arguments", "{}")
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": arguments if isinstance(arguments, str) else dumps(arguments),
                }
            )
    return items


def _responses_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, Mapping):
        # The Responses API reads a missing "strict" as true (and then refuses optional
        # parameters), and the SDK's FunctionToolParam requires the key: always state it.
        return {"type": "function", **function, "strict": function.get("strict") is True}
    return dict(tool)


def _responses_part(part: ContentPart | _ImageUrl) -> dict[str, Any]:
    if isinstance(part, _ImageUrl):
        return {"type": "input_image", "image_url": part.url, "detail": "auto"}
    return responses_part(part)


class _ResponsesModelFormat:
    """OpenAI Responses, as a :class:`~lionexec.abc.ModelFormat`."""

    __slots__ = ()

    @property
    def name(self) -> FormatName:
        """``"responses"``."""
        return "responses"

    @property
    def provider(self) -> ProviderFormat:
        """The Responses :class:`~lionexec.abc.ProviderFormat`."""
        return _PROVIDER

    @property
    def path(self) -> str:
        """``"/responses"``."""
        return "/responses"

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """``authorization: Bearer <api_key>``."""
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def convert_messages(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``{"input": [...]}``: assistant tool calls become ``function_call`` items, tool
        results ``function_call_output`` items, a user message's content parts
        ``input_text``, ``input_image`` and ``input_file`` parts."""
        return {"input": _responses_input(messages)}

    def tool(self, tool: Mapping[str, Any]) -> dict[str, Any]:
        """A function tool flattened: ``{"type": "function", "name", ..., "strict"}``, with
        ``strict`` always stated (the API reads a missing one as ``true``)."""
        return _responses_tool(tool)

    def defaults(self) -> dict[str, Any]:
        """None."""
        return {}

    def stream_fields(self) -> dict[str, Any]:
        """None."""
        return {}

    def parse(self, body: Mapping[str, Any]) -> ModelResponse:
        """:func:`parse_responses`."""
        return parse_responses(body)

    def assembler(self) -> _ResponsesAssembler:
        """A Responses stream's assembler (the end is ``response.completed``)."""
        return _ResponsesAssembler()

    def text_delta(self, chunk: Mapping[str, Any]) -> str | None:
        """A ``response.output_text.delta`` event's ``delta``."""
        if chunk.get("type") != "response.output_text.delta":
            return None
        delta = chunk.get("delta")
        return delta if isinstance(delta, str) else ""

    def __repr__(self) -> str:
        return "<ModelFormat 'responses'>"


_PROVIDER: Final = provider_format("responses")
#: The Responses format.
RESPONSES: Final = _ResponsesModelFormat()
