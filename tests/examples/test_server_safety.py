"""lionexec.server is safe to expose: every limit holds against hostile input.

Each test drives the server in-process on 127.0.0.1 (hypercorn's trio worker, port 0) with
``httpx.AsyncClient`` or a raw TCP stream, or calls the ASGI app directly where an interleaving
must be pinned down. Time is trio's clock (``autojump_clock``), never a real sleep.
"""

from __future__ import annotations

import gc
import hmac
import json
import math
import weakref
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec import HookPoint, MessageManager
from lionexec.serialization import converter
from lionexec.server._json import BadJSON, dumps, loads

from .conftest import DEMO_TOOLS, call, server

BUDGET = 10.0  # seconds per test (virtual seconds under autojump_clock)


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity``."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


class Gates:
    """A ``gate(name)`` tool that records entering and waits until the test opens it."""

    def __init__(self) -> None:
        self.entered: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.release: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.inside: set[str] = set()

    def tool(self) -> Callable[..., Any]:
        async def gate(name: str) -> str:
            """Wait at a named gate until the test opens it."""
            self.inside.add(name)
            self.entered[name].set()
            await self.release[name].wait()
            self.inside.discard(name)
            return name

        return gate


runs: Counter[str] = Counter()


async def counted(key: str) -> str:
    """A tool that counts how often it really ran, per key."""
    await trio.lowlevel.checkpoint()
    runs[key] += 1
    return f"ran {key}"


async def nan_out() -> float:
    """A tool whose output is not a finite number."""
    await trio.lowlevel.checkpoint()
    return math.nan


async def echo_float(x: float) -> dict[str, float]:
    """Echo a float (``"nan"`` and ``"-inf"`` convert to non-finite floats)."""
    await trio.lowlevel.checkpoint()
    return {"x": x}


