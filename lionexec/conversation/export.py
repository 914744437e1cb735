"""Render a history for OpenAI Chat Completions, the OpenAI Responses API and Anthropic Messages.

The three exports follow one plan, so they agree on what the model is shown:

* Each assistant turn is one turn: an :class:`AssistantResponse` with the calls it proposed,
  or, for requests no assistant turn claims, one turn per batch (a run of requests not
  interrupted by any other message, as ``Branch.act`` records a batch). Two ``act()`` batches
  one after the other are never merged into one turn. Two run at once on one branch are
  when the second's requests were recorded right after the first's (before any of its
  responses): the history does not say where one ended, and one turn proposing both
  batches' calls is valid for every provider.
* Each call's result comes right after its turn, in the order of the calls, even if the
  response was recorded later: every provider requires it.
* Every request yields exactly one call and exactly one result. A request with no recorded
  response gets an error result saying so; it is never dropped.
* A call's arguments are replayed as the model sent them: the raw argument string when there
  is one (Chat Completions and Responses, even a malformed one), else the arguments as JSON.
  Anthropic's ``tool_use.input`` is an object, so a malformed string is sent as ``{}`` there.
* A turn recorded from a provider's own message (``AssistantResponse.api``) is replayed
  verbatim to that same API: Anthropic ``thinking`` and ``redacted_thinking`` blocks with their
  signatures, Responses ``reasoning`` items with their ``encrypted_content`` and output
  message ids. Other APIs get its text and calls (reasoning is specific to its provider).
  Blocks of other kinds (Anthropic server-tool blocks, Responses items other than
  ``reasoning``, ``message`` and ``function_call``) stay in the record but are not replayed;
  text blocks are replayed without their citations.
* A completed call's result is its output: a string as it is, content parts
  (:mod:`lionexec.conversation.parts`: images, files) as the provider's own blocks, anything
  else as JSON (so ``None`` is ``null``). A call that did not complete gets
  ``{"error": <type>, "message": <text>, "outcome": <outcome>}`` and, for Anthropic,
  ``is_error: true``.
* Chat Completions ``tool`` messages hold text only. An image or file a tool returned is
  named in the tool message (``[image/png image: attached below]``) and sent in one ``user``
  message after the turn's tool messages (``image_url`` and ``file`` parts, as data URLs).
* Anthropic accepts tool-use ids of letters, digits, ``_`` and ``-`` only: another call id
  (``functions.add:0``, as some OpenAI-compatible models send) is exported there as
  :func:`anthropic_tool_id` maps it, the same in ``tool_use.id`` and ``tool_result.tool_use_id``.
  Anthropic also refuses text blocks of whitespace only: they are left out like empty ones.
* Everything is strict JSON (``json.dumps(..., allow_nan=False)`` succeeds) and valid
  UTF-8 (a lone surrogate in a recorded string becomes U+FFFD): a non-finite
  float in an output becomes ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, an int too long to
  print becomes a ``"<int with N bits>"`` string, cycles and nesting past the depth cap become
  markers.

The return types name the SDKs' own request types (``ChatCompletionMessageParam``,
``anthropic.types.MessageParam``, ``ResponseInputItemParam``) for type checkers when the SDK
is installed (``Any`` otherwise); at run time they are plain dicts and lists, and lionexec
never imports an SDK.
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NotRequired, TypeAlias, TypedDict

import attrs

from .._jsonable import json_encoder, utf8_text
from .._jsonable import jsonable as strict_json
from .messages import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    Message,
    System,
)
from .parts import ContentPart, FilePart, ImagePart, TextPart, content_parts

if TYPE_CHECKING:
    from anthropic.types import (  # type: ignore[import-not-found, unused-ignore]
        MessageParam as AnthropicMessageParam,
    )
    from openai.types.chat import (  # type: ignore[import-not-found, unused-ignore]
        ChatCompletionMessageParam as ChatMessageParam,
    )
    from openai.types.responses import (  # type: ignore[import-not-found, unused-ignore]
        ResponseInputItemParam as ResponsesInputItem,
    )
else:
    ChatMessageParam: TypeAlias = dict[str, Any]
    AnthropicMessageParam: TypeAlias = dict[str, Any]
    ResponsesInputItem: TypeAlias = dict[str, Any]

__all__ = [
    "NO_RESPONSE",
    "AnthropicExport",
    "AnthropicMessageParam",
    "ChatMessageParam",
    "ResponsesInputItem",
    "result_text",
    "to_anthropic",
    "to_openai",
    "to_responses",
]

#: The error type of the result exported for a request that has no recorded response.
NO_RESPONSE = "NoResponseRecorded"


class AnthropicExport(TypedDict):
    """Keyword arguments for ``anthropic.Anthropic().messages.create(**export, ...)``."""

    messages: list[AnthropicMessageParam]
    system: NotRequired[str]


@attrs.frozen
class _Text:
    role: str  # "system" | "user" | "assistant"
    text: str


@attrs.frozen
class _ToolTurn:
    turn: AssistantResponse | None
    text: str
    calls: tuple[ActionRequest, ...]
    results: tuple[ActionResponse | None, ...]


@attrs.frozen
class _Result:
    text: str  # the result as text (parts: their text, attachments named)
    parts: list[ContentPart] | None
    is_error: bool


def _typed(value: Any) -> Any:
    """The exports build plain JSON; their declared types are the SDKs' request types.

    Every string is made valid Unicode (:func:`_utf8`) on the way out.
    """
    return _utf8(value)


def _utf8(value: Any) -> Any:
    """*value*, plain JSON, with each string that holds a lone surrogate made valid Unicode
    (each lone half becomes U+FFFD). The SDKs send a request as UTF-8 (httpx encodes JSON
    with ``ensure_ascii=False``), which one such string would make fail: a tool's text
    output, a turn's text or a replayed argument string may hold one, as sent."""
    if isinstance(value, str):
        return utf8_text(value)
    if type(value) is dict:
        return {_utf8(key): _utf8(item) for key, item in value.items()}
    if type(value) is list:
        return [_utf8(item) for item in value]
    return value


