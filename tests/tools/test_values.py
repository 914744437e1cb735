"""Structuring values as their schema describes them: enums, literals, number strings, the
empty tuple and forward references.

No ``from __future__ import annotations`` here: the forward references below must stay
references inside real annotations (``Optional["Node"]``), as in code written without it.
"""

import dataclasses
import enum
from typing import Any, Literal, Optional

import attrs
import pytest

from lionexec import Branch
from lionexec.errors import ValidationError
from lionexec.tools import Tool
from lionexec.tools._jsonschema import compile_schema


class Size(str, enum.Enum):  # noqa: UP042 (the mixin spelling, on purpose)
    S = "s"
    M = "m"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Shade(enum.StrEnum):
    DARK = "dark"
    LIGHT = "light"


class Ratio(float, enum.Enum):
    HALF = 0.5
    FULL = 1.0


class Mode(enum.Enum):
    FAST = 1
    SAFE = 2


class Switch(enum.Enum):
    ON = True
    OFF = False


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def order(size: Size, level: Level = Level.LOW, shade: Shade = Shade.DARK) -> str:
    return f"{size!r} {level!r} {shade!r}"


def invalid(tool: Tool, arguments: dict[str, Any]) -> ValidationError:
    assert not compile_schema(tool.parameters).is_valid(arguments)  # the schema agrees
    with pytest.raises(ValidationError) as caught:
        tool.validate(arguments)
    return caught.value


# -- enums with a mixin -------------------------------------------------------------------


def test_mixin_enums_take_their_values_and_give_members() -> None:
    def scale(ratio: Ratio) -> None: ...

    tool = Tool.from_function(order)
    got = tool.validate({"size": "m", "level": 2, "shade": "light"})
    assert got == {"size": Size.M, "level": Level.HIGH, "shade": Shade.LIGHT}
    assert [type(v) for v in got.values()] == [Size, Level, Shade]
    assert tool.validate(got) == got
    assert Tool.from_function(scale).validate({"ratio": 0.5}) == {"ratio": Ratio.HALF}


@pytest.mark.parametrize(
    ("arguments", "field", "fragment"),
    [
        ({"size": "xl"}, "size", "expected one of 's', 'm', got a string 'xl'"),
        ({"size": "s", "level": 5}, "level", "expected one of 1, 2, got an integer 5"),
        ({"size": "s", "level": "2"}, "level", "got a string '2'"),
        ({"size": "s", "level": True}, "level", "got a boolean True"),
        ({"size": "s", "shade": "grey"}, "shade", "expected one of 'dark', 'light'"),
        ({"size": 1}, "size", "got an integer 1"),
    ],
)
def test_values_outside_a_mixin_enum_are_invalid(
    arguments: dict[str, Any], field: str, fragment: str
) -> None:
    error = invalid(Tool.from_function(order), arguments)
    assert error.field == field
    assert fragment in str(error)


async def test_a_mixin_enum_tool_receives_members_and_never_a_bad_value() -> None:
    branch = Branch()
    branch.register_tools(Tool.from_function(order))
    [good, bad] = await branch.act(
        [
            {"function": "order", "arguments": {"size": "m", "level": 2}},
            {"function": "order", "arguments": {"size": "xl", "level": 5}},
        ]
    )
    assert good.output == "<Size.M: 'm'> <Level.HIGH: 2> <Shade.DARK: 'dark'>"
    assert bad.outcome.value == "invalid"


# -- plain enums and literals -------------------------------------------------------------


def test_a_boolean_is_not_an_integer_enum_value() -> None:
    def run(mode: Mode) -> None: ...

    def toggle(switch: Switch) -> None: ...

    tool = Tool.from_function(run)
    assert tool.validate({"mode": 1}) == {"mode": Mode.FAST}
    for flag in (True, False):
        assert "expected one of 1, 2, got a boolean" in str(invalid(tool, {"mode": flag}))
    # unless a member's value is a boolean
    assert Tool.from_function(toggle).validate({"switch": False}) == {"switch": Switch.OFF}


