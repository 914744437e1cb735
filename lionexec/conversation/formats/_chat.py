"""OpenAI Chat Completions (``"chat"``): its assistant turns read, a history exported as its
``messages``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from .._messages import Message
from .._parts import ContentPart, FilePart, ImagePart
from .base import (
    _OPENAI_IMAGES,
    FormatName,
    ProviderTurn,
    _arguments_string,
    _plan,
    _result,
    _Text,
    _typed,
    part_text,
)

if TYPE_CHECKING:
    from openai.types.chat import (  # type: ignore[import-not-found, unused-ignore]
        ChatCompletionMessageParam as ChatMessageParam,
    )

    from ...tools import SchemaFormat
else:
    ChatMessageParam: TypeAlias = dict[str, Any]

__all__ = ["CHAT", "ChatMessageParam", "to_openai"]


def to_openai(history: Iterable[Message]) -> list[ChatMessageParam]:
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
                            "arguments": _arguments_string(call),
                        },
                    }
                    for call in item.calls
                ],
            }
        )
        attachments: list[dict[str, Any]] = []
        for call, response in zip(item.calls, item.results, strict=True):
            result = _result(response)
            text = result.text
            if result.parts is not None:
                sent = [_chat_part(part) for part in result.parts]
                carried = [p for p in sent if p is not None]
                text = "\n".join(
                    part_text(part, "attached below" if p is not None else "not sent")
                    for part, p in zip(result.parts, sent, strict=True)
                )
                if carried:
                    note = f"Attachments returned by tool call {call.content.call_id}:"
                    attachments.append({"type": "text", "text": note})
                    attachments.extend(carried)
            out.append({"role": "tool", "tool_call_id": call.content.call_id, "content": text})
        if attachments:
            out.append({"role": "user", "content": attachments})
    exported: list[ChatMessageParam] = _typed(out)
    return exported


def _chat_part(part: ContentPart) -> dict[str, Any] | None:
    if isinstance(part, ImagePart) and part.media_type in _OPENAI_IMAGES:
        return {"type": "image_url", "image_url": {"url": part.data_url()}}
    if isinstance(part, FilePart) and part.media_type == "application/pdf":
        file: dict[str, Any] = {"file_data": part.data_url()}
        file["filename"] = part.filename or "file.pdf"
        return {"type": "file", "file": file}
    return None


class _ChatFormat:
    """OpenAI Chat Completions, as a :class:`~lionexec.conversation.ProviderFormat`."""

    __slots__ = ()

    @property
    def name(self) -> FormatName:
        """``"chat"``."""
        return "chat"

    @property
    def tool_schema(self) -> SchemaFormat:
        """``"openai"``: ``{"type": "function", "function": {...}}``."""
        return "openai"

    def read_turn(self, message: Any) -> ProviderTurn:
        """An assistant message: its text content (or its ``text`` parts joined) and its
        ``tool_calls``."""
        if not isinstance(message, Mapping):
            raise ValueError(
                f"a Chat Completions turn is an assistant message, got {type(message).__name__}"
            )
        content = message.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(
                p["text"]
                for p in content
                if isinstance(p, Mapping) and p.get("type") == "text" and _is_text(p)
            )
        elif content is None:
            text = ""
        else:
            raise ValueError(
                f"an assistant message's content must be text, got {type(content).__name__}"
            )
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list | tuple):
            raise ValueError(
                f"an assistant message's tool_calls must be a list, got {type(calls).__name__}"
            )
        return ProviderTurn("chat", text, tuple(calls))

    def export(self, history: Iterable[Message]) -> list[ChatMessageParam]:
        """:func:`~lionexec.conversation.to_openai`."""
        return to_openai(history)

    def request_fields(self, history: Iterable[Message]) -> dict[str, Any]:
        """``{"messages": to_openai(history)}``."""
        return {"messages": to_openai(history)}

    def __repr__(self) -> str:
        return "<ProviderFormat 'chat'>"


def _is_text(block: Mapping[str, Any]) -> bool:
    return isinstance(block.get("text"), str)


#: The Chat Completions format.
CHAT: Final = _ChatFormat()
