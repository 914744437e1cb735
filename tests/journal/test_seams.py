"""The small seams the journal needs below it: Tool effect classes, idempotency keys in the
call context, and a sink's write-ahead reply honoured by the act transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from lionexec.act import Branch, EvidenceRecord, WriteAhead, WriteAheadReply
from lionexec.conversation import ActionOutcome, ActionResponseContent, ErrorInfo
from lionexec.errors import ConfigurationError
from lionexec.governance import CallContext
from lionexec.tools import Tool


def ping(x: int) -> int:
    return x


def test_effect_classes_default_to_unsafe_and_follow_idempotent() -> None:
    assert Tool.from_function(ping).effect == "unsafe"
    assert not Tool.from_function(ping).idempotent
    assert Tool.from_function(ping, idempotent=True).effect == "idempotent"
    for effect in ("pure", "idempotent", "keyed"):
        tool = Tool.from_function(ping, effect=effect)  # type: ignore[arg-type]
        assert (tool.effect, tool.idempotent) == (effect, True)  # safe to retry too
    assert Tool.from_function(ping, effect="unsafe").idempotent is False


def test_a_bad_effect_or_hook_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match=r"'sometimes'.*'ping'"):
        Tool.from_function(ping, effect="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="idempotency_key"):
        Tool.from_function(ping, idempotency_key="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reconcile"):
        Tool.from_function(ping, reconcile=3)  # type: ignore[arg-type]


async def test_the_key_is_in_the_context_without_a_journal() -> None:
    seen: list[str | None] = []

    def charge(order: str, ctx: CallContext) -> None:
        seen.append(ctx.idempotency_key)

    branch = Branch()
    branch.register_tools(
        [
            Tool.from_function(charge, context_param="ctx"),
            Tool.from_function(
                charge, name="keyed", context_param="ctx", idempotency_key=lambda a: a["order"]
            ),
        ]
    )
    await branch.act(
        [
            {"function": "charge", "arguments": {"order": "o1"}, "call_id": "call_1"},
            {"function": "keyed", "arguments": {"order": "o1"}},
        ]
    )
    assert sorted(seen, key=str) == [f"{branch.id}/call_1", "keyed:o1"]


async def test_a_key_that_is_not_a_string_makes_the_call_invalid() -> None:
    runs: list[int] = []
    branch = Branch()
    branch.register_tools(
        Tool.from_function(lambda x: runs.append(x), name="f", idempotency_key=lambda a: 7)
    )
    [response] = await branch.act({"function": "f", "arguments": {"x": 1}})
    assert response.outcome is ActionOutcome.INVALID
    assert response.error is not None and "idempotency_key" in response.error.message
    assert runs == []


class Replying:
    """A sink that answers every write-ahead with *reply*."""

    def __init__(self, reply: WriteAheadReply | None) -> None:
        self.reply = reply
        self.entries: list[WriteAhead] = []

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        self.entries.append(entry)
        return self.reply

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_a_recorded_reply_answers_the_call_without_running_it() -> None:
    runs: list[int] = []
    recorded = ActionResponseContent(function="f", output={"from": "journal"})
    sink = Replying(WriteAheadReply(recorded=recorded))
    branch = Branch(sinks=[sink])
    branch.register_tools(Tool.from_function(lambda x: runs.append(x), name="f"))
    async with branch:
        [response] = await branch.act({"function": "f", "arguments": {"x": 1}})
    assert runs == []
    assert (response.outcome, response.output, response.content.attempts) == (
        ActionOutcome.COMPLETED,
        {"from": "journal"},
        0,
    )
    assert len(branch.log) == 0  # nothing was invoked: no event-log record
    [entry] = sink.entries
    assert entry.context is not None and entry.context.idempotency_key is not None


async def test_a_recorded_failure_is_replayed_as_such() -> None:
    recorded = ActionResponseContent(
        function="f", error=ErrorInfo("Interrupted", "may or may not"), outcome="interrupted"
    )
    branch = Branch(sinks=[Replying(WriteAheadReply(recorded=recorded))])
    branch.register_tools(Tool.from_function(ping, name="f"))
    async with branch:
        [response] = await branch.act({"function": "f", "arguments": {"x": 1}})
    assert response.outcome is ActionOutcome.INTERRUPTED
    assert response.error == ErrorInfo("Interrupted", "may or may not")


async def test_prior_attempts_are_counted_in_the_response() -> None:
    runs: list[Any] = []
    branch = Branch(sinks=[Replying(WriteAheadReply(prior_attempts=2))])
    branch.register_tools(Tool.from_function(lambda x: runs.append(x), name="f"))
    async with branch:
        [response] = await branch.act({"function": "f", "arguments": {"x": 1}})
    assert runs == [1]
    assert response.content.attempts == 3
