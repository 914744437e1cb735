"""Strict schemas per the providers' rules, checked with the SDKs' own validators and types."""

from __future__ import annotations

import copy
import dataclasses
import enum
import inspect
import keyword
from typing import Any, Literal

import attrs
import jsonschema
import pydantic
import pytest
from anthropic.types import ToolParam
from hypothesis import given
from hypothesis import strategies as st
from openai.lib._parsing._completions import validate_input_tools
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionToolParam
from openai.types.responses import FunctionToolParam

from lionexec import Branch
from lionexec.errors import SchemaError, ValidationError
from lionexec.tools import ActionManager, FunctionCalling, Tool
from lionexec.tools._strict import strict_parameters

ADAPTERS: dict[str, pydantic.TypeAdapter[Any]] = {
    "openai": pydantic.TypeAdapter(ChatCompletionToolParam),
    "anthropic": pydantic.TypeAdapter(ToolParam),
    "responses": pydantic.TypeAdapter(FunctionToolParam),
}
FUNCTION_TOOL = pydantic.TypeAdapter(ChatCompletionFunctionToolParam)


class Unit(enum.Enum):
    CM = "cm"
    IN = "in"


@attrs.define
class Point:
    x: int
    y: int = 0
    label: str | None = None


@dataclasses.dataclass
class Filters:
    unit: Unit = Unit.CM
    points: list[Point] = dataclasses.field(default_factory=list)


async def search(query: str, limit: int = 10, filters: Filters | None = None) -> str:
    """Search the documents.

    Args:
        query: what to look for
        limit: how many results
    """
    return query


def assert_openai_strict(tool_schema: dict[str, Any]) -> None:
    """The OpenAI SDK's own checks: its strict-tool gate, and its strictifier is a no-op."""
    validate_input_tools([tool_schema])  # raises "`name` is not strict" otherwise
    parameters = copy.deepcopy(tool_schema["function"]["parameters"])
    assert (
        _ensure_strict_json_schema(parameters, path=(), root=parameters)
        == (tool_schema["function"]["parameters"])
    )


def assert_sdk_types(tool: Tool) -> None:
    for format, adapter in ADAPTERS.items():
        emitted = tool.schema_for(format)  # type: ignore[arg-type]
        assert adapter.validate_python(emitted) == emitted, format  # nothing unknown dropped
    assert FUNCTION_TOOL.validate_python(tool.schema) == tool.schema
    jsonschema.Draft202012Validator.check_schema(tool.parameters)


