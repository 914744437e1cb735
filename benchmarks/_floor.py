"""The equivalent-work floor for ``Branch.act``: the same contract in plain trio, kept lean.

Issue 13: the bare raw-trio floor (:class:`benchmarks.act.RawBranch`) does much less than the
contract asks of ``act``. This floor does the same work as lionexec per call, in slotted
classes with no framework:

* **envelope parsing** of a ``{"function", "arguments"[, "call_id"]}`` dict or an OpenAI
  ``tool_calls`` item (``{"id", "type", "function": {"name", "arguments": "<json>"}}``);
  every proposal of a batch is read before anything is recorded;
* **argument validation** against the tool's tiny declared schema (exact key set, exact
  types, read once from the annotations at registration); unknown tool or bad arguments end
  the call ``invalid`` without invoking it;
* a **call id** (the provider's, or ``call_`` + 32 hex digits, as lionexec makes them),
  refused before anything is recorded if the history or the batch already has it (an index
  of the history by call id, as lionexec keeps one);
* a **private deep copy** of the arguments (containers copied, scalars shared);
* an **event-like record** (id, status, duration, response, error: the exception without its
  traceback, as lionexec keeps failures);
* a **log record** per invoked call (branch, call, request and response ids, outcome, status,
  event) appended to an in-memory log;
* a **two-way linked request/response pair** in a list history: requests appended in proposal
  order before any call runs, each response appended (and linked both ways) when its call ends;
* **cancellation safety**: a ``BaseException`` passing through a call records it
  ``cancelled`` (response and log record) synchronously, then re-raises; ``act`` is always a
  checkpoint and a sequential batch checkpoints between calls (issue 13, item 4);
* a **creation time** (``time.time()``) on the request, the response and the event, as the
  contract has (messages' ``created_at``; an event's construction time);
* ids from the same fast generator as lionexec (:func:`lionexec._ids.uuid4`): three per call
  (request, response, event), as lionexec makes;
* **hostile input refused** as lionexec refuses it (the security issue): a function name or
  call id holding NUL or a lone surrogate, a call id over 256 characters (the batch is
  refused); arguments holding NaN or Infinity, an integer too long to print, a name that is
  not a string, text that is not valid Unicode, or nested too deeply (the call is
  ``invalid``), all checked in the one pass that copies them;
* **evidence immutability** (the security issue, which issue 13 says to measure with): the
  tool gets arguments it cannot change the record through (a copy unless they are all
  scalars), and the record keeps a private copy of what the tool returned;
* a call whose batch is cancelled before it starts does not start (a cancellation check
  before the tool, as lionexec's ``Event.invoke()`` makes).

Added to the floor later (the last three items): lionexec did this work per call and
the floor did not. README.md gives the ratios against the floor without them too.

Concurrent batches run in one nursery; a one-call batch runs inline (no nursery), the leanest
way to do a single call.
"""

from __future__ import annotations

import json
import math
import os
import time
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from lionexec._ids import uuid4

_perf = time.perf_counter
_now = time.time
_urandom = os.urandom


def new_call_id() -> str:
    return "call_" + _urandom(16).hex()


def _copy(value: Any) -> Any:
    """A private deep copy of JSON-like data: containers rebuilt, scalars shared."""
    kind = type(value)
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list:
        return [_copy(item) for item in value]
    return value


class _Hostile(ValueError):
    """Arguments lionexec refuses (the call is ``invalid``)."""


_LIMIT = 1 << 64  # smaller integers are printable: no check
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _text(text: str) -> str:
    if not text.isascii():
        text.encode()  # a lone surrogate: UnicodeEncodeError, a ValueError
    return text


_DEPTH = 64  # lionexec's MAX_ARGUMENT_DEPTH: the arguments' own dict is level 1


def _private(value: Any, depth: int = 1) -> Any:
    """:func:`_copy` of a model's arguments, refusing in the same pass what lionexec refuses
    (ValueError): non-finite floats, integers too long to print (over 4,300 digits), names
    that are not strings, text that is not valid Unicode, containers more than 64 levels
    deep."""
    kind = type(value)
    if kind is str:
        return _text(value)
    if kind is int:
        if -_LIMIT < value < _LIMIT:
            return value
        str(value)  # over 4,300 digits: ValueError (it could not be printed)
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        raise _Hostile("not a finite number")
    if kind is dict or kind is list:
        if depth > _DEPTH:
            raise _Hostile("nested too deeply")
        if kind is list:
            return [_private(item, depth + 1) for item in value]
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Hostile("a name that is not a string")
            copied[_text(key)] = _private(item, depth + 1)
        return copied
    if kind is bool or value is None:
        return value
    raise _Hostile(f"not JSON: {kind.__name__}")


