"""Anthropic Messages (``"anthropic"``): its assistant messages read as turns, a history
exported as its ``messages`` and ``system``."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NotRequired, TypeAlias, TypedDict

from ..._jsonable import jsonable as strict_json
from ..._jsonable import utf8_text
from .._messages import ActionRequest, Message
from .._parts import ContentPart, FilePart, ImagePart, TextPart
from .base import (
    _OPENAI_IMAGES,
    FormatName,
    ProviderTurn,
    _plan,
    _result,
    _Text,
    _typed,
    _verbatim_blocks,
    part_text,
)

if TYPE_CHECKING:
    from anthropic.types import (  # type: ignore[import-not-found, unused-ignore]
        MessageParam as AnthropicMessageParam,
    )

    from ...tools import SchemaFormat
else:
    AnthropicMessageParam: TypeAlias = dict[str, Any]

__all__ = [
    "ANTHROPIC",
    "AnthropicExport",
    "AnthropicMessageParam",
    "anthropic_part",
    "anthropic_tool_id",
    "to_anthropic",
]


class AnthropicExport(TypedDict):
    """Keyword arguments for ``anthropic.Anthropic().messages.create(**export, ...)``."""

    messages: list[AnthropicMessageParam]
    system: NotRequired[str]


_ANTHROPIC_IMAGES = _OPENAI_IMAGES


def to_anthropic(history: Iterable[Message]) -> AnthropicExport:
    """The history as keyword arguments for Anthropic's Messages API.

    Returns ``{"messages": [...]}``, plus ``"system"`` (every system message's text, joined by
    a blank line) when there is any. Consecutive messages of one role are merged, so results
    precede the next user text in one user turn. Empty text blocks (and blocks of whitespace
    only, which Anthropic refuses) are left out, and so is a message left with no blocks.
    Call ids are exported as :func:`anthropic_tool_id` maps them. A turn recorded from
    Anthropic replays its blocks in their order: ``thinking`` and ``redacted_thinking`` (with
    signatures), ``text``, ``tool_use``. Two assistant turns with no message between them
    (a final answer, then another turn of the model's) become one assistant message, as
    Anthropic itself combines consecutive turns; if the later turn has thinking blocks they
    are then not first in that message, which Anthropic refuses for a latest message with
    extended thinking: put the user's next message (an ``Instruction``) between the turns.
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
        return [{"type": "text", "text": text}] if text.strip() else []

    for item in _plan(history):
        if isinstance(item, _Text):
            if item.role == "system":
                system.append(item.text)
            else:
                put(item.role, text_blocks(item.text))
            continue
        blocks = _verbatim_blocks(item, "anthropic")
        if blocks is None:
            put("assistant", text_blocks(item.text) + [_tool_use(c) for c in item.calls])
        else:
            pending = iter(item.calls)
            replayed: list[dict[str, Any]] = []
            for block in blocks:
                kind = block.get("type")
                if kind == "tool_use":
                    call = next(pending, None)
                    if call is not None:
                        replayed.append(_tool_use(call))
                elif kind == "text" and isinstance(block.get("text"), str):
                    replayed.extend(text_blocks(block["text"]))
                elif kind == "thinking":
                    replayed.append(
                        {
                            "type": "thinking",
                            "thinking": str(block.get("thinking", "")),
                            "signature": str(block.get("signature", "")),
                        }
                    )
                elif kind == "redacted_thinking":
                    replayed.append({"type": "redacted_thinking", "data": str(block.get("data"))})
            replayed.extend(_tool_use(call) for call in pending)
            put("assistant", replayed)
        results: list[dict[str, Any]] = []
        for call, response in zip(item.calls, item.results, strict=True):
            result = _result(response)
            content: Any = result.text
            if result.parts is not None:
                content = [b for b in map(anthropic_part, result.parts) if b is not None] or ""
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": anthropic_tool_id(call.content.call_id),
                    "content": content,
                    "is_error": result.is_error,
                }
            )
        put("user", results)
    exported: AnthropicExport = {"messages": _typed(turns)}
    if system:
        exported["system"] = utf8_text("\n\n".join(system))
    return exported


def _tool_use(call: ActionRequest) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": anthropic_tool_id(call.content.call_id),
        "name": call.content.function,
        "input": strict_json(call.content.arguments),
    }


