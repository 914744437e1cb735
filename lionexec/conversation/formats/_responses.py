"""OpenAI Responses (``"responses"``): its output read as a turn, a history exported as its
``input`` items."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from .._messages import ActionRequest, Message
from .._parts import ContentPart, ImagePart, TextPart
from .base import (
    _OPENAI_IMAGES,
    FormatName,
    ProviderTurn,
    _arguments_string,
    _plan,
    _result,
    _Text,
    _typed,
    _verbatim_blocks,
    part_text,
)

if TYPE_CHECKING:
    from openai.types.responses import (  # type: ignore[import-not-found, unused-ignore]
        ResponseInputItemParam as ResponsesInputItem,
    )

    from ...tools import SchemaFormat
else:
    ResponsesInputItem: TypeAlias = dict[str, Any]

__all__ = ["RESPONSES", "ResponsesInputItem", "responses_part", "to_responses"]


def to_responses(history: Iterable[Message]) -> list[ResponsesInputItem]:
    """The history as an OpenAI Responses API ``input`` list.

    System text becomes a ``system`` message, user text a ``user`` message; each call a
    ``function_call`` item and each result a ``function_call_output`` item (content parts as
    ``input_text``, ``input_image`` and ``input_file``; an image or file type OpenAI does not
    take is named in text). A turn recorded from the Responses API
    replays its ``reasoning`` and output ``message`` items verbatim, in their order.
    """
    out: list[dict[str, Any]] = []
    for item in _plan(history):
        if isinstance(item, _Text):
            out.append({"role": item.role, "content": item.text})
            continue
        calls = list(item.calls)
        blocks = _verbatim_blocks(item, "responses")
        if blocks is None:
            if item.text or not calls:
                out.append({"role": "assistant", "content": item.text})
            out.extend(_function_call(call, None) for call in calls)
        else:
            pending = iter(calls)
            for block in blocks:
                kind = block.get("type")
                if kind == "function_call":
                    call = next(pending, None)
                    if call is not None:
                        out.append(_function_call(call, block))
                elif kind == "reasoning":
                    reasoning = _reasoning_item(block)
                    if reasoning is not None:
                        out.append(reasoning)
                elif kind == "message":
                    out.append(_output_message(block))
            out.extend(_function_call(call, None) for call in pending)
        for call, response in zip(item.calls, item.results, strict=True):
            result = _result(response)
            output: Any = result.text
            if result.parts is not None:
                output = [responses_part(part) for part in result.parts]
            out.append(
                {"type": "function_call_output", "call_id": call.content.call_id, "output": output}
            )
    exported: list[ResponsesInputItem] = _typed(out)
    return exported


def _function_call(call: ActionRequest, block: Mapping[str, Any] | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.content.call_id,
        "name": call.content.function,
        "arguments": _arguments_string(call),
    }
    if block is not None and isinstance(block.get("id"), str):
        item["id"] = block["id"]
    return item


def _reasoning_item(block: Mapping[str, Any]) -> dict[str, Any] | None:
    if not isinstance(block.get("id"), str):
        return None
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": block["id"],
        "summary": [
            {"type": "summary_text", "text": s["text"]}
            for s in _listed(block.get("summary"))
            if isinstance(s, Mapping) and isinstance(s.get("text"), str)
        ],
    }
    if isinstance(block.get("encrypted_content"), str):
        item["encrypted_content"] = block["encrypted_content"]
    content = [
        {"type": "reasoning_text", "text": c["text"]}
        for c in _listed(block.get("content"))
        if isinstance(c, Mapping)
        and c.get("type") == "reasoning_text"
        and isinstance(c.get("text"), str)
    ]
    if content:
        item["content"] = content
    return item


def _listed(value: object) -> list[Any]:
    """A kept block's field as the list it should be; anything else holds nothing to send."""
    return value if isinstance(value, list) else []


def _output_message(block: Mapping[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in _listed(block.get("content")):
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            parts.append({"type": "output_text", "text": part["text"], "annotations": []})
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "refusal", "refusal": part["refusal"]})
    if not isinstance(block.get("id"), str):
        text = "".join(p.get("text", "") for p in parts)
        return {"role": "assistant", "content": text}
    status = block.get("status")
    return {
        "type": "message",
        "role": "assistant",
        "id": block["id"],
        "status": status if status in ("in_progress", "completed", "incomplete") else "completed",
        "content": parts,
    }


#: Media types ``input_file`` refuses (it takes documents: PDF, text, office files).
_NOT_DOCUMENTS = ("audio/", "video/", "image/")


def responses_part(part: ContentPart) -> dict[str, Any]:
    """*part* as a Responses input content part (``input_text``, ``input_image``,
    ``input_file``); an image or file type OpenAI does not take is named in text instead."""
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        if part.media_type not in _OPENAI_IMAGES:
            return {"type": "input_text", "text": part_text(part, "not sent: unsupported type")}
        return {"type": "input_image", "image_url": part.data_url(), "detail": "auto"}
    if part.media_type.startswith(_NOT_DOCUMENTS):
        return {"type": "input_text", "text": part_text(part, "not sent: unsupported type")}
    return {
        "type": "input_file",
        "file_data": part.data_url(),
        "filename": part.filename or "file",
    }


class _ResponsesFormat:
    """OpenAI Responses, as a :class:`~lionexec.conversation.ProviderFormat`."""

    __slots__ = ()

    @property
    def name(self) -> FormatName:
        """``"responses"``."""
        return "responses"

    @property
    def tool_schema(self) -> SchemaFormat:
        """``"responses"``: ``{"type": "function", "name", ...}``."""
        return "responses"

    def read_turn(self, message: Any) -> ProviderTurn:
        """A response's output (the ``Response``, or its ``output`` list): ``message``,
        ``reasoning`` and ``function_call`` items, every one kept; the text is the messages'
        ``output_text`` parts joined by newlines."""
        items = message.get("output") if isinstance(message, Mapping) else message
        if not isinstance(items, list | tuple):
            raise ValueError(
                "a Responses API turn is a response or its output list, "
                f"got {type(message).__name__}"
            )
        texts: list[str] = []
        calls: list[Any] = []
        for item in items:
            kind = item.get("type") if isinstance(item, Mapping) else None
            if kind is None:
                raise ValueError(
                    f"a Responses API output item must be an object, got {type(item).__name__}"
                )
            if kind == "function_call":
                calls.append(item)
            elif kind == "message":
                content = item.get("content")
                if content is not None and not isinstance(content, list | tuple):
                    raise ValueError(
                        "a Responses API message item's content must be a list, "
                        f"got {type(content).__name__}"
                    )
                for part in content or ():
                    if (
                        isinstance(part, Mapping)
                        and part.get("type") == "output_text"
                        and isinstance(part.get("text"), str)
                    ):
                        texts.append(part["text"])
        return ProviderTurn("responses", "\n".join(texts), tuple(calls), tuple(items))

    def export(self, history: Iterable[Message]) -> list[ResponsesInputItem]:
        """:func:`~lionexec.conversation.to_responses`."""
        return to_responses(history)

    def request_fields(self, history: Iterable[Message]) -> dict[str, Any]:
        """``{"input": to_responses(history)}``."""
        return {"input": to_responses(history)}

    def __repr__(self) -> str:
        return "<ProviderFormat 'responses'>"


#: The Responses format.
RESPONSES: Final = _ResponsesFormat()
