"""cattrs hooks for the governance layer, generated from the records' fields.

Registered by :func:`lionexec.serialization.make_converter`.

Records that hold callables (a context's tool, a verdict's handler) render them by name or
leave them out; they are for logs and do not load back. A :class:`PermissionPolicy`
round-trips through :meth:`PermissionPolicy.to_dict` / :meth:`PermissionPolicy.from_dict`,
without its escalation handler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import JsonConverter

from .._jsonable import exception_record, jsonable
from ..tools import Tool
from ._context import CallContext, ToolInvocation
from ._gates import GateDenied
from ._hooks import PreHookResult
from ._policy import PermissionPolicy


def _callable_name(value: Callable[..., Any] | None) -> str | None:
    if value is None:
        return None
    return getattr(value, "__qualname__", None) or repr(value)


def _error(exc: BaseException | None) -> dict[str, Any] | None:
    return None if exc is None else exception_record(exc)


def _rules(rules: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    return {tool: list(patterns) for tool, patterns in rules.items()}


def configure(converter: JsonConverter) -> None:
    """Register this layer's (un)structure hooks on *converter*."""
    # Some annotations name types imported only for type checking; resolve them here, where
    # they are importable, before cattrs generates hooks from them.
    names = {"Tool": Tool, "CallContext": CallContext}
    for cls in (CallContext, PermissionPolicy):
        attrs.resolve_types(cls, localns=names)
    as_json = override(unstruct_hook=jsonable)
    as_error = override(unstruct_hook=_error)
    as_rules = override(unstruct_hook=_rules)

    def register(cls: type, **overrides: Any) -> Callable[[Any], dict[str, Any]]:
        hook: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(
            cls, converter, **overrides
        )
        converter.register_unstructure_hook(cls, hook)
        return hook

    register(ToolInvocation, arguments=as_json)
    context_fields = make_dict_unstructure_fn(
        CallContext, converter, arguments=as_json, tool=override(omit=True)
    )

    def context(value: CallContext) -> dict[str, Any]:
        record = context_fields(value)
        record["subject_argument"] = value.subject_argument
        return record

    converter.register_unstructure_hook(CallContext, context)
    register(
        PermissionPolicy,
        allow=as_rules,
        deny=as_rules,
        escalate=as_rules,
        on_escalate=override(omit=True),
    )
    converter.register_structure_hook(
        PermissionPolicy, lambda data, _: PermissionPolicy.from_dict(data)
    )
    register(GateDenied, error=as_error)
    register(PreHookResult, error=as_error, handler=override(unstruct_hook=_callable_name))