def walk_objects(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            found.append(schema)
        for value in schema.values():
            found.extend(walk_objects(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(walk_objects(value))
    return found


def test_strict_tool_emits_strict_and_closes_every_object() -> None:
    tool = Tool.from_function(search, strict=True)
    assert tool.schema["function"]["strict"] is True
    objects = walk_objects(tool.parameters)
    assert len(objects) == 3  # parameters, Filters, Point
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    properties = tool.parameters["properties"]
    assert properties["query"] == {"type": "string", "description": "what to look for"}
    assert properties["limit"] == {
        "type": ["integer", "null"],
        "description": "how many results (null means the default, 10)",
    }
    filters = properties["filters"]["anyOf"][0]["properties"]
    point = filters["points"]["anyOf"][0]["items"]
    assert point["properties"]["y"]["type"] == ["integer", "null"]
    assert point["properties"]["label"] == {"type": ["string", "null"]}  # default null dropped
    unit = properties["filters"]["anyOf"][0]["properties"]["unit"]
    assert unit == {
        "type": ["string", "null"],
        "enum": ["cm", "in", None],
        "description": 'Null means the default, "cm"',
    }
    assert "'default':" not in repr(tool.parameters)  # some strict endpoints refuse it
    assert_openai_strict(tool.schema)
    assert_sdk_types(tool)


def test_every_format_carries_strict() -> None:
    tool = Tool.from_function(search, strict=True)
    assert tool.schema_for("anthropic")["strict"] is True
    assert tool.schema_for("anthropic")["input_schema"] == tool.parameters
    responses = tool.schema_for("responses")
    assert responses == {
        "type": "function",
        "name": "search",
        "description": "Search the documents.",
        "parameters": tool.parameters,
        "strict": True,
    }
    loose = Tool.from_function(search, strict=False)
    assert "strict" not in loose.schema["function"]
    assert "strict" not in loose.schema_for("anthropic")
    assert loose.schema_for("responses")["strict"] is False
    assert_sdk_types(loose)
    registry = ActionManager([tool])
    assert registry.schemas("responses") == [responses]
    assert registry.schemas("anthropic") == [tool.schema_for("anthropic")]
    with pytest.raises(ValueError, match="unknown schema format 'gemini'"):
        ActionManager().schemas("gemini")  # type: ignore[arg-type]


def test_the_openai_sdk_refuses_a_non_strict_tool() -> None:
    with pytest.raises(ValueError, match="`search` is not strict"):
        # the check above is a real one
        validate_input_tools([Tool.from_function(search, strict=False).schema])


def test_schemas_are_fresh_copies() -> None:
    tool = Tool.from_function(search, strict=True)
    for format in ("openai", "anthropic", "responses"):
        emitted = tool.schema_for(format)  # type: ignore[arg-type]
        emitted.clear()
    assert tool.schema["function"]["strict"] is True
    assert tool.parameters["properties"]


def test_dict_parameters_cannot_be_strict_but_are_expressible_otherwise() -> None:
    def tag(labels: dict[str, int]) -> None: ...

    assert Tool.from_function(tag).parameters["properties"]["labels"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    with pytest.raises(SchemaError, match=r"parameter 'labels' of tool 'tag' cannot be strict"):
        Tool.from_function(tag, strict=True)


@attrs.define
class Query:
    text: str
    meta: dict[str, str] = attrs.field(factory=dict)


@pytest.mark.parametrize(
    ("func", "match"),
    [
        (lambda q: None, r"'q'.*any JSON value"),
        (lambda q, payload={}: None, r"'q'"),
    ],
)
def test_untyped_parameters_cannot_be_strict(func: Any, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        Tool.from_function(func, name="f", strict=True)


def test_nested_free_keys_name_the_nested_parameter() -> None:
    async def run(**kwargs: Any) -> None: ...

    with pytest.raises(SchemaError, match=r"parameter 'meta' .*free keys"):
        Tool.from_function(run, request_class=Query, strict=True)

    def deep(queries: list[Query]) -> None: ...

    with pytest.raises(SchemaError, match=r"parameter 'queries\[\]\.meta'"):
        Tool.from_function(deep, strict=True)

    def pair(point: tuple[int, int]) -> None: ...

    with pytest.raises(SchemaError, match=r"parameter 'point' .*fixed-length array"):
        Tool.from_function(pair, strict=True)
    assert Tool.from_function(
        lambda xs: None,
        name="f",
        strict=True,
        schema={
            "type": "object",
            "properties": {"xs": {"type": "array", "items": {"type": "integer"}}},
        },
    ).parameters["properties"]["xs"]["anyOf"][0]["items"] == {"type": "integer"}

    def loose(options: dict[str, Any]) -> None: ...

    with pytest.raises(SchemaError, match=r"parameter 'options' .*free-form object"):
        Tool.from_function(loose, strict=True)


def test_hand_written_strict_is_kept() -> None:
    def fetch(**kwargs: Any) -> None: ...

    explicit = {
        "type": "function",
        "function": {
            "name": "fetch",
            "description": "Fetch a URL.",
            "parameters": {
                "type": "object",
                "properties": {
                    "url": {"type": "string"},
                    "retries": {"type": ["integer", "null"]},
                },
                "required": ["url", "retries"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    tool = Tool.from_function(fetch, schema=explicit)
    assert tool.strict
    assert tool.schema == explicit
    assert tool.schema_for("anthropic")["strict"] is True
    assert tool.schema_for("responses")["strict"] is True
    assert_openai_strict(tool.schema)
    assert_sdk_types(tool)


def test_strict_explicit_schema_is_made_strict() -> None:
    def fetch(url: str, retries: int = 3) -> None: ...

    tool = Tool.from_function(
        fetch,
        schema={
            "type": "object",
            "properties": {"url": {"type": "string"}, "retries": {"type": "integer"}},
            "required": ["url"],
        },
        strict=True,
    )
    assert tool.parameters == {
        "type": "object",
        "properties": {"url": {"type": "string"}, "retries": {"type": ["integer", "null"]}},
        "required": ["url", "retries"],
        "additionalProperties": False,
    }
    assert tool.validate({"url": "u", "retries": None}) == {"url": "u", "retries": 3}
    assert_openai_strict(tool.schema)


def test_null_means_the_default_at_the_top_level() -> None:
    def f(a: int, b: int = 5, c: int | None = 3, tags: list[str] = ["x"]) -> None:  # noqa: B006
        ...

    tool = Tool.from_function(f, strict=True)
    sent = {"a": 1, "b": None, "c": None, "tags": None}
    validated = tool.validate(sent)
    assert validated == {"a": 1, "b": 5, "c": None, "tags": ["x"]}  # c admits None: kept
    assert sent == {"a": 1, "b": None, "c": None, "tags": None}  # the input is not changed
    assert tool.validate(validated) == validated
    with pytest.raises(ValidationError) as caught:
        tool.validate({"a": None, "b": None, "c": None, "tags": None})
    assert caught.value.field == "a"  # required: null is not "left out"


def test_null_inside_records_gives_the_record_default() -> None:
    tool = Tool.from_function(search, strict=True)
    sent = {
        "query": "q",
        "limit": None,
        "filters": {"unit": None, "points": [{"x": 1, "y": None, "label": None}]},
    }
    validated = tool.validate(sent)
    assert validated["limit"] == 10
    assert validated["filters"] == Filters(Unit.CM, [Point(1, 0, None)])
    assert tool.validate(validated) == validated


async def test_request_class_null_defaults_reach_the_function() -> None:
    seen: list[Any] = []

    async def draw(**kwargs: Any) -> None:
        seen.append(kwargs)

    tool = Tool.from_function(draw, request_class=Point, strict=True)
    event = FunctionCalling.create(tool, {"x": 1, "y": None, "label": None})
    await event.invoke()
    assert seen == [{"x": 1, "y": 0, "label": None}]
    assert_openai_strict(tool.schema)


async def test_explicit_schema_violations_are_invalid_and_never_run() -> None:
    ran: list[Any] = []

    def book(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "ok"

    tool = Tool.from_function(
        book,
        name="book",
        schema={
            "type": "object",
            "properties": {
                "seats": {"type": "integer", "minimum": 1, "maximum": 9},
                "name": {"type": "string", "pattern": "^[A-Z]"},
            },
            "required": ["seats"],
        },
    )
    with pytest.raises(ValidationError, match=r"seats: expected a number at most 9") as caught:
        tool.validate({"seats": 12})
    assert caught.value.field == "seats"
    branch = Branch()
    branch.register_tools(tool)
    bad, good = await branch.act(
        [
            {"function": "book", "arguments": {"seats": 2, "name": "bob"}},
            {"function": "book", "arguments": {"seats": 2, "name": "Bob"}},
        ]
    )
    assert bad.outcome.value == "invalid"
    assert "does not match the pattern" in repr(bad)
    assert good.outcome.value == "completed"
    assert ran == [{"seats": 2, "name": "Bob"}]


def test_malformed_explicit_schema_is_refused_when_the_tool_is_defined() -> None:
    with pytest.raises(SchemaError, match="unknown type"):
        Tool.from_function(
            lambda **kw: None,
            name="f",
            schema={"type": "object", "properties": {"a": {"type": "int"}}},
        )


def test_strict_parameters_is_idempotent_and_keeps_strict_schemas() -> None:
    strict = Tool.from_function(search, strict=True).parameters
    assert strict_parameters(strict) == strict


# -- generated signatures -------------------------------------------------------------------

_SCALARS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (int, st.integers()),
    (float, st.floats(allow_nan=False, allow_infinity=False)),
    (bool, st.booleans()),
    (str, st.text(max_size=5)),
    (Unit, st.sampled_from(["cm", "in"])),
    (Literal["a", "b"], st.sampled_from(["a", "b"])),
    (Point, st.builds(lambda x: {"x": x, "y": None, "label": None}, st.integers())),
]


def _typed() -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    def extend(
        inner: st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]],
    ) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
        return st.one_of(
            inner.map(lambda hv: (list[hv[0]], st.lists(hv[1], max_size=3))),
            inner.map(lambda hv: (hv[0] | None, st.none() | hv[1])),
        )

    return st.recursive(st.sampled_from(_SCALARS), extend, max_leaves=3)


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n)
)


@given(
    st.lists(st.tuples(_NAMES, _typed(), st.booleans()), max_size=5, unique_by=lambda t: t[0]),
    st.data(),
)
def test_generated_strict_tools_pass_the_sdk_checks_and_accept_nulls(
    params: list[tuple[str, tuple[Any, st.SearchStrategy[Any]], bool]], data: st.DataObject
) -> None:
    defaults = {name: data.draw(values) for name, (_, values), required in params if not required}
    signature = inspect.Signature(
        [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=hint,
                default=defaults.get(name, inspect.Parameter.empty),
            )
            for name, (hint, _), required in params
        ]
    )

    def func(**kwargs: Any) -> None: ...

    func.__signature__ = signature  # type: ignore[attr-defined]
    tool = Tool.from_function(func, strict=True)
    assert_openai_strict(tool.schema)
    assert_sdk_types(tool)
    sent = {
        name: (data.draw(values) if required or data.draw(st.booleans()) else None)
        for name, (_, values), required in params
    }
    jsonschema.Draft202012Validator(tool.parameters).validate(sent)
    validated = tool.validate(sent)
    assert validated.keys() == sent.keys()
    assert tool.validate(validated) == validated
