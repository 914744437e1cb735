"""The loop against Anthropic and Responses endpoints (httpx's mock transport, no network):
what a model sends never makes a later request unsendable; bodies of the wrong shape are
``MalformedResponseError``."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import anthropic.types
import httpx
import openai.types.responses
import pytest
import trio
from pydantic import TypeAdapter

from lionexec import Branch
from lionexec.engine import EventStatus
from lionexec.models import (
    Endpoint,
    LoopResult,
    MalformedResponseError,
    Model,
    ModelCall,
    run,
    run_stream,
)
from lionexec.models._call import parse_body

ANTHROPIC = TypeAdapter(list[anthropic.types.MessageParam])
RESPONSES = TypeAdapter(list[openai.types.responses.ResponseInputItemParam])
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
USAGE = {"input_tokens": 1, "output_tokens": 1}


async def f(x: float = 0.0) -> str:
    """A tool the model calls with a hostile argument."""
    return "ok"


async def shot() -> bytes:
    """A PNG image."""
    return PNG


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def anthropic_message(*blocks: dict[str, Any], stop: str) -> bytes:
    return json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "c",
            "content": list(blocks),
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": USAGE,
        }
    ).encode()


#: A tool_use whose input holds 1e400 (valid JSON; Python reads it as inf), whole and streamed.
HUGE_TOOL_USE = anthropic_message(
    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}, stop="tool_use"
).replace(b'"input": {}', b'"input": {"x": 1e400}')
HUGE_TOOL_USE_STREAM = sse(
    {"type": "message_start", "message": {"id": "msg_1", "model": "c", "usage": USAGE}},
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"x": 1e400}'},
    },
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": USAGE},
    {"type": "message_stop"},
)
DONE = anthropic_message({"type": "text", "text": "done"}, stop="end_turn")


def scripted(bodies: list[bytes], sent: list[dict[str, Any]]) -> httpx.AsyncClient:
    """A client whose every request gets the next of *bodies*; the requests go in *sent*."""

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))  # strict: httpx refuses NaN and Infinity
        body = bodies[len(sent) - 1]
        kind = "text/event-stream" if body.startswith(b"data:") else "application/json"
        return httpx.Response(200, stream=httpx.ByteStream(body), headers={"content-type": kind})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def run_loop(branch: Branch, model: Model, stream: bool) -> LoopResult:
    if not stream:
        return await run(branch, model, "go")
    async with aclosing(run_stream(branch, model, "go")) as events:
        results = [event async for event in events if isinstance(event, LoopResult)]
    return results[-1]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_huge_number_in_an_anthropic_tool_input_does_not_poison_later_requests(
    stream: bool,
) -> None:
    sent: list[dict[str, Any]] = []
    first = HUGE_TOOL_USE_STREAM if stream else HUGE_TOOL_USE
    branch = Branch()
    branch.register_tools([f])
    with trio.fail_after(10):
        async with scripted([first, DONE], sent) as client:
            endpoint = Endpoint("http://model.test/v1", api="anthropic")
            model = Model(endpoint=endpoint, name="c", client=client)
            result = await run_loop(branch, model, stream)
    assert [r.outcome.value for r in branch.messages.responses()] == ["invalid"]
    assert (result.stop_reason, result.text, len(sent)) == ("answered", "done", 2)
    messages = sent[1]["messages"]
    ANTHROPIC.validate_python(messages)
    [use] = [b for b in messages[1]["content"] if b["type"] == "tool_use"]
    [answer] = messages[2]["content"]
    assert use["input"] == {} and answer["tool_use_id"] == use["id"]
    assert answer["is_error"] is True  # the history's own export says the call was invalid


def responses_body(*items: dict[str, Any]) -> bytes:
    return json.dumps({"id": "resp_1", "status": "completed", "output": list(items)}).encode()


async def test_an_image_result_is_sent_to_a_responses_endpoint_as_input_image() -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"}
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "a dot"}],
    }
    sent: list[dict[str, Any]] = []
    branch = Branch()
    branch.register_tools([shot])
    with trio.fail_after(10):
        async with scripted([responses_body(call), responses_body(answer)], sent) as client:
            endpoint = Endpoint("http://model.test/v1", api="responses")
            model = Model(endpoint=endpoint, name="gpt", client=client)
            result = await run(branch, model, "look", system="be brief")
    assert result.text == "a dot"
    RESPONSES.validate_python(sent[1]["input"])
    assert sent[1]["input"] == branch.messages.to_responses()[:-1]  # all but the answer
    [output] = [i["output"] for i in sent[1]["input"] if i.get("type") == "function_call_output"]
    assert [part["type"] for part in output] == ["input_image"]


# -- Responses bodies of the wrong shape -------------------------------------------------------

NOT_A_LIST: list[Any] = [5, True, 1.5, "text", {"type": "output_text", "text": "x"}]


def message_item(content: Any) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": content}


@pytest.mark.parametrize("content", NOT_A_LIST)
def test_a_responses_message_whose_content_is_not_a_list_is_malformed(content: Any) -> None:
    body = {"output": [message_item(content)], "status": "completed"}
    with pytest.raises(MalformedResponseError):
        parse_body("responses", json.dumps(body))
    body["output"] = [message_item(None)]  # no content at all: no text
    assert parse_body("responses", json.dumps(body)).text == ""


# The error ends the stream early: httpx's nested body generators are left to trio's GC hook,
# which closes them and warns (as in test_call.py); the connection is closed by ModelCall.
@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
@pytest.mark.parametrize("content", NOT_A_LIST)
async def test_a_streamed_responses_message_whose_content_is_not_a_list_is_malformed(
    content: Any,
) -> None:
    response = {"id": "resp_1", "status": "completed", "output": [message_item(content)]}
    body = sse({"type": "response.completed", "response": response})
    sent: list[dict[str, Any]] = []
    with trio.fail_after(10):
        async with scripted([body], sent) as client:
            endpoint = Endpoint("http://model.test/v1", api="responses")
            call = ModelCall(endpoint=endpoint, payload={"model": "gpt"}, client=client)
            call.streaming = True
            async with aclosing(call.stream()) as chunks:
                async for _ in chunks:
                    pass
    assert call.status is EventStatus.FAILED
    assert isinstance(call.execution.error, MalformedResponseError)
