"""Trio's rule, over the whole public async API: every public async function is a checkpoint,
on every path, fast paths included.

A checkpoint is both a cancel point and a schedule point; ``trio.testing.assert_checkpoints``
checks both. Each case below drives one public coroutine down a path that needs no waiting
(nothing registered, nothing queued, an already-finished event, a batch of invalid calls),
which is where a missing checkpoint hides. :func:`test_every_public_async_function_is_covered`
keeps the table honest: a new public coroutine needs a case here (or a stated exemption).

The engine's own, finer-grained checkpoint tests are in ``tests/engine/test_checkpoints.py``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from trio.testing import assert_checkpoints

from lionexec.act import Branch, alcall
from lionexec.act._batch import Throttle, fan_out
from lionexec.act._evidence import SinkFeed
from lionexec.conversation import ActionRequest, Instruction, MessageManager
from lionexec.engine import Event, EventStatus, Executor, Processor
from lionexec.governance import (
    CallContext,
    HookBus,
    HookPoint,
    PermissionPolicy,
    SessionObserver,
    ToolInvocation,
)
from lionexec.tools import Tool

#: The packages whose public coroutines this contract covers.
PACKAGES = (
    "lionexec",
    "lionexec.engine",
    "lionexec.tools",
    "lionexec.governance",
    "lionexec.conversation",
    "lionexec.act",
)

#: Public coroutines with no fast-path case here, and why.
EXEMPT: dict[str, str] = {
    "Processor.execute": "a service (nursery.start); it checkpoints as it runs until stopped",
    "Branch.serve": "a service (nursery.start) that runs until cancelled",
    "SinkFeed.serve": "a service (nursery.start) that runs until its channel closes",
    "EvidenceSink.write_ahead": "a Protocol; its implementations are covered",
    "EvidenceSink.write": "a Protocol; its implementations are covered",
    "EvidenceSink.aclose": "a Protocol; its implementations are covered",
    "DurableEvidenceSink.known_call_ids": "a Protocol; its implementations are covered",
    "DurableEvidenceSink.flush": "a Protocol; its implementations are covered",
    "CallTransaction.run": "a phase of Branch.act, covered through it",
    "CallTransaction.gate": "a phase of Branch.act, covered through it",
    "CallTransaction.authorize": "a phase of Branch.act, covered through it",
    "CallTransaction.pre_hooks": "a phase of Branch.act, covered through it",
    "CallTransaction.transform": "a phase of Branch.act, covered through it",
    "CallTransaction.invoke": "a phase of Branch.act, covered through it",
    "CallTransaction.announce": "a phase of Branch.act, covered through it",
    "Evidence.write_ahead": "the act layer's evidence seam, covered through Branch.act",
    "SinkFeed.wait_writable": "the act layer's evidence seam, covered through Branch.act",
    "JsonlSink.write_ahead": "drives a worker thread; covered by the act layer's sink tests",
    "JsonlSink.write": "drives a worker thread; covered by the act layer's sink tests",
    "JsonlSink.aclose": "drives a worker thread; covered by the act layer's sink tests",
    "Event.stream": "an async generator, not a coroutine; covered in tests/engine",
}


def public_coroutines() -> set[str]:
    """``name`` or ``Class.method`` of every public coroutine function in :data:`PACKAGES`."""
    found: set[str] = set()
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.iscoroutinefunction(obj):
                found.add(name)
            if not isinstance(obj, type):
                continue
            for klass in obj.__mro__:
                if not klass.__module__.startswith("lionexec"):
                    continue
                for attr, value in vars(klass).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(value, staticmethod | classmethod):
                        value = value.__func__
                    if inspect.iscoroutinefunction(value):
                        found.add(f"{klass.__name__}.{attr}")  # named by where it is defined
    return found


# -- the cases ---------------------------------------------------------------------------------


class Instant(Event):
    async def _invoke(self) -> int:
        return 1


def finished_event() -> Event:
    event = Instant()
    event.status = EventStatus.COMPLETED
    return event


PROCESSOR_CONFIG = {"queue_capacity": 2, "capacity_refresh_time": 1, "concurrency_limit": None}


def context() -> CallContext:
    return CallContext(function="f", arguments={"x": 1}, call_id="call_1")


def invalid_calls() -> list[dict[str, Any]]:
    return [
        {"function": "missing", "arguments": {}},
        {"function": "also_missing", "arguments": {"a": 1}},
    ]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def identity(x: Any) -> Any:
    return x


def with_handler(point: HookPoint) -> HookBus:
    bus = HookBus()
    bus.on(point, lambda **_: None)
    return bus


def gated(verdict: bool) -> SessionObserver:
    observer = SessionObserver()
    observer.gate(lambda invocation: verdict)
    return observer


async def already_there() -> None:
    history = MessageManager()
    message = Instruction(content="u")
    history.add_message(message)
    with assert_checkpoints():
        await history.a_add_message(message)


async def denied_call() -> None:
    branch = Branch(policy=PermissionPolicy(mode="deny_all"))
    branch.register_tools(add)
    with assert_checkpoints():
        await branch.act({"function": "add", "arguments": {"a": 1, "b": 2}})


#: name -> (label, a factory of the coroutine to run under assert_checkpoints)
Case = tuple[str, Callable[[], Awaitable[Any]]]
CASES: dict[str, list[Case]] = {
    # engine
    "Event.invoke": [("on a completed event", lambda: finished_event().invoke())],
    "Event.wait_completed": [("on a completed event", lambda: finished_event().wait_completed())],
    "Processor.enqueue": [("with room", lambda: Processor(2, 1, None).enqueue(Instant()))],
    "Processor.enqueue_many": [("nothing", lambda: Processor(2, 1, None).enqueue_many([]))],
    "Processor.request_permission": [
        ("default", lambda: Processor(2, 1, None).request_permission())
    ],
    "Processor.handle_denied": [
        ("default", lambda: Processor(2, 1, None).handle_denied(Instant()))
    ],
    "Processor.process": [("empty queue", lambda: Processor(2, 1, None).process())],
    "Processor.join": [("empty queue", lambda: Processor(2, 1, None).join())],
    "Executor.forward": [("nothing pending", lambda: Executor(PROCESSOR_CONFIG).forward())],
    # tools
    "Tool.call": [
        ("inline sync tool", lambda: Tool.from_function(add, inline=True).call({"a": 1, "b": 2}))
    ],
    "Tool.transform": [
        (
            "inline sync preprocessor",
            lambda: Tool.from_function(add, inline=True, preprocessor=lambda a: a).transform(
                {"a": 1, "b": 2}
            ),
        )
    ],
    "Tool.postprocess": [
        (
            "inline sync postprocessor",
            lambda: Tool.from_function(add, inline=True, postprocessor=lambda r: r).postprocess(3),
        )
    ],
    "run_callable": [
        (
            "inline sync callable",
            lambda: importlib.import_module("lionexec.tools").run_callable(
                add, False, (), {"a": 1, "b": 2}, inline=True
            ),
        )
    ],
    # governance
    "HookBus.run_pre": [
        ("no handlers", lambda: HookBus().run_pre(tool_name="f")),
        ("a sync handler", lambda: with_handler(HookPoint.TOOL_PRE).run_pre(tool_name="f")),
    ],
    "HookBus.emit": [
        ("no handlers", lambda: HookBus().emit(HookPoint.TOOL_POST, call_id="c")),
        (
            "a sync handler",
            lambda: with_handler(HookPoint.TOOL_POST).emit(HookPoint.TOOL_POST, call_id="c"),
        ),
    ],
    "SessionObserver.authorize": [
        ("no gate", lambda: SessionObserver().authorize(ToolInvocation("f"))),
        ("a sync gate that allows", lambda: gated(True).authorize(ToolInvocation("f"))),
        ("a sync gate that denies", lambda: gated(False).authorize(ToolInvocation("f"))),
    ],
    "SessionObserver.emit": [("no subscribers", lambda: SessionObserver().emit("payload"))],
    "PermissionPolicy.decide": [
        ("allow_all", lambda: PermissionPolicy().decide(context())),
        ("deny_all", lambda: PermissionPolicy(mode="deny_all").decide(context())),
    ],
    # conversation
    "MessageManager.notify": [
        ("no callbacks", lambda: MessageManager().notify(Instruction(content="u"))),
        ("no messages", lambda: MessageManager(on_message_added=[print]).notify()),
    ],
    "MessageManager.a_add_message": [
        ("new, no callbacks", lambda: MessageManager().a_add_message(Instruction(content="u"))),
        ("already there", already_there),
    ],
    # act
    "Branch.act": [
        ("no calls", lambda: Branch().act([])),
        (
            "a sequential batch of only invalid calls",
            lambda: Branch().act(invalid_calls(), strategy="sequential"),
        ),
        ("a concurrent batch of only invalid calls", lambda: Branch().act(invalid_calls())),
        ("a denied call", denied_call),
    ],
    "Branch.aclose": [("a fresh branch", lambda: Branch().aclose())],
    "Branch.flush": [("a branch without durable sinks", lambda: Branch().flush())],
    "alcall": [
        ("no inputs", lambda: alcall(identity, [])),
        ("async func, one input", lambda: alcall(identity, [1])),
    ],
    "fan_out": [("no items", lambda: fan_out(lambda i, x: identity(x), []))],
    "Throttle.wait": [
        ("no period", lambda: Throttle(None).wait()),
        ("the first call", lambda: Throttle(1.0).wait()),
    ],
    "SinkFeed.wait_settled": [
        ("nothing to wait for", lambda: _feed().wait_settled(0)),
        ("the service is not running", lambda: _feed().wait_settled(5)),
    ],
    "SinkFeed.wait_stopped": [("the service is not running", lambda: _feed().wait_stopped())],
    "SinkFeed.close_unserved": [
        ("the feed is open", lambda: _feed().close_unserved(1.0)),
        ("closed, never served", lambda: _closed_feed().close_unserved(1.0)),
    ],
}


class _NullSink:
    async def write_ahead(self, entry: Any) -> None:
        await trio.lowlevel.checkpoint()

    async def write(self, records: Any) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


def _feed() -> SinkFeed:
    return SinkFeed(_NullSink(), capacity=1, report=lambda *args: None)


def _closed_feed() -> SinkFeed:
    feed = _feed()
    feed.close()
    return feed


#: Cases that run assert_checkpoints themselves (after their own setup).
SELF_CHECKING = {already_there, denied_call}

PARAMS = [
    pytest.param(factory, id=f"{name}: {label}")
    for name, cases in CASES.items()
    for label, factory in cases
]


@pytest.mark.parametrize("factory", PARAMS)
async def test_a_public_coroutine_is_a_checkpoint_on_its_fast_path(
    factory: Callable[[], Awaitable[Any]],
) -> None:
    if factory in SELF_CHECKING:
        await factory()
        return
    awaitable = factory()
    with assert_checkpoints():
        await awaitable


def test_every_public_async_function_is_covered() -> None:
    covered = set(CASES) | set(EXEMPT)
    missing = sorted(public_coroutines() - covered)
    assert missing == [], f"public coroutines without a checkpoint case: {missing}"


async def test_a_cancelled_caller_is_stopped_at_the_checkpoint() -> None:
    # The checkpoint is a cancel point: an already-cancelled caller does not get a verdict, a
    # dispatch or a notification; what must be written is written first.
    ran: list[str] = []
    bus = HookBus()
    bus.on(HookPoint.TOOL_POST, lambda **_: ran.append("hook"))
    observer = SessionObserver()
    observer.subscribe(object, lambda payload: ran.append("subscriber"))
    history = MessageManager(on_message_added=[lambda message: ran.append("callback")])
    request = ActionRequest.create("f", {})
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await bus.emit(HookPoint.TOOL_POST)
        with pytest.raises(trio.Cancelled):
            await observer.emit("kept")
        with pytest.raises(trio.Cancelled):
            await history.a_add_message(request)
        with pytest.raises(trio.Cancelled):
            await observer.authorize(ToolInvocation("f"))
    assert ran == []
    assert observer.records == ("kept",)  # stored synchronously, before the checkpoint
    assert request in history  # written synchronously, before the checkpoint
