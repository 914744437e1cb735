"""One conformance suite, run against every journal backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
import trio.testing

from lionexec.act import Branch
from lionexec.conversation import ActionOutcome, AssistantResponse, Instruction, System
from lionexec.errors import DuplicateCallError, NotDurableError
from lionexec.governance import CallContext, PermissionPolicy
from lionexec.journal import Applied, Journal, JournalError, NotApplied
from lionexec.tools import Tool

from .conftest import GatedBackend, JournalFactory


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def act_and_close(branch: Branch, calls: Any, **kwargs: Any) -> list[Any]:
    async with branch:
        return await branch.act(calls, **kwargs)


# -- histories ---------------------------------------------------------------------------------


async def test_a_restarted_journal_returns_the_same_history(journals: JournalFactory) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            branch.messages.add_message(System(content="be exact"))
            branch.messages.add_message(Instruction(content="add some numbers"))
            await branch.act(
                [
                    {"function": "add", "arguments": {"a": 1, "b": 2}},
                    {"function": "add", "arguments": {"a": "x", "b": 2}},  # invalid
                    {"function": "nope", "arguments": {}},  # unknown tool: invalid
                ]
            )
            turn = {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [
                    {
                        "call_id": "call_turn",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 5, "b": 5}'},
                    }
                ],
            }
            await branch.act(turn)
        expected = branch.messages
        branch_id = branch.id
    async with journals.new() as journal:
        again = await journal.branch(branch_id)
        assert again.messages == expected
        assert again.messages.to_openai() == expected.to_openai()
        assert again.messages.to_anthropic() == expected.to_anthropic()
        assert again.messages.to_responses() == expected.to_responses()
        assert any(isinstance(m, AssistantResponse) for m in again.messages)
        assert await journal.branch_ids() == [branch_id]
        # the restored branch goes on: more calls append after the restored messages
        again.register_tools(add)
        [response] = await act_and_close(again, {"function": "add", "arguments": {"a": 2, "b": 2}})
        assert response.output == 4
    async with journals.new() as journal:
        assert len(await journal.history(branch_id)) == len(expected) + 2


async def test_a_branch_that_retains_few_calls_still_journals_every_message(
    journals: JournalFactory,
) -> None:
    """Trimming (``retain=``) forgets calls in memory only: the journal keeps them all."""
    async with journals.new() as journal:
        branch = await journal.branch(retain=3)
        branch.register_tools(add)
        async with branch:
            for batch in range(4):
                branch.messages.add_message(Instruction(content=f"batch {batch}"))
                calls = [{"function": "add", "arguments": {"a": batch, "b": i}} for i in range(5)]
                await branch.act(calls, strategy="sequential" if batch % 2 else "concurrent")
                assert branch.messages.calls <= 5
        branch_id = branch.id
    async with journals.new() as journal:
        history = await journal.history(branch_id)
        assert len(history) == 4 * (1 + 2 * 5)
        assert sorted(m.output for m in history.responses()) == sorted(
            a + b for a in range(4) for b in range(5)
        )
        assert [m.content for m in history if isinstance(m, Instruction)] == [
            f"batch {b}" for b in range(4)
        ]


async def test_a_call_id_used_again_after_trimming_never_gets_another_tools_outcome(
    journals: JournalFactory,
) -> None:
    """A trimmed call id proposed again for another tool: refused before anything is
    recorded (the journal holds the id), the tool not run, never the other call's recorded
    output. (Before schema version 4 the journal's key for it, branch and call id, refused
    the call, but the request was journaled: the history held the id twice.)"""
    runs: list[str] = []

    def balance() -> str:
        """Balance."""
        runs.append("balance")
        return "balance: 100"

    def delete_all() -> str:
        """Delete everything."""
        runs.append("delete_all")
        return "deleted"

    async with journals.new() as journal:
        branch = await journal.branch(retain=1)
        branch.register_tools(
            [Tool.from_function(balance, effect="pure"), Tool.from_function(delete_all)]
        )
        async with branch:
            for i in range(3):
                await branch.act({"function": "balance", "arguments": {}, "call_id": f"c{i}"})
            assert "c0" not in [r.call_id for r in branch.messages.requests()]  # trimmed
            with pytest.raises(DuplicateCallError, match="'c0'"):
                await branch.act({"function": "delete_all", "arguments": {}, "call_id": "c0"})
            assert "delete_all" not in [r.function for r in branch.messages.requests()]
    assert runs == ["balance"] * 3


async def test_exports_of_outputs_json_has_no_value_for_are_the_same_after_a_restart(
    journals: JournalFactory,
) -> None:
    """An output JSON has no value for fails the call, named (a string "NaN" is data):
    the tool results exported before and after a restart are the same text."""
    values: dict[str, Any] = {
        "nan": float("nan"),
        "inf": float("inf"),
        "huge": 10**5000,
        "raw": b"\x00\xff",
        "nested": {"x": [float("-inf"), 1]},
        "text": "NaN",
    }

    def odd(which: str) -> Any:
        """An output JSON has no value for."""
        return values[which]

    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(odd, effect="pure"))
        async with branch:
            for which in values:
                await branch.act({"function": "odd", "arguments": {"which": which}})
        before = [branch.messages.to_openai(), branch.messages.to_anthropic()]
        before.append(branch.messages.to_responses())
        branch_id = branch.id
    async with journals.new() as journal:
        history = await journal.history(branch_id)
        after = [history.to_openai(), history.to_anthropic(), history.to_responses()]
    assert after == before
    results = [m["content"] for m in before[0] if m["role"] == "tool"]
    assert results[-1] == "NaN"  # the string: JSON data
    assert all('"outcome": "failed"' in r and "tool 'odd' returned" in r for r in results[:-1])


async def test_a_branch_opened_twice_at_once_is_one_branch(journals: JournalFactory) -> None:
    """Two tasks asking for the same branch together get the same Branch: two would be two
    writers of one branch's history (the second one's commits refused)."""
    async with journals.new() as journal:
        branch_id = uuid.uuid4()
        opened: list[Branch] = []

        async def open_it() -> None:
            opened.append(await journal.branch(branch_id))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(open_it)
                nursery.start_soon(open_it)
        first, second = opened
        assert first is second
        first.register_tools(add)
        async with first:
            [response] = await first.act({"function": "add", "arguments": {"a": 1, "b": 2}})
        assert response.content.output == 3
        assert len(await journal.history(branch_id)) == 2


async def test_text_with_every_kind_of_quoting_survives_a_restart(
    journals: JournalFactory,
) -> None:
    """Bodies go to PostgreSQL as binary arrays: what text-format array quoting would mangle
    (quotes, backslashes, braces, commas, the word NULL, newlines) comes back as it went."""
    nasty = "a \"quoted\" \\ back\\slash, {braces} NULL \n newline \t é 😀 'single'"

    def echo(text: str) -> str:
        """Echo."""
        return text

    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(echo)
        async with branch:
            branch.messages.add_message(Instruction(content=nasty))
            [response] = await branch.act({"function": "echo", "arguments": {"text": nasty}})
            assert response.output == nasty
        expected, branch_id = branch.messages, branch.id
    async with journals.new() as journal:
        again = await journal.history(branch_id)
        assert again == expected
        assert [m.content for m in again if isinstance(m, Instruction)] == [nasty]
        [call] = await journal.calls(branch_id)
        assert call.arguments == {"text": nasty}


async def test_messages_added_by_hand_are_journaled_on_flush_and_close(
    journals: JournalFactory,
) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        async with branch:
            branch.messages.add_message(Instruction(content="one"))
        branch_id = branch.id
    async with journals.new() as journal:
        [message] = (await journal.history(branch_id)).messages
        assert isinstance(message, Instruction) and message.content == "one"
        assert len(await journal.history(uuid.uuid4())) == 0


async def test_an_open_branch_is_returned_as_is(journals: JournalFactory) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        assert await journal.branch(branch.id) is branch
        async with branch:
            pass
        assert await journal.branch(branch.id) is not branch


# -- write-ahead -------------------------------------------------------------------------------


async def test_the_request_is_committed_before_the_tool_runs(journals: JournalFactory) -> None:
    seen: list[Any] = []
    async with journals.new() as journal:

        async def look(x: int) -> int:
            async with journals.new() as other:  # another reader: what is committed
                seen.extend(await other.calls(unfinished=True))
            return x

        branch = await journal.branch()
        branch.register_tools(Tool.from_function(look))
        [response] = await act_and_close(branch, {"function": "look", "arguments": {"x": 1}})
        assert response.output == 1
        [call] = seen
        assert (call.function, call.arguments, call.done, call.attempts) == (
            "look",
            {"x": 1},
            False,
            1,
        )
        [done] = await journal.calls()
        assert (done.done, done.outcome, done.attempts) == (True, "completed", 1)


async def test_concurrent_calls_share_commits(journals: JournalFactory) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        calls = [{"function": "add", "arguments": {"a": i, "b": 0}} for i in range(60)]
        responses = await act_and_close(branch, calls)
        assert [r.output for r in responses] == list(range(60))
        # 60 write-aheads and 60 outcomes share transactions (a database commit gathers
        # everything queued while the previous one ran; in memory a commit is instant)
        assert journal.commits < (60 if journals.kind == "memory" else 30), journal.commits
        assert len(await journal.calls()) == 60


async def test_denied_calls_are_journaled_in_the_history_without_a_call(
    journals: JournalFactory,
) -> None:
    async with journals.new() as journal:
        branch = await journal.branch(policy=PermissionPolicy.deny_all())
        branch.register_tools(add)
        [response] = await act_and_close(
            branch, {"function": "add", "arguments": {"a": 1, "b": 1}}
        )
        assert response.outcome is ActionOutcome.DENIED
        assert await journal.calls() == []
        history = await journal.history(branch.id)
        assert history.messages[-1].content.outcome is ActionOutcome.DENIED  # type: ignore[attr-defined]


# -- idempotency keys ----------------------------------------------------------------------------


async def test_every_call_has_a_key_in_its_context(journals: JournalFactory) -> None:
    keys: list[str | None] = []

    def charge(amount: int, ctx: CallContext) -> str:
        keys.append(ctx.idempotency_key)
        return "ok"

    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(charge, context_param="ctx"))
        await act_and_close(
            branch, {"function": "charge", "arguments": {"amount": 1}, "call_id": "call_1"}
        )
        assert keys == [f"{branch.id}/call_1"]
        [call] = await journal.calls()
        assert call.idempotency_key == keys[0]


async def test_a_completed_key_returns_the_recorded_response_without_running(
    journals: JournalFactory,
) -> None:
    runs: list[int] = []

    def transfer(transfer_id: str, amount: int) -> dict[str, Any]:
        runs.append(amount)
        return {"transfer": transfer_id, "amount": amount}

    tool = Tool.from_function(
        transfer, effect="keyed", idempotency_key=lambda args: args["transfer_id"]
    )
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(tool)
        [first] = await act_and_close(
            branch, {"function": "transfer", "arguments": {"transfer_id": "t1", "amount": 5}}
        )
    async with journals.new() as journal:  # after a restart, from another branch
        other = await journal.branch()
        other.register_tools(tool)
        [second] = await act_and_close(
            other, {"function": "transfer", "arguments": {"transfer_id": "t1", "amount": 5}}
        )
    assert runs == [5]
    assert second.outcome is ActionOutcome.COMPLETED
    assert second.output == first.output == {"transfer": "t1", "amount": 5}
    assert second.content.attempts == 0


async def test_a_key_reused_with_other_arguments_fails_naming_both_calls(
    journals: JournalFactory,
) -> None:
    runs: list[int] = []

    def transfer(transfer_id: str, amount: int) -> int:
        runs.append(amount)
        return amount

    tool = Tool.from_function(
        transfer, effect="keyed", idempotency_key=lambda args: args["transfer_id"]
    )
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(tool)
        async with branch:
            await branch.act(
                {
                    "function": "transfer",
                    "arguments": {"transfer_id": "t", "amount": 1},
                    "call_id": "call_a",
                }
            )
            [bad] = await branch.act(
                {
                    "function": "transfer",
                    "arguments": {"transfer_id": "t", "amount": 2},
                    "call_id": "call_b",
                }
            )
    assert runs == [1]
    assert bad.outcome is ActionOutcome.FAILED
    assert bad.error is not None and bad.error.type == "IdempotencyKeyConflict"
    assert "'call_a'" in bad.error.message and "'call_b'" in bad.error.message


async def test_a_key_in_flight_is_waited_for_and_runs_once(journals: JournalFactory) -> None:
    runs: list[int] = []
    release, waiting = trio.Event(), trio.Event()

    async def slow(order: int) -> int:
        runs.append(order)
        await release.wait()
        return order

    tool = Tool.from_function(slow, effect="keyed", idempotency_key=lambda args: "same")
    async with journals.new() as journal:
        wait_done = journal._engine.wait_done

        async def spy(key: str) -> Any:
            waiting.set()
            return await wait_done(key)

        journal._engine.wait_done = spy  # type: ignore[method-assign]
        branch = await journal.branch()
        branch.register_tools(tool)
        async with branch, trio.open_nursery() as nursery:
            results: list[Any] = []

            async def act() -> None:
                results.extend(await branch.act({"function": "slow", "arguments": {"order": 7}}))

            nursery.start_soon(act)
            nursery.start_soon(act)
            await waiting.wait()  # the second call waits for the first
            release.set()
    assert runs == [7]
    assert sorted(r.output for r in results) == [7, 7]


# -- recovery ------------------------------------------------------------------------------------


async def crashed_call(
    journals: JournalFactory, tool: Tool, arguments: dict[str, Any]
) -> tuple[uuid.UUID, str]:
    """Journal a call whose tool runs and the process "dies" before the outcome commit.

    The tool itself closes the journal, so nothing after its write-ahead reaches it.
    """
    journal = journals.new()
    await journal.open()
    original = tool.func_callable

    async def dying(**kwargs: Any) -> Any:
        await journal.aclose()
        return original(**kwargs)

    stand_in = Tool.from_function(
        dying,
        name=tool.name,
        schema=tool.schema,
        effect=tool.effect,
        idempotency_key=tool.idempotency_key,
    )
    branch = await journal.branch()
    branch.register_tools(stand_in)
    async with branch:
        with pytest.raises(NotDurableError):  # the outcome commit never happens
            await branch.act({"function": tool.name, "arguments": arguments, "call_id": "call_x"})
    return branch.id, "call_x"


@pytest.mark.parametrize("effect", ["pure", "idempotent", "keyed"])
async def test_recovery_reruns_safe_calls_counting_attempts(
    journals: JournalFactory, effect: str
) -> None:
    runs: list[int] = []

    def work(n: int) -> int:
        runs.append(n)
        return n * 10

    tool = Tool.from_function(work, effect=effect)  # type: ignore[arg-type]
    branch_id, call_id = await crashed_call(journals, tool, {"n": 4})
    assert runs == [4]
    async with journals.new() as journal:
        [pending] = await journal.calls(unfinished=True)
        assert (pending.call_id, pending.attempts, pending.effect) == (call_id, 1, effect)
        report = await journal.recover([tool])
        assert report.counts() == {"rerun": 1}
        [resolution] = report.resolutions
        assert (resolution.outcome, resolution.attempts) == (ActionOutcome.COMPLETED, 2)
        assert runs == [4, 4]
        history = await journal.history(branch_id)
        assert history.unanswered() == []
        [response] = history.responses()
        assert (response.output, response.content.attempts) == (40, 2)
        assert await journal.calls(unfinished=True) == []
        again = await journal.recover([tool])  # nothing left: recovery is idempotent
        assert again.resolutions == ()


async def test_recovery_never_reruns_an_unsafe_call(journals: JournalFactory) -> None:
    runs: list[int] = []

    def pay(n: int) -> int:
        runs.append(n)
        return n

    tool = Tool.from_function(pay)
    assert tool.effect == "unsafe"
    branch_id, _ = await crashed_call(journals, tool, {"n": 1})
    async with journals.new() as journal:
        report = await journal.recover([tool])
        assert report.counts() == {"interrupted": 1}
        history = await journal.history(branch_id)
        [response] = history.responses()
        assert response.outcome is ActionOutcome.INTERRUPTED
        assert response.error is not None and "may or may not" in response.error.message
        assert response.content.attempts == 1
    assert runs == [1]


@pytest.mark.parametrize(
    ("verdict", "action", "outcome", "runs_after"),
    [
        (Applied({"found": True}), "reconciled", ActionOutcome.COMPLETED, 1),
        (NotApplied(), "rerun", ActionOutcome.COMPLETED, 2),
        (ValueError("ledger down"), "interrupted", ActionOutcome.INTERRUPTED, 1),
    ],
)
async def test_a_reconcile_hook_finds_out_what_happened(
    journals: JournalFactory, verdict: Any, action: str, outcome: ActionOutcome, runs_after: int
) -> None:
    runs: list[int] = []
    asked: list[CallContext] = []

    def pay(n: int) -> dict[str, bool]:
        runs.append(n)
        return {"found": False}

    async def reconcile(context: CallContext) -> Any:
        asked.append(context)
        if isinstance(verdict, Exception):
            raise verdict
        return verdict

    tool = Tool.from_function(pay, reconcile=reconcile)
    branch_id, call_id = await crashed_call(journals, tool, {"n": 3})
    async with journals.new() as journal:
        report = await journal.recover([tool])
        [resolution] = report.resolutions
        assert (resolution.action, resolution.outcome) == (action, outcome)
        [context] = asked
        assert (context.call_id, dict(context.arguments)) == (call_id, {"n": 3})
        assert context.idempotency_key == f"{branch_id}/{call_id}"
        [response] = (await journal.history(branch_id)).responses()
        assert response.outcome is outcome
        if action == "reconciled":
            assert response.output == {"found": True}
        if action == "interrupted":
            assert response.error is not None and "ledger down" in response.error.message
    assert len(runs) == runs_after


async def test_requests_that_never_reached_the_write_ahead_did_not_run(
    journals: JournalFactory,
) -> None:
    """A request journaled (by another call's commit) whose own write-ahead never committed."""
    runs: list[str] = []

    def safe(tag: str) -> str:
        runs.append(tag)
        return tag

    def unsafe(tag: str) -> str:
        runs.append(tag)
        return tag

    tools = [Tool.from_function(safe, effect="pure"), Tool.from_function(unsafe)]
    async with journals.new() as journal:
        branch = await journal.branch()
        async with branch:
            for name in ("safe", "unsafe"):
                branch.messages.add_message(
                    __import__("lionexec").ActionRequest.create(name, {"tag": name})
                )
        branch_id = branch.id
    async with journals.new() as journal:
        report = await journal.recover(tools)
        actions = {r.function: (r.action, r.outcome) for r in report.resolutions}
        assert actions == {
            "safe": ("rerun", ActionOutcome.COMPLETED),
            "unsafe": ("not_started", ActionOutcome.CANCELLED),
        }
        assert (await journal.history(branch_id)).unanswered() == []
    assert runs == ["safe"]


async def test_recovery_without_tools_leaves_safe_calls_for_later(
    journals: JournalFactory,
) -> None:
    tool = Tool.from_function(add, effect="pure")
    await crashed_call(journals, tool, {"a": 1, "b": 2})
    async with journals.new() as journal:
        report = await journal.recover(None)
        assert report.counts() == {"left": 1}
        assert len(await journal.calls(unfinished=True)) == 1
        report = await journal.recover([tool])
        assert report.counts() == {"rerun": 1}


# -- lifecycle -----------------------------------------------------------------------------------


async def test_a_closed_journal_refuses_work_by_name(journals: JournalFactory) -> None:
    journal = journals.new()
    with pytest.raises(JournalError, match="not open"):
        await journal.calls()
    async with journal:
        pass
    with pytest.raises(JournalError, match="closed"):
        await journal.open()


async def test_public_async_functions_checkpoint(journals: JournalFactory) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        async with branch:
            pass
        for call in (
            journal.branch_ids,
            journal.calls,
            lambda: journal.history(branch.id),
            lambda: journal.branch(branch.id),
        ):
            with trio.testing.assert_checkpoints():
                await call()


async def test_the_journal_is_a_branch_sink() -> None:
    from lionexec.act import EvidenceSink
    from lionexec.journal import JournalSink, MemoryJournal

    async with MemoryJournal() as journal:
        branch = await journal.branch()
        [sink] = [s for s in branch.sinks if isinstance(s, JournalSink)]
        assert isinstance(sink, EvidenceSink)
        # the durable half of the contract (EvidenceSink's docs)
        assert sink.durable is True and sink.committed == 0
        assert callable(sink.known_call_ids) and callable(sink.expedite)
    assert Journal.__doc__


async def test_a_key_in_flight_elsewhere_is_waited_for(journals: JournalFactory) -> None:
    """Two journal objects on one database (two processes): the second call polls the key."""
    runs: list[str] = []
    release, started = trio.Event(), trio.Event()

    async def book(ref: str) -> str:
        runs.append(ref)
        started.set()
        await release.wait()
        return f"booked {ref}"

    tool = Tool.from_function(book, effect="keyed", idempotency_key=lambda args: args["ref"])
    async with journals.new() as first, journals.new() as second:
        one, two = await first.branch(), await second.branch()
        one.register_tools(tool)
        two.register_tools(tool)
        answers: dict[str, Any] = {}
        polled = trio.Event()
        wait_done = second._engine.wait_done

        async def spy(key: str) -> Any:
            polled.set()
            return await wait_done(key)

        second._engine.wait_done = spy  # type: ignore[method-assign]

        async def act(branch: Branch, who: str) -> None:
            [answers[who]] = await branch.act({"function": "book", "arguments": {"ref": "R1"}})

        async with one, two, trio.open_nursery() as nursery:
            nursery.start_soon(act, one, "one")
            await started.wait()
            nursery.start_soon(act, two, "two")
            await polled.wait()
            release.set()
    assert runs == ["R1"]
    assert answers["one"].output == answers["two"].output == "booked R1"
    assert answers["two"].content.attempts == 0


async def test_a_branch_that_cannot_be_written_fails_alone(journals: JournalFactory) -> None:
    runs: list[str] = []

    async def note(who: str) -> str:
        runs.append(who)
        return who

    async with journals.new() as journal:
        good, bad = await journal.branch(), await journal.branch()
        for branch in (good, bad):
            branch.register_tools(Tool.from_function(note))
        sink = bad.sinks[0]

        def broken(*args: Any) -> None:
            raise ValueError("this message cannot be written")

        sink._stage_messages = broken  # type: ignore[attr-defined]
        answers: dict[str, Any] = {}

        async def act(branch: Branch, who: str) -> None:
            try:
                [answers[who]] = await branch.act({"function": "note", "arguments": {"who": who}})
            except NotDurableError as exc:  # its outcome could not be committed either
                assert branch is bad
                [answers[who]] = exc.responses

        async with good, bad:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(act, good, "good")
                nursery.start_soon(act, bad, "bad")
            del sink._stage_messages  # mended: its history is committed when it closes
    assert runs == ["good"]  # the call whose request could not be committed never ran
    assert answers["good"].outcome is ActionOutcome.COMPLETED
    assert answers["bad"].outcome is ActionOutcome.FAILED
    assert "cannot be written" in answers["bad"].error.message
    async with journals.new() as journal:
        assert [c.arguments for c in await journal.calls()] == [{"who": "good"}]
        assert (await journal.history(bad.id)).responses()[0].outcome is ActionOutcome.FAILED


async def test_flush_commits_what_open_branches_recorded(journals: JournalFactory) -> None:
    async with journals.new() as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            await branch.act({"function": "add", "arguments": {"a": 1, "b": 1}})
            await journal.flush()
            async with journals.new() as reader:  # what another process would see now
                [call] = await reader.calls()
                assert (call.done, call.outcome) == (True, "completed")
                assert len(await reader.history(branch.id)) == 2


async def test_a_call_cancelled_at_the_write_ahead_never_runs_and_is_answered() -> None:
    runs: list[int] = []
    backend = GatedBackend()
    async with Journal(backend) as journal:
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(lambda x: runs.append(x), name="f"))
        async with branch:
            backend.armed = True
            scope = trio.CancelScope()

            async def call() -> None:
                with scope:
                    await branch.act({"function": "f", "arguments": {"x": 1}})

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await backend.waiting.wait()  # its request is being committed
                scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                assert branch.messages.responses() == []  # a commit ends whole...
                backend.gate.set()
            [response] = branch.messages.responses()  # ...then the cancellation lands
            assert response.outcome is ActionOutcome.CANCELLED
        assert runs == []
    async with Journal(backend) as journal:
        history = await journal.history(branch.id)
        assert history.unanswered() == []
        assert [c.outcome for c in await journal.calls()] == ["cancelled"]


