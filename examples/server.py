"""lionexec inside a trio server: tool calls over HTTP, on hypercorn's trio worker.

Run it with ``python examples/server.py --port 8000`` (127.0.0.1 unless ``--host`` says
otherwise; ``--port 0`` picks a free port and prints it). It needs ``hypercorn``.

Endpoints (JSON in, JSON out; errors are ``{"error": "<what was wrong>"}``):

``POST /v1/act``
    Body: ``{"conversation_id": str, "tool_calls": [OpenAI tool_calls items],
    "strategy"?: "concurrent" | "sequential"}``. Runs the calls through ``Branch.act`` and
    replies ``{"conversation_id": ..., "messages": [...]}``: one OpenAI tool message per call,
    in input order, ``{"role": "tool", "tool_call_id", "content", "status", "outcome"}``.
    A conversation is created by its first ``POST /v1/act`` (there is no create endpoint);
    ids are 1-128 characters of letters, digits and ``._~:-``. Bad bodies get a 400 naming the
    problem (invalid JSON, a missing or malformed field, an unreadable tool call: nothing is
    recorded and no conversation is created), bodies over 1 MiB a 413.

``GET /v1/conversations/{id}``
    The history: ``{"conversation_id", "messages": <OpenAI chat messages>, "records": <every
    message as lionexec serializes it>}``. It reads a consistent snapshot without waiting for
    calls in progress. Unknown ids get a 404.

``GET /v1/events`` (optionally ``?conversation_id=...``)
    A server-sent-events stream of lifecycle events, each ``id: <n>``, ``event: <type>``,
    ``data: <JSON object with conversation_id>``. Types: ``act.start``, ``tool.post`` and
    ``tool.error`` (the branch's hook bus, for calls that ran), ``message.add`` (the history's
    message callbacks: each request and response written), ``act.end`` (the statuses, in input
    order) and ``act.cancelled`` (the client went away; the calls recorded ``cancelled``).
    The stream opens with the comment ``: subscribed``; once a client has read it, every later
    event reaches it.

Concurrency: each conversation is one :class:`~lionexec.Branch` with a :class:`trio.Lock`;
requests to one conversation run one after another, requests to different ones in parallel.

Cancellation: while a request runs, its handler also listens for ``http.disconnect``; a client
that goes away cancels the request. ``Branch.act`` then records each call it had not finished
as ``cancelled`` before the cancellation propagates (calls already finished keep their
outcome), and announces them (``tool.error`` with status ``cancelled`` for calls that had
started, ``message.add``) within ``Branch.cancel_grace``; the server then publishes
``act.cancelled`` with their ids. A request whose client leaves while it still waits for the
conversation's lock never reached the conversation, so nothing is recorded for it. Nothing is
sent back to a client that is gone.

Slow subscribers never hold up tool calls: events are published with ``send_nowait`` into a
bounded memory channel per subscriber (``subscriber_buffer``, 256 events by default). A
subscriber whose buffer is full is disconnected, not silently thinned out: it gets the events
already buffered, then an ``event: overflow`` and the end of the stream. Event ids are
consecutive across the server, so a client can tell whether it missed anything and re-read
the history after reconnecting. On shutdown every stream ends. (There is no keep-alive
comment: a client that vanishes is noticed through ``http.disconnect``.)
"""

from __future__ import annotations

import argparse
import json
import re
import signal
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from lionexec import ActionOutcome, ActionRequest, ActionResponse, Branch, HookPoint
from lionexec.act import read_proposal
from lionexec.conversation import Message, result_text
from lionexec.serialization import converter

__all__ = ["DEMO_TOOLS", "App", "Conversation", "EventHub", "ServerEvent", "serve"]

T = TypeVar("T")

MAX_BODY: Final = 1 << 20
STRATEGIES: Final = ("concurrent", "sequential")
CONVERSATION_ID: Final = re.compile(r"[A-Za-z0-9._~:-]{1,128}")
JSON_HEADERS: Final = [(b"content-type", b"application/json")]
OVERFLOW: Final = b'event: overflow\ndata: {"reason": "subscriber buffer full"}\n\n'
SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


# -- demo tools ----------------------------------------------------------------------------------


