"""Durable runs: on a journaled branch every model reply is held before the loop acts on it
or returns it, and a run named by ``run_id`` continues, after a restart, from what the
journal holds (in-process here; ``test_agent_crash.py`` kills real agent processes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from lionexec.act import Branch
from lionexec.conversation import AssistantResponse, Instruction
from lionexec.errors import ConfigurationError
from lionexec.governance import PermissionPolicy
from lionexec.journal import SqliteJournal
from lionexec.models import Endpoint, Model, run, run_stream
from lionexec.models.testing import LocalProvider, Reply, Stall
from lionexec.testing import assert_consistent

pytestmark = pytest.mark.timeout(60)
BUDGET = 30


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@pytest.fixture
async def provider(nursery: trio.Nursery) -> AsyncIterator[LocalProvider]:
    local = LocalProvider()
    await nursery.start(local.serve)
    yield local


async def committed(path: Path, branch: Branch) -> list[Any]:
    """The branch's history as the journal file holds it, read through a journal of its own
    (what a process started now would find)."""
    async with SqliteJournal(path) as other:
        return list(await other.history(branch.name))


async def run_on(
    path: Path, provider: LocalProvider, instruction: str | None, **kwargs: Any
) -> tuple[Any, list[Any]]:
    """One process's life: open the journal and the branch, run, close; the result and the
    branch's history."""
    assert provider.base_url is not None
    policy = kwargs.pop("policy", None)
    async with SqliteJournal(path) as journal:
        branch = await journal.branch(kwargs.pop("branch_id"), policy=policy)
        branch.register_tools([add, refund])
        async with branch, Model(endpoint=Endpoint(provider.base_url), name="m") as model:
            result = await run(branch, model, instruction, **kwargs)
        if not branch.messages.unanswered():  # (a parked call's request waits)
            assert_consistent(branch)
        return result, list(branch.messages)


def kinds(history: list[Any]) -> list[str]:
    return [message.kind for message in history]


async def test_the_instruction_and_the_answer_are_held_before_the_model_or_caller_sees_them(
    provider: LocalProvider, tmp_path: Path
) -> None:
    go = trio.Event()
    provider.add(Stall(Reply("the answer"), release=go))
    path = tmp_path / "j.db"
    assert provider.base_url is not None
    with trio.fail_after(BUDGET):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            async with branch, Model(endpoint=Endpoint(provider.base_url), name="m") as model:
                async with trio.open_nursery() as nursery:
                    results: list[Any] = []

                    async def go_on() -> None:
                        results.append(await run(branch, model, "what is 2+2?"))

                    nursery.start_soon(go_on)
                    await provider.wait_for(lambda log: log.requests)
                    while_asking = await committed(path, branch)
                    go.set()
                after_answer = await committed(path, branch)  # (the branch still open)
    assert [type(m) for m in while_asking] == [Instruction]
    assert [type(m) for m in after_answer] == [Instruction, AssistantResponse]
    assert after_answer[-1].content == results[0].text == "the answer"


async def test_a_finished_run_returns_its_recorded_answer_without_asking_again(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply("3"))
    path, bid = tmp_path / "j.db", "4d4a7a8e-0f5e-4b43-9d43-6a3e2f1c0b11"
    with trio.fail_after(BUDGET):
        first, _ = await run_on(path, provider, "add 1 and 2", branch_id=bid, run_id="r1")
        again, history = await run_on(path, provider, "add 1 and 2", branch_id=bid, run_id="r1")
        # the instruction may be left out once the run is recorded
        third, _ = await run_on(path, provider, None, branch_id=bid, run_id="r1")
    assert len(provider.log.requests) == 2
    assert (first.text, first.stop_reason, first.turns, len(first.responses)) == (
        "3",
        "answered",
        2,
        2,
    )
    for later in (again, third):
        assert (later.text, later.stop_reason, later.turns, later.responses) == (
            "3",
            "answered",
            2,
            (),
        )
    assert kinds(history) == [
        "instruction",
        "assistant_response",
        "action_request",
        "action_response",
        "assistant_response",
    ]


async def test_a_run_stopped_between_turns_resumes_at_its_first_unanswered_turn(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 2, "b": 3})]), Stall(Reply("never sent")))
    path, bid = tmp_path / "j.db", "5e5b8b9f-1a6f-4c54-8e54-7b4f3a2d1c22"
    assert provider.base_url is not None
    with trio.fail_after(BUDGET):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch(bid)
            branch.register_tools([add])
            async with branch, Model(endpoint=Endpoint(provider.base_url), name="m") as model:
                with trio.move_on_after(BUDGET / 3) as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            lambda: run(branch, model, "add 2 and 3", run_id="r1", max_turns=4)
                        )
                        await provider.wait_for(lambda log: len(log.requests) == 2)
                        nursery.cancel_scope.cancel()  # the process stops mid-call
                assert not scope.cancelled_caught
        provider.add(Reply("5"))
        result, history = await run_on(
            path, provider, "add 2 and 3", branch_id=bid, run_id="r1", max_turns=4
        )
    assert (result.text, result.stop_reason, result.turns, len(result.responses)) == (
        "5",
        "answered",
        2,
        1,
    )
    resumed = provider.log.requests[-1]["messages"]
    assert [m["role"] for m in resumed] == ["user", "assistant", "tool"]
    assert resumed[-1]["content"] == "5"
    assert kinds(history).count("instruction") == 1
    assert kinds(history).count("assistant_response") == 2


