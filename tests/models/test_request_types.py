"""Every body the loop sends, checked against the SDKs' own request types (the oracles), for
the three APIs, streamed and whole, with strict and non-strict tools; and the openai SDK's
strict-tool checks accept lionexec's default tools, through the real SDK calling the local
provider."""

from __future__ import annotations

import typing
from contextlib import aclosing
from typing import Any

import anthropic.types
import anthropic.types.message_create_params as anthropic_params
import httpx
import openai
import openai.types.chat
import openai.types.chat.completion_create_params as chat_params
import openai.types.responses
import openai.types.responses.response_create_params as responses_params
import pytest
import trio
from pydantic import TypeAdapter

from lionexec import Branch, Tool
from lionexec.models import Endpoint, LoopResult, Model, run, run_stream
from lionexec.models.testing import LocalProvider, Reply

pytestmark = pytest.mark.timeout(60)

#: The body type of each API, whole and streamed.
BODIES = {
    ("chat", False): TypeAdapter(chat_params.CompletionCreateParamsNonStreaming),
    ("chat", True): TypeAdapter(chat_params.CompletionCreateParamsStreaming),
    ("responses", False): TypeAdapter(responses_params.ResponseCreateParamsNonStreaming),
    ("responses", True): TypeAdapter(responses_params.ResponseCreateParamsStreaming),
    ("anthropic", False): TypeAdapter(anthropic_params.MessageCreateParamsNonStreaming),
    ("anthropic", True): TypeAdapter(anthropic_params.MessageCreateParamsStreaming),
}
#: The function-tool type of each API: a tool must validate as *this* type, key for key
#: (the body's tool union would also match a tool missing a required key as another type).
TOOLS = {
    "chat": openai.types.chat.ChatCompletionFunctionToolParam,
    "responses": openai.types.responses.FunctionToolParam,
    "anthropic": anthropic.types.ToolParam,
}


def check_tool(api: str, tool: dict[str, Any]) -> None:
    kind = TOOLS[api]
    assert set(tool) <= set(typing.get_type_hints(kind)), (api, tool)
    assert TypeAdapter(kind).validate_python(tool) == tool, (api, tool)
    if api == "chat":
        definition = openai.types.shared_params.FunctionDefinition
        assert set(tool["function"]) <= set(typing.get_type_hints(definition))


def search(query: str, limit: int = 5) -> str:
    """Search the notes.

    Args:
        query: words to look for
        limit: how many results
    """
    return f"{limit} results for {query}"


def tag(labels: dict[str, int]) -> str:
    """Tag a note (free keys: cannot be strict)."""
    return ",".join(labels)


async def run_once(api: str, stream: bool, tools: list[Tool]) -> list[dict[str, Any]]:
    provider = LocalProvider(
        [Reply(tool_calls=[("search", {"query": "trio", "limit": None})]), Reply("found it")]
    )
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        branch = Branch()
        branch.register_tools(tools)
        async with Model(endpoint=Endpoint(base_url, api=api), name="local-model") as model:
            if stream:
                async with aclosing(run_stream(branch, model, "find trio")) as events:
                    result = [e async for e in events if isinstance(e, LoopResult)][-1]
            else:
                result = await run(branch, model, "find trio")
        nursery.cancel_scope.cancel()
    assert result.text == "found it"
    return provider.log.requests


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("strict", [None, True, False], ids=["default", "strict", "loose"])
async def test_every_body_the_loop_sends_is_of_the_sdk_request_type(
    api: str, stream: bool, strict: bool | None
) -> None:
    tools = [Tool.from_function(search, strict=strict), Tool.from_function(tag, strict=False)]
    bodies = await run_once(api, stream, tools)
    assert len(bodies) == 2
    for body in bodies:
        BODIES[(api, stream)].validate_python(body)
        for tool in body["tools"]:
            check_tool(api, tool)
        sent = {_name(api, t): t for t in body["tools"]}
        search_strict = _strict(api, sent["search"])
        assert search_strict is (strict is not False), (api, sent["search"])
        assert _strict(api, sent["tag"]) is False
        if api == "responses":  # stated either way: a missing key means strict there
            assert sent["tag"]["strict"] is False
        if api == "anthropic" and search_strict:
            assert sent["search"]["strict"] is True


def _name(api: str, tool: dict[str, Any]) -> str:
    name: str = tool["function"]["name"] if api == "chat" else tool["name"]
    return name


def _strict(api: str, tool: dict[str, Any]) -> bool:
    holder = tool["function"] if api == "chat" else tool
    return holder.get("strict") is True


def test_a_tool_is_strict_by_default_and_one_that_cannot_be_says_why() -> None:
    branch = Branch()
    branch.register_tools([search, tag, Tool.from_function(search, name="loose", strict=False)])
    assert branch.registry.strict_reason("search") is None
    assert branch.registry.get("search").strict
    reason = branch.registry.strict_reason("tag")
    assert reason is not None and "parameter 'labels' of tool 'tag' cannot be strict" in reason
    assert not branch.registry.get("tag").strict
    assert branch.registry.strict_reason("loose") is None  # asked not to be: no reason needed
    assert not branch.registry.get("loose").strict
    # the default keeps lionexec's own key rule: an optional parameter may be left out
    tool = branch.registry.get("search")
    assert tool.validate({"query": "q"}) == {"query": "q"}
    assert tool.validate({"query": "q", "limit": None}) == {"query": "q", "limit": 5}


def test_the_openai_sdk_strict_checks_accept_default_tools() -> None:
    from openai.lib._parsing._completions import validate_input_tools

    tool = Tool.from_function(search)
    validate_input_tools([tool.schema])  # raises for a tool that is not strict
    with pytest.raises(ValueError, match="is not strict"):
        validate_input_tools([Tool.from_function(search, strict=False).schema])


async def test_the_openai_sdk_parse_accepts_default_tools_against_the_local_provider() -> None:
    provider = LocalProvider([Reply(tool_calls=[("search", {"query": "trio", "limit": None})])])
    tool = Tool.from_function(search)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        async with httpx.AsyncClient() as http:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="local", http_client=http)
            completion = await client.chat.completions.parse(
                model="local-model",
                messages=[{"role": "user", "content": "find trio"}],
                tools=[tool.schema],  # type: ignore[list-item]
            )
        nursery.cancel_scope.cancel()
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.parsed_arguments == {"query": "trio", "limit": None}
    assert provider.log.requests[0]["tools"] == [tool.schema]
