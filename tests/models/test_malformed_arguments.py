"""Argument text that is not JSON: the exact error, with its position, recorded and exported
the same way for the three APIs, whether the model's turn came whole or streamed, or the
request was handed to ``act`` as a recorded ``ActionRequest``."""

from __future__ import annotations

import json
from contextlib import aclosing

import pytest
import trio

from lionexec import Branch
from lionexec.conversation import ActionRequest, ActionResponse
from lionexec.models import Endpoint, Model, run, run_stream
from lionexec.models.testing import LocalProvider, Reply

pytestmark = pytest.mark.timeout(60)

MALFORMED = '{"a": 1,'
EXPECTED = (
    "arguments are not valid JSON: Expecting property name enclosed in double quotes "
    "at line 1 column 9 (char 8)"
)


def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


def exported_results(branch: Branch) -> list[str]:
    """The tool result text each API's export sends back."""
    chat = [m["content"] for m in branch.messages.to_openai() if m["role"] == "tool"]
    responses = [
        item["output"]
        for item in branch.messages.to_responses()
        if item.get("type") == "function_call_output"
    ]
    anthropic = [
        block["content"]
        for message in branch.messages.to_anthropic()["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "tool_result"
    ]
    return [*chat, *responses, *anthropic]


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_model_sending_malformed_arguments_is_told_exactly_why(
    api: str, stream: bool
) -> None:
    provider = LocalProvider([Reply(tool_calls=[("add", MALFORMED)]), Reply("sorry")])
    branch = Branch()
    branch.register_tools(add)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        async with Model(endpoint=Endpoint(base_url, api=api), name="m") as model:
            if stream:
                async with aclosing(run_stream(branch, model, "add")) as events:
                    async for _ in events:
                        pass
            else:
                await run(branch, model, "add")
        nursery.cancel_scope.cancel()
    (response,) = [m for m in branch.messages if isinstance(m, ActionResponse)]
    assert response.outcome.value == "invalid"
    assert response.error is not None and response.error.message == EXPECTED
    results = exported_results(branch)
    assert len(results) == 3 and len(set(results)) == 1
    assert json.loads(results[0])["message"] == EXPECTED
    # ... and what the model was sent on the next turn says the same
    assert EXPECTED in json.dumps(provider.log.requests[1])


async def test_a_recorded_request_whose_argument_text_is_malformed_is_told_why() -> None:
    branch = Branch()
    branch.register_tools(add)
    request = ActionRequest.create("add", {}, raw_arguments=MALFORMED)
    (response,) = await branch.act(request)
    assert response.outcome.value == "invalid"
    assert response.error is not None and response.error.message == EXPECTED
    assert json.loads(exported_results(branch)[0])["message"] == EXPECTED
