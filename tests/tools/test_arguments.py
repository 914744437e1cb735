"""ArgumentSpec on its own: the key rule, an explicit JSON Schema, structuring, strict nulls."""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionexec.errors import ConfigurationError, SchemaError, ValidationError
from lionexec.tools import ArgumentSpec, Parameter
from lionexec.tools._jsonschema import compile_schema


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Box:
    width: int = attrs.field(alias="w")
    colour: Colour = Colour.RED


SIGNATURE = [
    Parameter("width", int),
    Parameter("colour", Colour, required=False, default=Colour.RED),
    Parameter("note", Any, required=False),
]
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "width": {"type": "integer"},
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "note": {},
    },
    "required": ["width"],
    "additionalProperties": False,
}


def test_a_spec_built_by_hand_validates_keys_and_structures_values() -> None:
    spec = ArgumentSpec(
        tool="paint",
        required=frozenset({"width"}),
        known=frozenset({"width", "colour"}),
        hints={"width": int, "colour": Colour},
    )
    assert spec.validate({"width": "3", "colour": "blue"}) == {"width": 3, "colour": Colour.BLUE}
    with pytest.raises(
        ValidationError, match="missing required argument 'width' for tool 'paint'"
    ):
        spec.validate({"colour": "red"})
    with pytest.raises(
        ValidationError, match=r"unexpected argument 'x' .*accepted: colour, width"
    ):
        spec.validate({"width": 1, "x": 1})
    with pytest.raises(
        ValidationError, match="invalid arguments for tool 'paint': colour"
    ) as caught:
        spec.validate({"width": 1, "colour": "green"})
    assert caught.value.field == "colour"
    with pytest.raises(ValidationError, match="must be an object, got list"):
        spec.validate([1])  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="argument names are strings"):
        spec.validate({"width": 1, 2: 3})  # type: ignore[dict-item]


def test_share_returns_a_dict_that_needs_no_normalizing_itself_and_copies_otherwise() -> None:
    spec = ArgumentSpec(
        tool="paint",
        required=frozenset({"width"}),
        known=frozenset({"width", "colour", "note"}),
        hints={"width": int, "colour": Colour},
    )
    exact = {"width": 3, "note": [1]}  # an exact int, and a value with no hint
    assert spec.validate(exact, share=True) is exact
    copied = spec.validate(exact)
    assert copied == exact and copied is not exact  # without share: always a new dict
    coerced = {"width": "3", "colour": "red"}
    normalized = spec.validate(coerced, share=True)
    assert normalized == {"width": 3, "colour": Colour.RED} and normalized is not coerced
    assert coerced == {"width": "3", "colour": "red"}  # the input is never changed
    with pytest.raises(ValidationError, match="unexpected argument 'x'"):
        spec.validate({"width": 1, "x": 1}, share=True)  # the key rule holds all the same


def test_from_parameters_reads_the_key_rule_and_the_hints() -> None:
    spec = ArgumentSpec.from_parameters("paint", PARAMETERS, signature=SIGNATURE)
    assert spec.required == {"width"}
    assert spec.known == {"width", "colour", "note"}
    assert spec.hints == {"width": int, "colour": Colour}  # Any is not checked
    assert spec.extra_keys is False and spec.json_schema is None and spec.nulls is None
    assert spec.validate({"width": 2.0, "note": object}) == {"width": 2, "note": object}


def test_extra_keys_need_var_keyword_and_a_schema_that_allows_them() -> None:
    open_parameters = {**PARAMETERS, "additionalProperties": True}
    spec = ArgumentSpec.from_parameters("paint", open_parameters, var_keyword=True)
    assert spec.validate({"width": 1, "extra": [1]}) == {"width": 1, "extra": [1]}
    closed = ArgumentSpec.from_parameters("paint", PARAMETERS, var_keyword=True)
    with pytest.raises(ValidationError, match="unexpected argument 'extra'"):
        closed.validate({"width": 1, "extra": [1]})
    with pytest.raises(ValidationError, match="argument names are strings"):
        spec.validate({"width": 1, 5: 1})  # type: ignore[dict-item]


def test_a_checked_schema_runs_before_structuring() -> None:
    parameters = {
        **PARAMETERS,
        "properties": {**PARAMETERS["properties"], "width": {"type": "integer", "maximum": 10}},
    }
    spec = ArgumentSpec.from_parameters(
        "paint", parameters, signature=SIGNATURE, check_schema=True
    )
    assert spec.json_schema is not None
    with pytest.raises(
        ValidationError, match="invalid arguments for tool 'paint': width"
    ) as caught:
        spec.validate({"width": 11})
    assert caught.value.field == "width"
    with pytest.raises(SchemaError):
        ArgumentSpec.from_parameters("paint", {"type": "nonsense"}, check_schema=True)
    direct = ArgumentSpec(
        tool="t",
        known=frozenset({"n"}),
        json_schema=compile_schema({"type": "object", "properties": {"n": {"type": "integer"}}}),
    )
    with pytest.raises(ValidationError, match="arguments for tool 't'"):
        direct.validate({"n": "one"})


