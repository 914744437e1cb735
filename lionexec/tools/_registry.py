"""``ActionManager``: the tool registry. It registers and resolves; it never invokes tools."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeAlias, overload

from lionexec.errors import DuplicateToolError, ToolNotFoundError

from ._calling import FunctionCalling
from ._schema import SCHEMA_FORMATS, SchemaFormat, tool_schema
from ._schema_types import AnthropicToolSchema, ChatToolSchema, ResponsesToolSchema
from ._tool import Tool

__all__ = ["ActionManager", "ToolLike"]

#: What :meth:`ActionManager.register_tool` accepts: a tool, or a callable to wrap in one.
ToolLike: TypeAlias = Tool | Callable[..., Any]


class ActionManager:
    """A registry of tools by name, in registration order.

    It answers "which tool is this call for?" and builds the uninvoked
    :class:`FunctionCalling`; running it is the job of the branch's action executor, which
    governs and records every call.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[ToolLike] = (), /) -> None:
        self._tools: dict[str, Tool] = {}
        self.register_tools(tools)

    def register_tool(self, tool: ToolLike, /, *, update: bool = False) -> Tool:
        """Register *tool* and return it; a callable is wrapped in ``Tool.from_function(it)``.

        Raises:
            DuplicateToolError: the name is taken and *update* is false.
            TypeError: *tool* is not callable.
        """
        (registered,) = self.register_tools([tool], update=update)
        return registered

    def register_tools(
        self,
        tools: ToolLike | Iterable[ToolLike | None] | None,
        /,
        *,
        update: bool = False,
    ) -> list[Tool]:
        """Register one tool or callable, or several: all of them, or (on any error) none.

        *tools* is a :class:`Tool`, a callable to wrap in ``Tool.from_function(it)``, or an
        iterable of those; ``None`` (alone or as an entry) is skipped. Returns the tools
        registered, in order.

        Raises:
            DuplicateToolError: a name is taken (or repeated in *tools*) and *update* is false.
            TypeError: an item is not callable.
        """
        if tools is None:
            return []
        items: Iterable[ToolLike | None] = (
            (tools,) if isinstance(tools, Tool) or callable(tools) else tools
        )
        batch: dict[str, Tool] = {}
        for item in items:
            if item is None:
                continue
            tool = item if isinstance(item, Tool) else _as_tool(item)
            if not update and (tool.name in self._tools or tool.name in batch):
                raise DuplicateToolError(tool.name)
            batch[tool.name] = tool
        self._tools.update(batch)
        return list(batch.values())

    def unregister(self, name: str) -> Tool:
        """Remove and return the tool called *name*; raises ToolNotFoundError."""
        tool = self.get(name)
        del self._tools[name]
        return tool

    def get(self, name: str) -> Tool:
        """The tool called *name*.

        Raises:
            ToolNotFoundError: listing the registered names and the closest match.
        """
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            available = sorted(self._tools)
            close = difflib.get_close_matches(str(name), available, n=1)
            raise ToolNotFoundError(str(name), available, close[0] if close else None) from None

    def match_tool(self, function: str, arguments: object) -> FunctionCalling:
        """An uninvoked call of the tool called *function* with validated *arguments*.

        Raises:
            ToolNotFoundError: no such tool.
            ValidationError: the arguments do not fit the tool, naming the field.
        """
        return FunctionCalling.create(self.get(function), arguments)

    @overload
    def schemas(self, format: Literal["openai"] = "openai") -> list[ChatToolSchema]: ...
    @overload
    def schemas(self, format: Literal["responses"]) -> list[ResponsesToolSchema]: ...
    @overload
    def schemas(self, format: Literal["anthropic"]) -> list[AnthropicToolSchema]: ...
    @overload
    def schemas(
        self, format: SchemaFormat
    ) -> list[ChatToolSchema] | list[ResponsesToolSchema] | list[AnthropicToolSchema]: ...

    def schemas(self, format: SchemaFormat = "openai") -> Any:
        """Every tool's schema, in registration order, as fresh copies.

        Typed as the shape each SDK's ``tools=`` takes (:class:`ChatToolSchema`,
        :class:`ResponsesToolSchema`, :class:`AnthropicToolSchema`: TypedDicts mirroring the
        SDKs' own, no SDK imported), so the list passes to
        ``client.chat.completions.create(tools=...)``, ``client.responses.create(tools=...)``
        or ``client.messages.create(tools=...)`` under ``mypy --strict`` with no cast.

        ``"openai"``: ``{"type": "function", "function": {...}}`` (Chat Completions);
        ``"anthropic"``: ``{"name", "description", "input_schema"}``; ``"responses"``:
        ``{"type": "function", "name", "description", "parameters", "strict"}`` (Responses
        API). Strict tools carry ``"strict": true`` in each.

        Raises:
            ValueError: an unknown *format*.
        """
        if format not in SCHEMA_FORMATS:  # also when no tool is registered
            tool_schema({}, format)
        return [tool_schema(t.schema, format) for t in self._tools.values()]

    def strict_reason(self, name: str) -> str | None:
        """Why the tool called *name* is not strict though strict was its default (the part
        of its schema a strict provider would refuse), or ``None`` (it is strict, or was built
        with ``strict=False`` or directly with :class:`Tool`).

        Raises:
            ToolNotFoundError: no such tool.
        """
        return self.get(name).strict_reason

    @property
    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._tools)

    def __contains__(self, item: object) -> bool:
        """A name, a :class:`Tool` (this very one) or a callable some registered tool wraps."""
        if isinstance(item, str):
            return item in self._tools
        if isinstance(item, Tool):
            return self._tools.get(item.name) is item
        return any(t.func_callable is item for t in self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        """The registered tools, in registration order."""
        return iter(list(self._tools.values()))

    def __repr__(self) -> str:
        return f"ActionManager({self.names!r})"


def _as_tool(item: object) -> Tool:
    if not callable(item):
        raise TypeError(f"cannot register {type(item).__name__} {item!r}: not a Tool or callable")
    return Tool.from_function(item)