async def get_weather(city: str) -> dict[str, Any]:
    """Today's (made-up) weather for a city. An async tool."""
    await trio.lowlevel.checkpoint()
    return {"city": city, "forecast": "sunny", "high_c": 21}


def word_count(text: str) -> int:
    """Count the words in a text. A sync tool: lionexec runs it in a worker thread."""
    return len(text.split())


async def slow_echo(text: str, seconds: float = 60.0) -> str:
    """Echo a text after waiting some seconds: a call long enough to walk away from."""
    await trio.sleep(seconds)
    return text


DEMO_TOOLS: Final[tuple[Callable[..., Any], ...]] = (get_weather, word_count, slow_echo)


# -- lifecycle events ----------------------------------------------------------------------------


@attrs.frozen
class ServerEvent:
    """One lifecycle event, as a server-sent event."""

    id: int
    type: str
    conversation_id: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        payload = json.dumps({"conversation_id": self.conversation_id, **self.data})
        return f"id: {self.id}\nevent: {self.type}\ndata: {payload}\n\n".encode()


@attrs.define(eq=False)
class Subscription:
    """One subscriber's bounded buffer. ``overflowed`` says why the stream ended early."""

    conversation_id: str | None
    send_channel: trio.MemorySendChannel[ServerEvent]
    receive_channel: trio.MemoryReceiveChannel[ServerEvent]
    overflowed: bool = False


class EventHub:
    """Fans lifecycle events out to subscribers without ever waiting for one.

    :meth:`publish` is synchronous: it puts the event into each matching subscriber's memory
    channel with ``send_nowait``. A subscriber whose buffer is full is dropped (its channel is
    closed, ``overflowed`` set): it reads what was buffered, then the end of the channel.
    """

    def __init__(self, buffer: int = 256) -> None:
        if buffer < 1:
            raise ValueError(f"a subscriber buffer holds at least 1 event, got {buffer}")
        self.buffer = buffer
        self._subscriptions: set[Subscription] = set()
        self._last_id = 0

    @contextmanager
    def subscribe(self, conversation_id: str | None = None) -> Iterator[Subscription]:
        """Receive the events of one conversation (or all, for ``None``) while in the block."""
        send_channel, receive_channel = trio.open_memory_channel[ServerEvent](self.buffer)
        subscription = Subscription(conversation_id, send_channel, receive_channel)
        self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            self._drop(subscription)
            receive_channel.close()

    def publish(self, type: str, conversation_id: str, **data: Any) -> None:
        self._last_id += 1
        event = ServerEvent(self._last_id, type, conversation_id, data)
        for subscription in list(self._subscriptions):
            if subscription.conversation_id not in (None, conversation_id):
                continue
            try:
                subscription.send_channel.send_nowait(event)
            except trio.WouldBlock:
                subscription.overflowed = True
                self._drop(subscription)

    def close(self) -> None:
        """End every subscriber's stream (after what is buffered)."""
        for subscription in list(self._subscriptions):
            self._drop(subscription)

    def _drop(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)
        subscription.send_channel.close()


# -- conversations -------------------------------------------------------------------------------


@attrs.define(eq=False)
class Conversation:
    """A conversation: its branch, and the lock that runs its requests one at a time."""

    id: str
    branch: Branch
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    def call_id(self, response: ActionResponse) -> str:
        request_id = response.content.action_request_id
        request = self.branch.messages[request_id] if request_id is not None else None
        return request.content.call_id if isinstance(request, ActionRequest) else ""

    def tool_message(self, response: ActionResponse) -> dict[str, Any]:
        """The OpenAI tool message for *response*, with its status and outcome."""
        content, _ = result_text(response)
        return {
            "role": "tool",
            "tool_call_id": self.call_id(response),
            "content": content,
            "status": response.content.status.value,
            "outcome": response.content.outcome.value,
        }


def _seconds(duration: object) -> float | None:
    return duration if isinstance(duration, float) else None


