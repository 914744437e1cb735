"""``FunctionCalling``: one call of a tool as a failure-capturing Event (ADR-0012 D1, D6, A4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Self

import attrs

from lionexec.engine.event import NOT_SERIALIZED, Event
from lionexec.errors import ValidationError

from .tool import Tool

__all__ = ["FunctionCalling", "Revalidator"]

#: Called with the preprocessed arguments; returns the arguments to call with, or raises.
Revalidator = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


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

    Construction normalizes *arguments* (a mapping, or an attrs or dataclass instance, to a
    plain dict) and validates them with :meth:`Tool.validate`; a
    :class:`~lionexec.errors.ValidationError` is raised then, never captured by the event.

    :meth:`invoke` runs the pipeline ::

        preprocessor(arguments, **preprocessor_kwargs)   # result replaces the arguments
          → revalidate(arguments)                         # result replaces the arguments
          → func_callable(**arguments)
          → postprocessor(response, **postprocessor_kwargs)  # result is the response

    Without a *revalidate*, arguments a preprocessor returned are checked again with
    :meth:`Tool.validate` (so a transform can never bypass the schema). Sync steps follow the
    tool's sync policy (worker thread under its limiter, or inline). Any ``Exception`` ends the
    event ``failed``; cancellation ends it ``cancelled`` and propagates.

    Invoking this event directly skips governance (gates, policy, hooks) and history; the
    branch's action executor is the governed path.
    """

    tool: Tool = attrs.field(metadata={NOT_SERIALIZED: True})
    #: The tool's name, recorded with the event (derived; if passed, it must match).
    function: str = attrs.field(default=attrs.Factory(_tool_name, takes_self=True))
    arguments: dict[str, Any] = attrs.field(factory=dict, converter=_argument_dict)
    revalidate: Revalidator | None = attrs.field(default=None, metadata={NOT_SERIALIZED: True})
    context: Any = attrs.field(default=None, metadata={NOT_SERIALIZED: True})
    #: Whether *arguments* were already returned by :meth:`Tool.validate` (the act layer's
    #: transaction validates before governance and passes them on); then construction does
    #: not validate them a second time.
    validated: bool = attrs.field(default=False, repr=False, metadata={NOT_SERIALIZED: True})

    #: :meth:`as_fresh_event` shares these with the new call instead of copying them; note
    #: that after an invocation the arguments it copies are the preprocessed ones.
    _fresh_shared: ClassVar[frozenset[str]] = frozenset({"tool", "revalidate", "context"})

    def __attrs_post_init__(self) -> None:
        if self.function != self.tool.name:
            raise ValidationError(
                f"function {self.function!r} does not name tool {self.tool.name!r}",
                field="function",
            )
        if not self.validated:
            self.arguments = self.tool.validate(self.arguments)
            self.validated = True

    @classmethod
    def create(
        cls,
        tool: Tool,
        arguments: object,
        *,
        revalidate: Revalidator | None = None,
        context: Any = None,
    ) -> Self:
        """Build an uninvoked call; raises ValidationError for bad *arguments*."""
        return cls(tool=tool, arguments=arguments, revalidate=revalidate, context=context)

    @property
    def request(self) -> dict[str, Any]:
        """What a processor's permission check sees (``{"function", "arguments"}``)."""
        return {"function": self.function, "arguments": dict(self.arguments)}

    async def _invoke(self) -> Any:
        tool = self.tool
        arguments = self.arguments
        if tool.preprocessor is not None:
            processed = await tool._preprocess(dict(arguments))
            if not isinstance(processed, Mapping):
                raise TypeError(
                    f"the preprocessor of tool {tool.name!r} returned "
                    f"{type(processed).__name__}, not a mapping of arguments"
                )
            arguments = self.arguments = dict(processed)
            if self.revalidate is None:
                arguments = self.arguments = tool.validate(arguments)
        if self.revalidate is not None:
            arguments = self.arguments = dict(await self.revalidate(dict(arguments)))
        if tool.context_param is not None:
            arguments = {**arguments, tool.context_param: self.context}
        response = await tool._call(arguments)
        if tool.postprocessor is not None:
            response = await tool._postprocess(response)
        return response
