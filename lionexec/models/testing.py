"""A local OpenAI-compatible provider that replays a script, for tests and the demo.

Needs ``hypercorn`` (and the ``http`` extra for the client side). Start it in a nursery::

    provider = LocalProvider([Reply(text="hi")])
    base_url = await nursery.start(provider.serve)   # "http://127.0.0.1:<port>/v1"

It answers ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/messages``
(Anthropic), streaming server-sent events when the request says ``"stream": true``. Each
request takes the next step of the script (or *default* when the script is used up):

* :class:`Reply`: a completion (text, tool calls, finish reason, usage), whole or streamed;
* :class:`Fail`: an HTTP error status, e.g. ``429`` with ``Retry-After``, or ``500``;
* :class:`Raw`: any body, e.g. one that is not JSON;
* :class:`Disconnect`: the connection dropped after some chunks (a truncated stream or body);
* :class:`Stall`: some chunks, then nothing until a :class:`trio.Event` is set (a slow body).

With ``limiter=RateLimiter(...)`` the provider also enforces a rate limit of its own, answering
``429`` with ``retry-after-ms``/``Retry-After`` and ``x-ratelimit-*`` headers when it is
exceeded: requests, and, when the limiter has a token budget, tokens (a reply costs its
``usage``, input and output). Every answer it grants carries the budgets left, as a real
provider's do: ``x-ratelimit-remaining-requests`` / ``-tokens`` (and, on the Anthropic route,
``anthropic-ratelimit-requests-remaining`` / ``-tokens-remaining`` with an RFC 3339
``-reset`` time). Everything it received and did is kept for assertions
(:attr:`LocalProvider.log`).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import trio

from lionexec._extras import missing_extra

try:
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
except ModuleNotFoundError as exc:  # (the server extra)
    raise missing_extra(exc, "server", "lionexec.models.testing (the local provider)") from exc

from lionexec.conversation.formats import FormatName
from lionexec.limits import RateLimiter

from .formats import MODEL_FORMATS

__all__ = ["Disconnect", "Fail", "LocalProvider", "ProviderLog", "Raw", "Reply", "Stall", "Step"]


@attrs.frozen
class Reply:
    """A completion.

    Attributes:
        text: the assistant text.
        tool_calls: ``(name, arguments)`` pairs; arguments a mapping (sent as JSON) or a
            string sent as is (so malformed JSON can be scripted).
        finish_reason: sent as given; ``None`` picks ``"tool_calls"`` or ``"stop"``.
        usage: ``(input_tokens, output_tokens)``.
        chunk_size: characters of text per streamed chunk.
        headers: extra response headers.
    """

    text: str = ""
    tool_calls: Sequence[tuple[str, Mapping[str, Any] | str]] = ()
    finish_reason: str | None = None
    usage: tuple[int, int] = (12, 5)
    chunk_size: int = 8
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Fail:
    """An HTTP error: *status* with an OpenAI-style error body and optional ``Retry-After``."""

    status: int = 500
    message: str = "scripted failure"
    retry_after: float | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Raw:
    """A response body sent exactly as given."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"


@attrs.frozen
class Disconnect:
    """Send *reply*'s first *after_chunks* chunks (a streamed one), or part of its body, then
    drop the connection."""

    reply: Reply = Reply(text="this answer is cut short")
    after_chunks: int = 1


@attrs.frozen
class Stall:
    """Send *reply*'s first *after_chunks* chunks (or, not streamed, half its body), then
    wait for *release* (forever if ``None``) before sending the rest. A client that
    disconnects meanwhile is recorded."""

    reply: Reply = Reply(text="a slow answer")
    after_chunks: int = 1
    release: trio.Event | None = attrs.field(default=None, eq=False)


Step = Reply | Fail | Raw | Disconnect | Stall


@attrs.define
class ProviderLog:
    """What the provider saw: request bodies, answers by status, disconnects."""

    requests: list[dict[str, Any]] = attrs.Factory(list)
    statuses: list[int] = attrs.Factory(list)
    disconnects: int = 0
    chunks_sent: int = 0
    sent: list[bytes] = attrs.Factory(list)
    """The stream chunks sent, as bytes (every request's, in order)."""
    arrivals: list[float] = attrs.Factory(list)
    """When each request arrived (trio's clock), in order."""
    stalled: int = 0