def _scalars_only(arguments: dict[str, Any]) -> bool:
    for value in arguments.values():  # noqa: SIM110 (a loop is faster than all())
        if type(value) not in _SCALARS:
            return False
    return True


def _name(label: str, text: Any) -> str:
    if type(text) is not str or not text or "\x00" in text:
        raise ValueError(f"a tool call needs a {label} without NUL, got {text!r:.80}")
    return _text(text)


class FloorTool:
    """A registered tool: its function and its declared schema (parameter name -> exact type)."""

    __slots__ = ("func", "name", "schema")

    def __init__(self, func: Callable[..., Awaitable[Any]]) -> None:
        self.func = func
        self.name = func.__name__
        annotations = typing.get_type_hints(func)  # (string annotations resolved once)
        annotations.pop("return", None)
        self.schema: dict[str, type] = annotations

    def valid(self, arguments: Any) -> bool:
        schema = self.schema
        if type(arguments) is not dict or arguments.keys() != schema.keys():
            return False
        for key, value in arguments.items():  # noqa: SIM110 (a loop is faster than all())
            if type(value) is not schema[key]:
                return False
        return True


class FloorRequest:
    __slots__ = ("arguments", "call_id", "created_at", "function", "id", "response_id")

    def __init__(self, function: str, arguments: Any, call_id: str) -> None:
        self.id = uuid4()
        self.created_at = _now()
        self.function = function
        self.arguments = arguments
        self.call_id = call_id
        self.response_id: Any = None


class FloorResponse:
    __slots__ = ("call_id", "created_at", "error", "id", "outcome", "output", "request_id")

    def __init__(
        self, request: FloorRequest, outcome: str, output: Any, error: tuple[str, str] | None
    ) -> None:
        self.id = uuid4()
        self.created_at = _now()
        self.request_id = request.id
        self.call_id = request.call_id
        self.outcome = outcome
        self.output = output
        self.error = error
        request.response_id = self.id  # the two-way link


class FloorEvent:
    __slots__ = ("created_at", "duration", "error", "id", "response", "status")

    def __init__(self) -> None:
        self.id = uuid4()
        self.created_at = _now()
        self.status = "processing"
        self.duration = 0.0
        self.response: Any = None
        self.error: BaseException | None = None


class FloorLogRecord:
    __slots__ = (
        "branch_id",
        "call_id",
        "event",
        "function",
        "outcome",
        "request_id",
        "response_id",
        "status",
    )

    def __init__(
        self, branch_id: Any, function: str, response: FloorResponse, event: FloorEvent
    ) -> None:
        self.branch_id = branch_id
        self.call_id = response.call_id
        self.function = function
        self.request_id = response.request_id
        self.response_id = response.id
        self.outcome = response.outcome
        self.status = event.status
        self.event = event


def _error(exc: BaseException) -> tuple[str, str]:
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {type(exc).__name__}>"
    return (type(exc).__name__, message)