def _watch(conversation: Conversation, hub: EventHub) -> None:
    """Publish the branch's hook and message events on *hub*."""
    cid = conversation.id

    def on_post(
        *, tool_name: str, call_id: str, result: str, duration: object, **_: object
    ) -> None:
        hub.publish(
            "tool.post", cid, call_id=call_id, tool=tool_name, result=result,
            duration=_seconds(duration),
        )  # fmt: skip

    def on_error(
        *,
        tool_name: str,
        call_id: str,
        error: object,
        status: Any,
        duration: object,
        **_: object,
    ) -> None:
        hub.publish(
            "tool.error", cid, call_id=call_id, tool=tool_name, status=status.value,
            error=None if error is None else f"{type(error).__name__}: {error}",
            duration=_seconds(duration),
        )  # fmt: skip

    def on_message(message: Message) -> None:
        data: dict[str, Any] = {"message_id": str(message.id), "kind": message.kind}
        if isinstance(message, ActionRequest):
            data.update(call_id=message.content.call_id, function=message.content.function)
        elif isinstance(message, ActionResponse):
            data.update(
                call_id=conversation.call_id(message),
                function=message.content.function,
                status=message.content.status.value,
                outcome=message.content.outcome.value,
            )
        hub.publish("message.add", cid, **data)

    conversation.branch.hooks.on(HookPoint.TOOL_POST, on_post)
    conversation.branch.hooks.on(HookPoint.TOOL_ERROR, on_error)
    conversation.branch.messages.on_message_added.append(on_message)


# -- HTTP plumbing -------------------------------------------------------------------------------


