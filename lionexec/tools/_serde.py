"""cattrs hooks for the tools layer; :func:`lionexec.serialization.make_converter` calls them."""

from __future__ import annotations

import copy
from typing import Any

from cattrs.preconf.json import JsonConverter

from .tool import Tool


def configure(converter: JsonConverter) -> None:
    """Register this layer's (un)structure hooks on *converter*.

    A :class:`Tool` unstructures to a record (no callables, one way). A
    :class:`~lionexec.tools.FunctionCalling` needs no hook: its ``function`` and ``arguments``
    are ordinary fields of the generic event record.
    """
    converter.register_unstructure_hook(Tool, _unstructure_tool)


def _unstructure_tool(tool: Tool) -> dict[str, Any]:
    from lionexec._jsonable import jsonable

    limiter = tool.limiter
    return {
        "name": tool.name,
        "description": tool.description,
        "schema": copy.deepcopy(tool.schema),
        "options": {
            "request_class": _qualname(tool.request_class),
            "strict": tool.strict,
            "preprocessor": _qualname(tool.preprocessor),
            "preprocessor_kwargs": jsonable(tool.preprocessor_kwargs),
            "postprocessor": _qualname(tool.postprocessor),
            "postprocessor_kwargs": jsonable(tool.postprocessor_kwargs),
            "inline": tool.inline,
            "limiter_tokens": None if limiter is None else jsonable(limiter.total_tokens),
            "idempotent": tool.idempotent,
            "subject": tool.subject,
            "context_param": tool.context_param,
        },
    }


def _qualname(obj: object) -> str | None:
    if obj is None:
        return None
    target = getattr(obj, "func", obj)  # functools.partial
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    return f"{module}.{name}" if module else str(name)