@asynccontextmanager
async def serving(
    app: Any, *, headers: dict[str, str] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """Serve *app* on 127.0.0.1 and yield a client for it; stop the server afterwards."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(server.serve, app, shutdown_trigger=stop.wait))
        async with httpx.AsyncClient(base_url=binds[0], timeout=None, headers=headers) as client:
            yield client
        stop.set()


def make_app(gates: Gates | None = None, **config: Any) -> Any:
    tools = [*DEMO_TOOLS, counted, nan_out, echo_float]
    if gates is not None:
        tools.append(gates.tool())
    return server.App(server.ServerConfig(port=0, **config), tools=tools)


async def fill(app: Any, conversation_id: str, calls: int) -> Any:
    """A conversation holding *calls* answered calls (2 x *calls* messages), made in-process."""
    conversation = app.conversation(conversation_id)
    batch = [call("get_weather", {"city": f"c{i}"}, f"w{i}") for i in range(calls)]
    await conversation.branch.act(batch)
    return conversation


# -- large conversations: pages and streams ---------------------------------------------------


async def test_history_is_paginated_with_a_max_page_size() -> None:
    app = make_app(page_size=50, max_page_size=200)
    with trio.fail_after(BUDGET):
        conversation = await fill(app, "big", 150)  # 300 messages
        async with serving(app) as client:
            first = (await client.get("/v1/conversations/big")).json()
            pages = []
            after: int | None = 0
            while after is not None:
                page = (await client.get(f"/v1/conversations/big?after={after}&limit=200")).json()
                pages.append(page)
                after = page["next"]
            too_big = await client.get("/v1/conversations/big?limit=201")
            not_a_cursor = await client.get("/v1/conversations/big?after=-1")
    # Without a limit, one default-sized page, not the whole conversation.
    assert (first["total"], first["after"], first["next"], len(first["records"])) == (
        300,
        0,
        50,
        50,
    )
    assert [(p["after"], p["next"], len(p["records"])) for p in pages] == [
        (0, 200, 200),
        (200, None, 100),
    ]
    records = [record for page in pages for record in page["records"]]
    loaded = converter.structure({"messages": records}, MessageManager)
    assert loaded == conversation.branch.messages
    # The pages' OpenAI messages show every call exactly once, each with its result.
    messages = [m for page in pages for m in page["messages"]]
    proposed = [c["id"] for m in messages if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(proposed) == sorted(answered) == sorted(f"w{i}" for i in range(150))
    assert too_big.status_code == 400
    assert too_big.json()["error"] == "limit must be from 1 to max_page_size (200)"
    assert not_a_cursor.status_code == 400
    assert not_a_cursor.json()["error"] == "after must be a non-negative integer, got '-1'"


async def test_streamed_history_is_json_lines_over_http() -> None:
    app = make_app(stream_chunk=7)
    with trio.fail_after(BUDGET):
        conversation = await fill(app, "big", 40)
        async with serving(app) as client:
            reply = await client.get("/v1/conversations/big/records")
            tail = await client.get("/v1/conversations/big/records?after=75")
            missing = await client.get("/v1/conversations/nope/records")
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/x-ndjson"
    lines = reply.content.splitlines()
    expected = [converter.unstructure(m) for m in conversation.branch.messages]
    assert [strict_loads(line) for line in lines] == expected
    assert [strict_loads(line) for line in tail.content.splitlines()] == expected[75:]
    assert missing.status_code == 404


async def test_streaming_a_large_history_yields_to_other_requests() -> None:
    """While the stream handler is between two chunks, a whole other request is served.

    At the ASGI level, so the interleaving is exact: the test's ``send`` parks the history
    handler after its second chunk; a ``POST /v1/act`` to the same conversation then runs to
    completion; the stream resumes and holds exactly the messages present when it started,
    in chunks of at most ``stream_chunk`` lines (never the whole history at once).
    """
    app = make_app(stream_chunk=10)
    chunks: list[bytes] = []
    parked, resume = trio.Event(), trio.Event()

    async def stream_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message["body"])
            if len(chunks) == 2:
                parked.set()
                await resume.wait()

    async def never_disconnect() -> dict[str, Any]:
        if not chunks:
            return {"type": "http.request", "body": b"", "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(BUDGET):
        conversation = await fill(app, "big", 30)  # 60 messages
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                app,
                http_scope("GET", "/v1/conversations/big/records"),
                never_disconnect,
                stream_send,
            )
            await parked.wait()
            status, reply = await asgi_post(
                app, {"conversation_id": "big", "tool_calls": [call("counted", {"key": "k"}, "x")]}
            )
            assert status == 200, reply
            assert len(conversation.branch.messages) == 62  # written while the stream waits
            resume.set()
    body_chunks = [c for c in chunks if c]
    assert len(body_chunks) == 6
    assert all(c.count(b"\n") <= 10 for c in body_chunks)
    lines = b"".join(chunks).splitlines()
    assert [strict_loads(line) for line in lines] == [
        converter.unstructure(m) for m in conversation.branch.messages.messages[:60]
    ]


def http_scope(method: str, path: str, query: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }


async def asgi_post(app: Any, body: dict[str, Any]) -> tuple[int, Any]:
    """``POST /v1/act`` straight into the ASGI app; returns the status and parsed body."""
    sent: list[dict[str, Any]] = []
    done = trio.Event()
    requests = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await app(http_scope("POST", "/v1/act"), receive, send)
    return sent[0]["status"], strict_loads(sent[1]["body"])


# -- conversations are freed ------------------------------------------------------------------


async def test_idle_conversations_are_evicted_after_the_ttl(autojump_clock: Any) -> None:
    app = make_app(idle_ttl=100.0, sweep_interval=10.0)
    body = {"conversation_id": "a", "tool_calls": [call("get_weather", {"city": "Oslo"}, "1")]}
    with trio.fail_after(1000):
        async with serving(app) as client:
            assert (await client.post("/v1/act", json=body)).status_code == 200
            branch = weakref.ref(app.conversations["a"].branch)
            await trio.sleep(60)
            assert (await client.get("/v1/conversations/a")).status_code == 200  # used again
            await trio.sleep(60)
            assert "a" in app.conversations  # 60 s idle: kept
            await trio.sleep(60)
            assert "a" not in app.conversations  # 120 s idle: the sweeper freed it
            gone = await client.get("/v1/conversations/a")
    assert gone.status_code == 404
    assert gone.json() == {"error": "no conversation 'a'"}
    gc.collect()
    assert branch() is None  # nothing else keeps the branch alive


async def test_least_recently_used_conversation_makes_room() -> None:
    app = make_app(max_conversations=2)

    def body(cid: str) -> dict[str, Any]:
        return {"conversation_id": cid, "tool_calls": [call("counted", {"key": cid}, "1")]}

    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            for cid in ("a", "b"):
                assert (await client.post("/v1/act", json=body(cid))).status_code == 200
            assert (await client.get("/v1/conversations/a")).status_code == 200  # a is fresher
            assert (await client.post("/v1/act", json=body("c"))).status_code == 200
            statuses = {
                cid: (await client.get(f"/v1/conversations/{cid}")).status_code
                for cid in ("a", "b", "c")
            }
    assert statuses == {"a": 200, "b": 404, "c": 200}
    assert list(app.conversations) == ["a", "c"]


async def test_busy_conversations_are_never_evicted() -> None:
    gates = Gates()
    app = make_app(gates, max_conversations=1)
    held = {"conversation_id": "a", "tool_calls": [call("gate", {"name": "g"}, "1")]}
    other = {"conversation_id": "b", "tool_calls": [call("counted", {"key": "b"}, "1")]}
    with trio.fail_after(BUDGET):
        async with serving(app) as client, trio.open_nursery() as nursery:
            nursery.start_soon(partial(client.post, "/v1/act", json=held))
            await gates.entered["g"].wait()
            refused = await client.post("/v1/act", json=other)
            gates.release["g"].set()
    assert refused.status_code == 503
    assert refused.json()["error"].startswith("max_conversations (1) are in use")
    assert list(app.conversations) == ["a"]


# -- limits on requests --------------------------------------------------------------------------


async def test_slow_upload_is_cut_with_408(autojump_clock: Any) -> None:
    app = make_app(body_timeout=5.0)
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            port = httpx.URL(str(client.base_url)).port
            assert port is not None
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                head = (
                    b"POST /v1/act HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100\r\n\r\n"
                )
                await stream.send_all(head + b'{"conversation_id": ')  # ... and no more
                reply = b""
                while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
                    data = await stream.receive_some()
                    assert data, reply
                    reply += data
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split(b" ")[1] == b"408"
    body = rest.partition(b"\r\n\r\n")[2]
    assert strict_loads(body) == {"error": "request body did not arrive within body_timeout (5 s)"}
    assert app.conversations == {}


async def test_declared_oversized_body_gets_413_before_it_is_read() -> None:
    app = make_app(max_body=1000)
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            reply = await client.post("/v1/act", content=b"x" * 1001)
    assert reply.status_code == 413
    assert reply.json() == {"error": "request body is larger than max_body (1000 bytes)"}


@pytest.mark.parametrize("chunks", [1, 3])
async def test_an_undeclared_oversized_body_gets_413_in_one_message_or_many(chunks: int) -> None:
    app = make_app(max_body=1000)
    text = b"x" * 1001
    size = -(-len(text) // chunks)
    messages = [
        {"type": "http.request", "body": text[i : i + size], "more_body": i + size < len(text)}
        for i in range(0, len(text), size)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(BUDGET):
        await app(http_scope("POST", "/v1/act"), receive, send)  # (no Content-Length)
    assert sent[0]["status"] == 413
    assert strict_loads(sent[1]["body"]) == {
        "error": "request body is larger than max_body (1000 bytes)"
    }
    assert app.conversations == {}


async def test_in_memory_conversations_share_one_registry_of_the_tools() -> None:
    app = make_app()
    with trio.fail_after(BUDGET):
        for name in ("a", "b"):
            status, reply = await asgi_post(
                app,
                {
                    "conversation_id": name,
                    "tool_calls": [call("get_weather", {"city": name}, "w")],
                },
            )
            assert status == 200 and reply["messages"][0]["outcome"] == "completed", reply
    first, second = (app.conversations[name].branch for name in ("a", "b"))
    assert first.registry is second.registry
    assert sorted(first.registry.names) == sorted(tool.__name__ for tool in app.tools)


async def test_calls_per_request_are_capped() -> None:
    app = make_app(max_calls=3)
    calls = [call("counted", {"key": "cap"}, str(i)) for i in range(4)]
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            reply = await client.post(
                "/v1/act", json={"conversation_id": "c", "tool_calls": calls}
            )
            ok = await client.post(
                "/v1/act", json={"conversation_id": "c", "tool_calls": calls[:3]}
            )
    assert reply.status_code == 400
    assert reply.json() == {"error": "at most max_calls (3) tool calls per request, got 4"}
    assert ok.status_code == 200


async def test_request_timeout_cancels_the_calls_and_answers_504(autojump_clock: Any) -> None:
    app = make_app(request_timeout=5.0)
    body = {
        "conversation_id": "t",
        "tool_calls": [
            call("get_weather", {"city": "Rome"}, "fast"),
            call("slow_echo", {"text": "late", "seconds": 60}, "slow"),
        ],
    }
    with trio.fail_after(BUDGET), app.hub.subscribe("t") as events:
        async with serving(app) as client:
            reply = await client.post("/v1/act", json=body)
            history = (await client.get("/v1/conversations/t")).json()
        seen = [event async for event in events.receive_channel]
    assert reply.status_code == 504
    assert reply.json()["error"].startswith("the request took longer than request_timeout (5 s)")
    outcomes = {
        m["tool_call_id"]: strict_loads(m["content"])
        for m in history["messages"]
        if "tool_call_id" in m
    }
    assert outcomes["fast"] == {"city": "Rome", "forecast": "sunny", "high_c": 21}
    assert outcomes["slow"]["outcome"] == "cancelled"
    assert [e.data["call_ids"] for e in seen if e.type == "act.cancelled"] == [["slow"]]
    assert not app.conversations["t"].lock.locked()


async def post_slowly(
    app: Any, body: dict[str, Any], *, upload: float, leave_after: float | None = None
) -> tuple[int, Any] | None:
    """``POST /v1/act`` into the ASGI app, its body arriving in two chunks *upload* seconds
    apart; the client disconnects *leave_after* seconds after the body (never, for
    ``None``). The status and parsed reply, or ``None`` if nothing was sent."""
    text = json.dumps(body).encode()
    chunks = [text[:10], text[10:]]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if chunks:
            if len(chunks) == 1:
                await trio.sleep(upload)
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        if leave_after is None:
            await trio.sleep_forever()
        await trio.sleep(leave_after)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(http_scope("POST", "/v1/act"), receive, send)
    return (sent[0]["status"], strict_loads(sent[1]["body"])) if sent else None


def slow_call(seconds: float) -> dict[str, Any]:
    return {
        "conversation_id": "s",
        "tool_calls": [call("slow_echo", {"text": "t", "seconds": seconds}, "slow")],
    }


async def test_body_timeout_covers_the_body_and_request_timeout_the_calls(
    autojump_clock: Any,
) -> None:
    """One deadline serves both, in turn: a body slower than ``body_timeout`` is a 408, calls
    longer than ``body_timeout`` (but within ``request_timeout``) complete, the calls get
    the whole ``request_timeout`` however long the body took, and calls past it are a 504;
    a client that leaves is sent nothing."""
    config = {"body_timeout": 2.0, "request_timeout": 5.0}
    with trio.fail_after(BUDGET * 5):
        assert await post_slowly(make_app(**config), slow_call(0), upload=3) == (
            408,
            {"error": "request body did not arrive within body_timeout (2 s)"},
        )
        posted = await post_slowly(make_app(**config), slow_call(4), upload=1.5)
        assert posted is not None and posted[0] == 200, posted
        assert posted[1]["messages"][0]["outcome"] == "completed"
        posted = await post_slowly(make_app(**config), slow_call(6), upload=1.5)
        assert posted is not None and posted[0] == 504, posted
        assert posted[1]["error"].startswith("the request took longer than request_timeout (5 s)")
        app = make_app(**config)
        assert await post_slowly(app, slow_call(4), upload=1, leave_after=1) is None
        [response] = app.conversations["s"].branch.messages.responses()
        assert response.content.outcome.value == "cancelled"


async def test_tool_calls_share_one_concurrency_cap_across_conversations() -> None:
    """``Branch.act(limiter=...)``: one cap across conversations."""
    gates = Gates()
    app = make_app(gates, max_concurrent_calls=2)

    def body(cid: str, *names: str) -> dict[str, Any]:
        return {
            "conversation_id": cid,
            "tool_calls": [call("gate", {"name": n}, n) for n in names],
        }

    replies: dict[str, httpx.Response] = {}

    with trio.fail_after(BUDGET):
        async with serving(app) as client, trio.open_nursery() as nursery:

            async def post_to(cid: str, *names: str) -> None:
                replies[cid] = await client.post("/v1/act", json=body(cid, *names))

            nursery.start_soon(post_to, "a", "a1", "a2")
            await gates.entered["a1"].wait()
            await gates.entered["a2"].wait()
            nursery.start_soon(post_to, "b", "b1")
            await wait_until(lambda: app.limiter.statistics().tasks_waiting == 1)
            await trio.testing.wait_all_tasks_blocked()
            assert gates.inside == {"a1", "a2"}  # b1 waits for a token
            gates.release["a1"].set()
            await gates.entered["b1"].wait()
            assert gates.inside == {"a2", "b1"}
            gates.release["a2"].set()
            gates.release["b1"].set()
    assert {cid: r.status_code for cid, r in replies.items()} == {"a": 200, "b": 200}
    assert app.limiter.total_tokens == 2


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll in-process server state that no event announces (bounded by the test budget)."""
    while not predicate():  # noqa: ASYNC110 (a limiter's waiters announce nothing)
        await trio.sleep(0.001)


# -- authentication ------------------------------------------------------------------------------


async def test_bearer_token_is_required_and_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real_compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return bool(real_compare(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    app = make_app(token="s3cret-token")
    body = {"conversation_id": "auth", "tool_calls": [call("counted", {"key": "auth"}, "1")]}
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            none = await client.post("/v1/act", json=body)
            wrong = await client.post(
                "/v1/act", json=body, headers={"Authorization": "Bearer s3cret-tokeN"}
            )
            history = await client.get("/v1/conversations/auth")
            events = await client.get("/v1/events")
            good = {"Authorization": "Bearer s3cret-token"}
            right = await client.post("/v1/act", json=body, headers=good)
            history_ok = await client.get("/v1/conversations/auth", headers=good)
    for refused in (none, wrong, history, events):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"].startswith("missing or wrong bearer token")
    assert runs["auth"] == 1  # only the authorized request ran its call
    assert right.status_code == 200 and history_ok.status_code == 200
    assert (b"s3cret-tokeN", b"s3cret-token") in compared
    assert (b"", b"s3cret-token") in compared
    assert "s3cret" not in repr(app.config)


async def test_the_bearer_scheme_is_read_in_any_case_the_token_exactly() -> None:
    app = make_app(token="s3cret")
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            statuses = {
                header: (
                    await client.get("/v1/conversations/x", headers={"Authorization": header})
                ).status_code
                for header in (
                    "Bearer s3cret",
                    "bearer s3cret",
                    "BEARER s3cret",
                    "Basic s3cret",
                    "Bearer S3CRET",
                    "Bearers3cret",
                    "s3cret",
                )
            }
    assert statuses == {
        "Bearer s3cret": 404,  # (no such conversation: past the token check)
        "bearer s3cret": 404,
        "BEARER s3cret": 404,
        "Basic s3cret": 401,
        "Bearer S3CRET": 401,
        "Bearers3cret": 401,
        "s3cret": 401,
    }


async def test_a_405_names_the_allowed_method_and_a_404_cuts_a_long_id() -> None:
    app = make_app()
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            wrong = await client.get("/v1/act")
            long = await client.get("/v1/conversations/" + "a" * 8000)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert long.status_code == 404 and len(long.content) < 200, long.content[:300]


def test_token_comes_from_the_flag_or_the_environment() -> None:
    variable = server.TOKEN_VARIABLE
    assert server.config_from_args([], {}).token is None
    assert server.config_from_args([], {variable: "from-env"}).token == "from-env"
    flagged = server.config_from_args(["--token", "flag", "--port", "0"], {variable: "env"})
    assert (flagged.token, flagged.port, flagged.host) == ("flag", 0, "127.0.0.1")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_calls", 0),
        ("body_timeout", math.nan),
        ("idle_ttl", -1.0),
        ("port", 70000),
        ("page_size", 2000),  # over max_page_size
    ],
)
def test_config_refuses_bad_limits(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        server.ServerConfig(**{field: value})


# -- bad bodies: 400, never 500 -------------------------------------------------------------------


def act_text(calls: str = "[]", extra: str = "") -> bytes:
    return f'{{"conversation_id": "c", "tool_calls": {calls}{extra}}}'.encode()


def args_text(arguments: str) -> bytes:
    item = {"id": "1", "type": "function", "function": {"name": "counted", "arguments": arguments}}
    return act_text(json.dumps([item]))


DEEP = 100_000


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (act_text("[]", ', "x": ' + "[" * DEEP + "]" * DEEP), "body is nested more than 32"),
        (act_text("[]", ', "x": ' + "[" * 40 + "]" * 40), "body is nested more than 32"),
        (act_text("[]", ', "x": ' + "9" * 5000), "body has an integer longer than 4300 digits"),
        (act_text("[]", ', "x": NaN'), "body: NaN is not a JSON number"),
        (act_text("[]", ', "x": -Infinity'), "body: -Infinity is not a JSON number"),
        (act_text("[]", ', "x": 1e400'), "body: the number 1e400 is too large for a float"),
        (
            args_text('{"key": ' + "[" * DEEP + "]" * DEEP + "}"),
            "tool_calls[0] arguments is nested more than 32",
        ),
        (
            args_text('{"key": ' + "1" * 5000 + "}"),
            "tool_calls[0] arguments has an integer longer than 4300 digits",
        ),
        (args_text('{"key": Infinity}'), "tool_calls[0] arguments: Infinity is not a JSON number"),
        (args_text('{"key": NaN}'), "tool_calls[0] arguments: NaN is not a JSON number"),
        (b'"a string"', "body must be a JSON object, got string"),
        (b"42", "body must be a JSON object, got number"),
        (b"null", "body must be a JSON object, got null"),
        (b"true", "body must be a JSON object, got boolean"),
        (
            act_text(json.dumps([call("counted", {"key": "a"}, "d"), call("counted", {}, "d")])),
            "tool_calls[1]: call id 'd' appears twice",
        ),
    ],
    ids=lambda value: value[:40] if isinstance(value, str) else None,
)
async def test_hostile_bodies_get_400_naming_the_problem(body: bytes, message: str) -> None:
    await assert_refused(body, message)