class HTTPError(Exception):
    """Reply *status* with ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


async def send_json(send: ASGISendCallable, status: int, payload: object) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode()
    headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_chunk(send: ASGISendCallable, body: bytes, *, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def read_body(receive: ASGIReceiveCallable, limit: int = MAX_BODY) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        if message["type"] != "http.request":
            continue
        chunks.append(message["body"])
        size += len(message["body"])
        if size > limit:
            raise HTTPError(413, f"request body is larger than {limit} bytes")
        if not message["more_body"]:
            return b"".join(chunks)


async def until_disconnect(
    receive: ASGIReceiveCallable, work: Callable[[], Awaitable[T]]
) -> T | None:
    """Run *work*, cancelling it if the client disconnects first (then return ``None``).

    Call it once the request body has been read: from then on this owns ``receive``.
    """
    result: T | None = None

    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        result = await work()
        nursery.cancel_scope.cancel()
    return result


# -- the application -----------------------------------------------------------------------------


class App:
    """The ASGI application. It keeps the conversations and the event hub.

    Args:
        tools: registered on each new conversation's branch (the demo tools by default).
        subscriber_buffer: events buffered per event-stream subscriber before it is dropped.
    """

    def __init__(
        self,
        *,
        tools: Iterable[Callable[..., Any]] = DEMO_TOOLS,
        subscriber_buffer: int = 256,
    ) -> None:
        self.tools = tuple(tools)
        self.hub = EventHub(subscriber_buffer)
        self.conversations: dict[str, Conversation] = {}

    def conversation(self, conversation_id: str) -> Conversation:
        """The conversation with this id, created (with the tools registered) if new."""
        conversation = self.conversations.get(conversation_id)
        if conversation is None:
            branch = Branch()
            branch.register_tools(self.tools)
            conversation = Conversation(conversation_id, branch)
            _watch(conversation, self.hub)
            self.conversations[conversation_id] = conversation
        return conversation

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            try:
                await self._route(scope, receive, send)
            except HTTPError as exc:
                await send_json(send, exc.status, {"error": exc.message})
            except ClientGone:
                pass

    async def _route(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/v1/act":
            _allow(method, "POST")
            await self.act(await read_body(receive), receive, send)
        elif path.startswith("/v1/conversations/"):
            _allow(method, "GET")
            await self.history(path.removeprefix("/v1/conversations/"), send)
        elif path == "/v1/events":
            _allow(method, "GET")
            query = parse_qs(scope["query_string"].decode("latin-1"))
            await self.events(query.get("conversation_id", [None])[-1], receive, send)
        else:
            raise HTTPError(404, f"no such endpoint: {method} {path}")

    async def act(self, body: bytes, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        conversation_id, tool_calls, strategy = _act_body(body)
        conversation = self.conversation(conversation_id)

        async def run() -> list[ActionResponse]:
            async with conversation.lock:
                return await self._act(conversation, tool_calls, strategy)

        responses = await until_disconnect(receive, run)
        if responses is not None:
            messages = [conversation.tool_message(response) for response in responses]
            await send_json(send, 200, {"conversation_id": conversation_id, "messages": messages})

    async def _act(
        self, conversation: Conversation, tool_calls: list[Any], strategy: Any
    ) -> list[ActionResponse]:
        cid, branch = conversation.id, conversation.branch
        first_new = len(branch.messages)
        self.hub.publish("act.start", cid, calls=len(tool_calls), strategy=strategy)
        try:
            responses = await branch.act(tool_calls, strategy=strategy)
        except trio.Cancelled:
            cancelled = [
                conversation.call_id(message)
                for message in branch.messages.messages[first_new:]
                if isinstance(message, ActionResponse)
                and message.content.outcome is ActionOutcome.CANCELLED
            ]
            self.hub.publish("act.cancelled", cid, call_ids=cancelled)
            raise
        statuses = [
            {"call_id": conversation.call_id(r), "status": r.content.status.value}
            for r in responses
        ]
        self.hub.publish("act.end", cid, results=statuses)
        return responses

    async def history(self, conversation_id: str, send: ASGISendCallable) -> None:
        conversation = self.conversations.get(conversation_id)
        if conversation is None:
            raise HTTPError(404, f"no conversation {conversation_id!r}")
        messages = conversation.branch.messages
        payload = {
            "conversation_id": conversation_id,
            "messages": messages.to_openai(),
            "records": converter.unstructure(messages),
        }
        await send_json(send, 200, payload)

    async def events(
        self, conversation_id: str | None, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        with self.hub.subscribe(conversation_id) as subscription:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send_chunk(send, b": subscribed\n\n")

            async def pump() -> None:
                async for event in subscription.receive_channel:
                    await send_chunk(send, event.encode())
                await send_chunk(send, OVERFLOW if subscription.overflowed else b"", more=False)

            await until_disconnect(receive, pump)


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise HTTPError(405, f"method {method} not allowed here; use {allowed}")


def _act_body(body: bytes) -> tuple[str, list[Any], str]:
    """Check a ``POST /v1/act`` body; raise a 400 naming the first problem."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HTTPError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HTTPError(400, f"body must be a JSON object, got {type(data).__name__}")
    if "conversation_id" not in data:
        raise HTTPError(400, "missing conversation_id")
    conversation_id = data["conversation_id"]
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.fullmatch(conversation_id):
        raise HTTPError(
            400,
            "conversation_id must be a string of 1-128 letters, digits or ._~:- characters, "
            f"got {conversation_id!r}",
        )
    if "tool_calls" not in data:
        raise HTTPError(400, "missing tool_calls")
    tool_calls = data["tool_calls"]
    if not isinstance(tool_calls, list):
        raise HTTPError(400, f"tool_calls must be a list, got {type(tool_calls).__name__}")
    strategy = data.get("strategy", "concurrent")
    if strategy not in STRATEGIES:
        raise HTTPError(400, f"strategy must be 'concurrent' or 'sequential', got {strategy!r}")
    # Branch.act reads every call before running any and raises ValueError for one it cannot
    # read; reading them here first gives the same message without creating the conversation.
    for index, tool_call in enumerate(tool_calls):
        try:
            read_proposal(tool_call)
        except ValueError as exc:
            raise HTTPError(400, f"tool_calls[{index}]: {exc}") from None
    return conversation_id, tool_calls, strategy


async def _lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# -- serving -------------------------------------------------------------------------------------


async def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    graceful_timeout: float = 3.0,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *app* until *shutdown_trigger* returns (forever if ``None``).

    With ``nursery.start(serve, ...)``, the start value is hypercorn's list of bound URLs
    (``["http://127.0.0.1:54321"]``), so ``port=0`` is usable. On shutdown the event streams
    end, and requests still running get *graceful_timeout* seconds before being cancelled.
    """
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.graceful_timeout = graceful_timeout

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        app.hub.close()

    await hypercorn_serve(app, config, shutdown_trigger=trigger, task_status=task_status)


async def _main(host: str, port: int) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def on_signal() -> None:
            async for _ in signals:
                return

        async with trio.open_nursery() as nursery:
            app = App()
            binds = await nursery.start(
                partial(serve, app, host=host, port=port, shutdown_trigger=on_signal)
            )
            print(f"lionexec demo server on {', '.join(binds)} (Ctrl+C to stop)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args(argv)
    trio.run(_main, args.host, args.port)


if __name__ == "__main__":
    main()
