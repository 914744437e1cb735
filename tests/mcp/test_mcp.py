"""lionexec.mcp against real MCP servers from the mcp SDK, on trio: in memory and over stdio."""

from __future__ import annotations

import base64
import importlib.util
import pathlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client._memory import InMemoryTransport
from mcp.server import Server

from lionexec import AlcallParams, Branch
from lionexec.errors import ConfigurationError, SchemaError
from lionexec.mcp import McpError, McpToolError, load_tools, map_names, mcp_output
from lionexec.tools import TOOL_NAME_PATTERN

HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("lionexec_mcp_server_app", HERE / "server_app.py")
assert _spec is not None and _spec.loader is not None
server_app = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_app)


@asynccontextmanager
async def memory_session() -> AsyncIterator[ClientSession]:
    async with (
        InMemoryTransport(server_app.build()) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def stdio_session(log: pathlib.Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=[str(HERE / "server_app.py")])
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@pytest.fixture
async def session() -> AsyncIterator[ClientSession]:
    """A session with the test server in memory (``test_over_stdio`` runs it as a process)."""
    async with memory_session() as session:
        yield session


async def test_tools_are_imported_with_their_schemas_and_safe_names(
    session: ClientSession,
) -> None:
    toolset = await load_tools(session)
    names = [tool.name for tool in toolset]
    assert all(TOOL_NAME_PATTERN.match(name) for name in names)
    assert names[:4] == ["math_add", "text_repeat", "explode", "picture"]
    assert toolset.mcp_name("math_add") == "math.add"
    assert toolset.tool_name("text/repeat") == "text_repeat"
    assert {toolset.mcp_name(n) for n in names} == {
        "math.add",
        "text/repeat",
        "explode",
        "picture",
        "a.b",
        "a_b",
        server_app.LONG_NAME,
        "mixed",
        "slow",
    }
    assert toolset.tool_name("a_b") == "a_b"  # already valid: kept
    assert toolset.tool_name("a.b").startswith("a_b_")  # collides: hashed
    assert len(toolset.tool_name(server_app.LONG_NAME)) == 64
    repeat = next(t for t in toolset if t.name == "text_repeat")
    assert repeat.description == "Repeat a text."
    assert repeat.parameters["properties"]["times"]["maximum"] == 5
    assert repeat.required == {"text"}


async def test_calls_run_on_the_server_and_carry_structured_and_image_output(
    session: ClientSession,
) -> None:
    branch = Branch()
    branch.register_tools(await load_tools(session))
    added, repeated, picture, mixed = await branch.act(
        [
            {"function": "math_add", "arguments": {"a": 2, "b": 3}},
            {"function": "text_repeat", "arguments": {"text": "ab", "times": 2}},
            {"function": "picture", "arguments": {}},
            {"function": "mixed", "arguments": {}},
        ]
    )
    assert (added.outcome.value, added.output) == ("completed", {"result": 5})
    assert (repeated.outcome.value, repeated.output) == ("completed", "abab")
    assert picture.outcome.value == "completed"
    [image] = picture.output
    assert image == {
        "type": "image",
        "data": base64.b64encode(server_app.PNG).decode(),
        "mime_type": "image/png",
    }
    assert mixed.output == [
        {"type": "text", "text": "a chart:"},
        {"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"},
    ]


async def test_bad_values_are_invalid_and_never_reach_the_server(session: ClientSession) -> None:
    server_app.CALLS.clear()
    branch = Branch()
    branch.register_tools(await load_tools(session))
    responses = await branch.act(
        [
            {"function": "text_repeat", "arguments": {"text": "ab", "times": 9}},
            {"function": "text_repeat", "arguments": {"text": ""}},
            {"function": "math_add", "arguments": {"a": "2", "b": 3}},
            {"function": "math_add", "arguments": {"a": 1}},
        ]
    )
    assert [r.outcome.value for r in responses] == ["invalid"] * 4
    assert "times: expected a number at most 5" in repr(responses[0])
    assert server_app.CALLS == []  # in memory we can see the server: nothing arrived


async def test_is_error_results_are_failed_with_the_content(session: ClientSession) -> None:
    branch = Branch()
    branch.register_tools(await load_tools(session))
    [response] = await branch.act({"function": "explode", "arguments": {"reason": "r"}})
    assert response.outcome.value == "failed"
    assert "McpToolError" in repr(response)
    assert "MCP tool 'explode' failed" in repr(response)
    toolset = await load_tools(session)
    explode = next(t for t in toolset if t.name == "explode")
    with pytest.raises(McpToolError) as caught:
        await explode.func_callable(reason="r")
    assert caught.value.tool == "explode"
    assert caught.value.content[0]["type"] == "text"


async def test_over_stdio(tmp_path: pathlib.Path) -> None:
    """The same server as a subprocess: names, outputs, invalid values and errors."""
    async with stdio_session(tmp_path / "server.log") as session:
        toolset = await load_tools(session)
        assert toolset.mcp_name("text_repeat") == "text/repeat"
        branch = Branch()
        branch.register_tools(toolset)
        added, picture, bad, exploded = await branch.act(
            [
                {"function": "math_add", "arguments": {"a": 2, "b": 3}},
                {"function": "picture", "arguments": {}},
                {"function": "text_repeat", "arguments": {"text": "ab", "times": 9}},
                {"function": "explode", "arguments": {"reason": "r"}},
            ]
        )
    assert added.output == {"result": 5}
    assert picture.output[0]["data"] == base64.b64encode(server_app.PNG).decode()
    assert (bad.outcome.value, exploded.outcome.value) == ("invalid", "failed")


async def test_a_slow_call_times_out_and_is_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with memory_session() as session:
        branch = Branch()
        branch.register_tools(await load_tools(session))
        slow, quick = await branch.act(
            [
                {"function": "slow", "arguments": {"seconds": 600}},
                {"function": "slow", "arguments": {"seconds": 1}},
            ],
            call_params=AlcallParams(timeout=10),
        )
    assert (slow.outcome.value, quick.outcome.value) == ("timed_out", "completed")
    assert quick.output == {"result": "woke"}


async def test_load_tools_is_a_checkpoint() -> None:
    async with memory_session() as session:
        with trio.testing.assert_checkpoints():
            await load_tools(session)


async def test_prefix_namespaces_the_tools() -> None:
    async with memory_session() as session:
        toolset = await load_tools(session, prefix="srv-")
    assert toolset.tool_name("math.add") == "srv-math_add"
    assert toolset.tool_name("a_b") == "srv-a_b"


async def test_a_client_works_as_well_as_a_session() -> None:
    async with Client(server_app.build(), mode="legacy") as client:
        branch = Branch()
        branch.register_tools(await load_tools(client))
        [response] = await branch.act({"function": "math_add", "arguments": {"a": 1, "b": 1}})
    assert response.output == {"result": 2}


# -- pagination (a low-level server that pages its listing) ---------------------------------


def paged_server(pages: list[list[str]], *, loop: bool = False) -> Server[Any]:
    async def list_tools(ctx: Any, params: mcp.types.PaginatedRequestParams | None) -> Any:
        index = int(params.cursor) if params is not None and params.cursor else 0
        more = index + 1 < len(pages)
        tools = [
            mcp.types.Tool(
                name=name,
                description=f"tool {name}",
                input_schema={
                    "type": "object",
                    "properties": {"n": {"type": "integer", "minimum": 0}},
                    "required": ["n"],
                },
            )
            for name in pages[index]
        ]
        cursor = "0" if loop else (str(index + 1) if more else None)
        return mcp.types.ListToolsResult(tools=tools, next_cursor=cursor)

    async def call_tool(ctx: Any, params: mcp.types.CallToolRequestParams) -> Any:
        n = (params.arguments or {})["n"]
        return mcp.types.CallToolResult(
            content=[mcp.types.TextContent(text=f"{params.name}:{n}")],
            structured_content=None,
        )

    return Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


@asynccontextmanager
async def paged_session(server: Server[Any]) -> AsyncIterator[ClientSession]:
    async with InMemoryTransport(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_every_page_of_the_listing_is_read() -> None:
    async with paged_session(paged_server([["one", "two"], ["three"], ["four.x"]])) as session:
        toolset = await load_tools(session)
        assert [t.name for t in toolset] == ["one", "two", "three", "four_x"]
        branch = Branch()
        branch.register_tools(toolset)
        ok, bad = await branch.act(
            [
                {"function": "four_x", "arguments": {"n": 4}},
                {"function": "three", "arguments": {"n": -1}},
            ]
        )
    assert ok.output == "four.x:4"
    assert bad.outcome.value == "invalid"


async def test_a_listing_that_never_ends_is_refused() -> None:
    async with paged_session(paged_server([["one"], ["two"]], loop=True)) as session:
        with pytest.raises(McpError, match="repeated the tools/list cursor"):
            await load_tools(session)
    async with paged_session(paged_server([["a"], ["b"], ["c"]])) as session:
        with pytest.raises(McpError, match="within 2 pages"):
            await load_tools(session, max_pages=2)


async def test_a_tool_with_an_unusable_schema_is_named() -> None:
    async def list_tools(ctx: Any, params: Any) -> Any:
        bad = mcp.types.Tool(
            name="broken",
            input_schema={"type": "object", "properties": {"a": {"type": "int"}}},
        )
        return mcp.types.ListToolsResult(tools=[bad])

    async with paged_session(Server("bad", on_list_tools=list_tools)) as session:
        with pytest.raises(SchemaError, match=r"cannot import MCP tool 'broken'.*unknown type"):
            await load_tools(session)


async def test_a_parameter_named_self_reaches_the_server() -> None:
    seen: list[dict[str, Any] | None] = []

    async def list_tools(ctx: Any, params: Any) -> Any:
        schema = {
            "type": "object",
            "properties": {"self": {"type": "string"}, "other": {"type": "string"}},
            "required": ["self"],
        }
        return mcp.types.ListToolsResult(
            tools=[mcp.types.Tool(name="describe", input_schema=schema)]
        )

    async def call_tool(ctx: Any, params: mcp.types.CallToolRequestParams) -> Any:
        seen.append(params.arguments)
        return mcp.types.CallToolResult(content=[mcp.types.TextContent(text="ok")])

    server = Server("self", on_list_tools=list_tools, on_call_tool=call_tool)
    async with paged_session(server) as session:
        branch = Branch()
        branch.register_tools(await load_tools(session))
        [response] = await branch.act(
            {"function": "describe", "arguments": {"self": "me", "other": "you"}}
        )
    assert (response.outcome.value, response.output) == ("completed", "ok")
    assert seen == [{"self": "me", "other": "you"}]


# -- names ----------------------------------------------------------------------------------


async def test_a_trailing_newline_is_not_part_of_a_safe_name() -> None:
    assert map_names(["search\n", "ok"]) == {"search_": "search\n", "ok": "ok"}
    assert len(next(iter(map_names(["a" * 64 + "\n"])))) == 64  # cut and hashed
    with pytest.raises(ConfigurationError, match="prefix"):
        map_names(["a"], prefix="p\n")
    async with paged_session(paged_server([["search\n"]])) as session:
        toolset = await load_tools(session)
        assert [t.name for t in toolset] == ["search_"]
        branch = Branch()
        branch.register_tools(toolset)
        [response] = await branch.act({"function": "search_", "arguments": {"n": 1}})
    assert response.output == "search\n:1"  # called on the server by its own name


def test_name_mapping_examples() -> None:
    assert map_names(["search", "github.search/code", "a b"]) == {
        "search": "search",
        "github_search_code": "github.search/code",
        "a_b": "a b",
    }
    mapping = map_names(["x.y", "x/y", "x_y"])
    assert mapping["x_y"] == "x_y"
    hashed = sorted(k for k in mapping if k != "x_y")
    assert len(hashed) == 2 and all(k.startswith("x_y_") for k in hashed)
    assert map_names([""]) == {f"tool_{__import__('hashlib').sha256(b'').hexdigest()[:8]}": ""}
    with pytest.raises(ConfigurationError, match="prefix"):
        map_names(["a"], prefix="bad.prefix")


_MCP_NAMES = st.lists(
    st.text(alphabet="ab_-./ xé" + "0", min_size=0, max_size=80), max_size=8, unique=True
)


@given(_MCP_NAMES, st.randoms(use_true_random=False), st.sampled_from(["", "p_"]))
def test_name_mapping_is_safe_reversible_and_order_independent(
    names: list[str], random: Any, prefix: str
) -> None:
    mapping = map_names(names, prefix=prefix)
    assert sorted(mapping.values()) == sorted(names)  # every tool, exactly once
    assert all(TOOL_NAME_PATTERN.match(name) for name in mapping)
    assert all(name.startswith(prefix) for name in mapping)
    for name, original in mapping.items():
        if TOOL_NAME_PATTERN.match(prefix + original):
            assert name == prefix + original
    shuffled = list(names)
    random.shuffle(shuffled)
    assert map_names(shuffled, prefix=prefix) == mapping


def test_output_rules_for_results_built_by_hand() -> None:
    result = mcp.types.CallToolResult(
        content=[
            mcp.types.EmbeddedResource(
                resource=mcp.types.BlobResourceContents(
                    uri="file:///a.pdf", mime_type="application/pdf", blob="JVBERi0="
                )
            ),
            mcp.types.EmbeddedResource(
                resource=mcp.types.TextResourceContents(uri="file:///a.txt", text="hello")
            ),
        ],
        structured_content={"pages": 1},
    )
    assert mcp_output(result) == [
        {
            "type": "file",
            "data": "JVBERi0=",
            "mime_type": "application/pdf",
            "uri": "file:///a.pdf",
        },
        {"type": "text", "text": "hello", "uri": "file:///a.txt"},
        # a text resource is a text part, but it does not carry the structured content
        {"type": "text", "text": '{"pages": 1}'},
    ]
    image_only = mcp.types.CallToolResult(
        content=[mcp.types.ImageContent(data="AA==", mime_type="image/png")],
        structured_content={"w": 1},
    )
    assert mcp_output(image_only)[-1] == {"type": "text", "text": '{"w": 1}'}
    assert mcp_output(mcp.types.CallToolResult(content=[])) is None


def test_structured_content_never_hides_a_resource() -> None:
    link = mcp.types.ResourceLink(name="report", uri="file:///tmp/report.csv")
    with_link = mcp.types.CallToolResult(
        content=[mcp.types.TextContent(text='{"count": 1}'), link],
        structured_content={"count": 1},
    )
    assert mcp_output(with_link) == [
        {"type": "text", "text": '{"count": 1}'},
        {
            "type": "text",
            "text": "resource report: file:///tmp/report.csv",
            "uri": "file:///tmp/report.csv",
        },
    ]
    notes = mcp.types.TextResourceContents(uri="file:///notes.txt", text="the full notes")
    with_resource = mcp.types.CallToolResult(
        content=[mcp.types.EmbeddedResource(resource=notes)],
        structured_content={"count": 1},
    )
    assert mcp_output(with_resource) == [
        {"type": "text", "text": "the full notes", "uri": "file:///notes.txt"},
        {"type": "text", "text": '{"count": 1}'},  # no TextContent carried it
    ]
    text_only = mcp.types.CallToolResult(
        content=[mcp.types.TextContent(text="a"), mcp.types.TextContent(text="b")],
        structured_content={"count": 1},
    )
    assert mcp_output(text_only) == {"count": 1}


def test_non_finite_structured_content_beside_an_image_is_strict_json_text() -> None:
    # The SDK reads NaN and 1e400 as floats: a successful call was recorded failed
    # (json.dumps(allow_nan=False) raised ValueError in mcp_output).
    result = mcp.types.CallToolResult(
        content=[mcp.types.ImageContent(data="AA==", mime_type="image/png")],
        structured_content={"mean": float("nan"), "max": float("inf")},
    )
    assert mcp_output(result)[-1] == {
        "type": "text",
        "text": '{"mean": "NaN", "max": "Infinity"}',
    }
