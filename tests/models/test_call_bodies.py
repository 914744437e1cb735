"""ModelCall reading bodies: decoded (decompressed) bytes, counted against max_body_bytes as
they arrive, streamed or not (httpx.MockTransport: no network)."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from lionexec.engine import EventStatus
from lionexec.models import Endpoint, MalformedResponseError, ModelCall, ProviderError

BODY = {
    "id": "x",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}


class Pieces(httpx.AsyncByteStream):
    """A response body sent as *pieces*, counting how many were taken."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.taken = 0

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self  # (not a generator: one left unfinished by a refusal needs no finalizing)

    async def __anext__(self) -> bytes:
        if self.taken == len(self.pieces):
            raise StopAsyncIteration
        self.taken += 1
        return self.pieces[self.taken - 1]


async def run(
    body: Pieces,
    headers: dict[str, str],
    *,
    streaming: bool,
    limit: int = 1 << 20,
    status: int = 200,
) -> tuple[ModelCall, list[Any]]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, stream=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        endpoint = Endpoint("http://model.test/v1", max_body_bytes=limit)
        call = ModelCall(
            endpoint=endpoint, payload={"model": "m"}, client=client, streaming=streaming
        )
        chunks: list[Any] = []
        if streaming:
            async for chunk in call.stream():
                chunks.append(chunk)
        else:
            await call.invoke()
    return call, chunks


def error_of(call: ModelCall) -> BaseException:
    error = call.execution.error
    assert isinstance(error, BaseException)
    return error


JSON_GZIP = {"content-type": "application/json", "content-encoding": "gzip"}
SSE = {"content-type": "text/event-stream"}


# -- compressed bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True])  # streamed: a plain JSON body answers
async def test_a_gzip_body_is_read_decoded(streaming: bool) -> None:
    body = Pieces([gzip.compress(json.dumps(BODY).encode())])
    call, chunks = await run(body, JSON_GZIP, streaming=streaming)
    assert call.status is EventStatus.COMPLETED, call.execution.error
    assert call.response.text == "hi"
    assert chunks == ([BODY] if streaming else [])


async def test_a_gzip_error_body_is_read_decoded() -> None:
    error = {"error": {"message": "bad request", "type": "invalid_request_error"}}
    body = Pieces([gzip.compress(json.dumps(error).encode())])
    call, _ = await run(body, JSON_GZIP, streaming=False, status=400)
    provider_error = error_of(call)
    assert isinstance(provider_error, ProviderError)
    assert (provider_error.status_code, provider_error.body) == (400, error)


@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_small_gzip_body_that_expands_past_the_limit_is_refused_early(
    streaming: bool,
) -> None:
    limit = 64 * 1024
    bomb = gzip.compress(b"0" * (256 * limit))  # 16 MiB of zeros in ~16 KiB
    assert len(bomb) < limit  # counted compressed, it would pass
    body = Pieces([bomb[i : i + 256] for i in range(0, len(bomb), 256)])
    call, _ = await run(body, JSON_GZIP, streaming=streaming, limit=limit)
    error = error_of(call)
    assert isinstance(error, MalformedResponseError), error
    assert str(error) == f"response body exceeds {limit} bytes"
    # stopped at the first pieces, each decompressing to ~256 KiB: not all 16 MiB decompressed
    assert body.taken <= 2 < len(body.pieces)


@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
async def test_a_corrupt_gzip_body_is_malformed_naming_the_encoding() -> None:
    body = Pieces([b"\x1f\x8b not gzip at all"])
    call, _ = await run(body, JSON_GZIP, streaming=False)
    error = error_of(call)
    assert isinstance(error, MalformedResponseError)
    assert "cannot be decoded (content-encoding 'gzip')" in str(error)


# -- streamed bodies -----------------------------------------------------------------------------


def sse_event(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    chunk = {"id": "x", "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode()  # "é" as UTF-8


@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
async def test_a_stream_line_that_never_ends_is_refused_once_it_passes_the_limit() -> None:
    limit = 4096
    body = Pieces([b"data: ", *[b"a" * 1024] * 64])  # 64 KiB, no line end
    call, chunks = await run(body, SSE, streaming=True, limit=limit)
    error = error_of(call)
    assert isinstance(error, MalformedResponseError)
    assert str(error) == f"streamed response exceeds {limit} bytes"
    assert chunks == []
    assert body.taken == 1 + 4  # "data: " and four KiB cross 4096 bytes: nothing more read


@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
async def test_a_stream_is_limited_in_bytes_not_characters() -> None:
    text = "é" * 1500  # 1,500 characters, 3,000 bytes
    body = Pieces([sse_event(text, "stop") + b"\n\n", b"data: [DONE]\n\n"])
    call, _ = await run(body, SSE, streaming=True, limit=2500)
    error = error_of(call)
    assert isinstance(error, MalformedResponseError)
    assert str(error) == "streamed response exceeds 2500 bytes"


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("piece", [1, 2, 7, 1 << 20])
async def test_stream_lines_are_read_alike_however_the_bytes_are_cut(
    end: bytes, piece: int
) -> None:
    events = [sse_event("hé"), b": a comment", sse_event("llo", "stop"), b"data: [DONE]"]
    sent = b"".join(event + end + end for event in events)
    body = Pieces([sent[i : i + piece] for i in range(0, len(sent), piece)])
    call, chunks = await run(body, SSE, streaming=True)
    assert call.status is EventStatus.COMPLETED, call.execution.error
    assert call.response.text == "héllo"
    assert chunks == [json.loads(event[len(b"data: ") :]) for event in events[::2]]


async def test_a_last_event_without_a_line_end_is_still_read() -> None:
    body = Pieces([sse_event("hi", "stop") + b"\n\n" + b"data: [DONE]"])
    call, chunks = await run(body, SSE, streaming=True)
    assert call.status is EventStatus.COMPLETED, call.execution.error
    assert call.response.text == "hi" and len(chunks) == 1
