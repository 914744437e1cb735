"""benchmarks/_floor.py, the equivalent-work floor of ``nox -s bench``, does the work lionexec's
``act`` does: each case here runs both and compares what they did."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import lionexec  # noqa: F401  (the package under test, before the checkout is on the path)
from lionexec.act import Branch

# benchmarks/ is not installed: reach it in the checkout (appended, so the installed lionexec
# is never shadowed by the checkout's copy)
if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks._floor import FloorBranch


def both(*tools: Any) -> list[Any]:
    lionexec_branch = Branch()
    lionexec_branch.register_tools(list(tools))
    floor = FloorBranch()
    floor.register_tools(list(tools))
    return [lionexec_branch, floor]


def outcome(response: Any) -> str:
    value = getattr(response, "outcome", None)
    return str(getattr(value, "value", value))


async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "arguments",
    [
        {"a": math.nan, "b": 1},
        {"a": math.inf, "b": 1},
        {"a": 10**5000, "b": 1},
        {"a": -(10**5000), "b": 1},
        {"a": "\ud800", "b": 1},
        {"\ud800": 1, "b": 1},
        {1: 1, "b": 1},
        {"a": nested(200), "b": 1},
        {"a": 1, "b": 2, "c": 3},
        {"a": 1},
    ],
    ids=[
        "nan",
        "inf",
        "big",
        "-big",
        "surrogate",
        "surrogate-name",
        "int-name",
        "deep",
        "extra",
        "missing",
    ],
)
async def test_hostile_or_wrong_arguments_end_the_call_invalid_in_both(
    arguments: dict[Any, Any],
) -> None:
    with trio.fail_after(5):
        for branch in both(add):
            [response] = await branch.act([{"function": "add", "arguments": arguments}])
            assert outcome(response) == "invalid", type(branch).__name__


@pytest.mark.parametrize(
    "call",
    [
        {"function": "ad\x00d", "arguments": {"a": 1, "b": 1}},
        {"function": "add\ud800", "arguments": {"a": 1, "b": 1}},
        {"function": "add", "arguments": {"a": 1, "b": 1}, "call_id": "c\x00"},
        {"function": "add", "arguments": {"a": 1, "b": 1}, "call_id": "c\ud800"},
        {"function": "add", "arguments": {"a": 1, "b": 1}, "call_id": "c" * 257},
        {"function": "", "arguments": {"a": 1, "b": 1}},
    ],
    ids=["nul-name", "surrogate-name", "nul-id", "surrogate-id", "long-id", "empty-name"],
)
async def test_hostile_names_and_call_ids_refuse_the_batch_in_both(call: dict[str, Any]) -> None:
    with trio.fail_after(5):
        for branch in both(add):
            with pytest.raises(ValueError):
                await branch.act([call])


async def test_neither_the_tool_nor_its_caller_can_change_the_record_in_both() -> None:
    kept: list[Any] = []

    async def keep(items: list) -> list:  # type: ignore[type-arg]  (the floor reads bare types)
        """Keep the list it was given, and return one it keeps too."""
        items.append(99)  # changes the tool's own copy only
        out = [1]
        kept.append(out)
        return out

    with trio.fail_after(5):
        for branch in both(keep):
            [response] = await branch.act([{"function": "keep", "arguments": {"items": [1]}}])
            kept[-1].append(2)  # changes what the tool returned, after the record
            if isinstance(branch, FloorBranch):
                request, output = branch.history[0], branch.history[1].output
                arguments = request.arguments
            else:
                request = branch.messages[response.content.action_request_id]
                arguments, output = request.content.arguments, response.content.output
            assert (arguments, output) == ({"items": [1]}, [1]), type(branch).__name__


async def test_a_call_whose_batch_is_cancelled_before_it_starts_does_not_start_in_both() -> None:
    started: list[int] = []

    async def mark(a: int) -> int:
        """Never checkpoints."""
        started.append(a)
        return a

    with trio.fail_after(5):
        for branch in both(mark):
            started.clear()
            with trio.CancelScope() as scope:
                scope.cancel()
                await branch.act([{"function": "mark", "arguments": {"a": i}} for i in range(3)])
            assert started == [], type(branch).__name__


TEXT = st.text(max_size=4) | st.sampled_from(["é", "\ud800", "a\udfffb", "\x00"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.just(5000).map(lambda digits: 10**digits)  # too long to print
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(TEXT | st.integers(0, 3), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(value=VALUES | st.integers(60, 68).map(nested))
async def test_both_agree_on_any_argument_value(value: Any) -> None:
    """Whatever a model sends as an argument, the floor and lionexec make the same call of
    it: ``invalid`` both, or ``completed`` both with the same record."""

    async def take(x: list) -> list:  # type: ignore[type-arg]  (the floor reads bare types)
        """Return what it was given."""
        return x

    with trio.fail_after(5):
        seen = []
        for branch in both(take):
            [response] = await branch.act([{"function": "take", "arguments": {"x": value}}])
            if isinstance(branch, FloorBranch):
                output = branch.history[-1].output
            else:
                output = response.content.output
            seen.append((outcome(response), output))
        assert seen[0] == seen[1], seen


def _journal_rows(path: Path) -> dict[str, Any]:
    """What a journal file holds, without ids or times: kinds of the history in order, the
    calls' (tool, arguments, effect, attempts, state, outcome), and the log's length."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        kinds = [k for (k,) in conn.execute("SELECT kind FROM lionexec_messages ORDER BY seq")]
        calls = conn.execute(
            "SELECT function, arguments, effect, attempts, state, outcome FROM lionexec_calls "
            "ORDER BY arguments"
        ).fetchall()
        [(logged,)] = conn.execute("SELECT count(*) FROM lionexec_log")
    return {"kinds": kinds, "calls": calls, "log": logged}


@pytest.mark.parametrize("strategy", ["sequential", "concurrent"])
async def test_the_journal_floor_writes_what_the_journal_writes(
    tmp_path: Path, strategy: str
) -> None:
    from benchmarks._journal_floor import DurableFloorBranch
    from lionexec.journal import SqliteJournal
    from lionexec.tools import Tool

    async def noop(x: int) -> int:
        """Return x."""
        return x

    batch = [{"function": "noop", "arguments": {"x": i}} for i in range(5)]
    with trio.fail_after(30):
        async with SqliteJournal(tmp_path / "lionexec.db") as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(noop, effect="pure"))
            async with branch:
                await branch.act(batch, strategy=strategy)  # type: ignore[arg-type]
        async with SqliteJournal(tmp_path / "floor.db"):  # the schema, nothing else
            pass
    floor = DurableFloorBranch(str(tmp_path / "floor.db"))
    floor.register_tools([noop])
    try:
        with trio.fail_after(30):
            await floor.act(batch, strategy=strategy)
        floor.fold()
    finally:
        floor.close()
    journaled = _journal_rows(tmp_path / "lionexec.db")
    assert journaled["calls"] == [
        ("noop", f'{{"x":{i}}}', "pure", 1, "done", "completed") for i in range(5)
    ]
    assert _journal_rows(tmp_path / "floor.db") == journaled
