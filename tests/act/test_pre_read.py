"""``Branch._act_read``: act of a call its caller read already (the server reads a request's
calls with ``read_proposal`` before it creates the conversation). It must refuse, record and
answer exactly as ``act([envelope])`` does, hostile input included.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import trio
import trio.testing

from lionexec import ActionOutcome, Branch
from lionexec.act import read_proposal
from lionexec.act._envelope import MAX_ARGUMENT_CHARS
from lionexec.act.sinks import JsonlSink
from lionexec.errors import ConfigurationError, DuplicateCallError, NotInTrioError
from lionexec.testing import assert_consistent

pytestmark = pytest.mark.timeout(30)


async def echo(key: Any = None) -> Any:
    """Echo.

    Args:
        key: what to echo.
    """
    return {"key": key}


def branch() -> Branch:
    b = Branch()
    b.register_tools([echo])
    return b


def chat(arguments: object, call_id: str | None = "c1") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "echo", "arguments": arguments},
    }


def deep(levels: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return {"key": value}


ENVELOPES = {
    "fine": chat({"key": "x"}),
    "fine-text": chat('{"key": "x"}'),
    "plain": {"function": "echo", "arguments": {"key": 2}, "call_id": "c1"},
    "anthropic": {"type": "tool_use", "id": "c1", "name": "echo", "input": {"key": 3}},
    "nan": chat({"key": math.nan}),
    "infinity-text": chat('{"key": Infinity}'),
    "deep": chat(deep(100)),
    "deep-text": chat(json.dumps(deep(100))),
    "huge": chat('{"key": "' + "x" * MAX_ARGUMENT_CHARS + '"}'),
    "huge-int": chat({"key": 2**20_000}),
    "repeated-name": chat('{"key": 1, "key": 2}'),
    "lone-surrogate": chat({"key": "\ud800"}),
    "not-json": chat('{"key": '),
    "not-an-object": chat("[1, 2]"),
    "unknown-tool": {"function": "nope", "arguments": {}, "call_id": "c1"},
    "bad-argument": chat({"key": 1, "other": 2}),
}


def recorded(b: Branch) -> list[tuple[Any, ...]]:
    """What the history says of each call (ids and times aside)."""
    out = []
    for request in b.messages.requests():
        response = b.messages.response_for(request)
        assert response is not None
        content = response.content
        error = None if content.error is None else (content.error.type, content.error.message)
        out.append(
            (
                request.content.call_id,
                request.content.function,
                request.content.arguments,
                request.content.raw_arguments,
                content.outcome,
                json.dumps(content.output),
                error,
            )
        )
    return out


@pytest.mark.parametrize("name", list(ENVELOPES))
async def test_a_pre_read_call_is_recorded_and_answered_as_act_records_it(name: str) -> None:
    envelope = ENVELOPES[name]
    by_act, pre_read = branch(), branch()
    [expected] = await by_act.act([envelope])
    [response] = await pre_read._act_read(envelope, read_proposal(envelope), None)
    assert recorded(pre_read) == recorded(by_act)
    assert response.content.outcome is expected.content.outcome
    if name.startswith(("nan", "infinity", "deep", "huge", "repeated", "lone", "not-")):
        assert response.content.outcome is ActionOutcome.INVALID  # (refused, as act does)
    assert_consistent(pre_read)


async def test_a_call_id_already_recorded_is_refused_as_act_refuses_it() -> None:
    envelope = ENVELOPES["fine"]
    b = branch()
    await b.act([envelope])
    with pytest.raises(DuplicateCallError) as by_act:
        await b.act([envelope])
    with pytest.raises(DuplicateCallError) as pre_read:
        await b._act_read(envelope, read_proposal(envelope), None)
    assert str(pre_read.value) == str(by_act.value)
    assert len(b.messages) == 2  # nothing more recorded


async def test_a_branch_whose_sinks_are_not_running_refuses_a_pre_read_call(
    tmp_path: Any,
) -> None:
    envelope = ENVELOPES["fine"]
    b = Branch(sinks=[JsonlSink(tmp_path / "log.jsonl", dumps=str)])
    b.register_tools([echo])
    with pytest.raises(ConfigurationError) as by_act:
        await b.act([envelope])
    with pytest.raises(ConfigurationError) as pre_read:
        await b._act_read(envelope, read_proposal(envelope), None)
    assert str(pre_read.value) == str(by_act.value)
    assert len(b.messages) == 0


def test_a_pre_read_call_outside_trio_is_refused() -> None:
    envelope = ENVELOPES["fine"]
    b = branch()
    with pytest.raises(NotInTrioError):
        b._act_read(envelope, read_proposal(envelope), None)
    assert len(b.messages) == 0


async def test_an_envelope_act_reads_as_a_turn_is_left_to_act() -> None:
    # a Responses ``message`` item that also has function/arguments keys: read_proposal reads
    # a call from it, act reads a turn (with no call); the pre-read path must do as act does
    envelope = {"type": "message", "function": "echo", "arguments": {}, "content": []}
    by_act, pre_read = branch(), branch()
    assert await by_act.act([envelope]) == []
    assert await pre_read._act_read(envelope, read_proposal(envelope), None) == []
    assert [m.kind for m in pre_read.messages] == [m.kind for m in by_act.messages]


async def test_a_pre_read_call_waits_for_a_token_of_the_limiter() -> None:
    limiter = trio.CapacityLimiter(1)
    envelope = ENVELOPES["fine"]
    b = branch()
    release = trio.Event()

    async def hold(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with limiter:
            task_status.started()
            await release.wait()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(hold)  # the only token is taken: the call waits for it
            nursery.start_soon(b._act_read, envelope, read_proposal(envelope), limiter)
            await trio.testing.wait_all_tasks_blocked()
            assert b.messages.responses() == []  # requested, not run
            release.set()
    [response] = b.messages.responses()
    assert response.content.outcome is ActionOutcome.COMPLETED
