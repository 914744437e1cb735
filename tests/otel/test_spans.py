"""OpenTelemetry spans of tool calls and model calls, checked with the SDK's in-memory exporter.

Real components: the OpenTelemetry SDK (a tracer provider, a simple span processor, the
in-memory exporter), a real branch feeding the sink through its evidence seam, and the local
scripted provider on 127.0.0.1 for model calls.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from lionexec.act import AlcallParams, Branch
from lionexec.governance import PermissionPolicy
from lionexec.models import Endpoint, Model, ProviderError, run
from lionexec.models.testing import Fail, LocalProvider, Reply
from lionexec.otel import OtelSink

pytestmark = pytest.mark.timeout(30)


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def fail(message: str = "kaput") -> None:
    """Always raise."""
    raise RuntimeError(message)


async def slow(seconds: float = 10.0) -> str:
    """Sleep on trio's clock, then answer."""
    await trio.sleep(seconds)
    return "late"


class Traced:
    """A tracer provider exporting to memory, and a sink tracing with it."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.sink = OtelSink(tracer_provider=self.provider)
        self.tracer = self.provider.get_tracer("the-application")

    def spans(self, name_prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(name_prefix)]

    def branch(self, **kwargs: Any) -> Branch:
        branch = Branch(sinks=[self.sink], **kwargs)
        branch.register_tools([add, fail, slow])
        return branch


@pytest.fixture
def traced() -> Traced:
    return Traced()


def call(function: str, **arguments: Any) -> dict[str, Any]:
    return {"function": function, "arguments": arguments}


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_completed_call_is_an_execute_tool_span(traced: Traced) -> None:
    async with traced.branch() as branch:
        [response] = await branch.act(call("add", a=2, b=3))
    [span] = traced.spans()
    request = branch.messages.requests()[0]
    assert span.name == "execute_tool add"
    assert span.kind is SpanKind.INTERNAL
    assert attrs_of(span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": request.call_id,
        "gen_ai.tool.type": "function",
        "lionexec.call.status": "completed",
        "lionexec.call.attempts": 1,
        "lionexec.event.status": "completed",
        "lionexec.branch.id": branch.name,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert span.start_time == int(request.created_at * 1e9)
    assert span.end_time == int(response.created_at * 1e9)
    assert span.parent is None  # nothing was current in the caller


async def test_a_failed_call_is_an_error_with_the_exception_type(traced: Traced) -> None:
    async with traced.branch() as branch:
        await branch.act(call("fail", message="disk on fire"))
    [span] = traced.spans()
    assert span.name == "execute_tool fail"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "disk on fire"
    assert attrs_of(span)["error.type"] == "RuntimeError"
    assert attrs_of(span)["lionexec.call.status"] == "failed"


async def test_a_denied_call_is_an_error_typed_denied(traced: Traced) -> None:
    policy = PermissionPolicy(mode="rules", deny={"add": ["*"]})
    async with traced.branch(policy=policy) as branch:
        with traced.tracer.start_as_current_span("handler") as handler:
            [response] = await branch.act(call("add", a=1, b=1))
    assert response.content.outcome == "denied"
    [span] = traced.spans("execute_tool")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs_of(span)["error.type"] == "denied"
    assert attrs_of(span)["lionexec.call.status"] == "denied"
    assert attrs_of(span)["lionexec.call.attempts"] == 0
    # never invoked, so no write-ahead: still nested under the caller's span
    assert span.parent is not None
    assert span.parent.span_id == handler.get_span_context().span_id


async def test_an_invalid_call_is_an_error_typed_invalid(traced: Traced) -> None:
    async with traced.branch() as branch:
        await branch.act([call("no_such_tool"), call("add", a="two", b=3)])
    spans = sorted(traced.spans(), key=lambda s: s.name)
    assert [s.name for s in spans] == ["execute_tool add", "execute_tool no_such_tool"]
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert attrs_of(span)["error.type"] == "invalid"
        assert attrs_of(span)["lionexec.event.status"] == "aborted"


async def test_a_timed_out_call_is_an_error_typed_timed_out(
    traced: Traced, autojump_clock: trio.abc.Clock
) -> None:
    async with traced.branch() as branch:
        await branch.act(call("slow", seconds=5), call_params=AlcallParams(timeout=2))
    [span] = traced.spans()
    assert span.status.status_code is StatusCode.ERROR
    assert attrs_of(span)["error.type"] == "timed_out"
    assert attrs_of(span)["lionexec.call.status"] == "timed_out"
    assert "2s" in (span.status.description or "")


async def test_a_batch_cancelled_from_outside_still_ends_its_spans(
    traced: Traced, autojump_clock: trio.abc.Clock
) -> None:
    async with traced.branch() as branch:
        with traced.tracer.start_as_current_span("handler") as handler:
            with trio.move_on_after(1) as scope:
                await branch.act([call("slow"), call("slow"), call("add", a=1, b=2)])
        assert scope.cancelled_caught
    spans = traced.spans("execute_tool")
    assert sorted(s.name for s in spans) == ["execute_tool add", *["execute_tool slow"] * 2]
    by_status = sorted(attrs_of(s)["lionexec.call.status"] for s in spans)
    assert by_status == ["cancelled", "cancelled", "completed"]
    for span in spans:
        assert span.end_time is not None
        assert span.parent is not None
        assert span.parent.span_id == handler.get_span_context().span_id
        if attrs_of(span)["lionexec.call.status"] == "cancelled":
            assert span.status.status_code is StatusCode.ERROR
            assert attrs_of(span)["error.type"] == "cancelled"


async def test_a_concurrent_batch_nests_under_each_callers_span(traced: Traced) -> None:
    async with traced.branch() as branch:

        async def handle(name: str, a: int) -> None:
            with traced.tracer.start_as_current_span(name):
                await branch.act([call("add", a=a, b=1), call("add", a=a, b=2)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(handle, "first", 1)
            nursery.start_soon(handle, "second", 10)
    handlers = {s.name: s for s in traced.spans() if not s.name.startswith("execute_tool")}
    assert set(handlers) == {"first", "second"}
    tools = traced.spans("execute_tool")
    assert len(tools) == 4
    children: dict[str, list[int]] = {"first": [], "second": []}
    for span in tools:
        assert span.parent is not None
        [name] = [n for n, h in handlers.items() if h.context.span_id == span.parent.span_id]
        assert span.context.trace_id == handlers[name].context.trace_id
        children[name].append(span.context.span_id)
    assert {k: len(v) for k, v in children.items()} == {"first": 2, "second": 2}


async def test_a_sink_shared_by_two_branches_traces_both(traced: Traced) -> None:
    async with traced.branch() as one, traced.branch() as two:
        await one.act(call("add", a=1, b=1))
        await two.act(call("add", a=2, b=2))
    traced_ids = sorted(attrs_of(s)["lionexec.branch.id"] for s in traced.spans())
    assert traced_ids == sorted([one.name, two.name])


async def test_hostile_names_are_cut_in_span_names_and_attributes(traced: Traced) -> None:
    name = "x" * 5000
    async with traced.branch() as branch:
        await branch.act(call(name))
    [span] = traced.spans()
    assert len(span.name) < 200
    assert len(attrs_of(span)["gen_ai.tool.name"]) <= 1024


# -- model calls ----------------------------------------------------------------------------------


@pytest.fixture
async def provider(nursery: trio.Nursery) -> LocalProvider:
    local = LocalProvider()
    await nursery.start(local.serve)
    return local


@pytest.fixture
async def models() -> AsyncIterator[list[Model]]:
    """Models a test opened, closed after it (each pools one HTTP client)."""
    opened: list[Model] = []
    yield opened
    for model in opened:
        await model.aclose()


def model_for(provider: LocalProvider, sink: OtelSink, api: Any = "chat") -> Model:
    assert provider.base_url is not None
    return Model(
        endpoint=Endpoint(provider.base_url, api=api),
        name="local-model",
        observers=[sink.observe_model_call],
    )


async def test_a_model_call_is_a_chat_span_with_usage(
    traced: Traced, provider: LocalProvider, models: list[Model]
) -> None:
    provider.add(Reply(text="hi", usage=(21, 7)))
    model = model_for(provider, traced.sink)
    models.append(model)
    with traced.tracer.start_as_current_span("handler") as handler:
        response = await model.complete([{"role": "user", "content": "hello"}])
    await traced.sink.flush()
    [span] = traced.spans("chat")
    assert span.name == "chat local-model"
    assert span.kind is SpanKind.CLIENT
    attributes = attrs_of(span)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "local-model"
    assert attributes["gen_ai.usage.input_tokens"] == 21
    assert attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["lionexec.model_call.status"] == "completed"
    assert response.usage is not None and response.usage.input_tokens == 21
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is not None
    assert span.parent.span_id == handler.get_span_context().span_id


async def test_an_anthropic_model_call_names_its_provider(
    traced: Traced, provider: LocalProvider, models: list[Model]
) -> None:
    provider.add(Reply(text="hi", usage=(3, 4)))
    model = model_for(provider, traced.sink, api="anthropic")
    models.append(model)
    await model.complete([{"role": "user", "content": "hello"}])
    await traced.sink.flush()
    [span] = traced.spans("chat")
    assert attrs_of(span)["gen_ai.provider.name"] == "anthropic"
    assert attrs_of(span)["gen_ai.usage.output_tokens"] == 4


async def test_a_failed_model_call_is_an_error_span(
    traced: Traced, provider: LocalProvider, models: list[Model]
) -> None:
    provider.add(Fail(status=500, message="overloaded"))
    model = model_for(provider, traced.sink)
    models.append(model)
    with pytest.raises(ProviderError):
        await model.complete([{"role": "user", "content": "hello"}])
    await traced.sink.flush()
    [span] = traced.spans("chat")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs_of(span)["error.type"] == "ProviderError"
    assert attrs_of(span)["lionexec.model_call.status"] == "failed"


async def test_the_loop_traces_model_turns_and_tool_calls_under_the_caller(
    traced: Traced, provider: LocalProvider, models: list[Model]
) -> None:
    provider.add(Reply(tool_calls=[("add", {"a": 2, "b": 3})]), Reply(text="5"))
    model = model_for(provider, traced.sink)
    models.append(model)
    async with traced.branch() as branch:
        with traced.tracer.start_as_current_span("agent") as agent:
            result = await run(branch, model, "what is 2 + 3?")
    await traced.sink.flush()
    assert result.text == "5"
    names = sorted(s.name for s in traced.spans() if s.name != "agent")
    assert names == ["chat local-model", "chat local-model", "execute_tool add"]
    for span in traced.spans():
        if span.name != "agent":
            assert span.parent is not None
            assert span.parent.span_id == agent.get_span_context().span_id


async def test_a_streamed_model_turn_is_traced(
    traced: Traced, provider: LocalProvider, models: list[Model]
) -> None:
    from contextlib import aclosing

    from lionexec.models import run_stream

    provider.add(Reply(text="streamed answer", usage=(5, 6)))
    model = model_for(provider, traced.sink)
    models.append(model)
    branch = Branch()
    async with aclosing(run_stream(branch, model, "hi")) as events:
        async for _ in events:
            pass
    await traced.sink.flush()
    [span] = traced.spans("chat")
    assert attrs_of(span)["gen_ai.usage.input_tokens"] == 5
    assert attrs_of(span)["lionexec.model_call.status"] == "completed"


async def test_an_observer_that_raises_changes_nothing(
    provider: LocalProvider, caplog: pytest.LogCaptureFixture, models: list[Model]
) -> None:
    def broken(call: Any, context: Any) -> None:
        raise ValueError("observer bug")

    provider.add(Reply(text="fine"))
    assert provider.base_url is not None
    model = Model(endpoint=Endpoint(provider.base_url), name="m", observers=[broken])
    models.append(model)
    response = await model.complete([{"role": "user", "content": "hello"}])
    assert response.text == "fine"
    assert "observer bug" in caplog.text


def test_a_model_refuses_an_observer_that_is_not_callable() -> None:
    from lionexec.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="observer must be callable"):
        Model(endpoint=Endpoint("http://127.0.0.1:1"), name="m", observers=["nope"])  # type: ignore[list-item]


def test_without_the_extra_the_import_names_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import lionexec.otel\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "pip install 'lionexec[otel]'" in out