async def assert_refused(body: bytes, message: str) -> None:
    """POST *body* to a fresh server: a 400 whose error starts with *message*, and nothing
    recorded (no conversation created)."""
    app = make_app()
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            reply = await client.post("/v1/act", content=body)
    assert reply.status_code == 400, reply.text
    assert strict_loads(reply.content)["error"].startswith(message), reply.json()
    assert app.conversations == {}


async def test_arguments_that_are_merely_not_json_are_recorded_invalid() -> None:
    app = make_app()
    body = args_text('{"key": ')  # a model's typo, not an attack: the model may correct it
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            reply = await client.post("/v1/act", content=body)
    assert reply.status_code == 200
    assert reply.json()["messages"][0]["outcome"] == "invalid"


SHAPES = {  # every tool call shape read_proposal reads, its arguments as a raw string
    "chat": lambda raw: {
        "id": "1",
        "type": "function",
        "function": {"name": "counted", "arguments": raw},
    },
    "anthropic": lambda raw: {"type": "tool_use", "id": "1", "name": "counted", "input": raw},
    "responses": lambda raw: {
        "type": "function_call",
        "call_id": "1",
        "name": "counted",
        "arguments": raw,
    },
    "plain": lambda raw: {"function": "counted", "arguments": raw, "call_id": "1"},
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"key": NaN}', "tool_calls[0] arguments: NaN is not a JSON number"),
        ('{"key": ' + "[" * 40 + "]" * 40 + "}", "tool_calls[0] arguments is nested more than 32"),
        ('{"key": ' + "1" * 5000 + "}", "tool_calls[0] arguments has an integer longer than 4300"),
    ],
    ids=["nan", "deep", "long-int"],
)
async def test_every_shapes_argument_string_is_held_to_the_limits(
    shape: str, arguments: str, message: str
) -> None:
    await assert_refused(act_text(json.dumps([SHAPES[shape](arguments)])), message)


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_every_shapes_argument_string_still_runs_when_it_is_fine(shape: str) -> None:
    app = make_app()
    body = act_text(json.dumps([SHAPES[shape]('{"key": "fine-' + shape + '"}')]))
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            reply = await client.post("/v1/act", content=body)
    assert reply.status_code == 200, reply.text
    (message,) = reply.json()["messages"]
    assert (message["outcome"], message["content"]) == ("completed", f"ran fine-{shape}")


