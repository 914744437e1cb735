"""``ModelCall``: one chat request to a model's endpoint, as an :class:`Event`.

Needs the ``http`` extra (``httpx``). Three endpoint shapes are spoken, one per provider
format (:mod:`lionexec.models.formats`): OpenAI Chat Completions (``"chat"``, ``POST
{base_url}/chat/completions``), OpenAI Responses (``"responses"``, ``POST
{base_url}/responses``) and Anthropic Messages (``"anthropic"``, ``POST {base_url}/messages``).
All three are normalized into one :class:`ModelResponse` whose
:meth:`~ModelResponse.message` is an OpenAI chat assistant message. This module is the HTTP
machinery they share; what differs per API is asked of the endpoint's format.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, ClassVar, Final

import attrs
import trio

from lionexec._extras import missing_extra

try:
    import httpx
except ModuleNotFoundError as exc:  # (the http extra)
    raise missing_extra(exc, "http", "lionexec.models (model calls over HTTP)") from exc

from lionexec.act import RetryPolicy
from lionexec.conversation import MessageManager
from lionexec.conversation.formats import FORMAT_ALIASES, FORMAT_NAMES, FormatName
from lionexec.conversation.formats.base import _canonical
from lionexec.engine import NOT_SERIALIZED, Event
from lionexec.limits import RateLimiter, retry_after_seconds

from ._errors import (
    MalformedResponseError,
    ModelConnectionError,
    ProviderError,
    StreamTruncatedError,
)
from ._response import ModelResponse
from .formats import MODEL_FORMATS, ModelFormat
from .formats.base import _shape

__all__ = [
    "Endpoint",
    "ModelCall",
    "build_payload",
    "close_client",
    "estimate_tokens",
    "open_client",
    "parse_body",
    "text_delta",
]

_FEEDBACK_HEADERS = ("retry-after", "retry-after-ms")
_CLOSE_GRACE: Final = 1.0


def _api_name(value: object) -> object:
    """A deprecated alias of a format name as the name it stands for (warning); anything else
    as it is, for the validator."""
    if isinstance(value, str) and value in FORMAT_ALIASES:
        return _canonical(value, 4)  # the caller of Endpoint(...)
    return value


@attrs.frozen
class Endpoint:
    """Where and how to send requests.

    Attributes:
        base_url: e.g. ``"https://api.openai.com/v1"``, ``"https://api.anthropic.com/v1"`` or a
            local provider's URL.
        api_key: sent as ``Authorization: Bearer ...`` (``x-api-key`` for Anthropic); never
            serialized or shown.
        api: the provider format: ``"chat"`` (OpenAI Chat Completions), ``"responses"``
            (OpenAI Responses) or ``"anthropic"`` (Anthropic Messages); see
            :mod:`lionexec.models.formats` (``"openai"``, a deprecated alias of ``"chat"``,
            warns).
        headers: extra request headers.
        timeout: seconds for connecting and between bytes read (httpx semantics), or ``None``.
        max_body_bytes: the largest response body read (default 16 MiB), counted decoded
            (decompressed) as it arrives, streamed or not; more is an error.
    """

    base_url: str = attrs.field(validator=attrs.validators.instance_of(str))
    api_key: str | None = attrs.field(default=None, repr=False)
    api: FormatName = attrs.field(
        default="chat", converter=_api_name, validator=attrs.validators.in_(FORMAT_NAMES)
    )
    headers: Mapping[str, str] = attrs.field(factory=dict)
    timeout: float | None = 60.0
    max_body_bytes: int = 16 * 1024 * 1024

    @property
    def url(self) -> str:
        """The full URL requests go to."""
        return self.base_url.rstrip("/") + _format(self).path

    def request_headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        headers.update(_format(self).auth_headers(self.api_key))
        headers.update(self.headers)
        return headers


def open_client(endpoint: Endpoint) -> httpx.AsyncClient:
    """A new ``httpx.AsyncClient`` for *endpoint*'s calls: its timeout, pooled connections,
    HTTP/2 offered when ``h2`` is installed (the ``http2`` extra of httpx)."""
    return httpx.AsyncClient(timeout=endpoint.timeout, http2=_HTTP2)


async def close_client(client: httpx.AsyncClient) -> None:
    """Close *client*: shielded and bounded, so cancellation never leaves it open."""
    await _close(client)


def _h2_available() -> bool:
    try:
        import h2  # noqa: F401
    except ImportError:
        return False
    return True


_HTTP2: Final = _h2_available()


def _format(endpoint: Endpoint) -> ModelFormat:
    """The endpoint's format (its ``api`` is a canonical name: the validator saw to it)."""
    return MODEL_FORMATS[endpoint.api]


def _new_payload() -> dict[str, Any]:
    return {}


def _estimate(call: ModelCall) -> int:
    return estimate_tokens(call.payload)


