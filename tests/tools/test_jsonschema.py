"""lionexec's JSON Schema validator, checked against the ``jsonschema`` package as an oracle."""

from __future__ import annotations

import dataclasses
import enum
import math
import pathlib
import uuid
from typing import Any

import attrs
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec.errors import SchemaError, ValidationError
from lionexec.tools._jsonschema import MAX_DEPTH, compile_schema

KEYS = ["a", "b", "c", "x-1"]
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from([0.0, 1.0, 2.5, -0.5, 3.0])
    | st.text(alphabet="ab1 é", max_size=4)
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=10,
)
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]
PATTERNS = ["^a", "b$", "[0-9]", "^$", "é", "^(a|b)+$"]
_count = st.integers(0, 3)
_number = st.integers(-3, 3) | st.sampled_from([0.5, -1.5, 2.0])


def _leaf_fragments() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.sampled_from(TYPES).map(lambda t: {"type": t}),
        st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True).map(
            lambda ts: {"type": ts}
        ),
        st.lists(_scalars | st.lists(_scalars, max_size=2), min_size=1, max_size=4).map(
            lambda vs: {"enum": vs}
        ),
        json_values.map(lambda v: {"const": v}),
        _number.map(lambda n: {"minimum": n}),
        _number.map(lambda n: {"maximum": n}),
        _number.map(lambda n: {"exclusiveMinimum": n}),
        _number.map(lambda n: {"exclusiveMaximum": n}),
        st.sampled_from([1, 2, 3, 0.5, 0.25, 1.5]).map(lambda n: {"multipleOf": n}),
        _count.map(lambda n: {"minLength": n}),
        _count.map(lambda n: {"maxLength": n}),
        st.sampled_from(PATTERNS).map(lambda p: {"pattern": p}),
        _count.map(lambda n: {"minItems": n}),
        _count.map(lambda n: {"maxItems": n}),
        st.booleans().map(lambda b: {"uniqueItems": b}),
        _count.map(lambda n: {"minProperties": n}),
        _count.map(lambda n: {"maxProperties": n}),
        st.lists(st.sampled_from(KEYS), max_size=3, unique=True).map(lambda r: {"required": r}),
        st.dictionaries(
            st.sampled_from(KEYS),
            st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
            max_size=2,
        ).map(lambda d: {"dependentRequired": d}),
        st.just({"format": "email"}),
    )


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out


def _schemas() -> st.SearchStrategy[Any]:
    leaf = st.lists(_leaf_fragments(), min_size=0, max_size=3).map(_merge) | st.booleans()

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        nested = st.one_of(
            st.dictionaries(st.sampled_from(KEYS), inner, max_size=3).map(
                lambda p: {"properties": p}
            ),
            inner.map(lambda s: {"additionalProperties": s}),
            st.dictionaries(st.sampled_from(PATTERNS), inner, max_size=2).map(
                lambda p: {"patternProperties": p}
            ),
            inner.map(lambda s: {"propertyNames": s}),
            inner.map(lambda s: {"items": s}),
            st.lists(inner, min_size=1, max_size=3).map(lambda s: {"prefixItems": s}),
            st.tuples(inner, _count, st.none() | _count).map(
                lambda t: (
                    {"contains": t[0], "minContains": t[1]}
                    | ({} if t[2] is None else {"maxContains": t[2]})
                )
            ),
            st.lists(inner, min_size=1, max_size=3).map(lambda s: {"anyOf": s}),
            st.lists(inner, min_size=1, max_size=3).map(lambda s: {"oneOf": s}),
            st.lists(inner, min_size=1, max_size=3).map(lambda s: {"allOf": s}),
            inner.map(lambda s: {"not": s}),
            st.tuples(inner, inner, inner).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
            st.dictionaries(st.sampled_from(KEYS), inner, max_size=2).map(
                lambda d: {"dependentSchemas": d}
            ),
        )
        return st.lists(nested | _leaf_fragments(), min_size=1, max_size=3).map(_merge)

    return st.recursive(leaf, extend, max_leaves=8)


@settings(max_examples=150)
@given(_schemas(), st.lists(json_values, min_size=1, max_size=5))
def test_agrees_with_jsonschema(schema: Any, values: list[Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    oracle = jsonschema.Draft202012Validator(schema)
    ours = compile_schema(schema)
    for value in values:
        assert ours.is_valid(value) == oracle.is_valid(value), (schema, value)


@settings(max_examples=25)
@given(st.data())
def test_agrees_with_jsonschema_on_values_built_to_match(data: st.DataObject) -> None:
    """Values built from a schema's own constants, so valid and invalid cases both occur."""
    schema = data.draw(_schemas())
    consts: list[Any] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, sub in node.items():
                if key in ("const",):
                    consts.append(sub)
                elif key == "enum":
                    consts.extend(sub)
                else:
                    collect(sub)
        elif isinstance(node, list):
            for sub in node:
                collect(sub)

    collect(schema)
    pool = st.sampled_from(consts) | json_values if consts else json_values
    value = data.draw(
        st.recursive(
            pool, lambda i: st.dictionaries(st.sampled_from(KEYS), i, max_size=3), max_leaves=5
        )
    )
    oracle = jsonschema.Draft202012Validator(schema)
    assert compile_schema(schema).is_valid(value) == oracle.is_valid(value), (schema, value)


REF_SCHEMA = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value"],
            "additionalProperties": False,
        },
        "a~b/c": {"type": "string"},
    },
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}, "odd": {"$ref": "#/$defs/a~0b~1c"}},
}