class LocalProvider:
    """The scripted provider (see the module docstring). An ASGI application."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        default: Step | None = None,
        limiter: RateLimiter | None = None,
        model: str = "local-model",
    ) -> None:
        self.script: deque[Step] = deque(script)
        self.default = default
        self.limiter = limiter
        self.model = model
        self.log = ProviderLog()
        self._changed = trio.Event()
        self._ids = 0
        #: The base URL (``http://127.0.0.1:<port>/v1``) once :meth:`serve` has started.
        self.base_url: str | None = None

    def add(self, *steps: Step) -> None:
        """Append steps to the script."""
        self.script.extend(steps)

    async def wait_for(self, predicate: Any) -> None:
        """Block until ``predicate(self.log)`` is true (checked after every change)."""
        while not predicate(self.log):
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    def _touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def serve(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; ``nursery.start`` returns the base URL (``.../v1``)."""
        config = Config()
        config.bind = [f"{host}:{port}"]
        config.graceful_timeout = 0.5
        config.accesslog = None
        config.errorlog = logging.getLogger(__name__)  # dropped connections log here
        async with trio.open_nursery() as nursery:
            urls: list[str] = await nursery.start(hypercorn_serve, self, config)
            self.base_url = urls[0].rstrip("/") + "/v1"
            task_status.started(self.base_url)

    # -- ASGI -----------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope["path"]
        api = _ROUTES.get(path)
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":  # cut short: its client went away
                self.log.disconnects += 1
                self._touch()
                return
            raw += message.get("body", b"")  # type: ignore[operator]
            if not message.get("more_body"):
                break
        if api is None or scope["method"] != "POST":
            await _send_json(send, 404, {"error": {"message": f"no route {path}"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unreadable": raw[:200].decode("utf-8", "replace")}
        self.log.requests.append(body)
        self.log.arrivals.append(trio.current_time())
        self._touch()
        try:
            await self._answer(api, body, receive, send)
        finally:
            self._touch()

    async def _answer(
        self,
        api: FormatName,
        body: dict[str, Any],
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
    ) -> None:
        budget: dict[str, str] = {}
        if self.limiter is not None:
            wait = self.limiter.try_acquire(self._cost())
            budget = _budget_headers(self.limiter, api)
            if wait:
                self.log.statuses.append(429)
                headers = {
                    "retry-after": str(math.ceil(wait)),
                    "retry-after-ms": f"{wait * 1000:.3f}",
                    "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": f"{wait:.3f}s",
                }
                headers = {**budget, **headers}
                await _send_json(send, 429, _error("rate limit reached", "rate_limit"), headers)
                return
        step = self.script.popleft() if self.script else self.default
        if step is None:
            step = Fail(500, "the local provider's script is used up")
        stream = bool(body.get("stream")) if isinstance(body, dict) else False
        if isinstance(step, Fail):
            self.log.statuses.append(step.status)
            headers = dict(step.headers)
            if step.retry_after is not None:
                headers["retry-after"] = str(math.ceil(step.retry_after))
                headers["retry-after-ms"] = f"{step.retry_after * 1000:.3f}"
            await _send_json(send, step.status, _error(step.message, "scripted"), headers)
            return
        if isinstance(step, Raw):
            self.log.statuses.append(step.status)
            await _start(send, step.status, [(b"content-type", step.content_type.encode())])
            await send({"type": "http.response.body", "body": step.body, "more_body": False})
            return
        self.log.statuses.append(200)
        reply = step if isinstance(step, Reply) else step.reply
        answer_headers = {**budget, **reply.headers}
        self._ids += 1
        ident = f"{_ANSWERS[api].prefix}-{self._ids}"
        if not stream:
            payload = json.dumps(self._whole(api, ident, reply)).encode()
            if isinstance(step, Disconnect | Stall):
                await _start(
                    send,
                    200,
                    [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                    ],
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": payload[: len(payload) // 2],
                        "more_body": True,
                    }
                )
                if isinstance(step, Disconnect):
                    self.log.disconnects += 1
                    raise _Dropped
                self.log.stalled += 1
                self._touch()
                if not await _wait_release(step.release, receive):
                    self.log.disconnects += 1
                    return
                rest = payload[len(payload) // 2 :]
                await send({"type": "http.response.body", "body": rest, "more_body": False})
                return
            await _send_json(send, 200, self._whole(api, ident, reply), answer_headers)
            return
        chunks = self._chunks(api, ident, reply)
        await _start(
            send,
            200,
            [
                (b"content-type", b"text/event-stream"),
                *((k.encode(), v.encode()) for k, v in answer_headers.items()),
            ],
        )
        cut = step.after_chunks if isinstance(step, Disconnect | Stall) else len(chunks)
        for chunk in chunks[:cut]:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.log.chunks_sent += 1
            self.log.sent.append(chunk)
            self._touch()
        if isinstance(step, Disconnect):
            self.log.disconnects += 1
            raise _Dropped
        if isinstance(step, Stall):
            self.log.stalled += 1
            self._touch()
            if not await _wait_release(step.release, receive):
                self.log.disconnects += 1
                return
        for chunk in chunks[cut:]:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.log.chunks_sent += 1
            self.log.sent.append(chunk)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _cost(self) -> int:
        """The tokens the next answer costs (its usage), within the limiter's token burst."""
        limiter = self.limiter
        if limiter is None or limiter.token_burst is None:
            return 0
        step = self.script[0] if self.script else self.default
        reply = step.reply if isinstance(step, Disconnect | Stall) else step
        if not isinstance(reply, Reply):
            return 0
        return min(limiter.token_burst, sum(reply.usage))

    # -- bodies ---------------------------------------------------------------------------------

    def _finish(self, reply: Reply) -> str:
        if reply.finish_reason is not None:
            return reply.finish_reason
        return "tool_calls" if reply.tool_calls else "stop"

    def _calls(self, reply: Reply) -> list[tuple[str, str, str]]:
        return [
            (f"call_{self._ids}_{i}", name, args if isinstance(args, str) else json.dumps(args))
            for i, (name, args) in enumerate(reply.tool_calls)
        ]

    def _whole(self, api: FormatName, ident: str, reply: Reply) -> dict[str, Any]:
        return _ANSWERS[api].whole(self, ident, reply)

    def _chat_whole(self, ident: str, reply: Reply) -> dict[str, Any]:
        calls = self._calls(reply)
        tokens_in, tokens_out = reply.usage
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in calls
            ]
        return {
            "id": ident,
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }

    def _responses_whole(self, ident: str, reply: Reply) -> dict[str, Any]:
        calls = self._calls(reply)
        tokens_in, tokens_out = reply.usage
        output: list[dict[str, Any]] = []
        if reply.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg-{self._ids}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call_id, name, args in calls:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc-{call_id}",
                    "call_id": call_id,
                    "name": name,
                    "arguments": args,
                    "status": "completed",
                }
            )
        finish = self._finish(reply)
        status = {"stop": "completed", "tool_calls": "completed", "length": "incomplete"}.get(
            finish, finish
        )
        result: dict[str, Any] = {
            "id": ident,
            "object": "response",
            "model": self.model,
            "status": status,
            "output": output,
            "usage": {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }
        if status == "incomplete":
            result["incomplete_details"] = {"reason": "max_output_tokens"}
        return result

    def _anthropic_whole(self, ident: str, reply: Reply) -> dict[str, Any]:
        calls = self._calls(reply)
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call_id, name, args in calls:
            try:
                arguments = json.loads(args)
            except ValueError:
                arguments = args  # scripted malformed arguments, sent as a string
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
        finish = self._finish(reply)
        stop = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}.get(
            finish, finish
        )
        tokens_in, tokens_out = reply.usage
        return {
            "id": ident,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
        }

    def _anthropic_chunks(self, ident: str, reply: Reply, pieces: list[str]) -> list[bytes]:
        whole = self._anthropic_whole(ident, reply)
        start = {**whole, "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": reply.usage[0], "output_tokens": 0}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        index = 0
        if pieces:
            events.append(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            events += [
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                }
                for piece in pieces
            ]
            events.append({"type": "content_block_stop", "index": 0})
            index = 1
        for block in whole["content"]:
            if block["type"] != "tool_use":
                continue
            args = (
                block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            )
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": block["id"],
                        "name": block["name"],
                        "input": {},
                    },
                }
            )
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": part},
                    }
                )
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": reply.usage[1]},
            }
        )
        events.append({"type": "message_stop"})
        return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]

    def _chunks(self, api: FormatName, ident: str, reply: Reply) -> list[bytes]:
        size = max(1, reply.chunk_size)
        pieces = [reply.text[i : i + size] for i in range(0, len(reply.text), size)]
        return _ANSWERS[api].chunks(self, ident, reply, pieces)

    def _responses_chunks(self, ident: str, reply: Reply, pieces: list[str]) -> list[bytes]:
        events: list[dict[str, Any]] = [
            {"type": "response.output_text.delta", "delta": piece} for piece in pieces
        ]
        events.append(
            {"type": "response.completed", "response": self._responses_whole(ident, reply)}
        )
        return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]

    def _chat_chunks(self, ident: str, reply: Reply, pieces: list[str]) -> list[bytes]:
        base = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": self.model}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": piece}) for piece in pieces]
        for index, (call_id, name, args) in enumerate(self._calls(reply)):
            half = len(args) // 2
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": args[:half]},
                            }
                        ]
                    }
                )
            )
            out.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})
            )
        out.append(chunk({}, self._finish(reply)))
        tokens_in, tokens_out = reply.usage
        out.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": tokens_in,
                    "completion_tokens": tokens_out,
                    "total_tokens": tokens_in + tokens_out,
                },
            }
        )
        encoded = [f"data: {json.dumps(c)}\n\n".encode() for c in out]
        encoded.append(b"data: [DONE]\n\n")
        return encoded