async def test_two_writers_of_one_branch_are_refused_by_name(journals: JournalFactory) -> None:
    async with journals.new() as first, journals.new() as second:
        one = await first.branch()
        one.register_tools(add)
        async with one:
            await one.act({"function": "add", "arguments": {"a": 1, "b": 1}})
        two_a = await first.branch(one.id)
        two_b = await second.branch(one.id)  # the same branch, opened by a second writer
        for branch in (two_a, two_b):
            branch.register_tools(add)
        async with two_a:
            [ok] = await two_a.act({"function": "add", "arguments": {"a": 2, "b": 2}})
        answers = []
        with pytest.raises(BaseException) as closing:  # it cannot commit what it holds
            async with two_b:
                with pytest.raises(NotDurableError) as unheld:  # nor its outcome
                    await two_b.act({"function": "add", "arguments": {"a": 3, "b": 3}})
                answers += unheld.value.responses
        assert "another writer" in repr(closing.value) or "another writer" in str(
            getattr(closing.value, "exceptions", "")
        )
        [refused] = answers
        assert ok.output == 4
        assert refused.outcome is ActionOutcome.FAILED
        assert refused.error is not None and "another writer" in refused.error.message
    async with journals.new() as journal:  # the first writer's record is intact
        assert await journal.history(one.id) == two_a.messages
