"""A tool's result that JSON cannot hold is a clear, recorded failure naming the tool, the type
and where it is, never a placeholder; converted in the tool's postprocessor, it is recorded
as the converted value; what the model is sent and what the journal keeps say the same.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
from pathlib import Path
from typing import Any

import pytest

from lionexec import ActionOutcome, Branch, EventStatus
from lionexec.journal import SqliteJournal
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call
from lionexec.tools import Tool


class Opaque:
    """An object of a class of one's own."""


@dataclasses.dataclass
class Point:
    x: float
    y: float


looped: list[Any] = []
looped.append(looped)

NOT_JSON = [
    (decimal.Decimal("9.99"), "decimal.Decimal"),
    ({"total": decimal.Decimal("9.99")}, "decimal.Decimal at ['total']"),
    ({1, 2}, "a set"),
    ({"tags": frozenset({"a"})}, "a frozenset at ['tags']"),
    (Opaque(), "Opaque"),
    (float("nan"), "the float nan (not finite)"),
    ([1.0, float("inf")], "the float inf (not finite) at [1]"),
    (Point(1.0, float("-inf")), "the float -inf (not finite) at ['y']"),
    (looped, "a circular reference"),
    ({Opaque(): 1}, "a mapping key of type"),
]


@pytest.mark.parametrize(("value", "named"), NOT_JSON, ids=[n for _, n in NOT_JSON])
async def test_a_result_json_cannot_hold_is_a_recorded_failure(value: Any, named: str) -> None:
    def price() -> Any:
        """Return the value."""
        return value

    branch = Branch()
    branch.register_tools(Tool.from_function(price, inline=True))
    [response] = await branch.act(call("price"))
    assert (response.outcome, response.status) == (ActionOutcome.FAILED, EventStatus.FAILED)
    assert response.error is not None and response.error.type == "TypeError"
    assert "tool 'price' returned" in response.error.message
    assert named in response.error.message
    assert "postprocessor" in response.error.message  # (what to do)
    assert response.output is None
    assert "<unserializable>" not in json.dumps(branch.messages.to_openai())
    [record] = branch.log
    assert record.event.status is EventStatus.FAILED and record.event.response is None
    assert_consistent(branch)


async def test_the_failure_is_raised_when_errors_are_not_suppressed() -> None:
    def price() -> decimal.Decimal:
        """A price."""
        return decimal.Decimal("1.10")

    branch = Branch()
    branch.register_tools(price)
    with pytest.raises(TypeError, match=r"tool 'price' returned a decimal\.Decimal"):
        await branch.act(call("price"), suppress_errors=False)
    [response] = branch.messages.responses()
    assert response.outcome is ActionOutcome.FAILED


@pytest.mark.parametrize(
    "value",
    [1, "x", None, [1, 2.5], {"a": {"b": [True, None]}}, (1, 2), Point(1.0, 2.0), Path("/a")],
    ids=str,
)
async def test_json_data_and_what_renders_as_it_by_documented_rules_complete(value: Any) -> None:
    async def give() -> Any:
        """Return the value."""
        return value

    branch = Branch()
    branch.register_tools(give)
    [response] = await branch.act(call("give"))
    assert response.outcome is ActionOutcome.COMPLETED, response.error


def to_text(value: decimal.Decimal) -> str:
    return str(value)


async def test_a_postprocessor_is_the_encoder_and_the_model_and_journal_agree(
    tmp_path: Path,
) -> None:
    def price() -> decimal.Decimal:
        """A price."""
        return decimal.Decimal("9.99")

    tool = Tool.from_function(price, postprocessor=to_text, effect="pure")
    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = await journal.branch()
        branch.register_tools(tool)
        async with branch:
            [response] = await branch.act(call("price"))
        assert response.outcome is ActionOutcome.COMPLETED and response.output == "9.99"
        sent = branch.messages.to_openai()
        name = branch.name
    async with SqliteJournal(tmp_path / "j.db") as journal:
        reopened = await journal.branch(name)
        [kept] = reopened.messages.responses()
        assert kept.output == "9.99"
        assert reopened.messages.to_openai() == sent


async def test_an_unserializable_result_is_journaled_as_the_same_failure(tmp_path: Path) -> None:
    def price() -> decimal.Decimal:
        """A price."""
        return decimal.Decimal("9.99")

    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(price, effect="pure"))
        async with branch:
            [response] = await branch.act(call("price"))
        name = branch.name
    async with SqliteJournal(tmp_path / "j.db") as journal:
        [kept] = (await journal.branch(name)).messages.responses()
    assert kept.outcome is ActionOutcome.FAILED
    assert kept.error == response.error


class Text(str):
    """A str subclass: JSON text, though not of the exact type."""


FLAT = [
    {"city": "Oslo", "high_c": 21, "rain": 0.5, "open": True, "note": None},
    {"a": float("nan")},
    {"a": float("-inf"), "b": 1},
    {"big": 2**20_000},
    {"big": -(2**3_000)},
    {1: "an int key", "b": 2},
    {"t": Text("x")},
    {"d": decimal.Decimal("1.5")},
    {"nested": {"a": float("inf")}},
    {"s": "\ud800"},
    {},
]


@pytest.mark.parametrize("value", FLAT, ids=[f"flat{i}" for i in range(len(FLAT))])
def test_the_flat_dict_fast_path_judges_and_copies_as_the_walk_does(value: Any) -> None:
    from lionexec._snapshot import snapshot
    from lionexec.act._results import not_json, recorded_result

    copied, problem = recorded_result(value)
    assert problem == not_json(snapshot(value))
    assert copied is not value
    if problem is None:
        assert copied == value
    value_keys = list(value)
    if value_keys:  # the record's own copy: changing the tool's dict changes nothing
        value[value_keys[0]] = "changed"
        assert copied[value_keys[0]] != "changed"
