"""lionexec.server: lionexec inside a trio server.

The server runs in-process on 127.0.0.1 (port 0) under hypercorn's trio worker and is driven
with ``httpx.AsyncClient``. Ordering is proven with trio events held by the tools themselves
(``Gates``), never with timing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from functools import partial
from typing import Any, cast

import attrs
import httpx
import pytest
import trio
import trio.testing

from lionexec import MessageManager
from lionexec.serialization import converter
from lionexec.server._approvals import _decision_body
from lionexec.server._asgi import HTTPError
from lionexec.server._events import OVERFLOW
from lionexec.server._json import dumps

from .conftest import DEMO_TOOLS, call, server

# Reading an endless event stream means leaving httpx's Response.aiter_lines() early; it nests
# async generators (httpx's and httpcore's) that it does not close, and trio warns when they are
# collected. Only those warnings are ignored.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)\.[\w.]+' was garbage collected:ResourceWarning"
)

BUDGET = 10.0  # seconds per test


class Gates:
    """A ``gate(name)`` tool that logs entering, waits to be released, then logs leaving."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.entered: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.release: defaultdict[str, trio.Event] = defaultdict(trio.Event)

    def tool(self) -> Callable[..., Any]:
        async def gate(name: str) -> str:
            """Wait at a named gate until the test opens it."""
            self.log.append(("enter", name))
            self.entered[name].set()
            await self.release[name].wait()
            self.log.append(("exit", name))
            return name

        return gate


def explode(reason: str) -> None:
    """A tool that always fails."""
    raise RuntimeError(reason)


def odd_text(fail: bool) -> str:
    """Text with a lone surrogate (a file name read with surrogateescape, say)."""
    if fail:
        raise ValueError("bad \udc80 name")
    return "a\udc80b"