#: Output tokens charged up front for a request that names no output cap (``max_tokens``,
#: ``max_completion_tokens``, ``max_output_tokens``): Anthropic's default cap here, and no
#: more than the output limit of most chat models. Set the request's cap (``Model(params=
#: {"max_tokens": ...})``) to charge what the model may really produce.
DEFAULT_OUTPUT_TOKENS: Final = 4096


def estimate_tokens(
    payload: Mapping[str, Any], *, output_tokens: int = DEFAULT_OUTPUT_TOKENS
) -> int:
    """A request's tokens, counted so as never to fall short of what the provider charges:
    the UTF-8 bytes of its JSON body (every token of a byte-level tokenizer covers at least
    one byte, and the body's keys and quotes outweigh the messages' framing tokens), plus its
    output cap, or *output_tokens* when it names none. A rate limiter charges it before the
    call and replaces it with the usage the response reports, so the overcount is given back
    when the call ends. (An image named only by its URL is the exception: its tokens are not
    in the body; set :attr:`ModelCall.estimated_tokens` for such calls.)"""
    try:
        size = len(json.dumps(payload, default=str, ensure_ascii=False).encode("utf-8", "replace"))
    except (TypeError, ValueError, RecursionError):
        size = 0
    cap = 0
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            cap = max(cap, value)
    return size + 1 + (cap or output_tokens)