async def test_max_turns_is_recorded_and_a_larger_budget_goes_on(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 1})]), Reply("2"))
    path, bid = tmp_path / "j.db", "6f6c9ca0-2b70-4d65-9f65-8c504b3e2d33"
    with trio.fail_after(BUDGET):
        first, _ = await run_on(path, provider, "go", branch_id=bid, run_id="r", max_turns=1)
        same, _ = await run_on(path, provider, "go", branch_id=bid, run_id="r", max_turns=1)
        assert len(provider.log.requests) == 1
        more, _ = await run_on(path, provider, "go", branch_id=bid, run_id="r", max_turns=3)
    assert (first.stop_reason, first.turns) == (same.stop_reason, same.turns) == ("max_turns", 1)
    assert (more.stop_reason, more.turns, more.text) == ("answered", 2, "2")
    assert len(provider.log.requests) == 2


async def test_a_parked_run_is_still_parked_after_a_restart(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply(tool_calls=[("refund", {"order": "O-1"})]))
    policy = PermissionPolicy(mode="rules", escalate={"refund": ["*"]})
    path, bid = tmp_path / "j.db", "707daab1-3c81-4e76-8a76-9d615c4f3e44"
    with trio.fail_after(BUDGET):
        first, _ = await run_on(path, provider, "refund", branch_id=bid, run_id="r", policy=policy)
        again, history = await run_on(
            path, provider, "refund", branch_id=bid, run_id="r", policy=policy
        )
    assert first.stop_reason == again.stop_reason == "awaiting_approval"
    assert again.turns == 1
    assert len(provider.log.requests) == 1
    assert kinds(history) == ["instruction", "assistant_response", "action_request"]


async def test_a_streamed_run_that_finished_yields_only_its_result(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply("hello"))
    path, bid = tmp_path / "j.db", "818ebbc2-4d92-4f87-9b87-ae726d504f55"
    assert provider.base_url is not None
    with trio.fail_after(BUDGET):
        await run_on(path, provider, "hi", branch_id=bid, run_id="r")
        async with SqliteJournal(path) as journal:
            branch = await journal.branch(bid)
            async with branch, Model(endpoint=Endpoint(provider.base_url), name="m") as model:
                events = [e async for e in run_stream(branch, model, "hi", run_id="r")]
    assert [type(e).__name__ for e in events] == ["LoopResult"]
    assert events[0].text == "hello"


@pytest.mark.parametrize(
    ("instruction", "run_id", "message"),
    [
        ("something else", "r", "was started with another instruction"),
        (None, "unknown", "is not recorded on branch"),
        ("hi", "", "run_id must be a non-empty string"),
    ],
)
async def test_run_ids_that_cannot_name_this_run_are_refused(
    provider: LocalProvider, tmp_path: Path, instruction: str | None, run_id: str, message: str
) -> None:
    provider.add(Reply("hello"))
    path, bid = tmp_path / "j.db", "929fccd3-5ea3-4098-8c98-bf837e615066"
    with trio.fail_after(BUDGET):
        await run_on(path, provider, "hi", branch_id=bid, run_id="r")
        with pytest.raises(ConfigurationError, match=message):
            await run_on(path, provider, instruction, branch_id=bid, run_id=run_id)
    assert len(provider.log.requests) == 1


async def test_a_run_another_instruction_followed_cannot_be_continued(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 1})]), Reply("second run's answer"))
    path, bid = tmp_path / "j.db", "a3a0dde4-6fb4-4109-9da9-c0948f726177"
    with trio.fail_after(BUDGET):
        await run_on(path, provider, "first", branch_id=bid, run_id="one", max_turns=1)
        await run_on(path, provider, "second", branch_id=bid, run_id="two")
        with pytest.raises(ConfigurationError, match="another instruction followed it"):
            await run_on(path, provider, "first", branch_id=bid, run_id="one", max_turns=5)
    assert len(provider.log.requests) == 2


async def test_assert_consistent_holds_on_a_reopened_journaled_branch(
    provider: LocalProvider, tmp_path: Path
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply("3"))
    provider.add(Reply(tool_calls=[("add", {"a": 3, "b": 4})]), Reply("7"))
    path, bid = tmp_path / "j.db", "b4b1eef5-7005-4a1a-8eaa-d1a5a0837288"
    with trio.fail_after(BUDGET):
        await run_on(path, provider, "1+2", branch_id=bid)
        async with SqliteJournal(path) as journal:
            branch = await journal.branch(bid)
            branch.register_tools([add])
            assert_consistent(branch)  # every call ran in the process before
            assert provider.base_url is not None
            async with branch, Model(endpoint=Endpoint(provider.base_url), name="m") as model:
                await run(branch, model, "3+4")
            assert_consistent(branch)  # one call of each kind: before, and in this process
            assert len(branch.log) == 1


async def test_flush_holds_hand_added_messages_and_is_a_checkpoint_without_sinks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    with trio.fail_after(BUDGET):
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            async with branch:
                branch.messages.add_message(Instruction(content="held?"))
                before = await committed(path, branch)
                await branch.flush()
                after = await committed(path, branch)
    assert (before, [m.content for m in after]) == ([], ["held?"])
    with trio.testing.assert_checkpoints():
        await Branch().flush()
