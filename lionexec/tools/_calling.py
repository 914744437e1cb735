"""``FunctionCalling``: one call of a tool as a failure-capturing Event, under the sync policy."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Coroutine, Mapping
from inspect import isawaitable
from types import CoroutineType
from typing import Any, ClassVar, Self

import attrs

from lionexec._ids import uuid4
from lionexec._snapshot import atoms_only, snapshot
from lionexec.engine import EventStatus
from lionexec.engine._event import NOT_SERIALIZED, Event
from lionexec.engine._execution import Execution, Unset
from lionexec.errors import ValidationError

from ._tool import Tool

__all__ = ["FunctionCalling"]

_new = object.__new__
_PENDING = EventStatus.PENDING
_CALL = Tool.call


def _argument_dict(value: object) -> dict[str, Any]:
    """A mapping, attrs instance or dataclass instance as a new plain dict of its fields."""
    if type(value) is dict or isinstance(value, Mapping):
        return dict(value)
    cls = type(value)
    if attrs.has(cls):
        return {a.alias or a.name: getattr(value, a.name) for a in attrs.fields(cls) if a.init}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    raise ValidationError(
        f"arguments must be a mapping, an attrs instance or a dataclass, got {cls.__name__}"
    )


def _tool_name(call: FunctionCalling) -> str:
    return call.tool.name


@attrs.define(kw_only=True, eq=False, on_setattr=attrs.setters.NO_OP)
class FunctionCalling(Event):
    """One call of :attr:`tool` with :attr:`arguments`, run once by :meth:`Event.invoke`.

    :meth:`invoke` runs ::

        func_callable(**copy_of_arguments)
          → postprocessor(response, **postprocessor_kwargs)  # result is the response

    The tool gets its own deep copy of :attr:`arguments`, so nothing it does to them changes
    what the event records. Sync steps follow the tool's sync policy (worker thread under its
    limiter, or inline). Any ``Exception`` ends the event ``failed``; cancellation ends it
    ``cancelled`` and propagates.

    :meth:`create` validates the arguments with :meth:`Tool.validate` (a
    :class:`~lionexec.errors.ValidationError` is raised then, never captured by the event);
    the plain constructor takes them as given. The tool's preprocessor (the *transform*) is
    not part of the event: it is a phase of the governed transaction, which revalidates what
    it returns before building the event (the act transaction does). Invoking an event
    directly skips governance (gates, policy, hooks) and history.
    """

    tool: Tool = attrs.field(metadata={NOT_SERIALIZED: True})
    #: The tool's name, recorded with the event (derived; if passed, it must match).
    function: str = attrs.field(default=attrs.Factory(_tool_name, takes_self=True))
    arguments: dict[str, Any] = attrs.field(factory=dict, converter=_argument_dict)
    #: Passed to the tool's ``context_param`` parameter, if it has one.
    context: Any = attrs.field(default=None, metadata={NOT_SERIALIZED: True})

    #: :meth:`as_fresh_event` shares these with the new call instead of copying them.
    _fresh_shared: ClassVar[frozenset[str]] = frozenset({"tool", "context"})

    def __attrs_post_init__(self) -> None:
        if self.function != self.tool.name:
            raise ValidationError(
                f"function {self.function!r} does not name tool {self.tool.name!r}",
                field="function",
            )

    @classmethod
    def create(cls, tool: Tool, arguments: object, *, context: Any = None) -> Self:
        """Build an uninvoked call with validated arguments; raises ValidationError."""
        return cls(tool=tool, arguments=tool.validate(_argument_dict(arguments)), context=context)

    @classmethod
    def _for_call(cls, tool: Tool, arguments: dict[str, Any], context: Any) -> Self:
        """The plain constructor for the act transaction, which has validated *arguments*
        (kept, not copied: the transaction shares them with its record) against *tool*.

        Trusted: no factory, converter or check runs; about a third of the constructor's cost,
        and every governed call builds one. A test checks it builds what the constructor
        builds.
        """
        event = _new(cls)  # plain stores: FunctionCalling has no __setattr__ hooks
        event.id = uuid4()
        event.created_at = time.time()
        event.metadata = {}
        event.execution = execution = _new(Execution)
        execution.status = _PENDING
        execution.duration = Unset
        execution.response = None
        execution.error = None
        execution.retryable = Unset
        event.streaming = False
        event._completion = None
        event.tool = tool
        event.function = tool.name
        event.arguments = arguments
        event.context = context
        return event

    @property
    def request(self) -> dict[str, Any]:
        """What a processor's permission check sees (``{"function", "arguments"}``)."""
        return {"function": self.function, "arguments": dict(self.arguments)}

    def _invoke(self) -> Coroutine[Any, Any, Any]:
        """The call's work, as a coroutine :meth:`Event._run` awaits.

        Not a coroutine function itself: for the common case, an async tool with no
        postprocessor (and no Tool subclass's own ``call()``), it returns the tool's own
        coroutine, called here without Tool.call's and run_callable's coroutines (nor one of
        its own), and without copying immutable values: ** gives the tool a new dict, so a
        deep copy per call would buy nothing. Anything else gets its own deep copy; the record
        keeps ours.
        """
        tool = self.tool
        direct = tool._func_async and tool.postprocessor is None and type(tool).call is _CALL
        arguments = self.arguments
        context_param = tool.arguments.context_param  # (Tool.context_param, without the call)
        if context_param is not None or not (direct and atoms_only(arguments)):
            arguments = snapshot(arguments)
            if context_param is not None:
                arguments[context_param] = self.context
        if not direct:
            return self._call_tool(tool, arguments)
        response = tool.func_callable(**arguments)  # what run_callable does for an async tool
        if type(response) is CoroutineType:
            return response
        return _settled(response)

    @staticmethod
    async def _call_tool(tool: Tool, arguments: dict[str, Any]) -> Any:
        response = await tool.call(arguments)
        if tool.postprocessor is not None:
            response = await tool.postprocess(response)
        return response


async def _settled(response: Any) -> Any:
    """*response* awaited if it is awaitable (an async tool's result that is not a
    coroutine), as it is otherwise."""
    if isawaitable(response):  # (an ABC check)
        return await response
    return response
