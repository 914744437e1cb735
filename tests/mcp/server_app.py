"""The MCP server the lionexec.mcp tests talk to, in memory or as a stdio subprocess.

Run as a script, it serves over stdio (``python server_app.py``).
"""

from __future__ import annotations

from typing import Annotated

import anyio
import mcp.types
from mcp.server.mcpserver import Image, MCPServer
from pydantic import Field

#: What the server's tools were called with (in-memory tests read it).
CALLS: list[tuple[str, dict[str, object]]] = []
LONG_NAME = "analytics." + "x" * 100
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def build() -> MCPServer:
    server = MCPServer("lionexec-test")

    @server.tool(name="math.add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        CALLS.append(("math.add", {"a": a, "b": b}))
        return a + b

    @server.tool(name="text/repeat", structured_output=False)
    def repeat(
        text: Annotated[str, Field(min_length=1)], times: Annotated[int, Field(ge=1, le=5)] = 1
    ) -> str:
        """Repeat a text."""
        CALLS.append(("text/repeat", {"text": text, "times": times}))
        return text * times

    @server.tool()
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"exploded: {reason}")

    @server.tool()
    def picture() -> Image:
        """A tiny PNG."""
        return Image(data=PNG, format="png")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleeps (on the server's clock)."""
        await anyio.sleep(seconds)
        return "woke"

    @server.tool(name="a.b")
    def dotted() -> str:
        return "dotted"

    @server.tool(name="a_b")
    def underscored() -> str:
        return "underscored"

    @server.tool(name=LONG_NAME)
    def long() -> str:
        return "long"

    @server.tool(structured_output=False)
    def mixed() -> list[mcp.types.ContentBlock]:
        """Text and an image together."""
        return [
            mcp.types.TextContent(text="a chart:"),
            mcp.types.ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
        ]

    return server


if __name__ == "__main__":
    build().run("stdio")
