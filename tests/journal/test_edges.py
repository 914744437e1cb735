"""Edges of the journal's promise: a call ending after the sink service
stopped, a record that would not fit a durable sink's buffer, a branch reopened while it
closes, a key waiter after its holder's outcome commit failed, and recovery of a key held by a
lost call of a later branch. Each is answered exactly once, and nothing waits forever."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from lionexec.conversation import ActionOutcome, Instruction
from lionexec.errors import NotDurableError
from lionexec.journal import Journal, JournalConnectionError, MemoryJournal
from lionexec.journal.backends import MemoryBackend
from lionexec.tools import Tool

from .conftest import GatedBackend


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


async def test_a_call_ending_after_the_service_stopped_is_answered_once() -> None:
    """The service is cancelled (a shutdown) while a call's tool runs: recording its
    response then drops the record (the feed cannot take it) instead of raising into the
    transaction, which answered the call a second time (``HistoryError``) and left the
    batch's later call unanswered."""
    release = trio.Event()

    async def slow(n: int) -> int:
        """Slow."""
        await release.wait()
        return n

    caught: list[BaseException] = []
    with trio.fail_after(10):
        async with MemoryJournal() as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(slow, effect="pure"))
            service = trio.CancelScope()

            async def serve(
                *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
            ) -> None:
                with service:
                    await branch.serve(task_status=task_status)

            async def act() -> None:
                calls = [{"function": "slow", "arguments": {"n": n}} for n in (0, 1)]
                try:
                    await branch.act(calls, strategy="sequential")
                except Exception as exc:
                    caught.append(exc)

            async with trio.open_nursery() as nursery:
                await nursery.start(serve)
                nursery.start_soon(act)
                await trio.testing.wait_all_tasks_blocked()  # call 0's tool runs
                service.cancel()
                await trio.testing.wait_all_tasks_blocked()
                release.set()
    [error] = caught
    assert isinstance(error, NotDurableError), error  # not an internal HistoryError
    assert "its service stopped" in str(error)
    assert [r.outcome for r in error.responses] == [ActionOutcome.COMPLETED] * 2
    assert branch.messages.unanswered() == []


async def test_a_record_beyond_a_durable_sinks_capacity_is_kept() -> None:
    """An invalid call (no write-ahead, so no room reserved) beside a full buffer: a durable
    sink's record is never dropped, so its commit holds the call and act() returns."""
    gate = trio.Event()

    async def slow() -> str:
        """Slow."""
        await gate.wait()
        return "ok"

    with trio.fail_after(10):
        async with MemoryJournal() as journal:
            branch = await journal.branch(sink_capacity=1)
            branch.register_tools(Tool.from_function(slow, effect="pure"))
            async with branch, trio.open_nursery() as nursery:
                nursery.start_soon(branch.act, {"function": "slow", "arguments": {}})
                await trio.testing.wait_all_tasks_blocked()  # slow runs: the room is its
                [response] = await branch.act({"function": "nope", "arguments": {}})
                gate.set()
            assert response.outcome is ActionOutcome.INVALID
            assert branch.statistics().sinks[0].dropped == 0
            history = await journal.history(branch.id)
            request_id = response.content.action_request_id
            assert request_id is not None and history.response_for(request_id) is not None


@pytest.mark.parametrize("cancel_the_close", [False, True])
async def test_a_branch_reopened_while_it_closes_waits_for_its_last_commit(
    cancel_the_close: bool,
) -> None:
    """Reopened while its closing commit runs, a branch was loaded without that commit's
    messages: a second writer of the same positions, every commit of it refused. Cancelling
    the close does not cut its last commit short (a commit is bounded by ``commit_timeout``,
    not by cancellation): the reopened branch is loaded after it either way."""
    backend = GatedBackend()
    with trio.fail_after(10):
        async with Journal(backend) as journal:
            branch = await journal.branch()
            reopened: list[Any] = []
            closing = trio.CancelScope()

            async def close() -> None:
                with closing:
                    async with branch:
                        branch.messages.add_message(Instruction(content="note"))  # by hand
                        backend.armed = True  # the closing commit waits for the gate

            async def reopen() -> None:
                reopened.append(await journal.branch(branch.id))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(close)
                await backend.waiting.wait()  # the closing commit is in flight
                nursery.start_soon(reopen)
                await trio.testing.wait_all_tasks_blocked()
                assert not reopened  # it waits for the closing commit
                if cancel_the_close:
                    closing.cancel()
                    await trio.testing.wait_all_tasks_blocked()
                    assert not reopened  # the commit still runs
                backend.gate.set()
            [again] = reopened
            assert again is not branch
            assert [m.content for m in again.messages] == ["note"]
            again.register_tools(Tool.from_function(add, effect="pure"))
            async with again:
                [response] = await again.act({"function": "add", "arguments": {"a": 1, "b": 2}})
            assert response.outcome is ActionOutcome.COMPLETED, response.content.error
            assert len(await journal.history(branch.id)) == 3


