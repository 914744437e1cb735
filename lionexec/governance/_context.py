"""The one call context every phase of a tool call sees, from the gate to the evidence."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from lionexec._slots import builder

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["CallContext", "ToolInvocation", "frozen_arguments"]


def frozen_arguments(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of *arguments* (a :class:`types.MappingProxyType` over a new dict).

    The copy is shallow: nested values are shared with the caller and must be treated as
    read-only too.
    """
    if type(arguments) is not dict and not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a mapping, not {type(arguments).__name__}")
    for key in arguments:
        if not isinstance(key, str):
            raise TypeError(f"argument names must be strings, not {key!r}")
    return MappingProxyType(dict(arguments))


@attrs.frozen
class ToolInvocation:
    """A proposed tool call, as session gates see it.

    ``arguments`` are the normalized arguments (validated against the tool's schema), held
    read-only. Invocations compare by value; they hash by everything except the arguments.
    """

    function: str
    arguments: Mapping[str, Any] = attrs.field(
        factory=dict, converter=frozen_arguments, hash=False
    )
    call_id: str | None = None
    branch_id: str | None = None

    #: ``_for_call(function, arguments, call_id, branch_id)``: an invocation holding
    #: *arguments* as they are, which must be a read-only view
    #: (:class:`types.MappingProxyType`) of a dict with string keys that nobody changes: no
    #: converter runs and nothing is copied. For the act transaction, which asks a gate
    #: without building a call context for it (set below, once the class exists).
    _for_call: ClassVar[Callable[[str, Mapping[str, Any], str | None, str | None], ToolInvocation]]


@attrs.frozen(kw_only=True)
class CallContext:
    """Everything a phase of one tool call may look at, fixed for that phase.

    Built by the act layer once the arguments are normalized; every phase after that
    (authorize, policy, pre-hooks, transform, revalidate, invoke, evidence) receives the same
    context. A transform that changes the arguments produces a new context with
    :meth:`with_arguments`, which the following phases then see.

    Attributes:
        function: the tool name.
        arguments: the normalized arguments, read-only (see :func:`frozen_arguments`).
        call_id: the tool-call id the model sees (see :attr:`ActionRequestContent.call_id`).
        branch_id: the branch the call runs in, if any.
        tool: the resolved tool, or ``None`` if none was resolved.
        idempotency_key: the call's idempotency key, for the tool to pass downstream (a
            payment API's ``Idempotency-Key``, say): the tool's own
            (``Tool(idempotency_key=...)``, prefixed with the tool name) or, by default,
            ``"<branch_id>/<call_id>"``. A durable journal runs a completed key at most once.
    """

    function: str
    arguments: Mapping[str, Any] = attrs.field(
        factory=dict, converter=frozen_arguments, hash=False
    )
    call_id: str
    branch_id: str | None = None
    tool: Tool | None = attrs.field(default=None, eq=False, hash=False)
    idempotency_key: str | None = None

    @property
    def subject_argument(self) -> str | None:
        """The name of the argument the tool declares as its policy subject, if any."""
        tool = self.tool
        return None if tool is None else tool.subject

    def invocation(self) -> ToolInvocation:
        """This call as a session gate sees it (sharing the read-only arguments)."""
        # The arguments are already a read-only view of a dict nobody else holds: shared,
        # not frozen again (a gated call would pay for a second copy of its arguments).
        return _build_invocation(self.function, self.arguments, self.call_id, self.branch_id)

    @classmethod
    def for_call(
        cls,
        function: str,
        arguments: dict[str, Any],
        call_id: str,
        branch_id: str | None,
        tool: Tool | None,
        idempotency_key: str | None,
    ) -> CallContext:
        """A context that takes *arguments* over, for a caller that built them itself.

        *arguments* must be a ``dict`` with string keys that nobody else holds or changes
        (the act transaction passes a snapshot of the validated arguments): it is held
        read-only without another copy, and no converter runs, which a context built for
        every governed call would otherwise pay for. A subclass is built with its own
        initializer. The other fields are as the class describes them.
        """
        if cls is not CallContext:  # a subclass: its own initializer
            return cls(
                function=function,
                arguments=arguments,
                call_id=call_id,
                branch_id=branch_id,
                tool=tool,
                idempotency_key=idempotency_key,
            )
        return _build_context(
            function, MappingProxyType(arguments), call_id, branch_id, tool, idempotency_key
        )

    _for_call = for_call  # (its earlier, private name)

    def with_arguments(self, arguments: Mapping[str, Any]) -> CallContext:
        """The same call with *arguments* instead (copied read-only)."""
        return attrs.evolve(self, arguments=arguments)


_build_invocation = builder(ToolInvocation, "function", "arguments", "call_id", "branch_id")
ToolInvocation._for_call = staticmethod(_build_invocation)
_build_context = builder(
    CallContext, "function", "arguments", "call_id", "branch_id", "tool", "idempotency_key"
)