@attrs.frozen
class _Answers:
    """How the local provider answers on one API: the id prefix, whole and streamed bodies."""

    prefix: str
    whole: Callable[[LocalProvider, str, Reply], dict[str, Any]]
    chunks: Callable[[LocalProvider, str, Reply, list[str]], list[bytes]]


_ANSWERS: Final[Mapping[FormatName, _Answers]] = {
    "chat": _Answers("chatcmpl", LocalProvider._chat_whole, LocalProvider._chat_chunks),
    "responses": _Answers("resp", LocalProvider._responses_whole, LocalProvider._responses_chunks),
    "anthropic": _Answers("msg", LocalProvider._anthropic_whole, LocalProvider._anthropic_chunks),
}
#: The API each path answers (``/v1`` and the format's path).
_ROUTES: Final[Mapping[str, FormatName]] = {
    "/v1" + MODEL_FORMATS[api].path: api for api in _ANSWERS
}


class _Dropped(Exception):
    """Raised inside the ASGI app to make the server drop the connection mid-response."""


async def _wait_release(release: trio.Event | None, receive: ASGIReceiveCallable) -> bool:
    """Wait for *release*; return ``False`` if the client disconnected first."""
    released = False
    async with trio.open_nursery() as nursery:

        async def wait_release() -> None:
            nonlocal released
            if release is None:
                await trio.sleep_forever()
            else:
                await release.wait()
            released = True
            nursery.cancel_scope.cancel()

        async def wait_disconnect() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(wait_release)
        nursery.start_soon(wait_disconnect)
    return released


def _budget_headers(limiter: RateLimiter, api: FormatName) -> dict[str, str]:
    """The budgets *limiter* has left, as a provider states them on every answer."""
    stats = limiter.statistics()
    headers: dict[str, str] = {}
    for kind, left in (("requests", stats.requests_available), ("tokens", stats.tokens_available)):
        if left is None:
            continue
        headers[f"x-ratelimit-remaining-{kind}"] = str(left)
        if api == "anthropic":
            reset = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=stats.period)
            headers[f"anthropic-ratelimit-{kind}-remaining"] = str(left)
            headers[f"anthropic-ratelimit-{kind}-reset"] = reset.isoformat().replace("+00:00", "Z")
    return headers


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


async def _send_json(
    send: ASGISendCallable,
    status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
) -> None:
    payload = json.dumps(body).encode()
    await _start(
        send,
        status,
        [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            *((k.encode(), v.encode()) for k, v in (headers or {}).items()),
        ],
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def _start(send: ASGISendCallable, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
