"""Tools of an MCP server as lionexec :class:`~lionexec.tools.Tool` objects (the ``mcp`` extra).

:func:`load_tools` lists the tools of a connected MCP client (an ``mcp.ClientSession`` or an
``mcp.Client``), every page of the listing, and wraps each in a :class:`~lionexec.tools.Tool`
whose explicit schema is the server's ``inputSchema``. Registered on a branch, an MCP tool is
governed and recorded like any other:

* **names**: an MCP name may hold dots and slashes, or be longer than the 64 characters
  providers accept. :func:`map_names` maps every name to :data:`~lionexec.tools.TOOL_NAME_PATTERN`
  deterministically (the same listing always gives the same names) and reversibly (the
  :attr:`McpToolset.names` table); the tool is called on the server by its own name;
* **arguments** are validated against the server's JSON Schema before the call
  (:mod:`lionexec.tools._jsonschema`): bad values end the call ``invalid`` and never reach
  the server;
* **errors**: a result with ``isError`` raises :class:`McpToolError` (carrying the content),
  so the call is recorded ``failed``;
* **output**: the result's structured content when the server sent some (and only text
  blocks beside it); otherwise its content as plain dicts of content parts: a single text part
  is just its string; several parts, or an image, are a list of ``{"type": "text", "text"}``,
  ``{"type": "image", "data": <base64>, "mime_type"}``, ``{"type": "audio", "data",
  "mime_type"}`` and ``{"type": "file", "data", "mime_type", "uri"}`` (an embedded binary
  resource). A text resource is a text part with its ``uri``; a resource link is a text part
  naming it;
* **limits**: a result larger than ``max_result_bytes`` (16 MiB by default: its text, base64
  data and structured content together) and binary data that is not valid base64 end the call
  ``failed`` with :class:`McpError` naming the tool, and are never recorded. A server that
  lists one name twice is refused (:class:`McpError`); tools of several servers on one branch
  whose names collide are a :class:`~lionexec.errors.DuplicateToolError` when registered:
  give each server's tools a ``prefix``.

Only this module imports ``mcp``; install it with ``pip install lionexec[mcp]``. The MCP SDK
runs on anyio, so it runs on trio.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from lionexec._extras import missing_extra

try:
    import mcp
    import mcp.types
except ModuleNotFoundError as exc:  # (the mcp extra)
    raise missing_extra(exc, "mcp", "lionexec.mcp") from exc

from lionexec.conversation.formats import dumps as strict_dumps
from lionexec.errors import ConfigurationError, LionexecError, SchemaError
from lionexec.tools import TOOL_NAME_PATTERN, Tool

__all__ = [
    "MAX_RESULT_BYTES",
    "McpError",
    "McpToolError",
    "McpToolset",
    "load_tools",
    "map_names",
    "mcp_output",
]

#: The most ``tools/list`` pages :func:`load_tools` reads by default before giving up.
MAX_PAGES: Final = 100
#: The largest result an MCP tool call may return by default, in bytes (see the module).
MAX_RESULT_BYTES: Final = 16 * 1024 * 1024
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX: Final = re.compile(r"[A-Za-z0-9_-]{0,40}")
_HASH_LENGTH: Final = 8


class McpError(LionexecError):
    """An MCP server answered in a way lionexec cannot use (a listing that never ends, ...)."""


class McpToolError(McpError):
    """An MCP tool reported an error (its result had ``isError: true``).

    Raised inside the tool's call, so the call is recorded ``failed`` with this message.

    Attributes:
        tool: the tool's MCP name.
        content: the result's content, as plain dicts of content parts (see the module).
    """

    def __init__(self, tool: str, content: list[dict[str, Any]]) -> None:
        texts = [part["text"] for part in content if part.get("type") == "text"]
        detail = "\n".join(texts) or "no details"
        super().__init__(f"MCP tool {tool!r} failed: {detail}")
        self.tool = tool
        self.content = content


def map_names(names: Iterable[str], *, prefix: str = "") -> dict[str, str]:
    """Map MCP tool *names* to lionexec tool names: ``{lionexec name: MCP name}``.

    Each name gets *prefix* (letters, digits, ``_``, ``-``; at most 40). A prefixed name that
    already matches :data:`~lionexec.tools.TOOL_NAME_PATTERN` is kept. Otherwise every other
    character becomes ``_`` (``github.search/code`` → ``github_search_code``); when that is
    longer than 64 characters, or collides with another name, it is cut to 55 characters and
    given ``_`` and 8 hex digits of the SHA-256 of the MCP name. The result depends only on
    the set of names, never on their order, so it is stable across sessions. Repeated names
    count once.

    Raises:
        ConfigurationError: a bad *prefix*, or (astronomically unlikely) two hashed names
            that still collide.
    """
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"prefix {prefix!r} must be at most 40 letters, digits, '_' or '-'"
        )
    originals = list(dict.fromkeys(names))
    kept = {prefix + n for n in originals if TOOL_NAME_PATTERN.fullmatch(prefix + n)}
    sanitized: dict[str, list[str]] = {}
    for n in originals:
        if prefix + n not in kept:
            sanitized.setdefault(_UNSAFE.sub("_", prefix + n), []).append(n)
    chosen: dict[str, str] = {}  # MCP name -> lionexec name
    for n in originals:
        if prefix + n in kept:
            chosen[n] = prefix + n
    for safe, group in sanitized.items():
        for n in group:
            if len(group) == 1 and safe not in kept and TOOL_NAME_PATTERN.fullmatch(safe):
                chosen[n] = safe
            else:
                digest = hashlib.sha256(n.encode("utf-8", "surrogatepass")).hexdigest()
                chosen[n] = f"{(safe or 'tool')[:55]}_{digest[:_HASH_LENGTH]}"
    mapping: dict[str, str] = {}
    for n in originals:
        name = chosen[n]
        if name in mapping:
            raise ConfigurationError(
                f"MCP tools {mapping[name]!r} and {n!r} map to the same name {name!r}"
            )
        mapping[name] = n
    return mapping


@attrs.frozen(eq=False)
class McpToolset:
    """The tools :func:`load_tools` imported, in the server's order, and the name table.

    Iterating gives the tools, so ``branch.register_tools(toolset)`` registers them all.
    """

    tools: tuple[Tool, ...]
    #: lionexec name → MCP name, for every tool.
    names: Mapping[str, str]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def mcp_name(self, name: str) -> str:
        """The MCP name of the tool lionexec calls *name*; raises KeyError."""
        return self.names[name]

    def tool_name(self, mcp_name: str) -> str:
        """The lionexec name of the MCP tool *mcp_name*; raises KeyError."""
        for name, original in self.names.items():
            if original == mcp_name:
                return name
        raise KeyError(mcp_name)


async def load_tools(
    session: mcp.ClientSession | mcp.Client,
    *,
    prefix: str = "",
    max_pages: int = MAX_PAGES,
    max_result_bytes: int = MAX_RESULT_BYTES,
) -> McpToolset:
    """List every tool of *session* (all pages) and wrap each as a :class:`Tool`.

    *session* is an initialized ``mcp.ClientSession`` or an entered ``mcp.Client``; the tools
    call it, so it must stay open while they run. *prefix* goes before every name (for tools
    of several servers on one branch). A call whose result is over *max_result_bytes* fails
    (see the module). Blocks for the listing round trips; cancellation propagates (nothing is
    kept).

    Raises:
        McpError: the listing did not end within *max_pages* pages, repeated a cursor, or
            listed one tool name twice.
        SchemaError: a tool's ``inputSchema`` is not a usable JSON Schema object (naming the
            tool).
    """
    listed: dict[str, mcp.types.Tool] = {}
    twice: list[str] = []  # refused once the listing is read (a looping cursor says more)
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        page = await _list_page(session, cursor)
        for tool in page.tools:
            if tool.name in listed:
                twice.append(tool.name)
            listed[tool.name] = tool
        cursor = page.next_cursor
        if cursor is None:
            break
        if cursor in seen:
            raise McpError(f"the MCP server repeated the tools/list cursor {cursor!r}")
        seen.add(cursor)
    else:
        raise McpError(f"the MCP tools/list did not end within {max_pages} pages")
    if twice:
        raise McpError(f"the MCP server listed the tool {twice[0]!r} twice")
    if isinstance(max_result_bytes, bool) or not isinstance(max_result_bytes, int):
        raise ConfigurationError(f"max_result_bytes must be an int, not {max_result_bytes!r}")
    if max_result_bytes < 1:
        raise ConfigurationError(f"max_result_bytes must be positive, not {max_result_bytes}")
    names = map_names(listed, prefix=prefix)
    tools = []
    for name, original in names.items():
        tools.append(_wrap(session, listed[original], name, max_result_bytes))
    return McpToolset(tuple(tools), names)


async def _list_page(
    session: mcp.ClientSession | mcp.Client, cursor: str | None
) -> mcp.types.ListToolsResult:
    if isinstance(session, mcp.Client):
        return await session.list_tools(cursor=cursor)
    params = None if cursor is None else mcp.types.PaginatedRequestParams(cursor=cursor)
    return await session.list_tools(params=params)


def _wrap(
    session: mcp.ClientSession | mcp.Client, tool: mcp.types.Tool, name: str, max_bytes: int
) -> Tool:
    schema = tool.input_schema
    try:
        return Tool.from_function(
            _McpCall(session, tool.name, max_bytes),
            name=name,
            description=tool.description or "",
            schema=schema if isinstance(schema, Mapping) else {},
        )
    except (ConfigurationError, SchemaError) as exc:
        raise SchemaError(f"cannot import MCP tool {tool.name!r}: {exc}") from None


@attrs.frozen(eq=False)
class _McpCall:
    """Calls one MCP tool by its own name; the :class:`Tool`'s callable."""

    session: mcp.ClientSession | mcp.Client = attrs.field(repr=False)
    tool: str
    max_bytes: int = MAX_RESULT_BYTES

    async def __call__(self, /, **arguments: Any) -> Any:  # "self" may be an argument
        result = await self.session.call_tool(self.tool, arguments)
        size = _result_size(result, self.max_bytes)
        if size > self.max_bytes:
            raise McpError(
                f"the MCP tool {self.tool!r} returned more than {self.max_bytes} bytes "
                f"(at least {size}); not recorded (load_tools(max_result_bytes=...) sets the cap)"
            )
        if result.is_error:
            raise McpToolError(self.tool, [_part(block) for block in result.content])
        return mcp_output(result)


