"""``ModelCall``: one chat request to an OpenAI-compatible endpoint, as an :class:`Event`.

Needs the ``http`` extra (``httpx``). Two endpoint shapes are spoken: Chat Completions
(``POST {base_url}/chat/completions``) and Responses (``POST {base_url}/responses``). Both are
normalized into one :class:`ModelResponse` whose :meth:`~ModelResponse.message` is an OpenAI
chat assistant message.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, ClassVar, Final, Literal

import attrs
import httpx
import trio

from lionexec._jsonable import jsonable as strict_json
from lionexec.act._envelope import read_arguments
from lionexec.conversation import MessageManager
from lionexec.conversation.export import (
    anthropic_part,
    anthropic_tool_id,
    dumps,
    part_text,
    responses_part,
)
from lionexec.conversation.parts import (
    ContentPart,
    FilePart,
    ImagePart,
    TextPart,
    parse_data_url,
)
from lionexec.engine import NOT_SERIALIZED, Event
from lionexec.limits import RateLimiter, retry_after_seconds

from .errors import (
    MalformedResponseError,
    ModelConnectionError,
    ProviderError,
    StreamTruncatedError,
    UnknownFinishReasonError,
)

__all__ = [
    "FINISH_REASONS",
    "Api",
    "Endpoint",
    "ModelCall",
    "ModelResponse",
    "Usage",
    "build_payload",
    "text_delta",
]

Api = Literal["chat", "responses", "anthropic"]

#: The finish reasons a :class:`ModelResponse` may carry (Responses statuses are mapped onto
#: them); any other value received is an :class:`UnknownFinishReasonError`.
FINISH_REASONS: Final = frozenset({"stop", "length", "tool_calls", "content_filter"})
_CHAT_FINISH: Final = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
}
_PATHS: Final = {"chat": "/chat/completions", "responses": "/responses", "anthropic": "/messages"}
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
_FEEDBACK_HEADERS = ("retry-after", "retry-after-ms")
_CLOSE_GRACE: Final = 1.0


@attrs.frozen
class Endpoint:
    """Where and how to send requests.

    Attributes:
        base_url: e.g. ``"https://api.openai.com/v1"``, ``"https://api.anthropic.com/v1"`` or a
            local provider's URL.
        api_key: sent as ``Authorization: Bearer ...`` (``x-api-key`` for Anthropic); never
            serialized or shown.
        api: ``"chat"`` (Chat Completions), ``"responses"`` or ``"anthropic"`` (Messages).
        headers: extra request headers.
        timeout: seconds for connecting and between bytes read (httpx semantics), or ``None``.
        max_body_bytes: the largest response body read (default 16 MiB), counted decoded
            (decompressed) as it arrives, streamed or not; more is an error.
    """

    base_url: str = attrs.field(validator=attrs.validators.instance_of(str))
    api_key: str | None = attrs.field(default=None, repr=False)
    api: Api = attrs.field(
        default="chat", validator=attrs.validators.in_(("chat", "responses", "anthropic"))
    )
    headers: Mapping[str, str] = attrs.field(factory=dict)
    timeout: float | None = 60.0
    max_body_bytes: int = 16 * 1024 * 1024

    @property
    def url(self) -> str:
        """The full URL requests go to."""
        return self.base_url.rstrip("/") + _PATHS[self.api]

    def request_headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self.api == "anthropic":
            headers["anthropic-version"] = ANTHROPIC_VERSION
            if self.api_key:
                headers["x-api-key"] = self.api_key
        elif self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers


@attrs.frozen
class Usage:
    """Tokens a response reports (``prompt``/``input`` and ``completion``/``output``)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@attrs.frozen
class ModelResponse:
    """A model's answer, normalized.

    Attributes:
        text: the assistant text (``""`` when it only proposed tool calls).
        tool_calls: OpenAI ``tool_calls`` items (``{"id", "type": "function", "function":
            {"name", "arguments"}}``, arguments a JSON string as sent), in the order proposed.
        finish_reason: one of :data:`FINISH_REASONS`.
        usage: the reported usage, or ``None``.
        model: the model name the provider reports, or ``None``.
        id: the provider's response id, or ``None``.
    """

    text: str
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str
    usage: Usage | None = None
    model: str | None = None
    id: str | None = None

    def message(self) -> dict[str, Any]:
        """The OpenAI chat assistant message (``role``, ``content``, ``tool_calls`` if any)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        return message


def _new_payload() -> dict[str, Any]:
    return {}


def _estimate(call: ModelCall) -> int:
    return estimate_tokens(call.payload)


def estimate_tokens(payload: Mapping[str, Any]) -> int:
    """A cheap estimate of a request's tokens: JSON characters / 4, plus the output cap."""
    try:
        size = len(json.dumps(payload, default=str))
    except (TypeError, ValueError, RecursionError):
        size = 0
    cap = 0
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            cap = max(cap, value)
    return size // 4 + 1 + cap


