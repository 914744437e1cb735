"""One plain call: ``act()`` runs it without a batch, with the batch path's checks and records.

A plain ``dict`` (or a list of one) that is not an assistant turn is read on its own
(``read_plain_call``) and run without the batch machinery; everything else is read as a batch.
Both must read and record the same things.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from lionexec import ActionOutcome, Branch, HookPoint, SessionObserver
from lionexec.act import read_batch
from lionexec.act._envelope import read_plain_call
from lionexec.act._results import recorded_result
from lionexec.conversation import ActionRequest
from lionexec.errors import DuplicateCallError
from lionexec.testing import assert_consistent
from lionexec.tools import FunctionCalling

pytestmark = pytest.mark.timeout(30)


async def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: one.
        b: two.
    """
    return a + b


def branch(**kwargs: Any) -> Branch:
    b = Branch(**kwargs)
    b.register_tools([add])
    return b


PLAIN = {"function": "add", "arguments": {"a": 1, "b": 2}, "call_id": "c1"}
OPENAI_ITEM = {
    "id": "c1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
}


@pytest.mark.parametrize(
    "envelope",
    [PLAIN, [PLAIN], OPENAI_ITEM, [OPENAI_ITEM], (PLAIN,)],
    ids=["dict", "list of one", "openai item", "list of one openai item", "tuple"],
)
def test_one_plain_call_is_read_as_the_batch_reader_reads_it(envelope: object) -> None:
    batch = read_batch(envelope)
    assert batch.turn is None
    [expected] = batch.proposals
    proposal = read_plain_call(envelope)
    if type(envelope) is tuple:  # (a tuple is read as a batch only)
        assert proposal is None
        return
    assert proposal == expected
    assert proposal.arguments == {"a": 1, "b": 2}
    assert proposal.arguments is not PLAIN["arguments"]  # the reader's own copy


@pytest.mark.parametrize(
    "envelope",
    [
        [PLAIN, {**PLAIN, "call_id": "c2"}],
        [],
        {"role": "assistant", "content": "hi", "tool_calls": [OPENAI_ITEM]},
        {"object": "chat.completion", "choices": [{"message": {"role": "assistant"}}]},
        [{"type": "message", "content": []}, {**OPENAI_ITEM, "type": "function_call"}],
        ActionRequest.create("add", {"a": 1, "b": 2}),
    ],
    ids=["two calls", "no call", "assistant message", "chat completion", "responses", "request"],
)
def test_batches_and_turns_are_left_to_the_batch_reader(envelope: object) -> None:
    assert read_plain_call(envelope) is None


def test_a_dict_that_is_no_call_is_refused_by_both_readers() -> None:
    with pytest.raises(ValueError, match="cannot read a tool call") as one:
        read_plain_call({"nothing": 1})
    with pytest.raises(ValueError, match="cannot read a tool call") as batch:
        read_batch([{"nothing": 1}])
    assert str(one.value) == str(batch.value)


async def test_a_reused_call_id_is_refused_before_anything_is_recorded() -> None:
    b = branch()
    await b.act(PLAIN)
    recorded = len(b.messages)
    for again in (PLAIN, [PLAIN]):
        with pytest.raises(DuplicateCallError, match="'c1' is already in this history") as exc:
            await b.act(again)
        assert exc.value.call_id == "c1"
    assert len(b.messages) == recorded
    assert b.statistics().in_flight == 0


async def test_a_cancelled_one_call_act_is_recorded_and_leaves_nothing_in_flight() -> None:
    started = trio.Event()

    async def wait() -> None:
        started.set()
        await trio.sleep_forever()

    b = branch()
    b.register_tools([wait])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.act, {"function": "wait", "arguments": {}})
        await started.wait()
        nursery.cancel_scope.cancel()
    [response] = [m for m in b.messages if m.kind == "action_response"]
    assert response.outcome is ActionOutcome.CANCELLED
    assert b.statistics().in_flight == 0
    assert_consistent(b)


async def test_one_call_acts_are_trimmed_to_retain() -> None:
    b = branch(retain=2)
    for index in range(10):
        [response] = await b.act({"function": "add", "arguments": {"a": index, "b": 1}})
        assert response.output == index + 1
        assert b.messages.calls <= 3  # trimmed once 10 % (at least one call) over
    assert len(b.log) == b.messages.calls
    assert_consistent(b)


async def test_an_observer_that_must_see_the_event_now_is_told_after_a_sync_post_hook() -> None:
    seen: list[str] = []
    observer = SessionObserver()
    observer.subscribe(FunctionCalling, lambda event: seen.append(f"observer {event.function}"))
    b = branch(observer=observer)
    b.hooks.on(HookPoint.TOOL_POST, lambda **kwargs: seen.append(f"post {kwargs['result']}"))
    await b.act(PLAIN)
    assert seen == ["post 3", "observer add"]
    [event] = observer.by_type(FunctionCalling)
    assert event.execution.response == 3
    assert b.log[0].event is not event  # the observer's is a copy


async def test_an_observer_nothing_reads_keeps_the_event_it_is_shown() -> None:
    observer = SessionObserver()
    b = branch(observer=observer)
    await b.act(PLAIN)
    [event] = observer.by_type(FunctionCalling)
    assert event.execution.response == 3
    assert event is not b.log[0].event  # copied when read


@pytest.mark.parametrize("value", ["text", True, None, 7, -(2**100)])
def test_a_usual_result_is_recorded_as_it_is(value: object) -> None:
    assert recorded_result(value) == (value, None)


def test_a_result_is_copied_for_the_record_and_checked() -> None:
    value = {"items": [1, 2]}
    copied, problem = recorded_result(value)
    assert problem is None
    assert copied == value
    assert copied is not value and copied["items"] is not value["items"]
    assert recorded_result({1, 2})[1] == "a set"
    huge, problem = recorded_result(10**5000)
    assert huge == 10**5000
    assert problem is not None and "int" in problem
