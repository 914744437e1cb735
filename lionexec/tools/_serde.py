"""cattrs hooks for the tools layer; :func:`lionexec.serialization.make_converter` calls them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn_from_attrs, override
from cattrs.preconf.json import JsonConverter

from .._jsonable import jsonable
from ._arguments import ArgumentSpec
from ._tool import Tool

#: The fields of a tool record's top level; callables are never part of a record.
_HEAD = ("name", "description", "schema")


def configure(converter: JsonConverter) -> None:
    """Register this layer's (un)structure hooks on *converter*.

    A :class:`Tool` unstructures to ``{"name", "description", "schema", "options"}`` (no
    callables, one way): ``options`` are its run options, with callables named by qualified
    name and the limiter given as its token count. A
    :class:`~lionexec.tools.FunctionCalling` needs no hook: its ``function`` and ``arguments``
    are ordinary fields of the generic event record.
    """
    by_name = override(unstruct_hook=_qualname)
    as_json = override(unstruct_hook=jsonable)
    options: dict[str, Any] = {
        "preprocessor": by_name,
        "preprocessor_kwargs": as_json,
        "postprocessor": by_name,
        "postprocessor_kwargs": as_json,
        "inline": override(),
        "limiter": override(rename="limiter_tokens", unstruct_hook=_tokens),
        "idempotent": override(),
        "subject": override(),
        "subject_kind": override(),
    }
    #: Options that are argument rules (:class:`ArgumentSpec` fields).
    rules: dict[str, Any] = {
        "request_class": by_name,
        "strict": override(),
        "context_param": override(),
    }
    attrs.resolve_types(Tool)
    attrs.resolve_types(ArgumentSpec)
    fields = attrs.fields(Tool)
    head = make_dict_unstructure_fn_from_attrs(
        [field for field in fields if field.name in _HEAD],
        Tool,
        converter,
        schema=override(unstruct_hook=copy.deepcopy),
    )
    rest = make_dict_unstructure_fn_from_attrs(
        [field for field in fields if field.name in options], Tool, converter, **options
    )
    spec = make_dict_unstructure_fn_from_attrs(
        [getattr(attrs.fields(ArgumentSpec), name) for name in rules],
        ArgumentSpec,
        converter,
        **rules,
    )

    def unstructure_tool(tool: Tool) -> dict[str, Any]:
        record = head(tool)
        arguments = spec(tool.arguments)
        context_param = arguments.pop("context_param")
        record["options"] = {**arguments, **rest(tool), "context_param": context_param}
        return record

    converter.register_unstructure_hook(Tool, unstructure_tool)


def _tokens(limiter: Any) -> Any:
    return None if limiter is None else jsonable(limiter.total_tokens)


def _qualname(obj: Callable[..., Any] | type | None) -> str | None:
    if obj is None:
        return None
    target = getattr(obj, "func", obj)  # functools.partial
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    return f"{module}.{name}" if module else str(name)