def test_a_literal_of_enum_members_takes_the_values_its_schema_advertises() -> None:
    def paint(colour: Literal[Colour.RED, Colour.BLUE], level: Literal[Level.LOW]) -> None: ...

    tool = Tool.from_function(paint)
    assert tool.parameters["properties"]["colour"] == {"type": "string", "enum": ["red", "blue"]}
    got = tool.validate({"colour": "red", "level": 1})
    assert got == {"colour": Colour.RED, "level": Level.LOW}
    assert type(got["level"]) is Level
    assert tool.validate({"colour": Colour.BLUE, "level": Level.LOW})["colour"] is Colour.BLUE
    error = invalid(tool, {"colour": "green", "level": 1})
    assert error.field == "colour"
    assert "expected one of 'red', 'blue', got a string 'green'" in str(error)
    # the value's exact type: True is not 1, nor is the string "1"
    for wrong in (True, "1"):
        assert invalid(tool, {"colour": "red", "level": wrong}).field == "level"


# -- numbers given as strings -------------------------------------------------------------


def scale(factor: float, count: int = 1) -> float:
    return factor * count


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"factor": "2.5", "count": "3"}, {"factor": 2.5, "count": 3}),
        ({"factor": "-1e3", "count": "-7"}, {"factor": -1000.0, "count": -7}),
        ({"factor": " 0 ", "count": "0"}, {"factor": 0.0, "count": 0}),
        ({"factor": "1E-2"}, {"factor": 0.01}),
    ],
)
def test_strings_holding_json_numbers_are_numbers(
    arguments: dict[str, Any], expected: dict[str, Any]
) -> None:
    got = Tool.from_function(scale).validate(arguments)
    assert got == expected
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize(
    ("arguments", "field", "fragment"),
    [
        ({"factor": "nan"}, "factor", "expected a number, got a string 'nan'"),
        ({"factor": "-inf"}, "factor", "expected a number"),
        ({"factor": "Infinity"}, "factor", "expected a number"),
        ({"factor": "1e999"}, "factor", "expected a finite number, got a string '1e999'"),
        ({"factor": "-1e999"}, "factor", "expected a finite number"),
        ({"factor": "1_000.5"}, "factor", "expected a number"),
        ({"factor": "\u0663"}, "factor", "expected a number"),  # ARABIC-INDIC DIGIT THREE
        ({"factor": ".5"}, "factor", "expected a number"),
        ({"factor": 1.0, "count": "1_000"}, "count", "expected an integer, got a string"),
        ({"factor": 1.0, "count": "\u0663"}, "count", "expected an integer"),
        ({"factor": 1.0, "count": "+3"}, "count", "expected an integer"),
        ({"factor": 1.0, "count": "007"}, "count", "expected an integer"),
        ({"factor": 1.0, "count": "3.0"}, "count", "expected an integer"),
    ],
)
def test_other_strings_are_not_numbers(
    arguments: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(ValidationError, match=fragment) as caught:
        Tool.from_function(scale).validate(arguments)
    assert caught.value.field == field
    assert f"{field}: " in str(caught.value)


def test_numbers_pass_as_before() -> None:
    got = Tool.from_function(scale).validate({"factor": 1, "count": 2.0})
    assert got == {"factor": 1.0, "count": 2}
    assert [type(v) for v in got.values()] == [float, int]


# -- the empty tuple ----------------------------------------------------------------------


def test_the_empty_tuple_takes_only_an_empty_array() -> None:
    def nothing(items: tuple[()]) -> None: ...

    tool = Tool.from_function(nothing)
    assert tool.parameters["properties"]["items"]["maxItems"] == 0
    assert tool.validate({"items": []}) == {"items": ()}
    error = invalid(tool, {"items": [1, 2, 3]})
    assert error.field == "items"
    assert "expected an array of 0 items, got 3" in str(error)


# -- forward references -------------------------------------------------------------------


@dataclasses.dataclass
class Node:
    value: int
    child: Optional["Node"] = None  # the classic spelling, on purpose


@attrs.define
class Branchy:
    value: int
    children: list["Branchy"] = attrs.Factory(list)


def test_a_self_referencing_record_with_a_string_reference_validates() -> None:
    def depth(root: Node, tree: Branchy) -> None: ...

    tool = Tool.from_function(depth)
    got = tool.validate(
        {
            "root": {"value": 1, "child": {"value": 2, "child": {"value": "3"}}},
            "tree": {"value": 1, "children": [{"value": 2}]},
        }
    )
    assert got == {
        "root": Node(1, Node(2, Node(3))),
        "tree": Branchy(1, [Branchy(2)]),
    }
    with pytest.raises(ValidationError, match="expected an integer") as caught:
        tool.validate({"root": {"value": 1, "child": {"value": "x"}}, "tree": {"value": 1}})
    assert caught.value.field == "root.child.value"