def mcp_output(result: mcp.types.CallToolResult) -> Any:
    """The output lionexec records for a successful ``CallToolResult`` (see the module)."""
    parts = [_part(block) for block in result.content]
    structured = result.structured_content
    if structured is not None:
        # by the MCP block types: a resource or resource link is a text part too, but it is
        # not the structured content's text
        texts = [getattr(block, "type", None) == "text" for block in result.content]
        if all(texts):
            return structured
        if not any(texts):
            # strict JSON text (a NaN the SDK read becomes "NaN"), never a ValueError that
            # would turn a successful call into a failed one
            parts.append({"type": "text", "text": strict_dumps(structured)})
        return parts
    if not parts:
        return None
    if len(parts) == 1 and parts[0].keys() == {"type", "text"}:
        return parts[0]["text"]
    return parts


def _result_size(result: mcp.types.CallToolResult, limit: int) -> int:
    """The size of *result*'s texts, data and structured content, counted until past *limit*."""
    size = 0
    for block in result.content:
        resource = getattr(block, "resource", None)
        for owner in (block, resource):
            for field in ("text", "data", "blob"):
                value = getattr(owner, field, None) if owner is not None else None
                if isinstance(value, str | bytes):
                    size += len(value)
        if size > limit:
            return size
    if result.structured_content is not None:
        size += len(strict_dumps(result.structured_content))
    return size


