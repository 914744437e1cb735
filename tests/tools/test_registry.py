"""ActionManager: it registers and resolves tools only; it has no path that invokes one."""

from __future__ import annotations

from typing import Any

import pytest

from lionexec.engine import EventStatus
from lionexec.errors import DuplicateToolError, ToolNotFoundError, ValidationError
from lionexec.tools import ActionManager, FunctionCalling, Tool


async def search(query: str, limit: int = 5) -> list[str]:
    """Search the index."""
    return [query] * limit


def read_file(path: str) -> str:
    """Read a file."""
    return path


def test_register_callables_and_tools_in_order() -> None:
    manager = ActionManager([search])
    tool = manager.register_tool(Tool.from_function(read_file, subject="path"))
    assert manager.names == ["search", "read_file"]
    assert len(manager) == 2
    assert list(manager) == [manager.get("search"), tool]


def test_duplicate_names_are_refused_unless_updating() -> None:
    manager = ActionManager([search])
    with pytest.raises(DuplicateToolError, match="'search'") as caught:
        manager.register_tool(search)
    assert caught.value.name == "search"
    replacement = Tool.from_function(read_file, name="search")
    manager.register_tool(replacement, update=True)
    assert manager.get("search") is replacement


def test_register_tools_is_all_or_nothing() -> None:
    manager = ActionManager()
    with pytest.raises(DuplicateToolError):
        manager.register_tools([search, read_file, search])
    assert len(manager) == 0
    with pytest.raises(TypeError, match="not a Tool or callable"):
        manager.register_tools([search, "read_file"])  # type: ignore[list-item]
    assert len(manager) == 0


def test_contains_by_name_tool_or_callable() -> None:
    tool = Tool.from_function(read_file)
    manager = ActionManager([search, tool])
    assert "search" in manager
    assert tool in manager
    assert search in manager
    assert read_file in manager
    assert Tool.from_function(read_file) not in manager  # another tool under the same name
    assert "write_file" not in manager
    assert len not in manager


def test_unknown_name_lists_registered_names_and_the_closest() -> None:
    manager = ActionManager([search, read_file])
    with pytest.raises(ToolNotFoundError) as caught:
        manager.get("read_fil")
    error = caught.value
    assert error.available == ["read_file", "search"]
    assert error.suggestion == "read_file"
    assert "did you mean 'read_file'" in str(error)
    with pytest.raises(ToolNotFoundError) as caught:
        manager.get("zzz")
    assert caught.value.suggestion is None


def test_match_tool_returns_an_uninvoked_validated_call() -> None:
    manager = ActionManager([search])
    call = manager.match_tool("search", {"query": "trio", "limit": "2"})
    assert isinstance(call, FunctionCalling)
    assert call.status is EventStatus.PENDING
    assert call.function == "search"
    assert call.arguments == {"query": "trio", "limit": 2}
    with pytest.raises(ValidationError) as caught:
        manager.match_tool("search", {"limit": 2})
    assert caught.value.field == "query"
    with pytest.raises(ToolNotFoundError):
        manager.match_tool("searc", {})


def test_registry_has_no_invocation_path() -> None:
    assert not any("invoke" in name for name in dir(ActionManager))


def test_schemas_in_openai_and_anthropic_shapes() -> None:
    manager = ActionManager([search, Tool.from_function(read_file, strict=False)])
    openai = manager.schemas()
    assert [s["function"]["name"] for s in openai] == ["search", "read_file"]
    assert openai[0] == manager.get("search").schema
    openai[0]["function"]["name"] = "mutated"  # a copy: the tool is unaffected
    assert manager.get("search").name == "search"
    assert manager.get("search").schema["function"]["name"] == "search"
    anthropic = manager.schemas("anthropic")
    assert anthropic[1] == {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": manager.get("read_file").parameters,
    }
    with pytest.raises(ValueError, match="unknown schema format"):
        manager.schemas("gemini")  # type: ignore[arg-type]


@pytest.mark.parametrize("format", ["openai", "anthropic", "responses"])
def test_schemas_are_deep_copies(format: Any) -> None:
    manager = ActionManager([Tool.from_function(search, strict=False), read_file])
    before = manager.schemas(format)
    mutated = manager.schemas(format)
    for schema in mutated:
        parameters = schema.get("function", schema)
        parameters = parameters.get("parameters") or parameters["input_schema"]
        parameters["properties"].clear()
        parameters["required"].append("x")
        schema.clear()
    assert manager.schemas(format) == before
    assert manager.get("search").parameters["required"] == ["query"]


def test_schema_copies_keep_shared_parts_shared_and_odd_values_copied() -> None:
    point = {"type": "object", "properties": {"x": {"type": "integer"}}}
    parameters = {
        "type": "object",
        "properties": {"a": point, "b": point, "c": {"enum": [(1, 2)]}},
    }
    tool = Tool.from_function(read_file, name="shared", schema=parameters)
    stored = tool.parameters["properties"]
    assert stored["a"] is stored["b"]  # the explicit schema was deep-copied as a whole
    for schema in (tool.schema_for(), ActionManager([tool]).schemas()[0]):
        properties = schema["function"]["parameters"]["properties"]
        assert properties == stored
        assert properties["a"] is properties["b"]  # one copy of one dict, as deepcopy makes
        assert properties["a"] is not stored["a"]
        assert properties["c"]["enum"] == [(1, 2)]  # not JSON: the general copy, still a copy
        assert properties["c"]["enum"] is not stored["c"]["enum"]


def test_unregister_removes_a_tool() -> None:
    manager = ActionManager([search])
    tool: Any = manager.unregister("search")
    assert tool.name == "search"
    assert "search" not in manager
    with pytest.raises(ToolNotFoundError):
        manager.unregister("search")


def test_register_tools_takes_what_the_branch_takes() -> None:
    # One callable, a Tool, None, and iterables with None entries: one behaviour per name.
    manager = ActionManager()
    assert [t.name for t in manager.register_tools(search)] == ["search"]
    assert manager.register_tools(None) == []
    registered = manager.register_tools([None, Tool.from_function(read_file), None])
    assert [t.name for t in registered] == ["read_file"]
    assert manager.names == ["search", "read_file"]
    with pytest.raises(DuplicateToolError):
        manager.register_tools(search)
    with pytest.raises(TypeError):
        manager.register_tools([42])  # type: ignore[list-item]
