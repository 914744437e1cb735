"""Retries of a model call after a 5xx or a connection error: jittered exponential waits (or
the provider's Retry-After), a whole-call deadline, and every attempt in the call's record
(the local provider on 127.0.0.1; the waits are a few milliseconds of real time)."""

from __future__ import annotations

import functools
import json
import socket

import pytest
import trio

from lionexec.act import RetryPolicy
from lionexec.engine import EventStatus
from lionexec.models import Endpoint, Model, ModelCall, ModelConnectionError, ProviderError
from lionexec.models.testing import Fail, LocalProvider, Reply

pytestmark = pytest.mark.timeout(60)

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
FAST = RetryPolicy(attempts=3, initial_delay=0.01, backoff=2.0, max_delay=0.02, jitter=0.005)


async def test_a_5xx_is_retried_and_each_attempt_is_recorded() -> None:
    provider = LocalProvider([Fail(503), Fail(502), Reply("ok")])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        call = ModelCall(endpoint=Endpoint(base_url), payload=PAYLOAD, retry=FAST)
        await call.invoke()
        nursery.cancel_scope.cancel()
    assert call.status is EventStatus.COMPLETED and call.execution.response.text == "ok"
    assert [a["status"] for a in call.attempt_log] == [503, 502, 200]
    assert [a["attempt"] for a in call.attempt_log] == [1, 2, 3] and call.attempts == 3
    first, second, last = (a["wait"] for a in call.attempt_log)
    assert 0.01 <= first <= 0.015 and 0.02 <= second <= 0.025 and last is None  # jittered
    record = call.to_dict()
    assert json.loads(json.dumps(record, allow_nan=False))["attempt_log"] == call.attempt_log


async def test_a_4xx_is_not_retried_and_retries_run_out() -> None:
    provider = LocalProvider([Fail(400), Fail(500), Fail(500), Fail(500), Fail(500)])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        bad = ModelCall(endpoint=Endpoint(base_url), payload=PAYLOAD, retry=FAST)
        await bad.invoke()
        down = ModelCall(endpoint=Endpoint(base_url), payload=PAYLOAD, retry=FAST)
        await down.invoke()
        nursery.cancel_scope.cancel()
    assert [a["status"] for a in bad.attempt_log] == [400]
    assert isinstance(down.execution.error, ProviderError)
    assert [a["status"] for a in down.attempt_log] == [500] * 4  # 1 + 3 retries
    assert down.attempt_log[-1]["wait"] is None


async def test_without_a_policy_nothing_is_retried() -> None:
    provider = LocalProvider([Fail(503), Reply("ok")])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        call = ModelCall(endpoint=Endpoint(base_url), payload=PAYLOAD)
        await call.invoke()
        nursery.cancel_scope.cancel()
    assert isinstance(call.execution.error, ProviderError)
    assert call.attempt_log == [{"attempt": 1, "status": 503, "error": None, "wait": None}]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_connection_error_is_retried_and_recorded() -> None:
    endpoint = Endpoint(f"http://127.0.0.1:{closed_port()}/v1")
    call = ModelCall(
        endpoint=endpoint, payload=PAYLOAD, retry=RetryPolicy(attempts=2, initial_delay=0.01)
    )
    await call.invoke()
    assert isinstance(call.execution.error, ModelConnectionError)
    assert len(call.attempt_log) == 3
    assert all(a["status"] is None and "ConnectError" in a["error"] for a in call.attempt_log)


async def test_a_retry_whose_wait_passes_the_deadline_is_not_made() -> None:
    provider = LocalProvider([Fail(503, retry_after=30), Reply("too late")])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        policy = RetryPolicy(attempts=5, initial_delay=0.01)
        call = ModelCall(endpoint=Endpoint(base_url), payload=PAYLOAD, retry=policy, deadline=5.0)
        await call.invoke()
        nursery.cancel_scope.cancel()
    assert isinstance(call.execution.error, ProviderError)
    assert call.attempt_log == [{"attempt": 1, "status": 503, "error": None, "wait": None}]
    assert provider.log.statuses == [503]


async def test_a_model_passes_its_policy_to_its_calls() -> None:
    provider = LocalProvider([Fail(500), Reply("ok")])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        async with Model(endpoint=Endpoint(base_url), name="m", retry=FAST) as model:
            assert (await model.complete(PAYLOAD["messages"])).text == "ok"
        nursery.cancel_scope.cancel()
    assert provider.log.statuses == [500, 200]


async def test_an_attempt_still_waiting_when_the_deadline_passes_is_abandoned() -> None:
    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()  # reads the request, never answers

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, silent, 0, host="127.0.0.1")
        (listener,) = await nursery.start(serve)
        port = listener.socket.getsockname()[1]
        call = ModelCall(
            endpoint=Endpoint(f"http://127.0.0.1:{port}/v1"),
            payload=PAYLOAD,
            retry=FAST,
            deadline=0.2,
        )
        with trio.fail_after(20):
            await call.invoke()
        nursery.cancel_scope.cancel()
    assert isinstance(call.execution.error, ModelConnectionError), call.execution.error
    assert "deadline of 0.2 s passed after 1 attempts" in str(call.execution.error)
    assert call.attempt_log[0]["error"] == "deadline passed waiting for the response"


def test_a_policy_with_no_jitter_waits_exactly_its_delays() -> None:
    policy = RetryPolicy(attempts=3, initial_delay=0.5, backoff=2.0, max_delay=1.5)
    assert [policy.delay(n) for n in range(3)] == [0.5, 1.0, 1.5]
