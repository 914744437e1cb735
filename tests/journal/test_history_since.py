"""A history kept between two branches of one id: ``Journal.committed_history`` says whether
the journal holds all of it, and ``history(since=)`` / ``branch(since=)`` read only what was
committed after it, on every backend; anything the journal does not hold is read whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

from lionexec.act import Branch
from lionexec.conversation import MessageManager, System
from lionexec.journal import Journal, JournalConnectionError
from lionexec.journal.backends._memory import MemoryStore
from lionexec.journal.backends._sql import SqlStore
from lionexec.tools import ActionManager, Tool

from .conftest import JournalFactory

BUDGET = 20.0


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def tools() -> ActionManager:
    registry = ActionManager()
    registry.register_tools([Tool.from_function(add, effect="pure")])
    return registry


def calls(*values: int) -> list[dict[str, Any]]:
    return [{"function": "add", "arguments": {"a": v, "b": 1}} for v in values]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every read of a branch's messages, as ``("whole", 0)`` or ``("from", start)``; a read
    repeated at once is counted once (PostgreSQL runs a transaction's function a second time,
    on a connection, when it reads)."""
    seen: list[tuple[str, int]] = []
    inside: list[bool] = []  # (a whole read reads from position 0 itself)
    for store in (SqlStore, MemoryStore):
        whole, tail = store.messages, store.messages_from

        def messages(self: Any, branch_id: str, _whole: Any = whole) -> Any:
            if seen[-1:] != [("whole", 0)]:
                seen.append(("whole", 0))
            inside.append(True)
            try:
                return _whole(self, branch_id)
            finally:
                inside.pop()

        def messages_from(self: Any, branch_id: str, start: int, _tail: Any = tail) -> Any:
            if not inside and seen[-1:] != [("from", start)]:
                seen.append(("from", start))
            return _tail(self, branch_id, start)

        monkeypatch.setattr(store, "messages", messages)
        monkeypatch.setattr(store, "messages_from", messages_from)
    yield seen


async def act_and_close(journal: Journal, branch: Branch, *values: int) -> None:
    async with branch:
        responses = await branch.act(calls(*values))
    assert all(r.success for r in responses)


async def test_a_kept_history_reads_only_what_was_committed_since(
    journals: JournalFactory, reads: list[tuple[str, int]]
) -> None:
    with trio.fail_after(BUDGET):
        async with journals.new() as journal, journals.new() as elsewhere:
            branch = await journal.branch(registry=tools())
            await act_and_close(journal, branch, 1, 2)
            kept = journal.committed_history(branch)
            assert kept is branch.messages and len(kept) == 4

            # another journal object (another process, a replica) goes on with the branch
            other = await elsewhere.branch(branch.id, registry=tools())
            await act_and_close(elsewhere, other, 3)

            reads.clear()
            caught_up = await journal.history(branch.id, since=kept)
            assert caught_up is kept
            assert reads == [("from", 3)]  # (its last message, to check it, and the new ones)
            assert caught_up == await journal.history(branch.id) == other.messages
            assert len(caught_up) == 6
            assert sorted(r.content.output for r in caught_up.responses()) == [2, 3, 4]

            # the branch built from it journals the next messages at the next positions
            reads.clear()
            again = await journal.branch(branch.id, since=caught_up, registry=tools())
            assert again.messages is caught_up and reads == [("from", 5)]
            await act_and_close(journal, again, 4)
            fresh = await elsewhere.history(branch.id)
            assert fresh == again.messages and len(fresh) == 8

            # nothing new: the check reads one row, and the history is returned as it is
            reads.clear()
            kept = journal.committed_history(again)
            assert kept is not None
            assert await journal.history(branch.id, since=kept) is kept
            assert reads == [("from", 7)] and len(kept) == 8


async def test_a_history_the_journal_does_not_hold_is_read_whole(
    journals: JournalFactory, reads: list[tuple[str, int]]
) -> None:
    with trio.fail_after(BUDGET):
        async with journals.new() as journal:
            branch = await journal.branch(registry=tools())
            await act_and_close(journal, branch, 1)
            other = await journal.branch(registry=tools())
            await act_and_close(journal, other, 2)
            expected = await journal.history(branch.id)

            uncommitted = (await journal.history(branch.id)).copy()
            uncommitted.add_message(System(content="never committed"))
            trimmed = await journal.history(branch.id)
            trimmed.add_message(System(content="x"))
            trimmed.trim_calls(0)
            assert len(trimmed) < trimmed.appended
            cases = {
                "holds a message never committed": uncommitted,
                "is another branch's": other.messages,
                "was trimmed": trimmed,
                "is empty": MessageManager(),
            }
            for why, since in cases.items():
                reads.clear()
                loaded = await journal.history(branch.id, since=since)
                assert loaded is not since, why
                assert loaded == expected, why
                assert ("whole", 0) in reads, why


async def test_committed_history_is_none_unless_the_journal_holds_all_of_it(
    journals: JournalFactory,
) -> None:
    with trio.fail_after(BUDGET):
        async with journals.new() as journal, journals.new() as another:
            branch = await journal.branch(registry=tools())
            assert journal.committed_history(branch) is None  # (never entered)
            async with branch:
                await branch.act(calls(1))
                assert journal.committed_history(branch) is None  # (open)
            assert journal.committed_history(branch) is branch.messages
            assert another.committed_history(branch) is None  # (not that journal's)
            assert journal.committed_history(Branch(registry=tools())) is None

            refused = await journal.branch(registry=tools())
            commit_batch = journal._engine._commit_batch

            async def outcomes_refused(batch: Any, **options: Any) -> Any:
                if batch.outcomes:
                    raise JournalConnectionError("the outcome commit was refused (test)")
                return await commit_batch(batch, **options)

            journal._engine._commit_batch = outcomes_refused  # type: ignore[method-assign]
            with pytest.raises(ExceptionGroup) as raised:
                async with refused:
                    await refused.act(calls(2), suppress_errors=False)
            assert raised.group_contains(JournalConnectionError, match="refused", depth=2)
            journal._engine._commit_batch = commit_batch  # type: ignore[method-assign]
            assert len(refused.messages) == 2
            assert journal.committed_history(refused) is None
