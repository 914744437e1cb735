"""FunctionCalling: one tool call as a failure-capturing event on trio, under the sync policy
(sync callables in worker threads unless inline; returned awaitables awaited).

Thread tests run on the real clock (an autojump clock would jump past a guard while a worker
thread runs); they never sleep, and every wait is bounded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from lionexec.engine import EventStatus
from lionexec.errors import ValidationError
from lionexec.serialization import converter
from lionexec.tools import FunctionCalling, Tool, current_tool_limiter

GUARD = 10  # seconds; only a failing test ever waits this long


def call(func: Callable[..., Any], arguments: Any = None, **tool_options: Any) -> FunctionCalling:
    name = tool_options.pop("name", None) or getattr(func, "__name__", "f")
    if name == "<lambda>":
        name = "f"
    return FunctionCalling.create(
        Tool.from_function(func, name=name, **tool_options), arguments or {}
    )


class Boom(Exception):
    pass


# -- construction ---------------------------------------------------------------------------


@attrs.define
class Query:
    text: str
    limit: int = 3


@dataclasses.dataclass
class DQuery:
    text: str
    limit: int = 3


async def find(text: str, limit: int = 3) -> str:
    return text * limit


@pytest.mark.parametrize("arguments", [Query("a", 2), DQuery("a", 2), {"text": "a", "limit": 2}])
def test_construction_normalizes_argument_objects_to_a_dict(arguments: Any) -> None:
    event = call(find, arguments)
    assert event.arguments == {"text": "a", "limit": 2}
    assert type(event.arguments) is dict


def test_construction_runs_request_class_validation() -> None:
    async def run(**kwargs: Any) -> Any:
        return kwargs

    event = call(run, {"text": "a", "limit": "7"}, request_class=Query)
    assert event.arguments == {"text": "a", "limit": 7}


@pytest.mark.parametrize(
    ("arguments", "options", "field"),
    [
        ({"limit": 1}, {}, "text"),
        ({"text": "a", "limit": "many"}, {}, "limit"),
        ({"text": "a"}, {"strict": True}, "limit"),
        ({"text": "a", "extra": 1}, {}, "extra"),
        ({"text": 1}, {"request_class": Query}, "text"),
    ],
)
def test_construction_errors_are_raised_and_name_the_field(
    arguments: dict[str, Any], options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        call(find, arguments, **options)
    assert caught.value.field == field


def test_non_object_arguments_are_refused_at_construction() -> None:
    with pytest.raises(ValidationError, match="mapping, an attrs instance or a dataclass"):
        call(find, "text=a")


async def test_a_tool_subclass_call_runs_and_gets_its_own_copy_of_the_arguments() -> None:
    seen: list[dict[str, Any]] = []

    @attrs.define(slots=True)
    class Audited(Tool):
        async def call(self, arguments: Any) -> Any:
            seen.append(arguments)
            arguments["a"] = 99  # a subclass that writes to what it was given
            return await super().call(arguments)

    async def f(a: int) -> int:
        return a

    base = Tool.from_function(f)
    tool = Audited(
        **{a.alias or a.name: getattr(base, a.name) for a in attrs.fields(Tool) if a.init}
    )
    recorded = {"a": 1}
    event = FunctionCalling._for_call(tool, recorded, None)
    await event.invoke()
    assert event.status is EventStatus.COMPLETED and event.response == 99
    assert seen and seen[0] is not recorded
    assert recorded == {"a": 1}  # the record keeps what was validated


def test_the_act_layers_trusted_constructor_builds_what_the_constructor_builds() -> None:
    async def f(a: int) -> int:
        return a

    tool, arguments, context = Tool.from_function(f), {"a": 1}, object()
    fast = FunctionCalling._for_call(tool, arguments, context)
    slow = FunctionCalling(tool=tool, arguments=arguments, context=context)
    assert fast.arguments is arguments  # kept, not copied
    for field in attrs.fields(FunctionCalling):
        if field.name not in {"id", "created_at", "execution"}:
            assert getattr(fast, field.name) == getattr(slow, field.name), field.name
    assert attrs.asdict(fast.execution) == attrs.asdict(slow.execution)
    assert fast.id != slow.id and fast.id.version == 4
    assert fast.to_dict().keys() == slow.to_dict().keys()


def test_function_must_name_the_tool() -> None:
    tool = Tool.from_function(find)
    assert FunctionCalling(tool=tool, function="find", arguments={"text": "a"}).function == "find"
    with pytest.raises(ValidationError) as caught:
        FunctionCalling(tool=tool, function="other", arguments={"text": "a"})
    assert caught.value.field == "function"


# -- the pipeline ---------------------------------------------------------------------------


async def test_first_invocation_goes_processing_and_keeps_created_at(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[EventStatus] = []

    async def work() -> str:
        seen.append(event.status)
        await trio.sleep(2.5)
        return "done"

    event = call(work)
    created = event.created_at
    await event.invoke()
    assert seen == [EventStatus.PROCESSING]
    assert event.created_at == created
    assert event.status is EventStatus.COMPLETED
    assert event.response == "done"
    assert event.execution.duration == 2.5  # seconds, on trio's clock


async def test_callable_gets_the_arguments_as_keywords() -> None:
    async def f(b: int = 0, *, c: int) -> tuple[int, int]:
        return b, c

    event = call(f, {"b": 1, "c": 2})
    await event.invoke()
    assert event.response == (1, 2)


async def test_postprocessor_result_becomes_the_response() -> None:
    async def wrap(response: Any, *, key: str) -> dict[str, Any]:
        return {key: response}

    event = call(
        find, {"text": "a", "limit": 2}, postprocessor=wrap, postprocessor_kwargs={"key": "out"}
    )
    await event.invoke()
    assert event.response == {"out": "aa"}


async def test_context_parameter_receives_the_call_context() -> None:
    async def f(a: int, ctx: Any = None) -> tuple[int, Any]:
        return a, ctx

    marker = object()
    event = FunctionCalling.create(
        Tool.from_function(f, context_param="ctx"), {"a": 1}, context=marker
    )
    await event.invoke()
    assert event.response == (1, marker)
    assert "ctx" not in event.arguments


@pytest.mark.parametrize("stage", ["callable", "postprocessor"])
async def test_ordinary_exceptions_are_captured_as_failed(stage: str) -> None:
    # (the preprocessor is the governed transaction's transform phase: tests/act/test_transform.py)
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise Boom(stage)

    def ok(value: Any, **kwargs: Any) -> Any:
        return value

    options: dict[str, Any] = {"postprocessor": ok}
    if stage != "callable":
        options[stage] = fail
    body: Callable[..., Any] = fail if stage == "callable" else find
    event = call(body, {"text": "a"} if stage != "callable" else {}, name="body", **options)
    await event.invoke()  # nothing raised
    assert event.status is EventStatus.FAILED
    assert isinstance(event.execution.error, Boom)  # one invoke, one error: not a group
    assert str(event.execution.error) == stage
    assert event.response is None
    assert isinstance(event.execution.duration, float)


async def test_cancellation_is_recorded_and_re_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow() -> None:
        await trio.sleep(10)

    event = call(slow)
    with trio.move_on_after(1) as scope:
        await event.invoke()
    assert scope.cancelled_caught  # the Cancelled propagated out of invoke()
    assert event.status is EventStatus.CANCELLED
    assert isinstance(event.execution.error, trio.Cancelled)
    assert event.execution.duration == 1


async def test_keyboard_interrupt_is_recorded_cancelled_and_re_raised() -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    event = call(interrupt, inline=True)
    with pytest.raises(KeyboardInterrupt):
        await event.invoke()
    assert event.status is EventStatus.CANCELLED


@pytest.mark.parametrize("outcome", ["completed", "failed", "cancelled", "processing"])
async def test_a_call_is_never_executed_twice(outcome: str) -> None:
    runs: list[int] = []

    async def body(fail: bool = False) -> int:
        runs.append(1)
        if fail:
            raise Boom
        return len(runs)

    event = call(body, {"fail": outcome == "failed"})
    if outcome == "cancelled":
        with trio.CancelScope() as scope:
            scope.cancel()
            await event.invoke()
    elif outcome == "processing":
        event.status = EventStatus.PROCESSING
    else:
        await event.invoke()
    before = (list(runs), event.status, event.response)
    await event.invoke()
    assert (runs, event.status, event.response) == before


async def test_terminal_status_signals_waiters() -> None:
    gate = trio.Event()

    async def body() -> str:
        await gate.wait()
        return "ok"

    event = call(body)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(event.invoke)
        await trio.testing.wait_all_tasks_blocked()
        assert not event.completion_event.is_set()
        gate.set()
        with trio.fail_after(GUARD):
            await event.wait_completed()
    assert event.status is EventStatus.COMPLETED


# -- serialization --------------------------------------------------------------------------


async def test_record_adds_function_and_arguments_and_omits_the_tool() -> None:
    event = FunctionCalling.create(
        Tool.from_function(find), {"text": "a", "limit": 1}, context=object()
    )
    await event.invoke()
    record = event.to_dict()
    assert record == converter.unstructure(event)
    assert record["function"] == "find"
    assert record["arguments"] == {"text": "a", "limit": 1}
    assert record["execution"]["status"] == "completed"
    assert record["execution"]["response"] == "a"
    assert not {"tool", "context", "streaming"} & record.keys()
    json.dumps(record)


async def test_record_of_failures_and_odd_values() -> None:
    class Opaque:
        pass

    async def fails(text: str) -> None:
        raise Boom("bad input")

    async def odd() -> Opaque:
        return Opaque()

    failed = call(fails, {"text": "a"})
    await failed.invoke()
    assert failed.to_dict()["execution"]["error"] == {"error": "Boom", "message": "bad input"}
    weird = call(odd)
    await weird.invoke()
    assert weird.to_dict()["execution"]["response"] == "<unserializable>"


@attrs.define
class Point:
    x: int


async def test_structured_arguments_serialize_as_json() -> None:
    async def at(p: Point) -> int:
        return p.x

    event = call(at, {"p": {"x": "4"}})
    assert event.arguments == {"p": Point(4)}
    await event.invoke()
    assert event.response == 4
    assert event.to_dict()["arguments"] == {"p": {"x": 4}}


def test_as_fresh_event_shares_the_tool_and_copies_the_arguments() -> None:
    event = call(find, {"text": "a"})
    fresh = event.as_fresh_event()
    assert fresh.tool is event.tool
    assert fresh.arguments == event.arguments
    assert fresh.arguments is not event.arguments
    assert fresh.status is EventStatus.PENDING
    assert fresh.metadata["original"]["id"] == str(event.id)


# -- where callables run: the sync policy ---------------------------------------------------


async def test_async_callables_run_on_the_trio_thread() -> None:
    trio_thread = threading.get_ident()

    class Service:
        async def method(self) -> int:
            return threading.get_ident()

        async def __call__(self) -> int:
            return threading.get_ident()

    async def plain() -> int:
        return threading.get_ident()

    service = Service()
    for func, name in [(plain, "plain"), (service.method, "m"), (service, "obj"),
                       (functools.partial(plain), "partial")]:  # fmt: skip
        event = call(func, name=name)
        await event.invoke()
        assert event.response == trio_thread, name


async def test_sync_callable_and_processors_run_in_worker_threads() -> None:
    trio_thread = threading.get_ident()
    threads: dict[str, int] = {}

    def pre(arguments: dict[str, Any]) -> dict[str, Any]:
        threads["pre"] = threading.get_ident()
        return arguments

    def body() -> None:
        threads["call"] = threading.get_ident()

    def post(response: Any) -> Any:
        threads["post"] = threading.get_ident()
        return response

    tool = Tool.from_function(body, preprocessor=pre, postprocessor=post)
    assert await tool.transform({}) == {}  # the transform phase runs it per the same policy
    event = FunctionCalling.create(tool, {})
    await event.invoke()
    assert event.status is EventStatus.COMPLETED
    assert threads.keys() == {"pre", "call", "post"}
    assert trio_thread not in threads.values()


async def test_the_tool_gets_its_own_copy_of_the_arguments() -> None:
    async def scribble(record: dict[str, Any]) -> str:
        record["email"] = "attacker@example.com"
        record["tags"].append("pwned")
        return "done"

    event = FunctionCalling.create(
        Tool.from_function(scribble), {"record": {"email": "a@b.c", "tags": []}}
    )
    await event.invoke()
    assert event.status is EventStatus.COMPLETED
    assert event.arguments == {"record": {"email": "a@b.c", "tags": []}}


async def test_inline_tools_run_sync_code_on_the_trio_thread() -> None:
    threads: list[int] = []

    def body() -> None:
        threads.append(threading.get_ident())

    def post(response: Any) -> Any:
        threads.append(threading.get_ident())
        return response

    event = call(body, postprocessor=post, inline=True)
    await event.invoke()
    assert threads == [threading.get_ident()] * 2


@pytest.mark.parametrize("inline", [False, True])
async def test_awaitables_returned_by_sync_callables_are_awaited(inline: bool) -> None:
    async def later(value: str) -> str:
        await trio.lowlevel.checkpoint()
        return value

    def decorated(value: str) -> Awaitable[str]:  # sync-declared, returns a coroutine
        return later(value)

    def post(response: str) -> Awaitable[str]:
        return later(response + "!")

    event = call(decorated, {"value": "v"}, postprocessor=post, inline=inline)
    await event.invoke()
    assert event.status is EventStatus.COMPLETED
    assert event.response == "v!"


async def test_blocking_sync_tools_run_concurrently_in_threads() -> None:
    barrier = threading.Barrier(4, timeout=GUARD)

    def meet(i: int) -> int:
        barrier.wait()  # returns only once all four threads are inside
        return i

    events = [call(meet, {"i": i}) for i in range(4)]
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            for event in events:
                nursery.start_soon(event.invoke)
    assert [e.status for e in events] == [EventStatus.COMPLETED] * 4
    assert [e.response for e in events] == [0, 1, 2, 3]


async def test_tool_limiter_bounds_worker_threads() -> None:
    limiter = trio.CapacityLimiter(1)
    inside = threading.Semaphore(0)
    peak: list[int] = []

    def body() -> None:
        peak.append(limiter.borrowed_tokens)
        inside.release()

    tool = Tool.from_function(body, limiter=limiter)
    events = [FunctionCalling.create(tool, {}) for _ in range(3)]
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            for event in events:
                nursery.start_soon(event.invoke)
    assert peak == [1, 1, 1]
    assert limiter.borrowed_tokens == 0


async def test_tools_share_a_per_run_default_limiter() -> None:
    limiter = current_tool_limiter()
    assert limiter is current_tool_limiter()
    assert limiter is not trio.to_thread.current_default_thread_limiter()
    seen: list[int] = []

    def body() -> None:
        seen.append(limiter.borrowed_tokens)

    await call(body).invoke()
    assert seen == [1]


async def test_cancelled_offload_ends_cancelled_at_once_and_keeps_the_thread_accounted() -> None:
    limiter = trio.CapacityLimiter(1)
    entered, release, exited = threading.Event(), threading.Event(), threading.Event()
    post_calls: list[Any] = []

    def blocking() -> str:
        entered.set()
        try:
            release.wait(GUARD)
            return "late"
        finally:
            exited.set()

    tool = Tool.from_function(
        blocking, limiter=limiter, postprocessor=post_calls.append, inline=False
    )
    event = FunctionCalling.create(tool, {})
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(event.invoke)
            await trio.to_thread.run_sync(entered.wait, GUARD)
            nursery.cancel_scope.cancel()
    # The event is cancelled while the thread is still blocked inside the tool.
    assert event.status is EventStatus.CANCELLED
    assert isinstance(event.execution.error, trio.Cancelled)
    assert not exited.is_set()
    assert limiter.borrowed_tokens == 1  # the abandoned thread still holds its token
    release.set()
    with trio.fail_after(GUARD):
        async with limiter:  # acquirable only once the thread has really returned
            pass
    assert exited.is_set()
    assert limiter.borrowed_tokens == 0
    # The late result was never delivered.
    assert event.status is EventStatus.CANCELLED
    assert event.response is None
    assert post_calls == []
