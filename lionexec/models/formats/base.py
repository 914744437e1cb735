"""The model-call side of a provider format: the contract, and what the three APIs share.

A :class:`ModelFormat` knows one API's requests and answers: the path and headers a request
goes with, its body (built on the conversation side,
:class:`~lionexec.abc.ProviderFormat`), its response and its stream of
server-sent events, read into one :class:`~lionexec.models.ModelResponse`. The HTTP
machinery (:class:`~lionexec.models.ModelCall`) is the same for all three and asks the
endpoint's format for everything that differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from lionexec.conversation._parts import (
    ContentPart,
    FilePart,
    ImagePart,
    TextPart,
    parse_data_url,
)
from lionexec.conversation.formats import dumps, part_text

from .._errors import MalformedResponseError, StreamTruncatedError, UnknownFinishReasonError
from .._response import ModelResponse, Usage

if TYPE_CHECKING:
    from lionexec.conversation.formats import FormatName, ProviderFormat

__all__ = ["ModelFormat", "StreamAssembler"]


@runtime_checkable
class StreamAssembler(Protocol):
    """Assembles one streamed response from its server-sent events, for one call.

    **Contract.** One assembler per stream, fed by the one task reading that stream, in
    order; it is synchronous bookkeeping (no I/O, nothing blocks, no checkpoint).
    :meth:`feed` takes each event's data as it was parsed (a JSON object, or the string
    ``"[DONE]"``); :meth:`result` is asked once the stream has ended.

    **Errors.** :meth:`feed` raises :class:`~lionexec.models.MalformedResponseError` for an
    event of the wrong shape and :class:`~lionexec.models.ProviderError` for an error event
    (a provider may report an error in a ``200`` stream). :meth:`result` raises
    :class:`~lionexec.models.StreamTruncatedError` when the stream ended before the API's end
    marker, and :class:`~lionexec.models.UnknownFinishReasonError` for a finish reason outside
    :data:`~lionexec.models.FINISH_REASONS`.
    """

    @property
    def chunks(self) -> int:
        """The events fed so far (the end marker and anything after it not counted)."""
        ...

    def feed(self, chunk: Any) -> bool:
        """Take one event; ``True`` for the end marker and anything after the end (events
        the caller does not yield), ``False`` for an event of the response."""
        ...

    def result(self) -> ModelResponse:
        """The response the stream assembled."""
        ...


@runtime_checkable
class ModelFormat(Protocol):
    """The model-call side of one provider API: request bodies, responses, streams.

    lionexec registers one object per API (:func:`~lionexec.models.formats.model_format`
    returns it by name); :class:`~lionexec.models.ModelCall` and
    :func:`~lionexec.models.build_payload` ask the endpoint's format rather than comparing
    names.

    **Contract.** Every method is synchronous and pure: it reads its arguments and returns new
    plain data, keeping no state (an assembler holds the state of one stream), so it may be
    called from any thread, concurrently. Nothing blocks and nothing is I/O (the HTTP request
    is the caller's); there is no checkpoint, so cancellation never interrupts one midway.
    Nothing passed in is changed or kept.

    **Errors.** Building a request does not fail for well-formed input: whatever a model sent
    before is sent as strict JSON (an argument string that is not a JSON object becomes
    ``{}`` where the API takes an object). :meth:`parse` raises
    :class:`~lionexec.models.MalformedResponseError` for a body not of this API's shape,
    :class:`~lionexec.models.UnknownFinishReasonError` for a finish reason outside
    :data:`~lionexec.models.FINISH_REASONS`, and :class:`~lionexec.models.ProviderError` for
    an error object sent with status ``200``. The call captures each on its event.
    """

    @property
    def name(self) -> FormatName:
        """The canonical name (one of :data:`~lionexec.conversation.formats.FORMAT_NAMES`)."""
        ...

    @property
    def provider(self) -> ProviderFormat:
        """The conversation side of the same API (its exports, its turns)."""
        ...

    @property
    def path(self) -> str:
        """The path requests go to, after the endpoint's base URL (``"/chat/completions"``)."""
        ...

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """The headers that carry *api_key* (none without one) and any version this API
        requires, in the order sent."""
        ...

    def convert_messages(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """OpenAI chat *messages* as the conversation fields of this API's request body."""
        ...

    def tool(self, tool: Mapping[str, Any]) -> dict[str, Any]:
        """An OpenAI chat *tool* (``{"type": "function", "function": {...}}``) in this API's
        shape; a tool of another type as it is."""
        ...

    def defaults(self) -> dict[str, Any]:
        """The request fields this API requires, sent unless the parameters name them."""
        ...

    def stream_fields(self) -> dict[str, Any]:
        """The request fields, besides ``"stream": true``, that ask this API to stream."""
        ...

    def parse(self, body: Mapping[str, Any]) -> ModelResponse:
        """Read a complete (non-streamed) response object."""
        ...

    def assembler(self) -> StreamAssembler:
        """A new assembler for one stream of this API."""
        ...

    def text_delta(self, chunk: Mapping[str, Any]) -> str | None:
        """The assistant text a stream event of this API adds (``""`` for none), or ``None``
        when *chunk* is not one of this API's text events."""
        ...


# -- reading responses ------------------------------------------------------------------------


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    return Usage(
        input_tokens=_int(raw.get("prompt_tokens", raw.get("input_tokens"))),
        output_tokens=_int(raw.get("completion_tokens", raw.get("output_tokens"))),
    )


def _str_or_none(value: object) -> str | None:
    return value[:200] if isinstance(value, str) else None


def _shape(condition: bool, what: str, body: object) -> None:
    if not condition:
        raise MalformedResponseError(f"provider response has no {what}", body=repr(body)[:4096])


def _tool_call(call_id: object, name: object, arguments: object, body: object) -> dict[str, Any]:
    _shape(isinstance(name, str) and bool(name), "tool call name", body)
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        # Not a JSON object (a list, a number): passed on as JSON, so that act() answers the
        # call ``invalid`` naming the problem instead of running it without arguments.
        arguments = json.dumps(arguments)
    return {
        "id": call_id if isinstance(call_id, str) and call_id else None,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


# -- streams ----------------------------------------------------------------------------------


@attrs.define
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = attrs.Factory(list)


@attrs.define
class _Assembler:
    """What every API's assembler keeps; each API reads its own events (:meth:`_read`)."""

    chunks: int = 0
    text: list[str] = attrs.Factory(list)
    calls: dict[int, _PartialCall] = attrs.Factory(dict)
    finish: object = None
    usage: Usage | None = None
    model: str | None = None
    id: str | None = None
    done: bool = False

    def feed(self, chunk: Any) -> bool:
        """Take one chunk; return ``True`` for the end marker and anything after the end
        (not chunks to yield)."""
        if self.done:
            return True
        if chunk == "[DONE]":
            self.done = True
            return True
        _shape(isinstance(chunk, Mapping), "JSON object in a stream chunk", chunk)
        self.chunks += 1
        self._read(chunk)
        return False

    def _read(self, chunk: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _assembled(self, finishes: Mapping[str, str], marker: str) -> ModelResponse:
        if not self.done:
            raise StreamTruncatedError(
                f"stream ended after {self.chunks} chunks without {marker}", chunks=self.chunks
            )
        _shape(self.finish is None or isinstance(self.finish, str), "finish reason string", {})
        if self.finish not in finishes:
            raise UnknownFinishReasonError(self.finish)
        calls = tuple(
            _tool_call(p.id, p.name, "".join(p.arguments) or "{}", {"stream": True})
            for _, p in sorted(self.calls.items())
        )
        return ModelResponse(
            text="".join(self.text),
            tool_calls=calls,
            finish_reason=finishes[str(self.finish)],
            usage=self.usage,
            model=self.model,
            id=self.id,
        )


# -- OpenAI chat messages, read for the other APIs -------------------------------------------


@attrs.frozen
class _ImageUrl:
    """An image a chat message names by its (``http``) URL."""

    url: str


def _parts(content: object) -> list[ContentPart | _ImageUrl]:
    """The content of a chat message as content parts (a remote image as its URL).

    Images and files sent as ``data:`` URLs become :class:`ImagePart` and :class:`FilePart`;
    a part that cannot be read is a text part naming it, so nothing is silently dropped.
    """
    if content is None:
        return []
    if not isinstance(content, list):
        return [TextPart(content if isinstance(content, str) else dumps(content))]
    parts: list[ContentPart | _ImageUrl] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        inner = part.get(kind) if isinstance(part, Mapping) and isinstance(kind, str) else None
        if kind in ("text", "refusal") and isinstance(inner, str):
            parts.append(TextPart(inner))
            continue
        if kind == "image_url" and isinstance(inner, Mapping):
            url = inner.get("url")
            decoded = parse_data_url(url)
            if decoded is not None:
                parts.append(ImagePart(decoded[1], decoded[0]))
                continue
            if isinstance(url, str) and url.startswith(("https://", "http://")):
                parts.append(_ImageUrl(url))
                continue
        if kind == "file" and isinstance(inner, Mapping):
            decoded = parse_data_url(inner.get("file_data"))
            filename = inner.get("filename")
            if decoded is not None:
                name = filename if isinstance(filename, str) else None
                parts.append(FilePart(decoded[1], decoded[0], name))
                continue
        parts.append(TextPart(f"[{kind if isinstance(kind, str) else 'content'} part: not sent]"))
    return parts


def _text(content: object) -> str:
    """The content of a chat message as text (parts joined, an attachment named)."""
    if isinstance(content, str):
        return content
    return "\n".join(
        f"[image {part.url}: not sent]"
        if isinstance(part, _ImageUrl)
        else part_text(part, "not sent")
        for part in _parts(content)
    )