@attrs.frozen
class Running:
    app: Any
    url: str
    client: httpx.AsyncClient


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
async def running(gates: Gates) -> AsyncIterator[Running]:
    app = server.App(
        server.ServerConfig(port=0),
        tools=[*DEMO_TOOLS, gates.tool(), explode, odd_text],
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        serve = partial(server.serve, app, shutdown_trigger=stop.wait)
        binds = await nursery.start(serve)
        url = binds[0]
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        async with httpx.AsyncClient(base_url=url) as client:
            yield Running(app, url, client)
        stop.set()


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll in-process server state that no event announces (bounded by the test budget)."""
    while not predicate():  # noqa: ASYNC110 (a lock's waiters announce nothing)
        await trio.sleep(0.001)


def lines_of(response: httpx.Response) -> AsyncGenerator[str, None]:
    """``response.aiter_lines()``, typed as the async generator it is (so it can be closed)."""
    return cast(AsyncGenerator[str, None], response.aiter_lines())


async def sse_frames(response: httpx.Response) -> AsyncGenerator[dict[str, Any], None]:
    """Parse a server-sent-events stream: each frame's fields, comments as ``comment``."""
    frame: dict[str, Any] = {}
    async with aclosing(lines_of(response)) as lines:
        async for line in lines:
            if line == "":
                if frame:
                    yield frame
                frame = {}
            elif line.startswith(":"):
                yield {"comment": line[1:].strip()}
            else:
                field, _, value = line.partition(": ")
                frame[field] = json.loads(value) if field == "data" else value


# -- POST /v1/act and GET /v1/conversations/{id} -------------------------------------------------


async def test_act_replies_with_openai_tool_messages_and_statuses(running: Running) -> None:
    with trio.fail_after(BUDGET):
        body = {
            "conversation_id": "c-1",
            "tool_calls": [
                call("get_weather", {"city": "Oslo"}, "w"),
                call("word_count", {"text": "one two three"}, "n"),
                call("explode", {"reason": "boom"}, "x"),
                call("no_such_tool", {}, "u"),
                call("word_count", {"text": 5}, "bad"),
            ],
        }
        reply = await running.client.post("/v1/act", json=body)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["conversation_id"] == "c-1"
    messages = data["messages"]
    assert [m["role"] for m in messages] == ["tool"] * 5
    assert [m["tool_call_id"] for m in messages] == ["w", "n", "x", "u", "bad"]  # input order
    assert [(m["status"], m["outcome"]) for m in messages] == [
        ("completed", "completed"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("aborted", "invalid"),
        ("aborted", "invalid"),
    ]
    assert json.loads(messages[0]["content"]) == {
        "city": "Oslo",
        "forecast": "sunny",
        "high_c": 21,
    }
    assert messages[1]["content"] == "3"
    failed = json.loads(messages[2]["content"])
    assert failed == {"error": "RuntimeError", "message": "boom", "outcome": "failed"}
    assert json.loads(messages[3]["content"])["error"] == "ToolNotFoundError"


async def test_text_that_is_not_valid_unicode_is_sent_as_valid_utf8(running: Running) -> None:
    # A lone surrogate in a tool's output or error made every body holding it a 500.
    with trio.fail_after(BUDGET):
        body = {
            "conversation_id": "odd",
            "tool_calls": [
                call("odd_text", {"fail": False}, "a"),
                call("odd_text", {"fail": True}, "b"),
            ],
        }
        reply = await running.client.post("/v1/act", json=body)
        history = await running.client.get("/v1/conversations/odd")
    for response in (reply, history):
        assert response.status_code == 200, response.text
        response.content.decode("utf-8")  # strict UTF-8
        json.loads(response.content)
    ok, failed = reply.json()["messages"]
    assert ok["content"] == "a\ufffdb" and ok["outcome"] == "completed"
    assert json.loads(failed["content"])["message"] == "bad \ufffd name"


async def test_a_retried_call_id_must_have_the_same_arguments_as_json(running: Running) -> None:
    # Python's 0 == False made {"text": "a", "n": false} a replay of {"text": "a", "n": 0}.
    with trio.fail_after(BUDGET):
        first = {"conversation_id": "r", "tool_calls": [call("word_count", {"text": "a b"}, "x")]}
        assert (await running.client.post("/v1/act", json=first)).status_code == 200
        again = await running.client.post("/v1/act", json=first)
        assert again.status_code == 200  # the same call again: its recorded answer
        other = {"conversation_id": "r", "tool_calls": [call("word_count", {"text": 1}, "y")]}
        assert (await running.client.post("/v1/act", json=other)).status_code == 200
        changed = {"conversation_id": "r", "tool_calls": [call("word_count", {"text": True}, "y")]}
        reply = await running.client.post("/v1/act", json=changed)
    assert reply.status_code == 409, reply.text
    assert "'y'" in reply.json()["error"]


async def test_a_repeated_name_in_arguments_makes_the_call_invalid(running: Running) -> None:
    # As Branch.act reads it: the server's stricter parse must not pick one of the two values
    raw = '{"text": "harmless", "text": "the other one"}'
    repeated = {"id": "dup", "type": "function", "function": {"name": "word_count"}}
    repeated["function"]["arguments"] = raw
    with trio.fail_after(BUDGET):
        body = {"conversation_id": "rep", "tool_calls": [repeated]}
        reply = await running.client.post("/v1/act", json=body)
    assert reply.status_code == 200, reply.text
    [message] = reply.json()["messages"]
    assert message["outcome"] == "invalid"
    assert "repeat the name 'text'" in message["content"]


async def test_sequential_strategy(running: Running) -> None:
    with trio.fail_after(BUDGET):
        body = {
            "conversation_id": "seq",
            "strategy": "sequential",
            "tool_calls": [call("word_count", {"text": "a b"}, "1"), call("word_count", {}, "2")],
        }
        reply = await running.client.post("/v1/act", json=body)
    assert reply.status_code == 200
    assert [m["outcome"] for m in reply.json()["messages"]] == ["completed", "invalid"]


async def test_history_endpoint_returns_openai_messages_and_records(running: Running) -> None:
    with trio.fail_after(BUDGET):
        for call_id, text in (("a", "x y"), ("b", "z")):
            body = {
                "conversation_id": "h",
                "tool_calls": [call("word_count", {"text": text}, call_id)],
            }
            assert (await running.client.post("/v1/act", json=body)).status_code == 200
        reply = await running.client.get("/v1/conversations/h")
    assert reply.status_code == 200
    data = reply.json()
    branch = running.app.conversations["h"].branch
    assert data["conversation_id"] == "h"
    assert (data["total"], data["after"], data["next"]) == (4, 0, None)  # one page holds it all
    tool_messages = [m for m in data["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("a", "2"), ("b", "1")]
    # The raw records are the full history: they load back into an equal MessageManager.
    loaded = converter.structure({"messages": data["records"]}, MessageManager)
    assert loaded == branch.messages


async def test_unknown_conversation_404_and_unknown_routes(running: Running) -> None:
    with trio.fail_after(BUDGET):
        missing = await running.client.get("/v1/conversations/never-created")
        no_route = await running.client.get("/v2/act")
        wrong_method = await running.client.get("/v1/act")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no conversation 'never-created'"}
    assert no_route.status_code == 404
    assert "no such endpoint" in no_route.json()["error"]
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"] == "method GET not allowed here; use POST"


GOOD_CALL = call("word_count", {"text": "a"}, "ok")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "body is not valid JSON"),
        (b"\xff\xfe", "body is not valid JSON"),
        (b"[1, 2]", "body must be a JSON object, got array"),
        (json.dumps({"tool_calls": [GOOD_CALL]}).encode(), "missing conversation_id"),
        (
            json.dumps({"conversation_id": 7, "tool_calls": []}).encode(),
            "conversation_id must be a string",
        ),
        (
            json.dumps({"conversation_id": "a/b", "tool_calls": []}).encode(),
            "conversation_id must be a string of 1-128 letters",
        ),
        (json.dumps({"conversation_id": "c"}).encode(), "missing tool_calls"),
        (
            json.dumps({"conversation_id": "c", "tool_calls": GOOD_CALL}).encode(),
            "tool_calls must be a list, got object",
        ),
        (
            json.dumps({"conversation_id": "c", "tool_calls": [GOOD_CALL, 3]}).encode(),
            "tool_calls[1]: cannot read a tool call from int",
        ),
        (
            json.dumps({"conversation_id": "c", "tool_calls": [{"name": "x"}]}).encode(),
            "tool_calls[0]: cannot read a tool call from a mapping with keys ['name']",
        ),
        (
            json.dumps(
                {"conversation_id": "c", "tool_calls": [call("", {}, "e")]},
            ).encode(),
            "tool_calls[0]: a tool call needs a non-empty function name",
        ),
        (
            json.dumps({"conversation_id": "c", "tool_calls": [], "strategy": "fast"}).encode(),
            "strategy must be 'concurrent' or 'sequential', got 'fast'",
        ),
        (
            json.dumps({"conversation_id": "c", "tool_calls": []}).encode(),
            "tool_calls is empty",
        ),
        (  # which one is meant? json keeps the last, other readers the first
            b'{"conversation_id": "c", "conversation_id": "other", "tool_calls": '
            + json.dumps([GOOD_CALL]).encode()
            + b"}",
            "body repeats the name 'conversation_id' within one object",
        ),
        (
            b'{"conversation_id": "c", "tool_calls": [{"id": "d", "id": "e", "type": '
            b'"function", "function": {"name": "word_count", "arguments": "{}"}}]}',
            "body repeats the name 'id' within one object",
        ),
    ],
)
async def test_bad_bodies_get_400_naming_the_problem(
    running: Running, body: bytes, message: str
) -> None:
    with trio.fail_after(BUDGET):
        reply = await running.client.post("/v1/act", content=body)
        after = await running.client.get("/v1/conversations/c")
    assert reply.status_code == 400
    assert reply.json()["error"].startswith(message), reply.json()
    assert running.app.conversations == {}  # nothing recorded, no conversation created
    assert after.status_code == 404


async def test_oversized_body_gets_413(running: Running) -> None:
    with trio.fail_after(BUDGET):
        reply = await running.client.post(
            "/v1/act", content=b" " * (running.app.config.max_body + 1)
        )
    assert reply.status_code == 413
    assert reply.json() == {"error": "request body is larger than max_body (1048576 bytes)"}


# -- concurrency ----------------------------------------------------------------------------------


async def test_one_conversation_is_serialized_different_ones_overlap(
    running: Running, gates: Gates
) -> None:
    replies: dict[str, httpx.Response] = {}

    async def post(conversation_id: str, name: str) -> None:
        body = {
            "conversation_id": conversation_id,
            "tool_calls": [call("gate", {"name": name}, name)],
        }
        replies[name] = await running.client.post("/v1/act", json=body)

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, "x", "x1")
            await gates.entered["x1"].wait()  # x1 holds conversation x
            nursery.start_soon(post, "x", "x2")
            nursery.start_soon(post, "y", "y1")
            await gates.entered["y1"].wait()  # y runs while x1 is still inside its tool
            lock = running.app.conversations["x"].lock
            await wait_until(lambda: lock.statistics().tasks_waiting == 1)  # x2 has arrived
            assert gates.log == [("enter", "x1"), ("enter", "y1")]  # ...and waits its turn
            gates.release["x1"].set()
            await gates.entered["x2"].wait()
            gates.release["x2"].set()
            gates.release["y1"].set()
    assert gates.log[:4] == [("enter", "x1"), ("enter", "y1"), ("exit", "x1"), ("enter", "x2")]
    assert sorted(gates.log[4:]) == [("exit", "x2"), ("exit", "y1")]
    for name, reply in replies.items():
        assert reply.status_code == 200
        assert reply.json()["messages"][0]["content"] == name


