"""The shared converter reads records as written, subclasses of the scalars included."""

from __future__ import annotations

import enum

import attrs
import pytest
from cattrs.errors import BaseValidationError

from lionexec.engine import Processor
from lionexec.serialization import converter, make_converter


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Colour(enum.StrEnum):
    RED = "red"


@attrs.frozen
class Record:
    flag: bool
    level: Level
    colour: Colour
    count: int
    ratio: float
    name: str


GOOD = {"flag": True, "level": 2, "colour": "red", "count": 3, "ratio": 1, "name": "n"}


def test_every_scalar_kind_round_trips() -> None:
    record = converter.structure(GOOD, Record)
    assert record == Record(True, Level.HIGH, Colour.RED, 3, 1.0, "n")
    assert type(record.level) is Level and type(record.colour) is Colour
    assert type(record.ratio) is float
    assert converter.structure(converter.unstructure(record), Record) == record


def test_a_statistics_record_round_trips() -> None:
    # ProcessorStatistics has booleans and ints: bool is dispatched to the int hook
    statistics = Processor(4, 0.1, None).statistics()
    assert converter.structure(converter.unstructure(statistics), type(statistics)) == statistics


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("flag", 1, "expected a boolean, got int"),
        ("count", True, "expected an integer, got bool"),
        ("count", "3", "expected an integer, got str"),
        ("ratio", "1.5", "expected a number, got str"),
        ("name", 5, "expected a string, got int"),
        ("level", 7, "7 is not a valid Level"),
        ("colour", "blue", "'blue' is not a valid Colour"),
    ],
)
def test_a_scalar_of_another_kind_is_refused(field: str, value: object, expected: str) -> None:
    with pytest.raises(BaseValidationError) as caught:
        make_converter().structure({**GOOD, field: value}, Record)
    assert any(expected in str(e) for e in caught.value.exceptions)