class FloorBranch:
    """History, tools and log; :meth:`act` runs a batch and returns its responses in order."""

    __slots__ = ("by_call_id", "history", "id", "log", "retain", "tools")

    def __init__(self, retain: int | None = None) -> None:
        self.id = uuid4()
        self.retain = retain  # keep about this many calls (the long-lived rows), or all
        self.tools: dict[str, FloorTool] = {}
        self.history: list[FloorRequest | FloorResponse] = []
        self.by_call_id: dict[str, FloorRequest] = {}
        self.log: list[FloorLogRecord] = []

    def register_tools(self, funcs: list[Callable[..., Awaitable[Any]]]) -> None:
        for func in funcs:
            tool = FloorTool(func)
            self.tools[tool.name] = tool

    @staticmethod
    def _read(call: Any) -> FloorRequest:
        """Envelope parsing: a plain dict, or an OpenAI ``tool_calls`` item."""
        if type(call) is not dict:
            raise ValueError(f"cannot read a tool call from {type(call).__name__}")
        function = call.get("function")
        if type(function) is dict:  # OpenAI: arguments are a JSON string
            name, raw, call_id = function.get("name"), function.get("arguments"), call.get("id")
            arguments = json.loads(raw) if type(raw) is str else raw
        else:
            name, arguments, call_id = function, call.get("arguments"), call.get("call_id")
        name = _name("function name", name)
        if call_id is not None:
            call_id = _name("call id", call_id)
            if len(call_id) > 256:
                raise ValueError(f"a tool call id over 256 characters: {call_id!r:.80}")
        try:
            arguments = _private(arguments)
        except ValueError:
            arguments = None  # the call is invalid
        return FloorRequest(name, arguments, call_id or new_call_id())

    def _finish(
        self,
        request: FloorRequest,
        outcome: str,
        output: Any,
        error: tuple[str, str] | None,
        event: FloorEvent | None,
    ) -> FloorResponse:
        response = FloorResponse(request, outcome, output, error)
        self.history.append(response)
        if event is not None:
            self.log.append(FloorLogRecord(self.id, request.function, response, event))
        return response

    async def _call(self, request: FloorRequest) -> FloorResponse:
        tool = self.tools.get(request.function)
        if tool is None or not tool.valid(request.arguments):
            return self._finish(request, "invalid", None, ("ValidationError", "bad call"), None)
        event = FloorEvent()
        start = _perf()
        arguments = request.arguments
        try:
            await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled call never starts
            if not _scalars_only(arguments):  # nothing the tool gets is the record's
                arguments = _copy(arguments)
            output = await tool.func(**arguments)
        except Exception as exc:
            event.duration = _perf() - start
            exc.__traceback__ = None
            event.error, event.status = exc, "failed"
            return self._finish(request, "failed", None, _error(exc), event)
        except BaseException as exc:  # cancellation: record it, then let it through
            event.duration = _perf() - start
            event.error, event.status = exc, "cancelled"
            self._finish(request, "cancelled", None, _error(exc), event)
            raise
        event.duration = _perf() - start
        output = _copy(output)  # the record's own: the tool may change what it returned
        event.response, event.status = output, "completed"
        return self._finish(request, "completed", output, None, event)

    def _cancel_unanswered(self, requests: list[FloorRequest], exc: BaseException) -> None:
        for request in requests:
            if request.response_id is None:
                self._finish(request, "cancelled", None, _error(exc), None)

    def _admit(self, calls: list[Any]) -> list[FloorRequest]:
        """Read every call, refuse repeated ids, then append the requests to the history."""
        requests = [self._read(call) for call in calls]  # all read before any is recorded
        by_call_id = self.by_call_id
        fresh = {request.call_id: request for request in requests}
        if len(fresh) != len(requests) or not by_call_id.keys().isdisjoint(fresh):
            raise ValueError("a tool call id is repeated in the batch or already in the history")
        by_call_id.update(fresh)
        self.history.extend(requests)
        return requests

    async def act(self, calls: list[Any], strategy: str = "concurrent") -> list[FloorResponse]:
        """Run *calls*; always a checkpoint; every request ends with exactly one response."""
        requests = self._admit(calls)
        out: list[Any] = [None] * len(requests)
        try:
            if len(requests) == 1:
                await trio.lowlevel.checkpoint()
                out[0] = await self._call(requests[0])
            elif strategy == "sequential":
                for index, request in enumerate(requests):
                    await trio.lowlevel.checkpoint()
                    out[index] = await self._call(request)
            else:
                await self._concurrently(requests, out)
        except BaseException as exc:
            self._cancel_unanswered(requests, exc)
            raise
        finally:
            if self.retain is not None:
                self._trim(self.retain)
        return out

    def _trim(self, retain: int) -> None:
        """Forget the oldest answered calls past *retain* (pairs and log records together),
        amortized as lionexec's ``Branch(retain=...)`` is: only once 10 % over."""
        excess = len(self.by_call_id) - retain
        if excess <= max(1, retain // 10):
            return
        gone: set[Any] = set()  # ids of the requests and responses that go
        for call_id, request in list(self.by_call_id.items())[:excess]:
            if request.response_id is None:  # in flight: never one half of a pair
                break
            del self.by_call_id[call_id]
            gone.add(request.id)
            gone.add(request.response_id)
        self.history = [m for m in self.history if m.id not in gone]
        self.log = [r for r in self.log if r.response_id not in gone]

    async def _concurrently(self, requests: list[FloorRequest], out: list[Any]) -> None:
        """Run every request in one nursery; its response goes to its place in *out*."""
        call = self._call

        async def one(index: int, request: FloorRequest) -> None:
            out[index] = await call(request)

        async with trio.open_nursery() as nursery:
            for index, request in enumerate(requests):
                nursery.start_soon(one, index, request)