_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
_NOT_ANTHROPIC_ID = re.compile(r"[^a-zA-Z0-9_-]")
#: How a mapped id ends: two underscores and 32 hex digits (128 bits of SHA-256).
_MAPPED_ID = re.compile(r".*__[0-9a-f]{32}")


def anthropic_tool_id(call_id: str) -> str:
    """*call_id* as a valid Anthropic tool-use id (``^[a-zA-Z0-9_-]+$``).

    A valid id is kept (lionexec's ``call_…``, OpenAI's and Anthropic's own). Another
    (``functions.add:0``) has every other character replaced by ``_`` and gets ``__`` and 32
    hex digits of its SHA-256 (``functions_add_0__1a2b…``), so ids that differ only in those
    characters stay apart. A valid id that ends as a mapped one does (``__`` and 32 hex
    digits) is mapped too: distinct ids never share a mapped id, even ids a model chose to
    make them (a collision of 128 bits of SHA-256 cannot be searched for). The mapping
    depends on the id alone, so a call and its result always agree.
    """
    if _ANTHROPIC_ID.fullmatch(call_id) and not _MAPPED_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_NOT_ANTHROPIC_ID.sub('_', call_id)}__{digest[:32]}"


def anthropic_part(part: ContentPart) -> dict[str, Any] | None:
    """*part* as an Anthropic content block (``None`` for blank text, which Anthropic
    refuses); an image or file type Anthropic does not take is named in text instead."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text.strip() else None
    encoded = base64.b64encode(part.data).decode("ascii")
    if isinstance(part, ImagePart) and part.media_type in _ANTHROPIC_IMAGES:
        source = {"type": "base64", "media_type": part.media_type, "data": encoded}
        return {"type": "image", "source": source}
    if isinstance(part, FilePart) and part.media_type == "application/pdf":
        source = {"type": "base64", "media_type": "application/pdf", "data": encoded}
        document: dict[str, Any] = {"type": "document", "source": source}
        if part.filename:
            document["title"] = part.filename
        return document
    if isinstance(part, FilePart) and part.media_type == "text/plain":
        try:
            text = part.data.decode("utf-8")
        except UnicodeDecodeError:
            return {"type": "text", "text": part_text(part, "not valid UTF-8, not sent")}
        source = {"type": "text", "media_type": "text/plain", "data": text}
        return {"type": "document", "source": source}
    return {"type": "text", "text": part_text(part, "not sent: unsupported type")}


class _AnthropicFormat:
    """Anthropic Messages, as a :class:`~lionexec.conversation.ProviderFormat`."""

    __slots__ = ()

    @property
    def name(self) -> FormatName:
        """``"anthropic"``."""
        return "anthropic"

    @property
    def tool_schema(self) -> SchemaFormat:
        """``"anthropic"``: ``{"name", "description", "input_schema"}``."""
        return "anthropic"

    def read_turn(self, message: Any) -> ProviderTurn:
        """An assistant message (``{"role": "assistant", "content": [...]}``, or its content
        block list): every block kept, ``tool_use`` blocks the calls, ``text`` blocks the text
        (joined by newlines)."""
        blocks = message.get("content") if isinstance(message, Mapping) else message
        if not isinstance(blocks, list | tuple):
            raise ValueError(
                "an Anthropic turn is an assistant message with a list of content blocks, "
                f"got {type(message).__name__}"
            )
        texts: list[str] = []
        calls: list[Any] = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind is None:
                raise ValueError(
                    f"an Anthropic content block must be an object, got {type(block).__name__}"
                )
            if kind == "tool_use":
                calls.append(block)
            elif kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        return ProviderTurn("anthropic", "\n".join(texts), tuple(calls), tuple(blocks))

    def export(self, history: Iterable[Message]) -> AnthropicExport:
        """:func:`~lionexec.conversation.to_anthropic`."""
        return to_anthropic(history)

    def request_fields(self, history: Iterable[Message]) -> dict[str, Any]:
        """``to_anthropic(history)``: ``{"messages": ...}`` and ``"system"`` if any."""
        return dict(to_anthropic(history))

    def __repr__(self) -> str:
        return "<ProviderFormat 'anthropic'>"


#: The Anthropic Messages format.
ANTHROPIC: Final = _AnthropicFormat()
