"""Entering a branch: one block at a time, a cancelled entry never hangs, a closed branch says so.

A branch with sinks serves them while it is entered (``async with branch``) or served
(``nursery.start(branch.serve)``). Two blocks at once, or a block inside another, used to
corrupt trio's nursery stack; an entry cancelled before its services started waited forever
for a shielded service (the outer deadline could not end it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from lionexec import Branch
from lionexec.testing import assert_consistent
from lionexec.testing import tool_call as call

pytestmark = pytest.mark.timeout(30)


def add(a: int, b: int) -> int:
    return a + b


def logged(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def branch_at(path: Path) -> Branch:
    branch = Branch.with_log_file(path)
    branch.registry.register_tool(add)
    return branch


async def test_an_entry_cancelled_before_it_starts_returns_and_leaves_the_branch_usable(
    tmp_path: Path,
) -> None:
    branch = branch_at(tmp_path / "log.jsonl")
    with trio.fail_after(5):  # (it used to wait forever, out of reach of this deadline)
        with trio.CancelScope() as scope:
            scope.cancel()
            async with branch:
                pytest.fail("the block of a cancelled entry ran")
    assert scope.cancelled_caught
    async with branch:  # not closed: it can be entered, and it acts
        [response] = await branch.act(call("add", a=1, b=2))
    assert response.output == 3
    assert logged(tmp_path / "log.jsonl") == 1


async def test_a_second_block_at_once_is_refused_and_the_first_goes_on(tmp_path: Path) -> None:
    branch = branch_at(tmp_path / "log.jsonl")
    refused: list[BaseException] = []
    async with branch:
        async with trio.open_nursery() as nursery:

            async def second() -> None:
                try:
                    async with branch:
                        pytest.fail("a second block entered the branch")
                except RuntimeError as exc:
                    refused.append(exc)

            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
        responses = await branch.act([call("add", a=i, b=1) for i in range(3)])
    assert [r.output for r in responses] == [1, 2, 3]
    assert len(refused) == 1 and "entered already" in str(refused[0])
    assert branch.name in str(refused[0])
    assert_consistent(branch)
    assert logged(tmp_path / "log.jsonl") == 3


async def test_two_entries_started_together_enter_once_and_corrupt_nothing(
    tmp_path: Path,
) -> None:
    branch = branch_at(tmp_path / "log.jsonl")
    entered: list[str] = []
    refused: list[str] = []

    async def enter(name: str) -> None:
        try:
            async with branch:
                entered.append(name)
                await branch.act(call("add", a=1, b=1))
        except RuntimeError:
            refused.append(name)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enter, "a")
            nursery.start_soon(enter, "b")
    assert len(entered) == 1 and len(refused) == 1
    assert logged(tmp_path / "log.jsonl") == 1


async def test_a_block_inside_another_is_refused_without_sinks_too() -> None:
    branch = Branch()
    branch.registry.register_tool(add)
    async with branch:
        with pytest.raises(RuntimeError, match="entered already"):
            async with branch:
                pass  # pragma: no cover
        [response] = await branch.act(call("add", a=2, b=2))
    assert response.output == 4
    async with branch:  # left: a branch without sinks can be entered again
        pass


async def test_serving_an_entered_branch_is_refused(tmp_path: Path) -> None:
    branch = branch_at(tmp_path / "log.jsonl")
    async with branch, trio.open_nursery() as nursery:
        with pytest.raises(RuntimeError, match="served already"):
            await nursery.start(branch.serve)


async def test_a_left_branch_with_sinks_says_it_was_closed(tmp_path: Path) -> None:
    branch = branch_at(tmp_path / "log.jsonl")
    async with branch:
        await branch.act(call("add", a=1, b=2))
    with pytest.raises(trio.ClosedResourceError, match="was closed"):
        async with branch:
            pass  # pragma: no cover
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["call_id"] for line in lines] == [
        branch.messages.requests()[0].call_id
    ]