# -- disconnects ----------------------------------------------------------------------------------


async def test_client_disconnect_cancels_its_calls_and_records_them_cancelled(
    running: Running, gates: Gates
) -> None:
    body = {
        "conversation_id": "d",
        "tool_calls": [
            call("get_weather", {"city": "Rome"}, "fast"),
            call("gate", {"name": "g1"}, "g1"),
            call("gate", {"name": "g2"}, "g2"),
            call("slow_echo", {"text": "late"}, "slow"),
        ],
    }
    with trio.fail_after(BUDGET), running.app.hub.subscribe("d") as events:
        async with trio.open_nursery() as nursery:
            client_scope = trio.CancelScope()

            async def post() -> None:
                with client_scope:
                    await running.client.post("/v1/act", json=body)
                    pytest.fail("the request should have been abandoned")

            nursery.start_soon(post)
            await gates.entered["g1"].wait()
            await gates.entered["g2"].wait()
            client_scope.cancel()  # httpx closes the connection mid-request
        seen = []
        async for event in events.receive_channel:
            seen.append(event)
            if event.type == "act.cancelled":
                break
    assert seen[0].type == "act.start"
    assert sorted(seen[-1].data["call_ids"]) == ["g1", "g2", "slow"]  # act.cancelled
    # Calls cut short are announced too: tool.error with status cancelled, and their messages.
    cut_short = {e.data["call_id"]: e.data["status"] for e in seen if e.type == "tool.error"}
    assert cut_short == {"g1": "cancelled", "g2": "cancelled", "slow": "cancelled"}
    answered = {
        e.data["call_id"]: e.data["outcome"]
        for e in seen
        if e.type == "message.add" and e.data["kind"] == "action_response"
    }
    assert answered == {
        "fast": "completed",
        "g1": "cancelled",
        "g2": "cancelled",
        "slow": "cancelled",
    }
    assert ("exit", "g1") not in gates.log

    conversation = running.app.conversations["d"]
    outcomes = {
        conversation.call_id(r): r.content.outcome.value
        for r in conversation.branch.messages.responses()
    }
    assert outcomes == {
        "fast": "completed",
        "g1": "cancelled",
        "g2": "cancelled",
        "slow": "cancelled",
    }
    assert conversation.branch.messages.unanswered() == []
    assert not conversation.lock.locked()

    with trio.fail_after(BUDGET):
        history = (await running.client.get("/v1/conversations/d")).json()
        again = await running.client.post(
            "/v1/act",
            json={"conversation_id": "d", "tool_calls": [call("word_count", {"text": "x"}, "z")]},
        )
    results = {m["tool_call_id"]: m["content"] for m in history["messages"] if m["role"] == "tool"}
    assert json.loads(results["slow"]) == {
        "error": "Cancelled",
        "message": "the call was cancelled before it finished",
        "outcome": "cancelled",
    }
    assert again.status_code == 200  # the conversation is usable again