@pytest.mark.parametrize(
    "value",
    [
        {"root": {"value": 1, "children": [{"value": 2, "children": []}]}},
        {"root": {"value": 1, "children": [{"value": "2"}]}},
        {"root": {"value": 1, "extra": 0}},
        {"odd": "s"},
        {"odd": 1},
    ],
)
def test_local_references_and_recursion(value: Any) -> None:
    oracle = jsonschema.Draft202012Validator(REF_SCHEMA)
    assert compile_schema(REF_SCHEMA).is_valid(value) == oracle.is_valid(value)


def test_errors_name_the_path_of_the_bad_value() -> None:
    validator = compile_schema(REF_SCHEMA)
    with pytest.raises(ValidationError) as caught:
        validator.validate({"root": {"value": 1, "children": [{"value": "2"}]}})
    assert caught.value.field == "root.children[0].value"
    assert "expected integer, got string '2'" in str(caught.value)
    with pytest.raises(ValidationError, match="unexpected property 'extra'") as caught:
        validator.validate({"root": {"value": 1, "extra": 0}})
    assert caught.value.field == "root"


def test_draft07_ref_replaces_its_siblings() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"s": {"type": "string"}},
        "properties": {"a": {"$ref": "#/definitions/s", "maxLength": 1}},
    }
    assert compile_schema(schema).is_valid({"a": "long"})
    assert jsonschema.Draft7Validator(schema).is_valid({"a": "long"})
    schema_2020 = {**schema, "$schema": "https://json-schema.org/draft/2020-12/schema"}
    assert not compile_schema(schema_2020).is_valid({"a": "long"})


def test_draft07_tuple_items_and_draft04_exclusive_bounds() -> None:
    tuple_schema = {"items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False}
    validator = compile_schema(tuple_schema)
    assert validator.is_valid([1, "a"])
    assert not validator.is_valid([1, "a", None])
    assert not validator.is_valid(["a"])
    bounded = compile_schema({"minimum": 0, "exclusiveMinimum": True, "maximum": 1})
    assert not bounded.is_valid(0)
    assert bounded.is_valid(0.5)
    assert bounded.is_valid(1)


def test_non_finite_numbers_are_refused() -> None:
    for schema in ({"type": "number"}, {"minimum": 0}, {"type": ["number", "string"]}):
        validator = compile_schema(schema)
        for bad in (math.nan, math.inf, -math.inf):
            assert not validator.is_valid(bad), (schema, bad)


def test_hostile_depth_is_refused_without_recursion_error() -> None:
    schema = {
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        "$ref": "#/$defs/n",
    }
    value: list[Any] = []
    for _ in range(MAX_DEPTH * 5):
        value = [value]
    with pytest.raises(ValidationError, match="nested deeper"):
        compile_schema(schema).validate(value)


def test_huge_integers_are_compared_exactly_without_overflow() -> None:
    huge = 10**400
    assert compile_schema({"type": "integer", "minimum": 0.5}).is_valid(huge)
    assert not compile_schema({"maximum": 1e300}).is_valid(huge)
    assert compile_schema({"multipleOf": 0.5}).is_valid(huge)
    assert not compile_schema({"multipleOf": 3}).is_valid(huge)
    assert not compile_schema({"multipleOf": 0.3}).is_valid(huge + 1)
    with pytest.raises(ValidationError, match="a very large number"):
        compile_schema({"maximum": 1}).validate(10**5000)


def test_large_unique_arrays_are_checked_in_linear_time() -> None:
    validator = compile_schema({"uniqueItems": True})
    assert validator.is_valid(list(range(200_000)))
    assert not validator.is_valid([*range(200_000), 1.0])
    assert not validator.is_valid([{"a": [1, True]}, {"a": [1.0, True]}])
    assert validator.is_valid([{"a": [1, True]}, {"a": [1, 1]}])


class Color(enum.Enum):
    RED = "red"


@attrs.define
class Point:
    x: int


@dataclasses.dataclass
class Box:
    width: float


def test_python_values_are_read_as_json_would_encode_them() -> None:
    schema = {
        "type": "object",
        "properties": {
            "color": {"enum": ["red"]},
            "path": {"type": "string", "pattern": "^/"},
            "id": {"type": "string"},
            "pair": {"type": "array", "items": {"type": "integer"}},
            "point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
                "additionalProperties": False,
            },
            "box": {"type": "object", "properties": {"width": {"type": "number"}}},
            "tags": {"type": "array", "uniqueItems": True},
        },
    }
    validator = compile_schema(schema)
    validator.validate(
        {
            "color": Color.RED,
            "path": pathlib.Path("/tmp"),
            "id": uuid.uuid4(),
            "pair": (1, 2),
            "point": Point(1),
            "box": Box(2.0),
            "tags": frozenset({"a", "b"}),
        }
    )
    assert not validator.is_valid({"pair": (1, "2")})


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "strnig"}, "unknown type"),
        ({"properties": []}, "properties must be an object"),
        ({"required": "a"}, "required must be an array"),
        ({"pattern": "("}, "invalid regular expression"),
        ({"$ref": "#/$defs/missing"}, "cannot resolve"),
        ({"$ref": "https://example.com/s.json"}, "inside the schema"),
        ({"anyOf": []}, "non-empty array"),
        ({"minimum": "1"}, "must be a number"),
        ({"items": 3}, "a schema is an object or a boolean"),
        (3, "object or a boolean"),
    ],
)
def test_malformed_schemas_raise_schema_error(schema: Any, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        compile_schema(schema)
