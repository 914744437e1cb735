"""What an MCP server may send back is bounded: result size, base64 data, names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types
import pytest
from mcp import ClientSession
from mcp.client._memory import InMemoryTransport
from mcp.server import Server

from lionexec import Branch
from lionexec.errors import ConfigurationError, DuplicateToolError
from lionexec.mcp import McpError, load_tools, mcp_output

pytestmark = pytest.mark.timeout(30)


def server(replies: dict[str, list[Any]], names: list[str] | None = None) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> Any:
        listed = names if names is not None else list(replies)
        tools = [
            mcp.types.Tool(name=name, input_schema={"type": "object", "properties": {}})
            for name in listed
        ]
        return mcp.types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: mcp.types.CallToolRequestParams) -> Any:
        return mcp.types.CallToolResult(content=replies[params.name], structured_content=None)

    return Server("limits", on_list_tools=list_tools, on_call_tool=call_tool)


@asynccontextmanager
async def session_of(app: Server[Any]) -> AsyncIterator[ClientSession]:
    async with InMemoryTransport(app) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_a_result_over_the_cap_fails_the_call_and_is_not_recorded() -> None:
    big = [mcp.types.TextContent(text="x" * 5_000)]
    small = [mcp.types.TextContent(text="ok")]
    async with session_of(server({"big": big, "small": small})) as session:
        branch = Branch()
        branch.register_tools(await load_tools(session, max_result_bytes=4_096))
        failed, fine = await branch.act(
            [{"function": "big", "arguments": {}}, {"function": "small", "arguments": {}}]
        )
    assert failed.outcome.value == "failed"
    assert "more than 4096 bytes" in failed.error.message and "'big'" in failed.error.message
    assert "xxxx" not in repr(failed.content)  # nothing of the result was recorded
    assert fine.output == "ok"


async def test_the_cap_is_checked_when_the_tools_are_loaded() -> None:
    async with session_of(server({"small": []})) as session:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ConfigurationError, match="max_result_bytes"):
                await load_tools(session, max_result_bytes=bad)  # type: ignore[arg-type]


async def test_invalid_base64_data_is_refused_not_stored() -> None:
    bad = [mcp.types.ImageContent(data="not base64!!", mime_type="image/png")]
    good = [mcp.types.ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]
    async with session_of(server({"bad": bad, "good": good})) as session:
        branch = Branch()
        branch.register_tools(await load_tools(session))
        refused, kept = await branch.act(
            [{"function": "bad", "arguments": {}}, {"function": "good", "arguments": {}}]
        )
    assert refused.outcome.value == "failed"
    assert "image data is not valid base64" in refused.error.message
    assert kept.outcome.value == "completed"
    blob = mcp.types.EmbeddedResource(
        resource=mcp.types.BlobResourceContents(uri="file:///a", blob="%%%")
    )
    with pytest.raises(McpError, match="resource data is not valid base64"):
        mcp_output(mcp.types.CallToolResult(content=[blob]))


async def test_a_name_listed_twice_is_refused_and_servers_colliding_on_a_branch_too() -> None:
    async with session_of(server({"dup": []}, names=["dup", "dup"])) as session:
        with pytest.raises(McpError, match="listed the tool 'dup' twice"):
            await load_tools(session)
    async with (
        session_of(server({"search": []})) as first,
        session_of(server({"search": []})) as second,
    ):
        branch = Branch()
        branch.register_tools(await load_tools(first))
        with pytest.raises(DuplicateToolError, match="search"):
            branch.register_tools(await load_tools(second))
        branch.register_tools(await load_tools(second, prefix="docs_"))
        assert sorted(branch.registry.names) == ["docs_search", "search"]
