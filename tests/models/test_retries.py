"""Retries of a model call after a 5xx or a connection error: jittered exponential waits (or
the provider's Retry-After), a whole-call deadline, and every attempt in the call's record
(the local provider on 127.0.0.1; the waits are a few milliseconds of real time)."""

from __future__ import annotations

import json
import socket

import pytest
import trio

from lionexec.engine import EventStatus
from lionexec.models import (
    Endpoint,
    Model,
    ModelCall,
    ModelConnectionError,
    ProviderError,
    RetryPolicy,
)
from lionexec.models.testing import Fail, LocalProvider, Reply

pytestmark = pytest.mark.timeout(60)

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
FAST = RetryPolicy(retries=3, base=0.01, max_wait=0.02)


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
    assert 0.005 <= first <= 0.01 and 0.01 <= second <= 0.02 and last is None  # jittered
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
    call = ModelCall(endpoint=endpoint, payload=PAYLOAD, retry=RetryPolicy(retries=2, base=0.01))
    await call.invoke()
    assert isinstance(call.execution.error, ModelConnectionError)
    assert len(call.attempt_log) == 3
    assert all(a["status"] is None and "ConnectError" in a["error"] for a in call.attempt_log)


async def test_a_retry_whose_wait_passes_the_deadline_is_not_made() -> None:
    provider = LocalProvider([Fail(503, retry_after=30), Reply("too late")])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        policy = RetryPolicy(retries=5, deadline=5.0)
        call = ModelCall(endpoint=Endpoint(base_url), payload=PAYLOAD, retry=policy)
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


def test_a_policy_refuses_negative_numbers() -> None:
    with pytest.raises(ValueError, match="retries must be a number >= 0"):
        RetryPolicy(retries=-1)
    assert RetryPolicy(base=1.0, max_wait=4.0).wait(5) <= 4.0
    assert RetryPolicy().wait(1, retry_after=2.5) == 2.5