@attrs.define(kw_only=True, eq=False)
class ModelCall(Event):
    """One chat request, sent when the event is invoked (or streamed).

    :meth:`invoke` sends the request and records a :class:`ModelResponse` as the response.
    :meth:`stream` (with ``streaming=True`` under a processor) asks the provider to stream and
    yields every server-sent chunk unchanged, as the parsed JSON object the provider sent
    (the caller sees the provider's own events, not a translation of them); when the stream
    ends the assembled :class:`ModelResponse` is the response.

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
        client: an ``httpx.AsyncClient`` to use, as it is (never closed here); ``None`` opens
            one for this call alone and closes it after (a :class:`~lionexec.models.Model`
            passes its one pooled client to each of its calls).
        limiter: see above.
        estimated_tokens: the token cost charged before the call (default:
            :func:`estimate_tokens` of the payload, which never falls short: its bytes plus
            its output cap, or 4096 output tokens); settled against the usage the
            response reports.
        rate_limit_retries: retries after a ``429`` when a limiter is bound.
        retry: when to send the call again after a ``5xx`` (``500``-``599``) or a
            connection error (refused, reset, a timeout before the status), never after a
            ``4xx`` or once the response has begun: a :class:`~lionexec.act.RetryPolicy`
            (its ``attempts`` retries, each after its jittered exponential delay, or after the
            provider's ``Retry-After`` when it sent one); ``None``: never.
        deadline: seconds for the whole call, every attempt and wait included, or ``None``.
            A retry whose wait would end past it is not made (the last error is the call's);
            an attempt still waiting for its status when it passes is abandoned (a
            :class:`ModelConnectionError`). The body is bounded by :attr:`Endpoint.timeout`.
        attempts: HTTP requests sent so far.
        attempt_log: one entry per HTTP request sent, in order: ``{"attempt": n,
            "status": <HTTP status or None>, "error": <error type and message, or None>,
            "wait": <seconds waited after it before the next attempt, or None>}``.
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
    retry: RetryPolicy | None = attrs.field(default=None, metadata={NOT_SERIALIZED: True})
    deadline: float | None = None
    attempts: int = attrs.field(default=0, init=False)
    # An init field so that the record (to_dict) carries it; a fresh event starts empty.
    attempt_log: list[dict[str, Any]] = attrs.field(factory=list)
    _granted: bool = attrs.field(default=False, init=False, repr=False)

    _fresh_shared: ClassVar[frozenset[str]] = frozenset({"endpoint", "client", "limiter"})
    _fresh_excluded: ClassVar[frozenset[str]] = Event._fresh_excluded | {"attempt_log"}

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
        assembler = _format(self.endpoint).assembler()
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
            body.update(_format(self.endpoint).stream_fields())
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
        self.client = client = call.client or open_client(endpoint)
        own = call.client is None
        try:
            body = call._body(self.stream)
            retries = 0
            failures = 0
            policy = call.retry
            deadline = math.inf
            if call.deadline is not None:
                deadline = trio.current_time() + call.deadline
            while True:
                limiter = call.limiter
                if limiter is not None and not call._granted:
                    await limiter.acquire(call.estimated_tokens)
                call._granted = False
                call.attempts += 1
                entry: dict[str, Any] = {
                    "attempt": call.attempts,
                    "status": None,
                    "error": None,
                    "wait": None,
                }
                call.attempt_log.append(entry)
                failure: ModelConnectionError | ProviderError
                try:
                    request = client.build_request(
                        "POST", endpoint.url, json=body, headers=endpoint.request_headers()
                    )
                    with trio.move_on_at(deadline) as scope:
                        response = await client.send(request, stream=True)
                    if scope.cancelled_caught:
                        entry["error"] = "deadline passed waiting for the response"
                        raise ModelConnectionError(
                            f"request to {endpoint.url}: the call's deadline of "
                            f"{call.deadline} s passed after "
                            f"{call.attempts} attempts"
                        )
                except httpx.TransportError as exc:
                    failure = ModelConnectionError(f"request to {endpoint.url} failed: {exc!r}")
                    failure.__cause__ = exc
                    entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
                else:
                    self.response = response
                    entry["status"] = response.status_code
                    if limiter is not None:
                        limiter.observe(response.status_code, response.headers)
                    if response.status_code < 400:
                        return response
                    error = await _provider_error(response)
                    await _close(response)
                    self.response = None
                    if error.rate_limited and limiter is not None:
                        limiter.correct(call.estimated_tokens, 0)
                        if retries >= call.rate_limit_retries:
                            raise error
                        retries += 1
                        continue
                    if response.status_code < 500:
                        raise error
                    failure = error
                failures += 1
                if policy is None or failures > policy.attempts:
                    raise failure
                retry_after = failure.retry_after if isinstance(failure, ProviderError) else None
                wait = policy.delay(failures - 1) if retry_after is None else retry_after
                if trio.current_time() + wait > deadline:
                    raise failure
                entry["wait"] = wait
                await trio.sleep(wait)
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


def parse_body(api: str, raw: bytes | str) -> ModelResponse:
    """Read a complete (non-streamed) response body of the format named *api*.

    Raises:
        ConfigurationError: *api* names no format.
        MalformedResponseError: not JSON, or not the shape of *api*'s responses.
        UnknownFinishReasonError: a finish reason outside :data:`~lionexec.models.FINISH_REASONS`.
    """
    format = MODEL_FORMATS[_canonical(api, 3)]
    body = _loads(raw)
    _shape(isinstance(body, Mapping), "JSON object", body)
    return format.parse(body)


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


def text_delta(chunk: Any) -> str:
    """The assistant text a stream chunk adds (any of the three APIs), or ``""``.

    Each format reads its own text events; Chat Completions chunks name no event type, so
    that format is asked last.
    """
    if not isinstance(chunk, Mapping):
        return ""
    for format in _DELTA_ORDER:
        delta = format.text_delta(chunk)
        if delta is not None:
            return delta
    return ""


_DELTA_ORDER: Final = tuple(MODEL_FORMATS[name] for name in ("responses", "anthropic", "chat"))


# -- requests ---------------------------------------------------------------------------------


def build_payload(
    api: str,
    model: str,
    messages: Sequence[Mapping[str, Any]] | MessageManager,
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    **params: Any,
) -> dict[str, Any]:
    """A request body for the format named *api* from a history or OpenAI chat *messages*,
    and OpenAI chat *tools*.

    A :class:`~lionexec.conversation.MessageManager` (what :func:`~lionexec.models.run`
    passes) is exported for *api* by its own exports: ``to_openai()``, ``to_responses()``,
    or ``to_anthropic()`` (its messages, and its system text as ``system``).

    OpenAI chat *messages* are converted. For ``"responses"`` they become ``input`` items
    (assistant tool calls become ``function_call`` items, tool results
    ``function_call_output`` items, a user message's content parts ``input_text``,
    ``input_image`` and ``input_file`` parts). For ``"anthropic"`` system messages become
    ``system``, assistant tool calls ``tool_use`` blocks (arguments that are not a strict JSON
    object are sent as ``{}``; call ids as
    :func:`~lionexec.conversation.formats.anthropic_tool_id` maps them), tool results
    ``tool_result`` blocks of a user turn, a user message's content parts ``text``, ``image``
    and ``document`` blocks; blank text is left out. A part that cannot be sent is named in
    text, never dropped. (Chat messages do not say which calls failed, so ``tool_result``
    blocks carry no ``is_error``: pass the history for that.)

    For ``"anthropic"``, ``max_tokens`` defaults to
    :data:`~lionexec.models.formats.ANTHROPIC_MAX_TOKENS`. *params* (``temperature``,
    ``max_tokens``, ...) are passed through.

    Raises:
        ConfigurationError: *api* names no format (the message lists the valid names).
    """
    format = MODEL_FORMATS[_canonical(api, 3)]
    payload: dict[str, Any] = {"model": model}
    if isinstance(messages, MessageManager):
        payload.update(format.provider.request_fields(messages))
    else:
        payload.update(format.convert_messages(messages))
    if tools:
        payload["tools"] = [format.tool(t) for t in tools]
    payload.update(format.defaults())
    payload.update(params)
    return payload
