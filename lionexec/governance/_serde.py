"""cattrs hooks for the governance layer.

Registered by :func:`lionexec.serialization.make_converter`.

Records that hold callables (a context's tool, a failure's handler) render them by name; they
are for logs and do not load back. A :class:`PermissionPolicy` round-trips through
:meth:`PermissionPolicy.to_dict` / :meth:`PermissionPolicy.from_dict`, without its escalation
handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cattrs.preconf.json import JsonConverter

from .._jsonable import exception_record, jsonable
from .context import CallContext, ToolInvocation
from .gates import GateDenied, SubscriberFailure
from .hooks import HookFailure, PreHookResult
from .permissions import PermissionPolicy


def _callable_name(value: Callable[..., Any] | None) -> str | None:
    if value is None:
        return None
    return getattr(value, "__qualname__", None) or repr(value)


def _error(exc: BaseException | None) -> dict[str, Any] | None:
    return None if exc is None else exception_record(exc)


def _exactly(cls: type) -> Callable[[Any], bool]:
    return lambda t: t is cls


def configure(converter: JsonConverter) -> None:
    """Register this layer's (un)structure hooks on *converter*.

    Hooks are registered by predicate, so cattrs never resolves these classes' annotations
    (some name types that are imported only for type checking).
    """
    unstructure = converter.register_unstructure_hook_func

    def invocation(value: ToolInvocation) -> dict[str, Any]:
        return {
            "function": value.function,
            "arguments": jsonable(value.arguments),
            "call_id": value.call_id,
            "branch_id": value.branch_id,
        }

    def context(value: CallContext) -> dict[str, Any]:
        return {**invocation(value.invocation()), "subject_argument": value.subject_argument}

    def policy(value: PermissionPolicy) -> dict[str, Any]:
        def rules(r: Any) -> dict[str, list[str]]:
            return {tool: list(patterns) for tool, patterns in r.items()}

        return {
            "mode": value.mode,
            "allow": rules(value.allow),
            "deny": rules(value.deny),
            "escalate": rules(value.escalate),
        }

    unstructure(_exactly(ToolInvocation), invocation)
    unstructure(_exactly(CallContext), context)
    unstructure(_exactly(PermissionPolicy), policy)
    converter.register_structure_hook_func(
        _exactly(PermissionPolicy), lambda data, _: PermissionPolicy.from_dict(data)
    )
    unstructure(
        _exactly(GateDenied),
        lambda v: {
            "invocation": invocation(v.invocation),
            "reason": v.reason,
            "error": _error(v.error),
        },
    )
    unstructure(
        _exactly(PreHookResult),
        lambda v: {
            "allowed": v.allowed,
            "reason": v.reason,
            "error": _error(v.error),
            "handler": _callable_name(v.handler),
        },
    )
    unstructure(
        _exactly(HookFailure),
        lambda v: {
            "point": v.point.value,
            "handler": _callable_name(v.handler),
            "error": _error(v.error),
        },
    )
    unstructure(
        _exactly(SubscriberFailure),
        lambda v: {
            "payload": jsonable(v.payload),
            "callable": _callable_name(v.callable),
            "error": _error(v.error),
        },
    )
