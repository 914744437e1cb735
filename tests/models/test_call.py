"""ModelCall against the local provider: outcomes, streams, failures, cancellation."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from lionexec.engine import EventStatus
from lionexec.limits import RateLimiter
from lionexec.models import (
    Endpoint,
    MalformedResponseError,
    ModelCall,
    ModelConnectionError,
    ModelResponse,
    ProviderError,
    StreamTruncatedError,
    UnknownFinishReasonError,
    build_payload,
)
from lionexec.models.testing import Disconnect, Fail, LocalProvider, Raw, Reply, Stall

MESSAGES = [{"role": "user", "content": "hi"}]


def new_call(provider: LocalProvider, *, api: str = "chat", **kwargs: Any) -> ModelCall:
    assert provider.base_url is not None
    endpoint = Endpoint(provider.base_url, api_key="sk-secret", api=api)  # type: ignore[arg-type]
    payload = build_payload(api, "local-model", MESSAGES)  # type: ignore[arg-type]
    return ModelCall(endpoint=endpoint, payload=payload, **kwargs)


async def run(call: ModelCall) -> list[Any]:
    chunks = []
    if call.streaming:
        async for chunk in call.stream():
            chunks.append(chunk)
    else:
        await call.invoke()
    return chunks


def error_of(call: ModelCall) -> BaseException:
    error = call.execution.error
    assert isinstance(error, BaseException)
    return error


async def test_invoke_records_the_normalized_response(provider: LocalProvider) -> None:
    provider.add(Reply(text="hello", tool_calls=[("add", {"a": 1, "b": 2})], usage=(7, 3)))
    call = new_call(provider)
    await call.invoke()
    assert call.status is EventStatus.COMPLETED
    response = call.response
    assert isinstance(response, ModelResponse)
    assert (response.text, response.finish_reason) == ("hello", "tool_calls")
    assert response.usage is not None and response.usage.total_tokens == 10
    [tool_call] = response.tool_calls
    assert tool_call["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    assert response.message()["tool_calls"] == [tool_call]
    assert "stream" not in provider.log.requests[0]
    assert call.attempts == 1
    record = json.dumps(call.to_dict(), allow_nan=False)
    assert "sk-secret" not in record


async def test_stream_yields_the_server_chunks_unchanged(provider: LocalProvider) -> None:
    provider.add(Reply(text="streamed answer", tool_calls=[("add", {"a": 1})], chunk_size=5))
    call = new_call(provider, streaming=True)
    chunks = await run(call)
    assert call.status is EventStatus.COMPLETED
    assert provider.log.requests[0]["stream"] is True
    # Exactly what the server sent (every data: line but the [DONE] marker), unchanged.
    sent = provider.log.sent
    assert sent[-1] == b"data: [DONE]\n\n"
    expected = [json.loads(c.decode()[len("data: ") :]) for c in sent[:-1]]
    assert chunks == expected
    response = call.response
    assert isinstance(response, ModelResponse)
    assert response.text == "streamed answer"
    assert response.tool_calls[0]["function"]["arguments"] == '{"a": 1}'
    assert response.usage is not None and response.usage.total_tokens == 17


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("api", "field", "last"),
    [("responses", "input", "response.completed"), ("anthropic", "messages", "message_stop")],
)
async def test_responses_and_anthropic_apis(
    provider: LocalProvider, streaming: bool, api: str, field: str, last: str
) -> None:
    provider.add(Reply(text="via " + api, tool_calls=[("lookup", {"q": "x"})], usage=(3, 4)))
    call = new_call(provider, api=api, streaming=streaming)
    chunks = await run(call)
    assert call.status is EventStatus.COMPLETED, call.execution.error
    response = call.response
    assert isinstance(response, ModelResponse)
    assert response.text == "via " + api
    assert response.tool_calls[0]["function"] == {"name": "lookup", "arguments": '{"q": "x"}'}
    assert response.finish_reason == "tool_calls"
    assert response.usage is not None and response.usage.total_tokens == 7
    assert field in provider.log.requests[0]
    if streaming:
        assert chunks[-1]["type"] == last
    else:
        assert chunks == []


async def test_anthropic_request_shape(provider: LocalProvider) -> None:
    provider.add(Reply("ok"))
    assert provider.base_url is not None
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "t2", "type": "function", "function": {"name": "f", "arguments": "["}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "1"},
        {"role": "tool", "tool_call_id": "t2", "content": "2"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    payload = build_payload("anthropic", "claude", messages, tools=tools)
    assert payload["system"] == "be brief" and payload["max_tokens"] > 0
    assert [m["role"] for m in payload["messages"]] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in payload["messages"][2]["content"]] == ["t1", "t2"]
    assert payload["tools"] == [{"name": "f", "input_schema": {"type": "object"}}]
    import anthropic.types
    import pydantic

    adapter = pydantic.TypeAdapter(anthropic.types.MessageParam)
    for message in payload["messages"]:
        adapter.validate_python(message)
    endpoint = Endpoint(provider.base_url, api="anthropic", api_key="sk-ant")
    assert endpoint.request_headers()["x-api-key"] == "sk-ant"
    assert "authorization" not in endpoint.request_headers()
    call = ModelCall(endpoint=endpoint, payload=payload)
    await call.invoke()
    assert call.status is EventStatus.COMPLETED


FAILURES = [
    (Fail(500, "boom"), ProviderError),
    (Fail(429, "slow down", retry_after=0.5), ProviderError),
    (Raw(b"<html>not json</html>"), MalformedResponseError),
    (Raw(b'{"choices": "nope"}'), MalformedResponseError),
    (Raw(b'{"choices": [{"message": {"content": NaN}}]}'), MalformedResponseError),
    (Raw(b"[" * 100_000), MalformedResponseError),
    (Disconnect(), StreamTruncatedError),
    (Reply(text="odd", finish_reason="sideways"), UnknownFinishReasonError),
]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("step", "error_type"), FAILURES)
async def test_every_failure_is_captured_as_a_named_error(
    provider: LocalProvider, step: Any, error_type: type[Exception], streaming: bool
) -> None:
    provider.add(step)
    call = new_call(provider, streaming=streaming)
    await run(call)
    assert call.status is EventStatus.FAILED
    assert isinstance(error_of(call), error_type)
    json.dumps(call.to_dict(), allow_nan=False)


async def test_provider_error_carries_status_body_and_retry_after(
    provider: LocalProvider,
) -> None:
    provider.add(Fail(429, "slow down", retry_after=1.5))
    call = new_call(provider)
    await call.invoke()
    error = error_of(call)
    assert isinstance(error, ProviderError)
    assert (error.status_code, error.retry_after, error.rate_limited) == (429, 1.5, True)
    assert isinstance(error.body, dict) and error.body["error"]["message"] == "slow down"
    assert error.headers["retry-after"] == "2"


async def test_a_stream_cut_after_some_chunks_is_truncated(provider: LocalProvider) -> None:
    provider.add(Disconnect(Reply(text="a" * 40, chunk_size=4), after_chunks=3))
    call = new_call(provider, streaming=True)
    chunks = await run(call)
    assert len(chunks) == 3  # what did arrive was passed on
    error = error_of(call)
    assert isinstance(error, StreamTruncatedError) and error.chunks == 3
    assert call.status is EventStatus.FAILED


async def test_unreachable_endpoint_is_a_connection_error() -> None:
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = Endpoint(f"http://127.0.0.1:{port}/v1")
    call = ModelCall(endpoint=endpoint, payload={"model": "m", "messages": MESSAGES})
    await call.invoke()
    assert call.status is EventStatus.FAILED
    assert isinstance(error_of(call), ModelConnectionError)


@pytest.mark.parametrize("streaming", [False, True])
async def test_cancellation_mid_response_closes_the_connection_and_is_recorded(
    provider: LocalProvider, streaming: bool
) -> None:
    provider.add(Stall(Reply(text="x" * 64), after_chunks=2))
    call = new_call(provider, streaming=streaming)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, call)
            await provider.wait_for(lambda log: log.stalled == 1)
            scope.cancel()
    assert call.status is EventStatus.CANCELLED
    assert isinstance(error_of(call), trio.Cancelled)
    # The server saw the client go away: the connection was closed, not left dangling.
    with trio.fail_after(5):
        await provider.wait_for(lambda log: log.disconnects == 1)


# Closing early leaves httpx's nested body generators to trio's GC hook, which closes them and
# warns; the connection itself is closed by ModelCall (the server sees the disconnect).
@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
async def test_a_consumer_closing_the_stream_early_is_a_cancellation(
    provider: LocalProvider,
) -> None:
    provider.add(Stall(Reply(text="y" * 64), after_chunks=2))
    call = new_call(provider, streaming=True)
    stream = call.stream()
    first = await stream.__anext__()
    assert first["choices"][0]["delta"]["role"] == "assistant"
    with pytest.raises(GeneratorExit):
        await stream.athrow(GeneratorExit)
    assert call.status is EventStatus.CANCELLED
    with trio.fail_after(5):
        await provider.wait_for(lambda log: log.disconnects == 1)


async def test_429_with_a_limiter_is_retried_after_the_pause(provider: LocalProvider) -> None:
    provider.add(Fail(429, retry_after=0.01), Fail(429, retry_after=0.01), Reply(text="done"))
    limiter = RateLimiter(requests=1000, period=1.0)
    call = new_call(provider, limiter=limiter)
    await call.invoke()
    assert call.status is EventStatus.COMPLETED
    assert call.attempts == 3
    stats = limiter.statistics()
    assert stats.provider_pauses == 2 and stats.granted == 3


async def test_429_retries_are_bounded(provider: LocalProvider) -> None:
    provider.add(*[Fail(429, retry_after=0.001)] * 3)
    call = new_call(provider, limiter=RateLimiter(requests=1000, period=1.0), rate_limit_retries=2)
    await call.invoke()
    assert call.status is EventStatus.FAILED
    assert isinstance(error_of(call), ProviderError) and call.attempts == 3


async def test_usage_corrects_the_token_estimate(provider: LocalProvider) -> None:
    provider.add(Reply(text="ok", usage=(30, 10)))
    limiter = RateLimiter(tokens=10_000, period=60.0)
    call = new_call(provider, limiter=limiter, estimated_tokens=500)
    await call.invoke()
    assert limiter.statistics().tokens_charged == 40


@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_response_over_the_size_limit_is_refused(
    provider: LocalProvider, streaming: bool
) -> None:
    provider.add(Reply(text="x" * 5000, chunk_size=100))
    assert provider.base_url is not None
    endpoint = Endpoint(provider.base_url, max_body_bytes=2000)
    call = ModelCall(endpoint=endpoint, payload={"model": "m"}, streaming=streaming)
    await run(call)
    assert call.status is EventStatus.FAILED
    error = error_of(call)
    assert isinstance(error, MalformedResponseError) and "exceeds 2000" in str(error)


def _chat_body(**choice: Any) -> dict[str, Any]:
    first = {
        "index": 0,
        "message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop",
    }
    return {"id": "x", "choices": [{**first, **choice}]}


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("chat", _chat_body(finish_reason=["stop"])),  # unhashable: was a TypeError
        ("chat", _chat_body(finish_reason={"a": 1})),
        ("anthropic", {"content": [{"type": "text", "text": "x"}], "stop_reason": ["end_turn"]}),
    ],
)
def test_a_body_of_the_wrong_shape_is_malformed_never_a_type_error(
    api: Any, body: dict[str, Any]
) -> None:
    from lionexec.models._call import parse_body

    with pytest.raises(MalformedResponseError, match="reason string"):
        parse_body(api, json.dumps(body))


@pytest.mark.parametrize(
    ("api", "chunks", "what"),
    [
        ("chat", [{"choices": 5}, "[DONE]"], "list of choices"),
        ("chat", [{"choices": [{"index": 0, "delta": {}, "finish_reason": ["stop"]}]}, "[DONE]"],
         "finish reason string"),
        ("chat", [{"choices": [{"index": 0, "delta": {"tool_calls": 3}}]}, "[DONE]"],
         "list of tool call deltas"),
        ("anthropic", [{"type": "message_delta", "delta": {"stop_reason": ["end_turn"]}},
                       {"type": "message_stop"}], "finish reason string"),
    ],
)  # fmt: skip
def test_a_stream_of_the_wrong_shape_is_malformed_never_a_type_error(
    api: Any, chunks: list[Any], what: str
) -> None:
    from lionexec.models.formats import model_format

    assembler = model_format(api).assembler()
    with pytest.raises(MalformedResponseError, match=what):
        for chunk in chunks:
            assembler.feed(chunk)
        assembler.result()


def test_an_anthropic_stream_whose_usage_is_not_an_object_still_assembles() -> None:
    from lionexec.models.formats import model_format

    assembler = model_format("anthropic").assembler()
    chunks = [
        {"type": "message_start", "message": {"usage": 5, "id": "m1"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    ]
    for chunk in chunks:
        assembler.feed(chunk)
    assert assembler.result().finish_reason == "stop"


async def test_a_request_whose_client_goes_away_mid_body_is_not_logged(
    provider: LocalProvider,
) -> None:
    """A client killed while sending (half its body sent) is a disconnect, never a request."""
    assert provider.base_url is not None
    host, port = provider.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    )
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(head + body[:20])
        await stream.aclose()
        await provider.wait_for(lambda log: log.disconnects == 1)
    assert provider.log.requests == []
    assert provider.log.statuses == []
