"""Entering a branch: one block at a time, a cancelled entry never hangs, a closed branch says so.

A branch with sinks serves them while it is entered (``async with branch``) or served
(``nursery.start(branch.serve)``). Two blocks at once, or a block inside another, used to
corrupt trio's nursery stack; an entry cancelled before its services started waited forever
for a shielded service (the outer deadline could not end it).
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import trio
import trio.testing

from lionexec import Branch
from lionexec.errors import DuplicateCallError
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
    assert len(refused) == 1 and "entered or served already" in str(refused[0])
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
        with pytest.raises(RuntimeError, match="entered or served already"):
            async with branch:
                pass  # pragma: no cover
        [response] = await branch.act(call("add", a=2, b=2))
    assert response.output == 4
    async with branch:  # left: a branch without sinks can be entered again
        pass


async def test_serving_an_entered_branch_is_refused(tmp_path: Path) -> None:
    branch = branch_at(tmp_path / "log.jsonl")
    async with branch, trio.open_nursery() as nursery:
        with pytest.raises(RuntimeError, match="entered or served already"):
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


class CountingSink:
    """A sink that counts its ``aclose`` calls (the contract: exactly one)."""

    durable = False

    def __init__(self) -> None:
        self.closes = 0

    async def write_ahead(self, entry: object) -> None:
        return None

    async def write(self, records: object) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self.closes += 1
        await trio.lowlevel.checkpoint()


async def test_two_serves_started_together_serve_once() -> None:
    sink = CountingSink()
    branch = Branch(sinks=[sink])
    refused: list[BaseException] = []

    async def serve(nursery: trio.Nursery) -> None:
        try:
            await nursery.start(branch.serve)
        except RuntimeError as exc:
            refused.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, nursery)
        nursery.start_soon(serve, nursery)
        await trio.testing.wait_all_tasks_blocked()
        await branch.aclose()
    assert len(refused) == 1 and "served already" in str(refused[0])
    assert sink.closes == 1


@pytest.mark.parametrize("checkpoints", range(8))
async def test_an_entry_cancelled_at_any_point_closes_every_sink_once(checkpoints: int) -> None:
    sinks = [CountingSink(), CountingSink(), CountingSink()]
    branch = Branch(sinks=sinks)
    scope = trio.CancelScope()

    async def cancel_soon() -> None:
        for _ in range(checkpoints):
            await trio.lowlevel.checkpoint()
        scope.cancel()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_soon)
            with scope:
                async with branch:
                    await trio.sleep_forever()
    # entered or not, the block is gone and so are the sinks: each closed exactly once
    assert [sink.closes for sink in sinks] in ([1, 1, 1], [0, 0, 0])
    if sinks[0].closes:
        with pytest.raises(trio.ClosedResourceError):
            async with branch:
                pass  # pragma: no cover
    else:  # cancelled before anything started: the branch is as it was
        async with branch:
            pass
        assert [sink.closes for sink in sinks] == [1, 1, 1]


@pytest.mark.parametrize("where", ["another task", "a nested cancel scope", "while entering"])
async def test_aclose_while_entered_closes_the_sinks_and_corrupts_nothing(where: str) -> None:
    sink = CountingSink()
    branch = Branch(sinks=[sink])
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            if where == "while entering":
                nursery.start_soon(branch.aclose)  # runs while the entry below starts
            async with branch:
                if where == "another task":
                    nursery.start_soon(branch.aclose)
                    await trio.testing.wait_all_tasks_blocked()
                elif where == "a nested cancel scope":
                    with trio.CancelScope():
                        await branch.aclose()
                assert not branch.statistics().sinks[0].serving
    assert sink.closes == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_abandoned_nursery_whose_child_outlives_the_run_is_a_trio_internal_error() -> None:
    """Why the branch's nursery holders are KI-protected: in raw trio, a KeyboardInterrupt
    that leaves a nursery never exited (as one landing in its frame as the frame resumes from
    the nursery's ``__aexit__`` does), while a child outlives the run in a shielded, bounded
    cleanup (a sink's service, a cancelled call's announcements), ends ``trio.run`` in
    ``TrioInternalError``: the one violation the KI soak has seen."""

    async def child() -> None:
        with trio.CancelScope(shield=True):
            await trio.sleep(0.05)

    async def main() -> None:
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()  # never exited, as if a KeyboardInterrupt hit
        nursery.start_soon(child)
        await trio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    with pytest.raises(trio.TrioInternalError):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    gc.collect()  # (the abandoned nursery and child report themselves as they are collected)


async def test_leaving_a_branch_holds_its_nursery_ki_protected() -> None:
    """A sink's ``expedite()`` is called as its feed closes: from the block's exit it runs
    KI-protected (the frame holding the branch's nursery), from a caller's ``aclose()`` not."""
    protected: list[bool] = []

    class Expediting(CountingSink):
        def expedite(self) -> None:
            protected.append(trio.lowlevel.currently_ki_protected())

    async with Branch(sinks=[Expediting()]):
        pass
    branch = Branch(sinks=[Expediting()])
    await branch.aclose()
    assert protected == [True, False]


async def test_a_processor_cycle_holds_its_nursery_ki_protected() -> None:
    from lionexec.engine import Event, Processor

    protected: list[bool] = []

    class Checking(Processor):
        async def request_permission(self, **request: object) -> bool:
            protected.append(trio.lowlevel.currently_ki_protected())
            return True

    class Nothing(Event):
        async def _invoke(self) -> None:
            return None

    processor = Checking(queue_capacity=4, capacity_refresh_time=0.01, concurrency_limit=1)
    await processor.enqueue(Nothing())
    await processor.process()
    assert protected == [True]


async def test_an_exception_of_the_block_leaves_it_as_itself() -> None:
    # The branch's nursery is its own business: a web app catching DuplicateCallError (or
    # its own errors) around `async with branch:` sees the exception, not a group.
    class Mine(Exception):
        pass

    branch = Branch()
    with pytest.raises(Mine) as caught:
        async with branch:
            raise Mine("the application's own")
    assert not isinstance(caught.value, BaseExceptionGroup)

    def one() -> int:
        return 1

    branch.register_tools(one)
    proposal = {"id": "c1", "type": "function", "function": {"name": "one", "arguments": "{}"}}
    await branch.act(proposal)
    with pytest.raises(DuplicateCallError):
        async with branch:
            await branch.act(proposal)  # the same call id again


async def test_a_cancelled_block_leaves_as_cancelled_and_records_its_calls(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def slow() -> None:
        await trio.sleep(100)

    branch = Branch()
    branch.register_tools(slow)
    with trio.move_on_after(1) as scope:
        async with branch:
            await branch.act({"function": "slow", "arguments": {}})
    assert scope.cancelled_caught
    assert [m.content.outcome.value for m in branch.messages if hasattr(m.content, "outcome")] == [
        "cancelled"
    ]