# -- strict JSON out -----------------------------------------------------------------------------


async def test_non_finite_outputs_never_make_responses_non_json() -> None:
    app = make_app()
    body = {
        "conversation_id": "n",
        "tool_calls": [
            call("nan_out", {}, "nan"),
            call("echo_float", {"x": "-inf"}, "inf"),
            call("echo_float", {"x": "nan"}, "nan-arg"),
        ],
    }
    with trio.fail_after(BUDGET), app.hub.subscribe("n") as events:
        async with serving(app) as client:
            posted = await client.post("/v1/act", json=body)
            page = await client.get("/v1/conversations/n")
            stream = await client.get("/v1/conversations/n/records")
        app.hub.close()
        # the event stream's frames, as the SSE endpoint writes them
        data_lines = [
            event.encode().split(b"\ndata: ")[1].rstrip(b"\n")
            async for event in events.receive_channel
        ]
    assert any(b"nan_out" in line for line in data_lines)  # its record among them
    for text in (posted.content, page.content, *stream.content.splitlines(), *data_lines):
        strict_loads(text)  # every byte the server wrote is strict JSON
    assert posted.status_code == 200 and page.status_code == 200
    # A tool's NaN is not JSON: the call fails, naming the tool and the value, recorded.
    # (Whether "nan" from the model converts to a float or makes the call invalid is the
    # library's rule; either way the output is strict.)
    [nan] = [m for m in posted.json()["messages"] if m["tool_call_id"] == "nan"]
    assert nan["outcome"] == "failed"
    assert "tool 'nan_out' returned the float nan (not finite)" in nan["content"]
    errors = [
        r["content"]["error"] for r in page.json()["records"] if r["kind"] == "action_response"
    ]
    assert any(e is not None and "'nan_out'" in e["message"] for e in errors)


