"""OpenAI Chat Completions (``"chat"``, ``POST /chat/completions``): requests, responses,
streams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from lionexec.conversation.formats import provider_format

from .._errors import ProviderError, UnknownFinishReasonError
from .._response import ModelResponse
from .base import _Assembler, _int, _PartialCall, _shape, _str_or_none, _tool_call, _usage

if TYPE_CHECKING:
    from lionexec.conversation.formats import FormatName, ProviderFormat

__all__ = ["CHAT", "parse_chat"]

_CHAT_FINISH: Final = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
}


def parse_chat(body: Mapping[str, Any]) -> ModelResponse:
    """Read a Chat Completions response object."""
    choices: Any = body.get("choices")
    _shape(isinstance(choices, list) and bool(choices), "choices", body)
    choice = choices[0]
    _shape(isinstance(choice, Mapping), "choice object", body)
    message = choice.get("message")
    _shape(isinstance(message, Mapping), "message", body)
    content = message.get("content")
    _shape(content is None or isinstance(content, str), "text content", body)
    calls = message.get("tool_calls") or []
    _shape(isinstance(calls, list), "tool_calls list", body)
    tool_calls = []
    for item in calls:
        _shape(isinstance(item, Mapping), "tool call object", body)
        function = item.get("function")
        _shape(isinstance(function, Mapping), "tool call function", body)
        tool_calls.append(
            _tool_call(item.get("id"), function.get("name"), function.get("arguments"), body)
        )
    finish = choice.get("finish_reason")
    _shape(finish is None or isinstance(finish, str), "finish reason string", body)
    if finish not in _CHAT_FINISH:
        raise UnknownFinishReasonError(finish)
    return ModelResponse(
        text=content or "",
        tool_calls=tuple(tool_calls),
        finish_reason=_CHAT_FINISH[finish],
        usage=_usage(body.get("usage")),
        model=_str_or_none(body.get("model")),
        id=_str_or_none(body.get("id")),
    )


@attrs.define
class _ChatAssembler(_Assembler):
    """A Chat Completions stream: ``choices`` deltas, usage in the last chunk, ``[DONE]``."""

    def _read(self, chunk: Mapping[str, Any]) -> None:
        if "error" in chunk:
            raise ProviderError(200, dict(chunk))
        self.model = self.model or _str_or_none(chunk.get("model"))
        self.id = self.id or _str_or_none(chunk.get("id"))
        if chunk.get("usage") is not None:
            self.usage = _usage(chunk.get("usage"))
        choices = chunk.get("choices") or []
        _shape(isinstance(choices, list), "list of choices", chunk)
        for choice in choices:
            if not isinstance(choice, Mapping) or _int(choice.get("index")) != 0:
                continue
            delta = choice.get("delta") or {}
            _shape(isinstance(delta, Mapping), "delta object", chunk)
            content = delta.get("content")
            if isinstance(content, str):
                self.text.append(content)
            calls = delta.get("tool_calls") or []
            _shape(isinstance(calls, list), "list of tool call deltas", chunk)
            for item in calls:
                _shape(isinstance(item, Mapping), "tool call delta", chunk)
                partial = self.calls.setdefault(_int(item.get("index")), _PartialCall())
                if isinstance(item.get("id"), str):
                    partial.id = item["id"]
                function = item.get("function") or {}
                if isinstance(function, Mapping):
                    if isinstance(function.get("name"), str):
                        partial.name += function["name"]
                    if isinstance(function.get("arguments"), str):
                        partial.arguments.append(function["arguments"])
            if choice.get("finish_reason") is not None:
                self.finish = choice.get("finish_reason")

    def result(self) -> ModelResponse:
        """The assembled response (see :class:`~lionexec.abc.StreamAssembler`)."""
        return self._assembled(_CHAT_FINISH, "[DONE]")


class _ChatModelFormat:
    """OpenAI Chat Completions, as a :class:`~lionexec.abc.ModelFormat`."""

    __slots__ = ()

    @property
    def name(self) -> FormatName:
        """``"chat"``."""
        return "chat"

    @property
    def provider(self) -> ProviderFormat:
        """The Chat Completions :class:`~lionexec.abc.ProviderFormat`."""
        return _PROVIDER

    @property
    def path(self) -> str:
        """``"/chat/completions"``."""
        return "/chat/completions"

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """``authorization: Bearer <api_key>``."""
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def convert_messages(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``{"messages": [...]}``: the messages as they are (copied)."""
        return {"messages": [dict(m) for m in messages]}

    def tool(self, tool: Mapping[str, Any]) -> dict[str, Any]:
        """The tool as it is (copied)."""
        return dict(tool)

    def defaults(self) -> dict[str, Any]:
        """None."""
        return {}

    def stream_fields(self) -> dict[str, Any]:
        """``stream_options.include_usage``: the last chunk then reports the usage."""
        return {"stream_options": {"include_usage": True}}

    def parse(self, body: Mapping[str, Any]) -> ModelResponse:
        """:func:`parse_chat`."""
        return parse_chat(body)

    def assembler(self) -> _ChatAssembler:
        """A Chat Completions stream's assembler (the end marker is ``[DONE]``)."""
        return _ChatAssembler()

    def text_delta(self, chunk: Mapping[str, Any]) -> str | None:
        """The first choice's ``delta.content``; ``None`` if it has none."""
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            delta = choices[0].get("delta")
            if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
                return str(delta["content"])
        return None

    def __repr__(self) -> str:
        return "<ModelFormat 'chat'>"


_PROVIDER: Final = provider_format("chat")
#: The Chat Completions format.
CHAT: Final = _ChatModelFormat()