def test_strict_takes_exactly_the_required_keys_and_reads_null_as_the_default() -> None:
    strict_parameters = {**PARAMETERS, "required": ["width", "colour", "note"]}
    spec = ArgumentSpec.from_parameters(
        "paint", strict_parameters, signature=SIGNATURE, strict=True
    )
    assert spec.validate({"width": 1, "colour": None, "note": None}) == {
        "width": 1,
        "colour": Colour.RED,
        "note": None,
    }
    with pytest.raises(ValidationError, match="missing required argument 'colour'"):
        spec.validate({"width": 1, "note": None})


def test_a_request_class_structures_through_its_aliases() -> None:
    parameters = {
        "type": "object",
        "properties": {"w": {"type": "integer"}, "colour": {}},
        "required": ["w"],
    }
    spec = ArgumentSpec.from_parameters("box", parameters, request_class=Box)
    assert spec.validate({"w": "4"}) == {"w": 4}
    assert spec.validate({"w": 4, "colour": "blue"}) == {"w": 4, "colour": Colour.BLUE}
    with pytest.raises(ValidationError, match="invalid arguments for tool 'box'"):
        spec.validate({"w": "wide"})
    with pytest.raises(ConfigurationError, match="request_class must be an attrs class"):
        ArgumentSpec(tool="box", request_class=dict)


def test_the_runtime_parameter_cannot_be_supplied() -> None:
    spec = ArgumentSpec(tool="t", known=frozenset({"a"}), context_param="ctx", extra_keys=True)
    with pytest.raises(ValidationError, match="supplied by the runtime") as caught:
        spec.validate({"a": 1, "ctx": "forged"})
    assert caught.value.field == "ctx"


@given(
    st.dictionaries(
        st.sampled_from(["width", "colour", "note", "other"]),
        st.one_of(
            st.integers(),
            st.floats(allow_nan=True),
            st.text(max_size=4),
            st.none(),
            st.sampled_from(["red", "blue", Colour.RED, Colour.BLUE]),  # valid ones, often
        ),
    )
)
def test_validation_either_raises_validation_error_or_is_idempotent(
    arguments: dict[str, Any],
) -> None:
    spec = ArgumentSpec.from_parameters("paint", PARAMETERS, signature=SIGNATURE)
    try:
        result = spec.validate(arguments)
    except ValidationError:
        return
    assert result is not arguments
    again = spec.validate(result)
    assert again.keys() == result.keys()
    for key, value in again.items():
        assert value == result[key] or (isinstance(value, float) and math.isnan(value))


EXACT_SIGNATURE = [
    Parameter("n", int),
    Parameter("x", float, required=False, default=0.0),
    Parameter("s", str, required=False, default=""),
    Parameter("flag", bool, required=False, default=False),
    Parameter("any", Any, required=False),
]
EXACT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {name: {} for name in ("n", "x", "s", "flag", "any")},
    "required": ["n"],
}


def test_only_a_spec_of_exact_types_and_known_names_has_the_one_pass_rule() -> None:
    spec = ArgumentSpec.from_parameters("f", EXACT_PARAMETERS, signature=EXACT_SIGNATURE)
    assert spec._exact == {"n": int, "x": float, "s": str, "flag": bool, "any": None}
    by_hand = ArgumentSpec(tool="f", known=frozenset({"n"}), hints={"n": int})
    assert by_hand._exact == {"n": int}  # the initializer computes it too
    assert attrs.evolve(by_hand, strict=True)._exact is None
    for other in (
        ArgumentSpec.from_parameters("paint", PARAMETERS, signature=SIGNATURE),  # an enum
        ArgumentSpec.from_parameters("f", EXACT_PARAMETERS, var_keyword=True),  # **kwargs
        ArgumentSpec.from_parameters("f", EXACT_PARAMETERS, check_schema=True),
        ArgumentSpec(tool="f", known=frozenset({"ctx"}), context_param="ctx"),
    ):
        assert other._exact is None


@given(
    st.dictionaries(
        st.sampled_from(["n", "x", "s", "flag", "any", "other"]),
        st.one_of(
            st.integers(),
            st.floats(allow_nan=True),
            st.booleans(),
            st.text(max_size=3),
            st.none(),
            st.lists(st.integers(), max_size=2),
        ),
    ),
    st.booleans(),
)
def test_the_one_pass_rule_decides_as_the_general_rule_does(
    arguments: dict[str, Any], share: bool
) -> None:
    fast = ArgumentSpec.from_parameters("f", EXACT_PARAMETERS, signature=EXACT_SIGNATURE)
    general = attrs.evolve(fast)
    object.__setattr__(general, "_exact", None)  # the path every other spec takes

    def outcome(spec: ArgumentSpec) -> Any:
        try:
            result = spec.validate(dict(arguments), share=share)
        except ValidationError as exc:
            return ("error", str(exc), exc.field)
        return ("ok", [(k, type(v), v) for k, v in result.items()])

    assert outcome(fast) == outcome(general)