@attrs.define(kw_only=True, eq=False)
class ModelCall(Event):
    """One chat request, sent when the event is invoked (or streamed).

    :meth:`invoke` sends the request and records a :class:`ModelResponse` as the response.
    :meth:`stream` (with ``streaming=True`` under a processor) asks the provider to stream and
    yields every server-sent chunk unchanged, as the parsed JSON object the provider sent
    (ADR-0003 D2); when the stream ends the assembled :class:`ModelResponse` is the response.

    Outcomes, all captured on the event (never raised): an HTTP error status is a
    :class:`ProviderError` (status, body, retry-after); a body that is not JSON, or not the
    expected shape, a :class:`MalformedResponseError`; a stream or body cut short a
    :class:`StreamTruncatedError`; a finish reason outside :data:`FINISH_REASONS` an
    :class:`UnknownFinishReasonError`; a network failure a :class:`ModelConnectionError`.
    Cancellation closes the connection (a bounded, shielded close) and propagates; the event
    ends ``cancelled``.

    **Rate limits.** With a :attr:`limiter` (a :class:`RateLimitedProcessor` binds its own
    when it grants the call), the call waits for the limiter if it was not granted yet,
    reports every response's headers to it (``429``/``Retry-After``, ``x-ratelimit-*``), and
    corrects the token estimate from the reported usage. A ``429`` is then retried, up to
    :attr:`rate_limit_retries` times, once the limiter allows (the limiter pauses every other
    call meanwhile, so the processor defers them); without a limiter it is captured at once.

    Attributes:
        endpoint: where to send (not serialized: it holds the API key).
        payload: the request body without ``stream`` (see :func:`build_payload`).
        client: an ``httpx.AsyncClient`` to use; ``None`` opens one for the call.
        limiter: see above.
        estimated_tokens: the token cost charged before the call (default: an estimate from
            the payload).
        rate_limit_retries: retries after a ``429`` when a limiter is bound.
        attempts: HTTP requests sent so far.
    """

    endpoint: Endpoint = attrs.field(metadata={NOT_SERIALIZED: True})
    payload: dict[str, Any] = attrs.field(factory=_new_payload)
    client: httpx.AsyncClient | None = attrs.field(
        default=None, repr=False, metadata={NOT_SERIALIZED: True}
    )
    limiter: RateLimiter | None = attrs.field(
        default=None, repr=False, metadata={NOT_SERIALIZED: True}
    )
    estimated_tokens: int = attrs.field(default=attrs.Factory(_estimate, takes_self=True))
    rate_limit_retries: int = 3
    attempts: int = attrs.field(default=0, init=False)
    _granted: bool = attrs.field(default=False, init=False, repr=False)

    _fresh_shared: ClassVar[frozenset[str]] = frozenset({"endpoint", "client", "limiter"})

    @property
    def request(self) -> dict[str, Any]:
        """``{"cost": estimated_tokens, "call": self}``, for a rate-limited processor."""
        return {"cost": self.estimated_tokens, "call": self}

    def grant(self, limiter: RateLimiter) -> None:
        """Record that *limiter* has granted this call (a processor calls this)."""
        self.limiter = limiter
        self._granted = True

    def ungrant(self) -> None:
        """Record that the grant was given back unused (a processor calls this): the call
        asks its limiter again when it runs."""
        self._granted = False

    # -- running --------------------------------------------------------------------------------

    async def _invoke(self) -> ModelResponse:
        async with _Session(self, stream=False) as response:
            body = await _read_body(response, self.endpoint.max_body_bytes)
        result = parse_body(self.endpoint.api, body)
        self._correct(result)
        return result

    async def _stream(self) -> AsyncGenerator[Any, None]:
        assembler = _Assembler(self.endpoint.api)
        async with _Session(self, stream=True) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                # Not a stream after all: the whole body is the one chunk.
                body = await _read_body(response, self.endpoint.max_body_bytes)
                result = parse_body(self.endpoint.api, body)
                yield _loads(body)
                self._correct(result)
                self.execution.response = result
                return
            try:
                limit = self.endpoint.max_body_bytes
                async with aclosing(_sse_chunks(response, limit)) as chunks:
                    async for chunk in chunks:
                        # After the end marker the rest is drained, not yielded: stopping
                        # early would leave httpx's nested body generators to the GC.
                        if not assembler.feed(chunk):
                            yield chunk
            except httpx.TransportError as exc:
                raise StreamTruncatedError(
                    f"stream cut short after {assembler.chunks} chunks: {exc!r}",
                    chunks=assembler.chunks,
                ) from exc
        result = assembler.result()
        self._correct(result)
        self.execution.response = result

    def _correct(self, result: ModelResponse) -> None:
        if self.limiter is not None and result.usage is not None:
            self.limiter.correct(self.estimated_tokens, result.usage.total_tokens)

    def _body(self, stream: bool) -> dict[str, Any]:
        body = dict(self.payload)
        if stream:
            body["stream"] = True
            if self.endpoint.api == "chat":
                body["stream_options"] = {"include_usage": True}
        else:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return body


