"""Schema generation: the type table, docstrings, overrides, and generated signatures."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import keyword
import pathlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionexec.errors import SchemaError
from lionexec.tools import Tool, parse_docstring, type_schema
from lionexec.tools._schema import signature_parameters


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.define
class Point:
    """A point on the plane.

    Attributes:
        x: the horizontal coordinate
        y: the vertical coordinate
    """

    x: int
    y: int = 0


@attrs.define
class Segment:
    start: Point
    end: Point
    label: str | None = None


@dataclasses.dataclass
class Box:
    width: float
    height: float = 1.0


@attrs.define
class Tree:
    value: int
    children: list[Tree] = attrs.field(factory=list)


def check(schema: Mapping[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)


POINT = {
    "description": "A point on the plane.",
    "type": "object",
    "properties": {
        "x": {"type": "integer", "description": "the horizontal coordinate"},
        "y": {"type": "integer", "description": "the vertical coordinate", "default": 0},
    },
    "required": ["x"],
    "additionalProperties": False,
}

TYPE_TABLE: list[tuple[Any, dict[str, Any]]] = [
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (str, {"type": "string"}),
    (None, {"type": "null"}),
    (Any, {}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (list, {"type": "array"}),
    (Sequence[str], {"type": "array", "items": {"type": "string"}}),
    (set[int], {"type": "array", "items": {"type": "integer"}}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (
        tuple[int, str],
        {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "items": False,
            "minItems": 2,
            "maxItems": 2,
        },
    ),
    (tuple, {"type": "array"}),
    (tuple[()], {"type": "array", "maxItems": 0}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (dict[str, Any], {"type": "object"}),
    (dict, {"type": "object"}),
    (int | None, {"type": ["integer", "null"]}),
    (int | str, {"type": ["integer", "string"]}),
    (
        list[int] | None,
        {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
    ),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, "a"], {"enum": [1, "a"]}),
    (Color, {"type": "string", "enum": ["red", "green"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (Point, POINT),
    (
        Segment,
        {
            "type": "object",
            "properties": {
                "start": POINT,
                "end": POINT,
                "label": {"type": ["string", "null"], "default": None},
            },
            "required": ["start", "end"],
            "additionalProperties": False,
        },
    ),
    (
        Box,
        {
            "type": "object",
            "properties": {
                "width": {"type": "number"},
                "height": {"type": "number", "default": 1.0},
            },
            "required": ["width"],
            "additionalProperties": False,
        },
    ),
    (pathlib.Path, {"type": "string"}),
    (uuid.UUID, {"type": "string", "format": "uuid"}),
]


@pytest.mark.parametrize(("hint", "expected"), TYPE_TABLE, ids=[repr(h) for h, _ in TYPE_TABLE])
def test_type_schema_table(hint: Any, expected: dict[str, Any]) -> None:
    schema = type_schema(hint)
    assert schema == expected
    check(schema)


def test_recursive_attrs_class_is_described_loosely_at_the_recursion() -> None:
    schema = type_schema(Tree)
    assert schema["properties"]["children"] == {"type": "array", "items": {"type": "object"}}
    check(schema)


@pytest.mark.parametrize("hint", [object(), complex, bytes, dict[int, str], type])
def test_undescribable_types_raise_schema_error(hint: Any) -> None:
    with pytest.raises(SchemaError):
        type_schema(hint)


def test_unsupported_parameter_type_names_the_parameter() -> None:
    def f(ok: int, bad: complex) -> None: ...

    with pytest.raises(SchemaError, match="'bad'"):
        Tool.from_function(f)


def test_parameters_with_defaults_are_optional() -> None:
    def search(query: str, limit: int = 10, exact: bool = False) -> None: ...

    parameters = Tool.from_function(search, strict=False).parameters
    assert parameters["required"] == ["query"]
    assert parameters["properties"]["limit"] == {"type": "integer", "default": 10}
    check(parameters)


@pytest.mark.parametrize(
    "default",
    [float("inf"), float("nan"), "/tmp/\udcff", 10**5000],
    ids=["inf", "nan", "lone-surrogate", "huge-int"],
)
def test_a_default_strict_json_cannot_hold_is_left_out_of_the_schema(default: object) -> None:
    # the schema goes to providers and into saved tool records: strict JSON, always
    def search(query: str, limit: Any = default) -> None: ...

    tool = Tool.from_function(search)
    assert "default" not in tool.parameters["properties"]["limit"]
    assert tool.parameters["required"] == ["query"]
    json.dumps(tool.schema, allow_nan=False).encode("utf-8")


def test_var_args_var_kwargs_and_context_parameter_are_excluded() -> None:
    def f(a: int, *args: int, context: object, b: str = "", **kwargs: int) -> None: ...

    tool = Tool.from_function(f, context_param="context")
    assert list(tool.parameters["properties"]) == ["a", "b"]
    assert "additionalProperties" not in tool.parameters  # **kwargs: extras allowed
    plain = Tool.from_function(lambda a: None, name="plain")
    assert plain.parameters["additionalProperties"] is False


def test_openai_shape_name_and_description() -> None:
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key to look up
        """
        return key

    assert Tool.from_function(lookup, strict=False).schema == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a key up.",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string", "description": "the key to look up"}},
                "required": ["key"],
                "additionalProperties": False,
            },
        },
    }


