"""One HTTP client per Model: pooled across its calls, closed with the model; a given client
is used as it is and never closed by lionexec (the local provider on 127.0.0.1)."""

from __future__ import annotations

import httpx
import pytest
import trio

from lionexec.models import Endpoint, Model
from lionexec.models.testing import LocalProvider, Reply

pytestmark = pytest.mark.timeout(60)

MESSAGES = [{"role": "user", "content": "hi"}]


async def test_a_model_sends_every_call_through_one_client_and_closes_it() -> None:
    provider = LocalProvider(default=Reply("ok"))
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        async with Model(endpoint=Endpoint(base_url), name="m") as model:
            client = model.http_client()
            calls = [model.call(MESSAGES) for _ in range(3)]
            assert all(call.client is client for call in calls)
            for _ in range(3):
                assert (await model.complete(MESSAGES)).text == "ok"
            assert model.http_client() is client and not client.is_closed
        assert client.is_closed  # closed with the model
        # a closed model opens a new client if it is used again
        async with model:
            assert (await model.complete(MESSAGES)).text == "ok"
            assert model.http_client() is not client
        nursery.cancel_scope.cancel()
    assert provider.log.statuses == [200] * 4


async def test_a_given_client_is_used_as_it_is_and_left_open() -> None:
    provider = LocalProvider(default=Reply("ok"))
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        async with httpx.AsyncClient() as given:
            async with Model(endpoint=Endpoint(base_url), name="m", client=given) as model:
                assert model.http_client() is given
                await model.complete(MESSAGES)
            assert not given.is_closed
            await model.aclose()  # closing again, or a model with a given client: no effect
            assert not given.is_closed
        nursery.cancel_scope.cancel()


async def test_closing_a_model_is_not_interrupted_by_cancellation() -> None:
    provider = LocalProvider(default=Reply("ok"))
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        model = Model(endpoint=Endpoint(base_url), name="m")
        await model.complete(MESSAGES)
        client = model.http_client()
        with trio.CancelScope() as scope:
            scope.cancel()
            await model.aclose()
        assert client.is_closed
        nursery.cancel_scope.cancel()