class _Session:
    """Open the HTTP response for a call (after the limiter, retrying 429s); close it always."""

    def __init__(self, call: ModelCall, *, stream: bool) -> None:
        self.call = call
        self.stream = stream
        self.client: httpx.AsyncClient | None = None
        self.response: httpx.Response | None = None

    async def __aenter__(self) -> httpx.Response:
        call = self.call
        endpoint = call.endpoint
        self.client = client = call.client or httpx.AsyncClient(timeout=endpoint.timeout)
        own = call.client is None
        try:
            body = call._body(self.stream)
            retries = 0
            while True:
                limiter = call.limiter
                if limiter is not None and not call._granted:
                    await limiter.acquire(call.estimated_tokens)
                call._granted = False
                call.attempts += 1
                try:
                    request = client.build_request(
                        "POST", endpoint.url, json=body, headers=endpoint.request_headers()
                    )
                    response = await client.send(request, stream=True)
                except httpx.TransportError as exc:
                    raise ModelConnectionError(
                        f"request to {endpoint.url} failed: {exc!r}"
                    ) from exc
                self.response = response
                if limiter is not None:
                    limiter.observe(response.status_code, response.headers)
                if response.status_code < 400:
                    return response
                error = await _provider_error(response)
                await _close(response)
                self.response = None
                if not (error.rate_limited and limiter is not None):
                    raise error
                limiter.correct(call.estimated_tokens, 0)
                if retries >= call.rate_limit_retries:
                    raise error
                retries += 1
        except BaseException:
            if self.response is not None:
                await _close(self.response)
                self.response = None
            if own:
                await _close(client)
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        if self.response is not None:
            await _close(self.response)
        if self.call.client is None and self.client is not None:
            await _close(self.client)


async def _close(closable: httpx.Response | httpx.AsyncClient) -> None:
    """Close a response or client: shielded, bounded (the connection is dropped either way)."""
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + _CLOSE_GRACE
        # A broken connection may fail to close cleanly; it is gone anyway.
        with contextlib.suppress(Exception):
            await closable.aclose()


async def _provider_error(response: httpx.Response) -> ProviderError:
    try:
        raw = await _read_body(response, 64 * 1024)
    except (StreamTruncatedError, MalformedResponseError, httpx.TransportError):
        raw = b""
    text = raw.decode("utf-8", "replace")
    body: object
    try:
        body = _loads(text)
    except MalformedResponseError:
        body = text[:4096]
    headers = {k.lower(): v for k, v in response.headers.items()}
    feedback = {
        k: v for k, v in headers.items() if k in _FEEDBACK_HEADERS or k.startswith("x-ratelimit-")
    }
    return ProviderError(
        response.status_code, body, retry_after=retry_after_seconds(headers), headers=feedback
    )


async def _read_body(response: httpx.Response, limit: int) -> bytes:
    """The decoded (decompressed) body, refused once it exceeds *limit* bytes: a compressed
    body is counted as it decompresses, so a small one that expands too far is refused after
    the read that crosses the limit."""
    parts: list[bytes] = []
    size = 0
    try:
        async for part in response.aiter_bytes():
            size += len(part)
            if size > limit:
                raise MalformedResponseError(
                    f"response body exceeds {limit} bytes",
                    body=b"".join(parts)[:4096].decode("utf-8", "replace"),
                )
            parts.append(part)
    except httpx.DecodingError as exc:
        raise _undecodable(response, exc) from exc
    except httpx.TransportError as exc:
        raise StreamTruncatedError(
            f"response body cut short after {size} bytes: {exc!r}", chunks=0
        ) from exc
    return b"".join(parts)


def _undecodable(response: httpx.Response, exc: httpx.DecodingError) -> MalformedResponseError:
    encoding = response.headers.get("content-encoding", "")
    return MalformedResponseError(
        f"provider sent a body that cannot be decoded (content-encoding {encoding!r}): {exc}"[:300]
    )


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} is not JSON")