GOOGLE = """Move a point.

    Args:
        x (int): how far
            to the right
        y: how far up

    Returns:
        The new point.
    """

NUMPY = """Move a point.

    Parameters
    ----------
    x : int
        how far
        to the right
    y : int
        how far up

    Returns
    -------
    Point
    """

REST = """Move a point.

    :param int x: how far
        to the right
    :param y: how far up
    :returns: the new point
    """


@pytest.mark.parametrize("doc", [GOOGLE, NUMPY, REST], ids=["google", "numpy", "rest"])
def test_docstring_styles_give_parameter_descriptions(doc: str) -> None:
    def move(x: int, y: int = 0) -> None: ...

    move.__doc__ = doc
    summary, params = parse_docstring(doc)
    assert summary == "Move a point."
    assert params == {"x": "how far to the right", "y": "how far up"}
    properties = Tool.from_function(move, strict=False).parameters["properties"]
    assert properties["x"]["description"] == "how far to the right"
    assert properties["y"]["description"] == "how far up"
    assert Tool.from_function(move).description == "Move a point."


def test_google_entries_name_word_characters_only() -> None:
    # "name: text" entries with an identifier for a name skip the entry regex; the others
    # still go through it (same results as before that shortcut)
    doc = """Summary.

    Args:
        plain: the plain one
        snake_case: a snake
        typed (int): with a type
        **kwargs: the extras
        2nd: starts with a digit
        self.attr: not a name,
            so a continuation
        e\u0301: combining accent
        spaced : a space before the colon
        empty:
            described below
    """
    assert parse_docstring(doc) == (
        "Summary.",
        {
            "plain": "the plain one",
            "snake_case": "a snake",
            "typed": "with a type",
            "kwargs": "the extras",
            "2nd": "starts with a digit self.attr: not a name, so a continuation "
            "e\u0301: combining accent",
            "spaced": "a space before the colon",
            "empty": "described below",
        },
    )


def test_a_google_type_may_hold_parentheses() -> None:
    doc = """Plot it.

    Args:
        limit (int, optional): how many points.
        key (Callable(str) -> str): how to sort.
        table (dict(str, list(int))):
            nested twice.
        broken (int: not an entry, so a continuation
    """
    assert parse_docstring(doc) == (
        "Plot it.",
        {
            "limit": "how many points.",
            "key": "how to sort.",
            "table": "nested twice. broken (int: not an entry, so a continuation",
        },
    )


def test_a_numpy_entry_may_name_several_parameters() -> None:
    doc = """Place it.

    Parameters
    ----------
    x, y : int
        the coordinates,
        in metres.
    *args, **kwargs
        passed on.
    """

    def place(x: int, y: int) -> None: ...

    place.__doc__ = doc
    described = "the coordinates, in metres."
    assert parse_docstring(doc) == (
        "Place it.",
        {"x": described, "y": described, "args": "passed on.", "kwargs": "passed on."},
    )
    properties = Tool.from_function(place).parameters["properties"]
    assert properties["x"]["description"] == properties["y"]["description"] == described


def test_docstring_without_sections_is_all_summary() -> None:
    assert parse_docstring("One.\n\n    Two\n    lines.") == ("One.\n\nTwo lines.", {})
    assert parse_docstring(None) == (None, {})


def test_explicit_schema_overrides_the_generated_one() -> None:
    def f(**kwargs: Any) -> None: ...

    override = {
        "type": "function",
        "function": {
            "name": "fetch",
            "description": "Fetch a URL.",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            },
        },
    }
    tool = Tool.from_function(f, schema=override)
    assert tool.name == "fetch"
    assert tool.schema == override
    assert tool.schema is not override
    override["function"]["parameters"]["required"].append("x")  # later edits don't leak in
    assert tool.required == {"url"}
    parameters_only = Tool.from_function(f, name="g", schema={"type": "object", "properties": {}})
    assert parameters_only.schema["function"]["parameters"] == {"type": "object", "properties": {}}


