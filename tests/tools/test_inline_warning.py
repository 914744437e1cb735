"""An ``inline=True`` tool that holds the trio thread longer than a threshold is reported: a
warning on the ``lionexec`` logger naming the tool and how long it held the loop, once per
tool. The tools below block for real (``time.sleep``), since what is measured is the thread's
real time; the assertions are on the report, never on a duration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from lionexec import ActionOutcome, Branch
from lionexec.testing import tool_call as call
from lionexec.tools import Tool, _runner, set_inline_warning


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    previous = set_inline_warning(0.05)
    _runner._reported.clear()
    yield
    set_inline_warning(previous)
    _runner._reported.clear()


def blocking_branch(name: str, seconds: float) -> Branch:
    def work() -> str:
        """Block the calling thread."""
        time.sleep(seconds)
        return "done"

    branch = Branch()
    branch.register_tools(Tool.from_function(work, name=name, inline=True))
    return branch


def reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "lionexec" and "held the trio thread" in r.getMessage()
    ]


async def test_an_inline_tool_that_blocks_is_reported_once_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_inline_warning(0.01)
    branch = blocking_branch("slow_lookup", 0.05)
    with caplog.at_level(logging.WARNING, logger="lionexec"):
        [first] = await branch.act(call("slow_lookup"))
        [second] = await branch.act(call("slow_lookup"))
    assert first.outcome is second.outcome is ActionOutcome.COMPLETED
    [report] = reports(caplog)
    assert "'slow_lookup'" in report and "inline=True" in report
    held = float(report.split("for ", 1)[1].split(" s", 1)[0])
    assert held >= 0.05  # it slept that long at least: how long it held the loop


async def test_each_tool_is_reported_on_its_own(caplog: pytest.LogCaptureFixture) -> None:
    set_inline_warning(0.0)
    with caplog.at_level(logging.WARNING, logger="lionexec"):
        await blocking_branch("first_tool", 0.01).act(call("first_tool"))
        await blocking_branch("second_tool", 0.01).act(call("second_tool"))
    assert [r.split("'")[1] for r in reports(caplog)] == ["first_tool", "second_tool"]


async def test_below_the_threshold_or_disabled_nothing_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_inline_warning(60.0)
    with caplog.at_level(logging.WARNING, logger="lionexec"):
        await blocking_branch("quick_one", 0.001).act(call("quick_one"))
        set_inline_warning(None)
        await blocking_branch("not_watched", 0.02).act(call("not_watched"))
    assert reports(caplog) == []


async def test_a_tool_in_a_worker_thread_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_inline_warning(0.0)

    def work() -> str:
        """Block a worker thread."""
        time.sleep(0.02)
        return "done"

    branch = Branch()
    branch.register_tools(Tool.from_function(work, name="threaded"))
    with caplog.at_level(logging.WARNING, logger="lionexec"):
        await branch.act(call("threaded"))
    assert reports(caplog) == []


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "0.1"])
def test_the_threshold_must_be_a_finite_number_or_none(bad: object) -> None:
    with pytest.raises(ValueError, match="seconds must be a finite number"):
        set_inline_warning(bad)  # type: ignore[arg-type]
    assert set_inline_warning(0.05) == 0.05  # unchanged by the refusal