def result_text(response: ActionResponse | None) -> tuple[str, bool]:
    """The text a model is shown for *response*, and whether it is an error.

    ``None`` stands for a request that has no recorded response. Content parts are rendered
    as their text, with each image or file named.
    """
    result = _result(response)
    return result.text, result.is_error


def _result(response: ActionResponse | None) -> _Result:
    if response is None:
        record = {"error": NO_RESPONSE, "message": "no response was recorded for this call"}
        return _Result(dumps(record), None, True)
    content = response.content
    if content.success:
        output = content.output
        if isinstance(output, str):
            return _Result(output, None, False)
        parts = content_parts(output)
        if parts is not None:
            return _Result(_parts_text(parts), parts, False)
        converted = strict_json(output)
        if isinstance(converted, str):  # a value JSON has no scalar for (NaN, a huge int,
            # bytes, ...): its text as it is, which is what a journal keeps and reloads
            return _Result(converted, None, False)
        return _Result(_json_text(converted), None, False)
    error = content.error
    record = {
        "error": error.type if error is not None else "UnknownError",
        "message": error.message if error is not None else "",
        "outcome": content.outcome.value,
    }
    return _Result(dumps(record), None, True)


def _parts_text(parts: list[ContentPart]) -> str:
    return "\n".join(part_text(part) for part in parts)


def part_text(part: ContentPart, note: str = "attached below") -> str:
    """*part* as text: a text part's text; an image or file named, with *note*."""
    if isinstance(part, TextPart):
        return part.text
    kind = "image" if isinstance(part, ImagePart) else "file"
    name = f" {part.filename}" if isinstance(part, FilePart) and part.filename else ""
    return f"[{part.media_type} {kind}{name}: {note}]"


# -- the plan ----------------------------------------------------------------------------------


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

    def tool_turn(turn: AssistantResponse | None, calls: list[ActionRequest]) -> _ToolTurn:
        text = turn.content if turn is not None else ""
        return _ToolTurn(turn, text, tuple(calls), tuple(answers.get(c.id) for c in calls))

    plan: list[_Text | _ToolTurn] = []
    run: list[ActionRequest] = []  # unclaimed requests of one batch, waiting to become a turn
    for m in messages:
        if isinstance(m, ActionRequest) and m.id not in owner:
            run.append(m)
            continue
        if run:  # any other message ends the batch: act() adds a batch's requests together
            plan.append(tool_turn(None, run))
            run = []
        if isinstance(m, ActionRequest | ActionResponse):
            continue  # placed with its turn
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
            plan.append(tool_turn(m, calls))
    if run:
        plan.append(tool_turn(None, run))
    return plan


def _arguments_string(call: ActionRequest) -> str:
    raw = call.content.raw_arguments
    return raw if raw is not None else dumps(call.content.arguments)


def _verbatim_blocks(item: _ToolTurn, api: str) -> list[dict[str, Any]] | None:
    """The blocks of *item*'s turn if it was recorded from *api* (else ``None``)."""
    turn = item.turn
    if turn is None or turn.api != api or not turn.blocks:
        return None
    return [dict(block) for block in turn.blocks]


# -- OpenAI Chat Completions -------------------------------------------------------------------


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


_OPENAI_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_ANTHROPIC_IMAGES = _OPENAI_IMAGES


# -- OpenAI Responses --------------------------------------------------------------------------


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


# -- Anthropic Messages ------------------------------------------------------------------------


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


def dumps(value: object) -> str:
    """Strict JSON text of *value* (see :func:`lionexec._jsonable.jsonable`), non-ASCII kept."""
    return _json_text(strict_json(value))


#: :func:`dumps` of a value :func:`~lionexec._jsonable.jsonable` has converted already (which
#: holds no cycle): ``json.dumps(converted, ensure_ascii=False, allow_nan=False)``'s text, with
#: the encoder built once (a tool message's text, per call: server CPU row of nox -s bench).
_json_text: Final = json_encoder(separators=(", ", ": "))