def _loads(text: str | bytes) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise MalformedResponseError(
            f"provider sent a body that is not JSON ({exc.__class__.__name__}: {exc})"[:300],
            body=shown,
        ) from None


# -- reading bodies ---------------------------------------------------------------------------


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


def parse_body(api: Api, raw: bytes | str) -> ModelResponse:
    """Read a complete (non-streamed) response body.

    Raises:
        MalformedResponseError: not JSON, or not the shape of *api*'s responses.
        UnknownFinishReasonError: a finish reason outside :data:`FINISH_REASONS`.
    """
    body = _loads(raw)
    _shape(isinstance(body, Mapping), "JSON object", body)
    if api == "chat":
        return parse_chat(body)
    if api == "responses":
        return parse_responses(body)
    return parse_anthropic(body)


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


# -- streams ----------------------------------------------------------------------------------


async def _sse_chunks(response: httpx.Response, limit: int) -> AsyncGenerator[Any, None]:
    """Each server-sent event's data: parsed JSON, or the string ``"[DONE]"``.

    Raises :class:`MalformedResponseError` once the stream exceeds *limit* bytes (decoded),
    checked on every read: lines are split here, so a line that never ends is refused as soon
    as it passes the limit, not buffered whole.
    """
    data: list[str] = []
    pending = bytearray()  # the unfinished line
    size = 0
    try:
        async for part in response.aiter_bytes():
            size += len(part)
            if size > limit:
                raise MalformedResponseError(f"streamed response exceeds {limit} bytes")
            for line in _lines(pending, part):
                if line:
                    _keep_data(line, data)
                elif data:
                    yield _event(data)
    except httpx.DecodingError as exc:
        raise _undecodable(response, exc) from exc
    _keep_data(bytes(pending.rstrip(b"\r")), data)  # the last line, if the stream did not end it
    if data:
        yield _event(data)


def _event(data: list[str]) -> Any:
    """The event whose ``data`` lines *data* holds (emptied): parsed JSON, or ``"[DONE]"``."""
    text = "\n".join(data)
    data.clear()
    return text if text.strip() == "[DONE]" else _loads(text)


def _keep_data(line: bytes, data: list[str]) -> None:
    """Append the value of a ``data`` field *line* to *data* (other fields and comments, and
    a blank *line*, are ignored here)."""
    field, _, value = line.decode("utf-8", "replace").partition(":")
    if field == "data":
        data.append(value[1:] if value.startswith(" ") else value)


def _lines(pending: bytearray, part: bytes) -> list[bytes]:
    """The lines *part* completes, without their ends (``\\r\\n``, ``\\n`` or ``\\r``); the
    unfinished rest stays in *pending*. A line ended by ``\\r`` waits there for the next part,
    which may start with the ``\\n`` of the same line end."""
    lines: list[bytes] = []
    for piece in part.splitlines(keepends=True):
        if pending.endswith(b"\r"):
            lines.append(bytes(pending[:-1]))
            pending.clear()
            if piece == b"\n":
                continue
        pending += piece
        if pending.endswith(b"\n"):
            lines.append(bytes(pending.rstrip(b"\r\n")))
            pending.clear()
    return lines


@attrs.define
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = attrs.Factory(list)


@attrs.define
class _Assembler:
    """Assembles the final response from a stream's chunks."""

    api: Api
    chunks: int = 0
    text: list[str] = attrs.Factory(list)
    calls: dict[int, _PartialCall] = attrs.Factory(dict)
    finish: object = None
    usage: Usage | None = None
    model: str | None = None
    id: str | None = None
    done: bool = False
    final: ModelResponse | None = None
    input_tokens: int = 0

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
        if self.api == "chat":
            self._chat(chunk)
        elif self.api == "responses":
            self._responses(chunk)
        else:
            self._anthropic(chunk)
        return False

    def _chat(self, chunk: Mapping[str, Any]) -> None:
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

    def _responses(self, chunk: Mapping[str, Any]) -> None:
        kind = chunk.get("type")
        if kind in ("response.completed", "response.incomplete"):
            response: Any = chunk.get("response")
            _shape(isinstance(response, Mapping), "response in the final event", chunk)
            self.final = parse_responses(response)
            self.done = True
        elif kind in ("error", "response.failed"):
            raise ProviderError(200, dict(chunk))

    def _anthropic(self, chunk: Mapping[str, Any]) -> None:
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
        if self.api == "anthropic":
            return self._assembled(_ANTHROPIC_FINISH, "message_stop")
        if self.api == "responses":
            if self.final is None:
                raise StreamTruncatedError(
                    f"stream ended after {self.chunks} chunks without response.completed",
                    chunks=self.chunks,
                )
            return self.final
        return self._assembled(_CHAT_FINISH, "[DONE]")

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


