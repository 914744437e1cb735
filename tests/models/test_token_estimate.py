"""The token estimate charged before a call never falls short of what the provider counts, and
is settled against the usage the response reports (the local provider on 127.0.0.1)."""

from __future__ import annotations

import pytest
import trio

from lionexec.limits import BudgetExceededError, RateLimiter
from lionexec.models import Endpoint, ModelCall
from lionexec.models._call import DEFAULT_OUTPUT_TOKENS, estimate_tokens
from lionexec.models.testing import LocalProvider, Reply

pytestmark = pytest.mark.timeout(60)


def payload(text: str, **params: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **params}


def test_without_an_output_cap_the_documented_allowance_is_charged() -> None:
    small = estimate_tokens(payload("hi"))
    assert small > DEFAULT_OUTPUT_TOKENS  # 120 tokens of answer can no longer go uncounted
    capped = payload("hi", max_tokens=50)
    assert estimate_tokens(capped) == estimate_tokens(capped, output_tokens=1) < 200
    assert estimate_tokens(payload("hi"), output_tokens=10) == small - DEFAULT_OUTPUT_TOKENS + 10


@pytest.mark.parametrize("text", ["word " * 200, "字" * 300, "🙂" * 100, '"\\' * 50])
def test_the_input_part_is_at_least_the_utf8_bytes_of_the_text(text: str) -> None:
    # every token of a byte-level tokenizer covers at least one byte of the text
    assert estimate_tokens(payload(text, max_tokens=1)) > len(text.encode("utf-8"))


async def test_the_estimate_is_charged_up_front_and_settled_against_usage() -> None:
    provider = LocalProvider([Reply("ok", usage=(30, 120))])
    limiter = RateLimiter(tokens=100_000, period=60.0)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        call = ModelCall(endpoint=Endpoint(base_url), payload=payload("hi"), limiter=limiter)
        assert call.estimated_tokens >= 150  # more than the usage to come
        await call.invoke()
        nursery.cancel_scope.cancel()
    assert limiter.statistics().tokens_charged == 150  # the estimate replaced by the usage


def test_a_budget_smaller_than_the_output_allowance_asks_for_a_cap() -> None:
    limiter = RateLimiter(tokens=2400, period=1.0)
    call = ModelCall(endpoint=Endpoint("http://127.0.0.1:9/v1"), payload=payload("hi"))
    with pytest.raises(BudgetExceededError, match="exceeds the token burst"):
        limiter.check(call.estimated_tokens)
    capped = ModelCall(
        endpoint=Endpoint("http://127.0.0.1:9/v1"), payload=payload("hi", max_tokens=200)
    )
    limiter.check(capped.estimated_tokens)


async def test_the_local_provider_enforces_tokens_and_states_its_budgets() -> None:
    budget = RateLimiter(requests=100, period=60.0, tokens=100)
    provider = LocalProvider(
        [Reply("a", usage=(30, 30)), Reply("b", usage=(30, 30))], limiter=budget
    )
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        first = ModelCall(endpoint=Endpoint(base_url), payload=payload("hi", max_tokens=1))
        await first.invoke()
        second = ModelCall(endpoint=Endpoint(base_url), payload=payload("hi", max_tokens=1))
        await second.invoke()  # 60 more tokens than the 40 left: refused
        nursery.cancel_scope.cancel()
    assert provider.log.statuses == [200, 429]
    assert first.execution.error is None
    error = second.execution.error
    assert error is not None and error.headers["x-ratelimit-remaining-tokens"] == "40"


async def test_the_anthropic_route_states_its_budgets_the_anthropic_way() -> None:
    budget = RateLimiter(requests=5, period=60.0)
    provider = LocalProvider([Reply("a")], limiter=budget)
    client_side = RateLimiter(requests=50, period=60.0)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        call = ModelCall(
            endpoint=Endpoint(base_url, api="anthropic"),
            payload={
                "model": "c",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
            },
            limiter=client_side,
        )
        await call.invoke()
        nursery.cancel_scope.cancel()
    assert call.execution.error is None
    # the provider's count (4 left) is the truth: the client's 49 came down to it
    assert client_side.statistics().requests_available == 4
