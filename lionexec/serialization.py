"""The one cattrs converter that knows every lionexec record.

Everything lionexec writes (event records, log entries, conversation histories) goes through
:data:`converter`, built by :func:`make_converter` on cattrs' preconf JSON converter. The
global cattrs converter is never touched, so applications may configure theirs freely.

Event records are one-way: they unstructure for logs and inspection, and never structure back
into a live event (``Event.from_dict`` always raises). Values of unknown type (responses,
arguments, errors, metadata) go through :func:`lionexec._jsonable.jsonable`, which never raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import JsonConverter
from cattrs.preconf.json import make_converter as _make_json_converter

from ._jsonable import exception_record, jsonable
from .engine.event import NOT_SERIALIZED, Event
from .engine.execution import Execution, UnsetType
from .engine.status import EventStatus

__all__ = ["converter", "dumps", "exception_record", "jsonable", "make_converter"]


def make_converter() -> JsonConverter:
    """Build a fresh converter with every lionexec hook registered."""
    conv = _make_json_converter()
    conv.register_unstructure_hook(EventStatus, lambda s: s.value)
    conv.register_structure_hook(EventStatus, lambda v, _: EventStatus(v))
    conv.register_unstructure_hook(uuid.UUID, str)
    conv.register_structure_hook(
        uuid.UUID, lambda v, _: v if isinstance(v, uuid.UUID) else uuid.UUID(v)
    )
    conv.register_unstructure_hook(Execution, _unstructure_execution)
    conv.register_unstructure_hook_factory(
        lambda cls: isinstance(cls, type) and issubclass(cls, Event),
        lambda cls: _event_unstructure_fn(conv, cls),
    )
    for configure in _layer_hooks():
        configure(conv)
    return conv


def _unstructure_execution(execution: Execution) -> dict[str, Any]:
    error = execution.error
    return {
        "status": execution.status.value,
        "duration": None if isinstance(execution.duration, UnsetType) else execution.duration,
        "response": jsonable(execution.response),
        "error": exception_record(error) if isinstance(error, BaseException) else error,
        "retryable": None if isinstance(execution.retryable, UnsetType) else execution.retryable,
    }


def _event_unstructure_fn(conv: JsonConverter, cls: type[Event]) -> Callable[[Any], Any]:
    overrides: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name.startswith("_") or field.metadata.get(NOT_SERIALIZED):
            overrides[field.name] = override(omit=True)
        elif field.name == "execution":
            overrides[field.name] = override(unstruct_hook=_unstructure_execution)
        elif field.name != "id":
            overrides[field.name] = override(unstruct_hook=jsonable)
    return make_dict_unstructure_fn(cls, conv, **overrides)


def _layer_hooks() -> list[Callable[[JsonConverter], None]]:
    """Each upper layer's ``configure(converter)``; imported here so layers stay independent."""
    from .act import _serde as act_serde
    from .conversation import _serde as conversation_serde
    from .governance import _serde as governance_serde
    from .tools import _serde as tools_serde

    return [
        tools_serde.configure,
        governance_serde.configure,
        conversation_serde.configure,
        act_serde.configure,
    ]


#: The shared converter. Use it, or build your own with :func:`make_converter`.
converter: JsonConverter = make_converter()


def dumps(value: Any) -> str:
    """Serialize any lionexec record (or plain value) to a JSON string."""
    return converter.dumps(value)