def text_delta(chunk: Any) -> str:
    """The assistant text a stream chunk adds (any of the three APIs), or ``""``."""
    if not isinstance(chunk, Mapping):
        return ""
    kind = chunk.get("type")
    if kind == "response.output_text.delta":
        delta = chunk.get("delta")
        return delta if isinstance(delta, str) else ""
    if kind == "content_block_delta":
        block = chunk.get("delta")
        if isinstance(block, Mapping) and block.get("type") == "text_delta":
            text = block.get("text")
            return text if isinstance(text, str) else ""
        return ""
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        delta = choices[0].get("delta")
        if isinstance(delta, Mapping) and isinstance(delta.get("content"), str):
            return str(delta["content"])
    return ""


# -- requests ---------------------------------------------------------------------------------


def build_payload(
    api: Api,
    model: str,
    messages: Sequence[Mapping[str, Any]] | MessageManager,
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    **params: Any,
) -> dict[str, Any]:
    """A request body for *api* from a history or OpenAI chat *messages*, and OpenAI chat
    *tools*.

    A :class:`~lionexec.conversation.MessageManager` (what :func:`~lionexec.models.run`
    passes) is exported for *api* by its own exports: ``to_openai()``, ``to_responses()``,
    or ``to_anthropic()`` (its messages, and its system text as ``system``).

    OpenAI chat *messages* are converted. For ``"responses"`` they become ``input`` items
    (assistant tool calls become ``function_call`` items, tool results
    ``function_call_output`` items, a user message's content parts ``input_text``,
    ``input_image`` and ``input_file`` parts). For ``"anthropic"`` system messages become
    ``system``, assistant tool calls ``tool_use`` blocks (arguments that are not a strict JSON
    object are sent as ``{}``; call ids as
    :func:`~lionexec.conversation.export.anthropic_tool_id` maps them), tool results
    ``tool_result`` blocks of a user turn, a user message's content parts ``text``, ``image``
    and ``document`` blocks; blank text is left out. A part that cannot be sent is named in
    text, never dropped. (Chat messages do not say which calls failed, so ``tool_result``
    blocks carry no ``is_error``: pass the history for that.)

    For ``"anthropic"``, ``max_tokens`` defaults to :data:`ANTHROPIC_MAX_TOKENS`. *params*
    (``temperature``, ``max_tokens``, ...) are passed through.
    """
    payload: dict[str, Any] = {"model": model}
    if isinstance(messages, MessageManager):
        payload.update(_exported(api, messages))
    elif api == "chat":
        payload["messages"] = [dict(m) for m in messages]
    elif api == "responses":
        payload["input"] = _responses_input(messages)
    else:
        payload.update(_anthropic_messages(messages))
    if tools:
        payload["tools"] = [_tool(api, t) for t in tools]
    if api == "anthropic":
        payload["max_tokens"] = ANTHROPIC_MAX_TOKENS
    payload.update(params)
    return payload


def _exported(api: Api, history: MessageManager) -> dict[str, Any]:
    """The conversation part of a request for *api*: *history* exported by its own exports."""
    if api == "chat":
        return {"messages": history.to_openai()}
    if api == "responses":
        return {"input": history.to_responses()}
    return dict(history.to_anthropic())


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


def _tool(api: Api, tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat *tool* in *api*'s shape."""
    if api == "responses":
        return _responses_tool(tool)
    if api == "anthropic":
        return _anthropic_tool(tool)
    return dict(tool)


def _responses_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, Mapping):
        return {"type": "function", **function}
    return dict(tool)


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


def _responses_part(part: ContentPart | _ImageUrl) -> dict[str, Any]:
    if isinstance(part, _ImageUrl):
        return {"type": "input_image", "image_url": part.url, "detail": "auto"}
    return responses_part(part)


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
    ``act()`` could read them (:func:`~lionexec.act.envelope.read_arguments`: not NaN,
    Infinity, a number past the float range, a repeated name, nesting too deep: a model
    may send any of those, and ``act()`` answered the call ``invalid``)."""
    arguments, _ = read_arguments(raw)
    converted = strict_json(arguments or {})
    return converted if isinstance(converted, dict) else {}


def _anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, Mapping):
        spec = {"name": function.get("name"), "input_schema": function.get("parameters") or {}}
        if function.get("description"):
            spec["description"] = function["description"]
        return spec
    return dict(tool)