async def test_disconnect_while_queued_for_the_conversation_records_nothing(
    running: Running, gates: Gates
) -> None:
    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            first = nursery.start_soon
            queued_scope = trio.CancelScope()

            async def post(name: str) -> None:
                body = {"conversation_id": "q", "tool_calls": [call("gate", {"name": name}, name)]}
                await running.client.post("/v1/act", json=body)

            async def post_queued() -> None:
                with queued_scope:
                    await post("queued")

            first(post, "holder")
            await gates.entered["holder"].wait()
            nursery.start_soon(post_queued)
            lock = running.app.conversations["q"].lock
            await wait_until(lambda: lock.statistics().tasks_waiting == 1)
            queued_scope.cancel()
            await wait_until(lambda: lock.statistics().tasks_waiting == 0)
            gates.release["holder"].set()
    messages = running.app.conversations["q"].branch.messages
    assert [r.content.call_id for r in messages.requests()] == ["holder"]
    assert "queued" not in gates.entered


# -- server-sent events ---------------------------------------------------------------------------


async def test_event_stream_delivers_lifecycle_events(running: Running) -> None:
    body = {
        "conversation_id": "s",
        "tool_calls": [
            call("word_count", {"text": "a b"}, "ok"),
            call("explode", {"reason": "nope"}, "bad"),
            call("missing_tool", {}, "inv"),
        ],
    }
    with trio.fail_after(BUDGET):
        other = {
            "conversation_id": "other",
            "tool_calls": [call("word_count", {"text": "q"}, "o")],
        }
        async with running.client.stream(
            "GET", "/v1/events", params={"conversation_id": "s"}
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"] == "text/event-stream"
            async with aclosing(sse_frames(stream)) as frames:
                assert await anext(frames) == {"comment": "subscribed"}
                assert (await running.client.post("/v1/act", json=other)).status_code == 200
                assert (await running.client.post("/v1/act", json=body)).status_code == 200
                received = []
                async for frame in frames:
                    received.append(frame)
                    if frame["event"] == "act.end":
                        break

    assert all(f["data"]["conversation_id"] == "s" for f in received)  # filtered
    ids = [int(f["id"]) for f in received]
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # nothing missed
    kinds = [f["event"] for f in received]
    assert kinds[0] == "act.start" and kinds[-1] == "act.end"
    assert received[0]["data"] == {
        "conversation_id": "s",
        "calls": 3,
        "strategy": "concurrent",
        "replayed": 0,
    }
    by_kind = defaultdict(list)
    for frame in received:
        by_kind[frame["event"]].append(frame["data"])
    (post,) = by_kind["tool.post"]
    assert (post["call_id"], post["tool"], post["result"]) == ("ok", "word_count", "2")
    (error,) = by_kind["tool.error"]  # the invalid call never ran: no hook, only messages
    assert (error["call_id"], error["status"]) == ("bad", "failed")
    assert error["error"] == "RuntimeError: nope"
    added = {(m["kind"], m["call_id"]): m for m in by_kind["message.add"]}
    assert set(added) == {
        (k, c) for k in ("action_request", "action_response") for c in ("ok", "bad", "inv")
    }
    assert added["action_response", "inv"]["outcome"] == "invalid"
    assert by_kind["act.end"][0]["results"] == [
        {"call_id": "ok", "status": "completed"},
        {"call_id": "bad", "status": "failed"},
        {"call_id": "inv", "status": "aborted"},
    ]


async def test_slow_subscriber_is_dropped_without_blocking_calls(running: Running) -> None:
    calls = [call("word_count", {"text": "w"}, f"c{i}") for i in range(20)]
    running.app.hub.buffer = 8  # for subscriptions from now on
    with trio.fail_after(BUDGET), running.app.hub.subscribe() as slow:
        reply = await running.client.post(
            "/v1/act", json={"conversation_id": "busy", "tool_calls": calls}
        )
        assert reply.status_code == 200  # the never-reading subscriber held nothing up
        assert slow.overflowed
        kept = [event async for event in slow.receive_channel]  # buffered events, then the end
    assert len(kept) == 8
    assert [e.id for e in kept] == list(range(kept[0].id, kept[0].id + len(kept)))


async def test_event_stream_of_a_dropped_subscriber_ends_with_overflow() -> None:
    """At the ASGI level: the SSE handler sends what was buffered, then ``event: overflow``."""
    app = server.App(server.ServerConfig(subscriber_buffer=2))
    chunks: list[bytes] = []
    more: list[bool] = []
    subscribed = trio.Event()
    disconnect = trio.Event()
    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message["body"])
            more.append(message["more_body"])
            subscribed.set()

    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(app.events, None, receive, send)
            await subscribed.wait()
            await trio.testing.wait_all_tasks_blocked()  # the handler waits for an event
            for n in range(5):  # synchronously: the handler gets no chance to drain
                app.hub.publish("tick", "c", n=n)
    # One event went straight to the waiting handler, two into its buffer; the fourth found
    # the buffer full and dropped the subscriber.
    assert chunks[0] == b": subscribed\n\n"
    assert [c.split(b"\n")[:2] for c in chunks[1:4]] == [
        [b"id: 1", b"event: tick"],
        [b"id: 2", b"event: tick"],
        [b"id: 3", b"event: tick"],
    ]
    assert chunks[4:] == [OVERFLOW]
    assert more == [True] * 4 + [False]  # the overflow notice ends the response


async def test_shutdown_ends_event_streams(gates: Gates) -> None:
    app = server.App(server.ServerConfig(port=0))
    stop = trio.Event()
    with trio.fail_after(BUDGET):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(server.serve, app, shutdown_trigger=stop.wait))
            async with (
                httpx.AsyncClient(base_url=binds[0]) as client,
                client.stream("GET", "/v1/events") as stream,
                aclosing(lines_of(stream)) as lines,
            ):
                assert await anext(lines) == ": subscribed"
                stop.set()
                assert [line async for line in lines] == [""]  # then the stream ends


@pytest.mark.parametrize(
    "body",
    [
        b'{"decision": "reject", "reason": "no \\ud800"}',
        b'{"by": "\\udc80"}',
        b'{"\\ud800": 1}',
    ],
)
def test_an_approval_decision_with_text_that_is_not_valid_unicode_is_a_400(body: bytes) -> None:
    # It reached the journal (a 500) or the error message (a 500 writing it).
    with pytest.raises(HTTPError) as caught:
        _decision_body(body, server.ServerConfig())
    assert caught.value.status == 400
    dumps({"error": str(caught.value)}).decode("utf-8")