async def test_a_key_waiter_is_answered_after_its_holders_outcome_commit_failed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The holder's outcome commit fails once (its act() raises NotDurableError): the call
    waiting for its key commits the holder's branch itself, instead of waiting for some
    unrelated commit forever."""
    release = trio.Event()
    runs: list[str] = []

    async def transfer(transfer_id: str) -> str:
        """Move money."""
        runs.append(transfer_id)
        await release.wait()
        return f"done {transfer_id}"

    tool = Tool.from_function(transfer, effect="keyed", idempotency_key=lambda a: a["transfer_id"])
    call = {"function": "transfer", "arguments": {"transfer_id": "T9"}}
    got: list[Any] = []
    async with MemoryJournal() as journal:
        failing = [True]
        commit_batch = journal._engine._commit_batch

        async def outcome_fails_once(batch: Any, **options: Any) -> Any:
            if failing and batch.outcomes and not batch.requests:
                failing.pop()
                raise JournalConnectionError("the outcome commit failed once (test)")
            return await commit_batch(batch, **options)

        journal._engine._commit_batch = outcome_fails_once  # type: ignore[method-assign]
        holder, waiter = await journal.branch(), await journal.branch()
        holder.register_tools(tool)
        waiter.register_tools(tool)
        with trio.fail_after(3600):  # (trio's clock)
            async with holder, waiter, trio.open_nursery() as nursery:

                async def hold() -> None:
                    with pytest.raises(NotDurableError):
                        await holder.act(call)

                async def wait() -> None:
                    got.extend(await waiter.act(call))

                nursery.start_soon(hold)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()  # waiting for key T9
                release.set()
    [response] = got
    assert response.outcome is ActionOutcome.COMPLETED
    assert response.output == "done T9"
    assert runs == ["T9"]


async def test_recovery_of_a_call_waiting_for_a_key_a_later_branch_held_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A safe call of an older branch waited for the key a call of a newer branch held, and
    the process died: recovery took the older branch first, and its re-run waited forever
    for the key. Calls that hold keys are resolved first now."""
    started = trio.Event()
    runs: list[str] = []

    async def transfer(transfer_id: str, amount: int) -> str:
        """Move money."""
        runs.append(transfer_id)
        if len(runs) == 1:
            started.set()
            await trio.sleep_forever()  # the process dies while it runs
        return f"{transfer_id}: {amount}"

    tool = Tool.from_function(transfer, effect="keyed", idempotency_key=lambda a: a["transfer_id"])
    call = {"function": "transfer", "arguments": {"transfer_id": "T9", "amount": 5}}
    backend = MemoryBackend()
    journal = Journal(backend)
    await journal.open()
    older = await journal.branch()
    older.register_tools([tool, Tool.from_function(add, effect="pure")])
    newer = await journal.branch()
    newer.register_tools(tool)
    async with older, newer, trio.open_nursery() as nursery:
        await older.act({"function": "add", "arguments": {"a": 1, "b": 1}})  # journaled first
        nursery.start_soon(newer.act, call)  # holds key T9, runs
        await started.wait()
        nursery.start_soon(older.act, call)  # the same key: waits for it
        await trio.testing.wait_all_tasks_blocked()
        assert [c.branch_id for c in await journal.calls(unfinished=True)] == [newer.name]
        await journal.aclose()  # the process "dies": nothing more reaches the journal
        nursery.cancel_scope.cancel()

    async with Journal(backend) as restarted:
        assert [str(b) for b in await restarted.branch_ids()] == [older.name, newer.name]
        with trio.fail_after(600):
            report = await restarted.recover([tool, Tool.from_function(add, effect="pure")])
        assert report.counts() == {"rerun": 2}
        for branch in (older, newer):
            history = await restarted.history(branch.id)
            assert history.unanswered() == []
            assert history.responses()[-1].output == "T9: 5"
    assert runs == ["T9", "T9"]  # the holder re-run once; the waiter answered from its key


async def test_a_closed_journal_and_its_branch_are_freed_once_dropped(tmp_path: Any) -> None:
    # freed by their reference counts, not at the next full collection (which a long-lived
    # process may reach late, with every dropped branch's history still held meanwhile)
    import gc
    import weakref

    from lionexec.journal import SqliteJournal

    async def double(x: int) -> int:
        return 2 * x

    async def run() -> tuple[weakref.ref[Any], weakref.ref[Any], weakref.ref[Any]]:
        async with SqliteJournal(tmp_path / "j.db") as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(double, effect="pure"))
            async with branch:
                [response] = await branch.act({"function": "double", "arguments": {"x": 2}})
            assert response.output == 4
            history = branch.messages
            return weakref.ref(journal), weakref.ref(branch), weakref.ref(history.messages[-1])

    gc.collect()
    gc.disable()
    try:
        refs = await run()
        await trio.lowlevel.checkpoint()
        assert [ref() for ref in refs] == [None, None, None]
    finally:
        gc.enable()


async def test_a_branch_nothing_refers_to_is_made_anew_by_the_next_open() -> None:
    import weakref

    async def double(x: int) -> int:
        return 2 * x

    async with MemoryJournal() as journal:
        first = await journal.branch()
        assert await journal.branch(first.id) is first  # (open: returned as is)
        gone = weakref.ref(first)
        branch_id = first.id
        del first
        assert gone() is None
        again = await journal.branch(branch_id)
        again.register_tools(Tool.from_function(double, effect="pure"))
        async with again:
            [response] = await again.act({"function": "double", "arguments": {"x": 3}})
        assert response.output == 6
        history = await journal.history(branch_id)
        assert [m.kind for m in history] == ["action_request", "action_response"]