def _base64(data: object, tool_part: str) -> object:
    """*data*, checked to be base64 as MCP requires (a model or a file reader gets it)."""
    if isinstance(data, str):
        try:
            binascii.a2b_base64(data.encode("ascii"), strict_mode=True)
        except (ValueError, UnicodeEncodeError):
            raise McpError(f"the MCP result's {tool_part} data is not valid base64") from None
    return data


def _part(block: Any) -> dict[str, Any]:
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind in ("image", "audio"):
        return {"type": kind, "data": _base64(block.data, kind), "mime_type": block.mime_type}
    if kind == "resource":
        resource = block.resource
        uri = str(resource.uri)
        if getattr(resource, "text", None) is not None:
            part = {"type": "text", "text": resource.text, "uri": uri}
            if resource.mime_type:
                part["mime_type"] = resource.mime_type
            return part
        return {
            "type": "file",
            "data": _base64(resource.blob, "resource"),
            "mime_type": resource.mime_type or "application/octet-stream",
            "uri": uri,
        }
    if kind == "resource_link":
        return {
            "type": "text",
            "text": f"resource {block.name}: {block.uri}",
            "uri": str(block.uri),
        }
    dump = block.model_dump(mode="json") if hasattr(block, "model_dump") else repr(block)
    return {"type": "text", "text": strict_dumps(dump)}