def test_request_class_defines_the_schema() -> None:
    async def draw(**kwargs: Any) -> None: ...

    tool = Tool.from_function(draw, request_class=Point, strict=False)
    expected = {k: v for k, v in POINT.items() if k != "description"}
    assert tool.parameters == expected
    strict = Tool.from_function(draw, request_class=Point, strict=True)
    assert strict.parameters["required"] == ["x", "y"]


# -- generated signatures -----------------------------------------------------------------

_JSON_TEXT = st.text(max_size=8)
_SCALARS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (int, st.integers()),
    (float, st.floats(allow_nan=False, allow_infinity=False)),
    (bool, st.booleans()),
    (str, _JSON_TEXT),
    (Any, st.integers() | _JSON_TEXT),
    (Color, st.sampled_from(["red", "green"])),
    (Literal["a", "b", 3], st.sampled_from(["a", "b", 3])),
    (Point, st.builds(lambda x, y: {"x": x, "y": y}, st.integers(), st.integers())),
]


def _typed_values() -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    base = st.sampled_from(_SCALARS)

    def extend(
        inner: st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]],
    ) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
        return st.one_of(
            inner.map(lambda hv: (list[hv[0]], st.lists(hv[1], max_size=3))),
            inner.map(
                lambda hv: (dict[str, hv[0]], st.dictionaries(_JSON_TEXT, hv[1], max_size=3))
            ),
            inner.map(lambda hv: (hv[0] | None, st.none() | hv[1])),
            inner.map(lambda hv: (tuple[hv[0], ...], st.lists(hv[1], max_size=3))),
        )

    return st.recursive(base, extend, max_leaves=3)


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n)
)


@st.composite
def signatures(draw: st.DrawFn) -> tuple[inspect.Signature, dict[str, Any]]:
    names = draw(st.lists(_NAMES, unique=True, max_size=6))
    params, example = [], {}
    for name in names:
        hint, values = draw(_typed_values())
        optional = draw(st.booleans())
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=hint,
                default=None if optional else inspect.Parameter.empty,
            )
        )
        if not optional or draw(st.booleans()):
            example[name] = draw(values)
    return inspect.Signature(params), example


@given(signatures())
def test_generated_signatures_give_valid_schemas_that_accept_valid_calls(
    drawn: tuple[inspect.Signature, dict[str, Any]],
) -> None:
    signature, example = drawn

    def func(**kwargs: Any) -> None: ...

    func.__signature__ = signature  # type: ignore[attr-defined]
    tool = Tool.from_function(func, strict=False)
    parameters = tool.parameters
    check(tool.schema["function"]["parameters"])
    assert list(parameters["properties"]) == list(signature.parameters)
    assert parameters["required"] == [
        p.name for p in signature.parameters.values() if p.default is inspect.Parameter.empty
    ]
    jsonschema.Draft202012Validator(parameters).validate(example)
    normalized = tool.validate(example)
    assert normalized.keys() == example.keys()
    assert tool.validate(normalized) == normalized


def test_unresolvable_string_annotation_names_the_parameter() -> None:
    class Local:
        pass

    def f(ok: int, item: Local) -> Local:
        return item

    with pytest.raises(SchemaError, match=r"'item'.*module level"):
        Tool.from_function(f)
    lenient = Tool.from_function(
        f, schema={"type": "object", "properties": {"ok": {}, "item": {}}}
    )
    assert lenient.validate({"ok": "1", "item": "x"}) == {"ok": 1, "item": "x"}


def test_return_annotation_is_ignored() -> None:
    class Local:
        pass

    def f(a: int) -> Local:
        return Local()

    assert Tool.from_function(f).required == {"a"}


def test_a_string_annotation_is_evaluated_without_writing_into_the_module() -> None:
    def tool(x: int) -> int:
        return x

    namespace = {"__builtins__": __builtins__}
    source = "def f(x: '(leaked := int)') -> int:\n    return x\n"
    exec(compile(source, "<tool>", "exec", dont_inherit=True), namespace)
    params, _ = signature_parameters(namespace["f"])
    assert params[0].annotation is int
    assert "leaked" not in namespace
    params, _ = signature_parameters(tool)  # real (postponed) annotations still resolve
    assert params[0].annotation is int