def test_the_servers_json_writer_is_strict() -> None:
    value = {"nan": math.nan, "inf": [math.inf, -math.inf], "big": 10**5000, "ok": 1.5}
    assert strict_loads(dumps(value)) == {
        "nan": "NaN",
        "inf": ["Infinity", "-Infinity"],
        "big": "<int with 16610 bits>",
        "ok": 1.5,
    }
    assert dumps({"plain": [1, "two", None]}) == b'{"plain": [1, "two", null]}'


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


# JSON values nested around the limit, with brackets inside strings too (the reader counts
# brackets before it walks: a count at most the limit proves the depth is, and no more)
_NESTED = st.recursive(
    st.none() | st.integers() | st.sampled_from(["", "[", "{[", "]]", "[[[[[[", "a{b}c"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_NESTED, st.integers(min_value=1, max_value=6))
def test_the_servers_json_reader_refuses_exactly_what_nests_too_deep(
    value: Any, max_depth: int
) -> None:
    text = json.dumps(value)
    if _depth(value) > max_depth:
        with pytest.raises(BadJSON, match=f"nested more than {max_depth} levels deep"):
            loads(text, max_depth=max_depth)
    else:
        assert loads(text.encode(), max_depth=max_depth) == value


# -- idempotent retries ---------------------------------------------------------------------------


async def test_a_retried_post_returns_the_recorded_responses_without_running_again() -> None:
    app = make_app()
    first = {
        "conversation_id": "r",
        "tool_calls": [call("counted", {"key": "r1"}, "a"), call("counted", {"key": "r2"}, "b")],
    }
    mixed = {
        "conversation_id": "r",
        "tool_calls": [call("counted", {"key": "r3"}, "c"), call("counted", {"key": "r1"}, "a")],
    }
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            original = await client.post("/v1/act", json=first)
            retried = await client.post("/v1/act", json=first)
            partly_new = await client.post("/v1/act", json=mixed)
    assert original.status_code == retried.status_code == partly_new.status_code == 200
    assert retried.json() == original.json()  # the recorded responses, byte for byte
    assert [m["tool_call_id"] for m in partly_new.json()["messages"]] == ["c", "a"]
    assert [m["content"] for m in partly_new.json()["messages"]] == ["ran r3", "ran r1"]
    assert (runs["r1"], runs["r2"], runs["r3"]) == (1, 1, 1)
    messages = app.conversations["r"].branch.messages
    assert [r.content.call_id for r in messages.requests()] == ["a", "b", "c"]


async def test_a_reused_call_id_with_different_arguments_gets_409() -> None:
    app = make_app()
    body = {"conversation_id": "i", "tool_calls": [call("counted", {"key": "i1"}, "x")]}
    changed = {
        "conversation_id": "i",
        "tool_calls": [call("counted", {"key": "i3"}, "new"), call("counted", {"key": "i2"}, "x")],
    }
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            assert (await client.post("/v1/act", json=body)).status_code == 200
            conflict = await client.post("/v1/act", json=changed)
    assert conflict.status_code == 409
    assert conflict.json()["error"].startswith("tool call id 'x' is already recorded")
    assert (runs["i1"], runs["i2"], runs["i3"]) == (1, 0, 0)  # nothing of the batch ran
    assert len(app.conversations["i"].branch.messages) == 2


# -- events cost nothing while nobody listens ----------------------------------------------------


async def test_branches_are_watched_only_while_someone_subscribes() -> None:
    """No subscriber, no message callbacks or hooks: lionexec copies nothing for them."""
    app = make_app()

    def watchers(cid: str) -> tuple[int, int]:
        branch = app.conversations[cid].branch
        return len(branch.messages.on_message_added), len(
            branch.hooks.handlers_for(HookPoint.TOOL_POST)
        )

    def body(cid: str) -> dict[str, Any]:
        return {"conversation_id": cid, "tool_calls": [call("counted", {"key": cid}, "1")]}

    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            assert (await client.post("/v1/act", json=body("quiet"))).status_code == 200
            assert watchers("quiet") == (0, 0)
            with app.hub.subscribe("loud") as subscription:
                assert watchers("quiet") == (1, 1)  # existing conversations are watched
                assert (await client.post("/v1/act", json=body("loud"))).status_code == 200
                assert watchers("loud") == (1, 1)  # ...and new ones
                kinds = []
                while True:
                    try:
                        kinds.append(subscription.receive_channel.receive_nowait().type)
                    except trio.WouldBlock:
                        break
            assert watchers("quiet") == watchers("loud") == (0, 0)
    assert kinds == ["act.start", "tool.post", "message.add", "message.add", "act.end"]


async def test_an_event_stream_of_an_impossible_conversation_id_is_a_400() -> None:
    app = make_app()
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            replies = [
                await client.get("/v1/events", params={"conversation_id": bad})
                for bad in ("a b", "x" * 200, "é", "../x")
            ]
    assert [reply.status_code for reply in replies] == [400] * 4, [r.text for r in replies]
    assert all("no such conversation id" in reply.json()["error"] for reply in replies)
    assert not app.hub.watched


async def test_a_query_with_too_many_parameters_is_a_400() -> None:
    app = make_app()
    crowded = "&".join(f"k{i}=v" for i in range(5_000))
    with trio.fail_after(BUDGET):
        async with serving(app) as client:
            replies = [
                await client.get(f"{path}?{crowded}")
                for path in ("/v1/events", "/v1/approvals", "/v1/conversations/c1")
            ]
    assert [reply.status_code for reply in replies] == [400] * 3, [r.text for r in replies]
    assert all(reply.json() == {"error": "too many query parameters"} for reply in replies)


async def test_an_open_server_refuses_what_another_sites_page_sends(tmp_path: Path) -> None:
    """With no token, a web page elsewhere must not act or decide through the user's browser:
    a cross-site POST carries that site's ``Origin``, and a site whose DNS name was pointed at
    127.0.0.1 shows only in ``Host``. Clients that are not browsers send no ``Origin``."""
    ran: list[str] = []

    def pay(invoice: str) -> str:
        """Pay an invoice."""
        ran.append(invoice)
        return "paid"

    config = server.ServerConfig(port=0, approve=("pay",), journal=str(tmp_path / "o.db"))
    async with server.open_app(config, tools=[pay]) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            body = {"conversation_id": "c", "tool_calls": [call("pay", {"invoice": "I1"}, "p")]}
            forged = await client.post(
                "/v1/act",
                content=json.dumps(body),
                headers={"origin": "http://evil.example", "content-type": "text/plain"},
            )
            assert forged.status_code == 403 and "another site" in forged.json()["error"]
            parked = await client.post("/v1/act", json=body)  # no Origin: not a browser
            approval_id = parked.json()["messages"][0]["approval_id"]
            for headers in (
                {"origin": "http://evil.example"},
                # DNS rebinding: same-origin as far as the browser knows
                {"origin": "http://evil.example", "host": "evil.example"},
            ):
                refused = await client.post(f"/v1/approvals/{approval_id}", headers=headers)
                assert refused.status_code == 403, refused.text
            pending = await client.get("/v1/approvals")
            assert [a["approval_id"] for a in pending.json()["approvals"]] == [approval_id]
            own = await client.post(
                f"/v1/approvals/{approval_id}", headers={"origin": "http://127.0.0.1"}
            )
            assert own.status_code == 200, own.text
    assert ran == ["I1"]


async def test_an_answered_act_returns_though_the_client_sends_nothing_more() -> None:
    """A keep-alive client waits for its reply and sends nothing after the body: the handler
    answers, ends its watch for a disconnect, and returns (nothing left waiting on receive)."""
    app = make_app()
    body = json.dumps(
        {"conversation_id": "k", "tool_calls": [call("get_weather", {"city": "Oslo"}, "k1")]}
    ).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/act",
        "query_string": b"",
        "headers": [(b"content-length", b"%d" % len(body))],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []
    waiting = 0

    async def receive() -> dict[str, Any]:
        nonlocal waiting
        if messages:
            return messages.pop()
        waiting += 1
        try:
            await trio.sleep_forever()
        finally:
            waiting -= 1
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(BUDGET):
        await app(scope, receive, send)
    assert waiting == 0
    assert sent[0]["status"] == 200
    reply = strict_loads(sent[1]["body"])
    assert [m["tool_call_id"] for m in reply["messages"]] == ["k1"]
    assert not app.conversations["k"].lock.locked()
