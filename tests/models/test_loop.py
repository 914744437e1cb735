"""The loop: model turns, governed tool calls, consistent history, valid exports."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import anthropic.types
import httpx
import openai.types.chat
import pydantic
import pytest
import trio
import trio.testing

from lionexec.act import Branch
from lionexec.conversation import ActionRequest, ActionResponse, AssistantResponse, Instruction
from lionexec.errors import ConfigurationError
from lionexec.limits import RateLimiter
from lionexec.models import (
    Endpoint,
    LoopResult,
    Model,
    ProviderError,
    RateLimitedProcessor,
    TextDelta,
    ToolCallsProposed,
    ToolResult,
    TurnCompleted,
    run,
    run_stream,
)
from lionexec.models.testing import Fail, LocalProvider, Reply, Stall
from lionexec.testing import assert_consistent

OPENAI_MESSAGE = pydantic.TypeAdapter(openai.types.chat.ChatCompletionMessageParam)
ANTHROPIC_MESSAGE = pydantic.TypeAdapter(anthropic.types.MessageParam)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def new_branch(*tools: Callable[..., Any]) -> Branch:
    branch = Branch()
    branch.register_tools(list(tools) or [add])
    return branch


#: Models made by model_for, closed after each test (each holds a pooled client).
_OPEN: list[Model] = []


@pytest.fixture
async def provider(nursery: trio.Nursery) -> AsyncIterator[LocalProvider]:
    """The conftest's provider; the models made for it are closed after the test (an
    autouse async fixture would not run under pytest-trio)."""
    local = LocalProvider()
    await nursery.start(local.serve)
    try:
        yield local
    finally:
        with trio.CancelScope(shield=True):
            while _OPEN:
                await _OPEN.pop().aclose()


def model_for(provider: LocalProvider, **kwargs: Any) -> Model:
    assert provider.base_url is not None
    api = kwargs.pop("api", "chat")
    model = Model(endpoint=Endpoint(provider.base_url, api=api), name="local-model", **kwargs)
    _OPEN.append(model)
    return model


def assert_exports_validate(branch: Branch) -> None:
    messages = branch.messages.to_openai()
    for message in messages:
        OPENAI_MESSAGE.validate_python(message)
    exported = branch.messages.to_anthropic()
    for message in exported["messages"]:
        ANTHROPIC_MESSAGE.validate_python(message)


async def test_a_tool_turn_then_an_answer(provider: LocalProvider) -> None:
    provider.add(Reply(text="let me add", tool_calls=[("add", {"a": 2, "b": 3})]), Reply("5"))
    branch = new_branch()
    result = await run(branch, model_for(provider), "what is 2 + 3?", system="be brief")
    assert (result.text, result.stop_reason, result.turns) == ("5", "answered", 2)
    kinds = [type(m).__name__ for m in branch.messages]
    assert kinds == [
        "System",
        "Instruction",
        "AssistantResponse",
        "ActionRequest",
        "ActionResponse",
        "AssistantResponse",
    ]
    turn = branch.messages.messages[2]
    assert isinstance(turn, AssistantResponse) and turn.content == "let me add"
    request = branch.messages.requests()[0]
    assert turn.tool_calls == (request.id,)
    response = branch.messages.responses()[0]
    assert response.content.output == 5
    assert_consistent(branch)
    assert_exports_validate(branch)
    # The second request carried the assistant turn and the tool result, in that order.
    sent = provider.log.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["tool_calls"][0]["id"] == sent[3]["tool_call_id"] == request.call_id
    assert sent[3]["content"] == "5"
    assert provider.log.requests[0]["tools"][0]["function"]["name"] == "add"


async def test_hostile_tool_calls_are_answered_invalid_and_the_loop_goes_on(
    provider: LocalProvider,
) -> None:
    provider.add(
        Reply(
            tool_calls=[
                ("no_such_tool", {}),
                ("add", "{not json"),
                ("add", {"a": "two", "b": 3}),
                ("add", {"a": 1, "b": 1}),
            ]
        ),
        Reply("sorry"),
    )
    branch = new_branch()
    result = await run(branch, model_for(provider), "go")
    assert result.stop_reason == "answered"
    outcomes = [r.content.outcome.value for r in branch.messages.responses()]
    assert sorted(outcomes) == ["completed", "invalid", "invalid", "invalid"]
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_a_turn_names_every_call_it_proposed_the_unreadable_ones_too(
    provider: LocalProvider,
) -> None:
    provider.add(
        Reply(text="two", tool_calls=[("add", {"a": 1, "b": 2}), ("add", "{not json")]),
        Reply("done"),
    )
    branch = new_branch()
    await run(branch, model_for(provider), "go")
    turn = branch.messages.messages[1]
    assert isinstance(turn, AssistantResponse) and turn.content == "two"
    assert turn.tool_calls == tuple(r.id for r in branch.messages.requests())
    # One assistant turn carrying both calls, then both results: what the model sent.
    sent = provider.log.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["function"]["arguments"] for c in sent[1]["tool_calls"]] == [
        '{"a": 1, "b": 2}',
        "{not json",
    ]
    assert_consistent(branch)
    assert_exports_validate(branch)


class IdleSink:
    """An evidence sink; the branch below never serves it, so act() refuses to run."""

    async def write_ahead(self, entry: Any) -> None:
        return None

    async def write(self, records: Any) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def test_a_turn_act_refuses_is_not_recorded(provider: LocalProvider) -> None:
    provider.add(Reply(text="calling", tool_calls=[("add", {"a": 1, "b": 2})]))
    branch = Branch(sinks=[IdleSink()])
    branch.register_tools(add)
    with pytest.raises(ConfigurationError, match="not running"):
        await run(branch, model_for(provider), "go")
    # Only the instruction: no assistant turn naming requests that were never recorded.
    assert [type(m).__name__ for m in branch.messages] == ["Instruction"]
    assert_consistent(branch)


async def test_call_ids_a_model_reuses_are_replaced(provider: LocalProvider) -> None:
    # The local provider numbers call ids per response; force a clash with the history.
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply("done"))
    branch = new_branch()
    branch.messages.add_message(Instruction(content="earlier"))
    old = ActionRequest.create("add", {"a": 0, "b": 0}, call_id="call_1_0")
    await branch.act(old)
    await run(branch, model_for(provider), "again")
    ids = [r.call_id for r in branch.messages.requests()]
    assert len(set(ids)) == 2
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_a_model_reusing_a_call_id_the_journal_holds_gets_a_fresh_one(
    tmp_path: Any,
) -> None:
    """On a journaled branch that retain= trimmed, a model's reused call id (some send
    "call_0" every turn) is in the journal's history, not in memory: the loop gives the call
    a fresh id, as for one in memory (act() refused the turn, and run() raised)."""
    from lionexec.journal import SqliteJournal
    from lionexec.tools import Tool

    def work(n: int) -> int:
        """Work."""
        return n

    turns = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal turns
        turns += 1
        if turns % 2:  # every other turn a tool call, always with the id "call_0"
            call = {"id": "call_0", "type": "function"}
            call["function"] = {"name": "work", "arguments": '{"n": 1}'}  # type: ignore[assignment]
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "done"}, "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return httpx.Response(200, json={"id": f"r{turns}", "model": "m", "choices": [choice]})

    with trio.fail_after(30):
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            model = Model(endpoint=Endpoint("http://x/v1"), name="m", client=client)
            async with SqliteJournal(tmp_path / "j.db") as journal:
                branch = await journal.branch(retain=1)
                branch.register_tools(Tool.from_function(work, effect="pure"))
                async with branch:
                    for i in range(4):
                        await run(branch, model, f"go {i}")  # (it raised DuplicateCallError)
                history = await journal.history(branch.name)
    call_ids = [request.call_id for request in history.requests()]
    assert len(call_ids) == 4 and len(set(call_ids)) == 4  # one call per run, none reused
    assert call_ids[0] == "call_0"


async def test_max_turns_ends_with_every_request_answered(provider: LocalProvider) -> None:
    provider.default = Reply(tool_calls=[("add", {"a": 1, "b": 1})])
    branch = new_branch()
    result = await run(branch, model_for(provider), "loop forever", max_turns=3)
    assert (result.stop_reason, result.turns) == ("max_turns", 3)
    assert len(branch.messages.responses()) == 3
    assert len(provider.log.requests) == 3
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_a_parked_call_stops_the_loop(provider: LocalProvider) -> None:
    from lionexec.conversation import ActionOutcome
    from lionexec.governance import PermissionPolicy
    from lionexec.journal import MemoryJournal

    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    provider.add(
        Reply(tool_calls=[("refund", {"order": "O-1"}), ("add", {"a": 1, "b": 2})]),
        Reply("the model must not be asked again"),
    )
    policy = PermissionPolicy(mode="rules", allow={"add": ["*"]}, escalate={"refund": ["*"]})
    with trio.fail_after(30):
        async with MemoryJournal() as journal:
            branch = await journal.branch(policy=policy)
            branch.register_tools([add, refund])
            async with branch:
                result = await run(branch, model_for(provider), "refund O-1", max_turns=5)
            [pending] = await journal.approvals()
    assert (result.stop_reason, result.turns) == ("awaiting_approval", 1)
    assert len(provider.log.requests) == 1
    [waiting] = branch.messages.unanswered()
    assert (waiting.function, pending.function) == ("refund", "refund")
    [answered] = branch.messages.responses()
    assert (answered.function, answered.outcome) == ("add", ActionOutcome.COMPLETED)


@pytest.mark.parametrize("max_turns", [0, -1, True, 1.5])
async def test_bad_max_turns(provider: LocalProvider, max_turns: Any) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        await run(new_branch(), model_for(provider), "x", max_turns=max_turns)


async def test_length_stop_reason(provider: LocalProvider) -> None:
    provider.add(Reply("trunc", finish_reason="length"))
    result = await run(new_branch(), model_for(provider), "x")
    assert result.stop_reason == "length"


async def test_a_failed_model_call_raises_its_named_error_and_records_nothing(
    provider: LocalProvider,
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 1})]), Fail(500, "down"))
    branch = new_branch()
    with pytest.raises(ProviderError, match="down") as info:
        await run(branch, model_for(provider), "x")
    assert info.value.status_code == 500
    assert len(branch.messages) == 4  # instruction, turn, request, response
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_cancelled_while_the_model_answers(provider: LocalProvider) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 1})]), Stall(Reply("slow")))
    branch = new_branch()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, branch, model_for(provider), "x")
            await provider.wait_for(lambda log: log.stalled == 1)
            scope.cancel()
    assert len(branch.messages) == 4
    assert_consistent(branch)
    assert_exports_validate(branch)
    with trio.fail_after(5):
        await provider.wait_for(lambda log: log.disconnects == 1)


async def test_cancelled_while_tools_run(provider: LocalProvider) -> None:
    started = trio.Event()

    async def slow(x: int) -> int:
        """Never finishes."""
        started.set()
        await trio.sleep_forever()
        return x

    provider.add(Reply("working", tool_calls=[("slow", {"x": 1}), ("add", {"a": 1, "b": 2})]))
    branch = new_branch(slow, add)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, branch, model_for(provider), "x")
            await started.wait()
            scope.cancel()
    outcomes = {r.content.function: r.content.outcome.value for r in branch.messages.responses()}
    assert outcomes["slow"] == "cancelled"
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_run_stream_yields_deltas_and_call_progress(provider: LocalProvider) -> None:
    provider.add(
        Reply("adding now", tool_calls=[("add", {"a": 4, "b": 5})], chunk_size=3),
        Reply("the sum is 9", chunk_size=4),
    )
    branch = new_branch()
    events = []
    async for event in run_stream(branch, model_for(provider), "4 + 5?"):
        events.append(event)
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "adding nowthe sum is 9"
    proposed = [e for e in events if isinstance(e, ToolCallsProposed)]
    assert proposed[0].calls[0]["function"]["name"] == "add"
    results = [e.response for e in events if isinstance(e, ToolResult)]
    assert isinstance(results[0], ActionResponse) and results[0].content.output == 9
    assert sum(isinstance(e, TurnCompleted) for e in events) == 2
    final = events[-1]
    assert isinstance(final, LoopResult) and final.text == "the sum is 9"
    assert all(r.get("stream") for r in provider.log.requests)
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_closing_the_stream_early_leaves_the_history_consistent(
    provider: LocalProvider,
) -> None:
    provider.add(Reply("a", tool_calls=[("add", {"a": 4, "b": 5})]), Reply("b"))
    branch = new_branch()
    stream = run_stream(branch, model_for(provider), "x")
    async for event in stream:
        if isinstance(event, ToolResult):
            break
    await stream.aclose()
    assert_consistent(branch)
    assert_exports_validate(branch)


async def test_the_loop_through_a_rate_limited_processor(provider: LocalProvider) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply("3"))
    processor = RateLimitedProcessor(RateLimiter(requests=100, period=1.0, tokens=100_000))
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        branch = new_branch()
        result = await run(branch, model_for(provider, processor=processor), "1 + 2?")
        processor.stop()
    assert result.text == "3"
    stats = processor.statistics()
    assert stats.completed == 2 and stats.limits.granted == 2
    assert stats.limits.tokens_charged == 2 * 17  # estimates corrected to reported usage
    assert_consistent(branch)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_loop_on_the_anthropic_api(provider: LocalProvider, stream: bool) -> None:
    provider.add(Reply("hm", tool_calls=[("add", {"a": 1, "b": 2}), ("add", "[1]")]), Reply("3"))
    branch = new_branch()
    model = model_for(provider, api="anthropic")
    if stream:
        async for event in run_stream(branch, model, "1 + 2?", system="sys"):
            result = event
    else:
        result = await run(branch, model, "1 + 2?", system="sys")
    assert isinstance(result, LoopResult) and result.text == "3"
    second = provider.log.requests[1]
    assert second["system"] == "sys"
    roles = [m["role"] for m in second["messages"]]
    # One assistant turn with both calls (the unreadable one too), then both results.
    assert roles == ["user", "assistant", "user"]
    assert [b["type"] for b in second["messages"][1]["content"]] == [
        "text",
        "tool_use",
        "tool_use",
    ]
    outcomes = sorted(r.content.outcome.value for r in branch.messages.responses())
    assert outcomes == ["completed", "invalid"]
    for message in second["messages"]:
        ANTHROPIC_MESSAGE.validate_python(message)
    assert_consistent(branch)


async def test_the_loop_on_the_responses_api(provider: LocalProvider) -> None:
    provider.add(Reply("hm", tool_calls=[("add", {"a": 1, "b": 2})]), Reply("3"))
    branch = new_branch()
    result = await run(branch, model_for(provider, api="responses"), "1 + 2?")
    assert result.text == "3"
    items = provider.log.requests[1]["input"]
    assert [i.get("type", i.get("role")) for i in items] == [
        "user",
        "assistant",
        "function_call",
        "function_call_output",
    ]
    assert items[2]["call_id"] == items[3]["call_id"]
    assert_consistent(branch)


async def test_run_is_a_checkpoint_on_its_error_path(provider: LocalProvider) -> None:
    with trio.testing.assert_checkpoints(), pytest.raises(ValueError):
        await run(new_branch(), model_for(provider), "x", max_turns=0)


async def test_model_complete_raises_the_captured_error(provider: LocalProvider) -> None:
    provider.add(Fail(429, "busy", retry_after=3))
    with trio.testing.assert_checkpoints(), pytest.raises(ProviderError) as info:
        await model_for(provider).complete([{"role": "user", "content": "x"}])
    assert info.value.retry_after == 3.0


@pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning")
async def test_closing_the_stream_mid_text_closes_the_model_call(provider: LocalProvider) -> None:
    provider.add(Stall(Reply("x" * 64, chunk_size=4), after_chunks=3))
    branch = new_branch()
    async with aclosing(run_stream(branch, model_for(provider), "x")) as events:
        async for event in events:
            assert isinstance(event, TextDelta)
            break
    with trio.fail_after(5):
        await provider.wait_for(lambda log: log.disconnects == 1)
    assert_consistent(branch)
