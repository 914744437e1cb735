"""The one cattrs converter that knows every lionexec record.

Everything lionexec writes (event records, log entries, conversation histories) goes through
:data:`converter`, built by :func:`make_converter` on cattrs' preconf JSON converter. The
global cattrs converter is never touched, so applications may configure theirs freely.

This module is an edge: it imports every layer's records (and each layer's private
``_serde`` module, which generates that layer's hooks), and no layer imports it. Lower layers
that need the converter (:meth:`Event.to_dict <lionexec.engine.Event.to_dict>`, a tool's or a
policy's record) find it in a tiny registration module at the bottom, where this module
registers :func:`make_converter` when it is imported (``import lionexec`` imports it). The
shared :data:`converter` is built on first use.

Event records are one-way: they unstructure for logs and inspection, and never structure back
into a live event (``Event.from_dict`` always raises). Values of unknown type (responses,
arguments, errors, metadata) go through :func:`jsonable`, which never raises.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import JsonConverter
from cattrs.preconf.json import make_converter as _make_json_converter

from . import _unstructure
from ._failures import ReportedFailure
from ._jsonable import exception_record, jsonable
from ._public import publish as _publish
from .conversation import _serde as conversation_serde
from .engine._event import NOT_SERIALIZED, Event
from .engine._execution import Execution, UnsetType
from .engine._status import EventStatus
from .governance import _serde as governance_serde
from .tools import _serde as tools_serde

__all__ = ["converter", "dumps", "exception_record", "jsonable", "make_converter"]

#: Each layer's ``configure(converter)``, lowest layer first.
_LAYER_HOOKS: tuple[Callable[[JsonConverter], None], ...] = (
    tools_serde.configure,
    governance_serde.configure,
    conversation_serde.configure,
)


def make_converter() -> JsonConverter:
    """Build a fresh converter with every lionexec hook registered."""
    conv = _make_json_converter()
    # Records are read as written: a scalar of another type is refused, naming the field,
    # not converted (``5`` is not the text ``"5"``, ``2.7`` not the count ``2``). The hooks
    # also get the subclasses (bool, IntEnum, StrEnum): those are honoured by *cls*.
    conv.register_structure_hook(str, _exactly_str)
    conv.register_structure_hook(int, _exactly_int)
    conv.register_structure_hook(float, _a_number)
    conv.register_unstructure_hook(EventStatus, lambda s: s.value)
    conv.register_structure_hook(EventStatus, lambda v, _: EventStatus(v))
    conv.register_unstructure_hook(uuid.UUID, str)
    conv.register_structure_hook(uuid.UUID, _a_uuid)
    conv.register_unstructure_hook(
        Execution,
        make_dict_unstructure_fn(
            Execution,
            conv,
            duration=override(unstruct_hook=_unset_as_none),
            response=override(unstruct_hook=jsonable),
            error=override(unstruct_hook=_error_value),
            retryable=override(unstruct_hook=_unset_as_none),
        ),
    )
    conv.register_unstructure_hook_factory(
        lambda cls: isinstance(cls, type) and issubclass(cls, Event),
        lambda cls: _event_unstructure_fn(conv, cls),
    )
    conv.register_unstructure_hook(
        ReportedFailure,
        make_dict_unstructure_fn(
            ReportedFailure, conv, error=override(unstruct_hook=exception_record)
        ),
    )
    for configure in _LAYER_HOOKS:
        configure(conv)
    return conv


def _a_uuid(value: Any, _: type) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        return uuid.UUID(value)  # ValueError for text that is not one
    raise TypeError(f"expected a UUID string, got {type(value).__name__}")


def _exactly_str(value: Any, cls: type) -> Any:
    if isinstance(value, str):
        return value if cls is str else cls(value)  # a StrEnum: its member
    raise TypeError(f"expected a string, got {type(value).__name__}")


def _exactly_int(value: Any, cls: type) -> Any:
    if cls is bool:  # (a subclass of int: dispatched here)
        if type(value) is bool:
            return value
        raise TypeError(f"expected a boolean, got {type(value).__name__}")
    if isinstance(value, int) and not isinstance(value, bool):
        return value if cls is int else cls(value)  # an IntEnum: its member
    raise TypeError(f"expected an integer, got {type(value).__name__}")


def _a_number(value: Any, cls: type) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if cls is float else cls(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _unset_as_none(value: Any) -> Any:
    return None if isinstance(value, UnsetType) else value


def _error_value(error: Any) -> Any:
    return exception_record(error) if isinstance(error, BaseException) else jsonable(error)


def _event_unstructure_fn(conv: JsonConverter, cls: type[Event]) -> Callable[[Any], Any]:
    overrides: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.name.startswith("_") or field.metadata.get(NOT_SERIALIZED):
            overrides[field.name] = override(omit=True)
        elif field.name == "execution":
            pass  # the Execution hook above
        elif field.name != "id":
            overrides[field.name] = override(unstruct_hook=jsonable)
    return make_dict_unstructure_fn(cls, conv, **overrides)


_unstructure.register(make_converter)

if TYPE_CHECKING:
    #: The shared converter (built on first use). Use it, or build your own with
    #: :func:`make_converter`.
    converter: JsonConverter


def __getattr__(name: str) -> Any:
    if name == "converter":
        return _unstructure.get()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dumps(value: Any) -> str:
    """Serialize any lionexec record (or plain value) to a strict JSON string; never raises
    for a value the converter can unstructure.

    The value is unstructured by the shared converter, then rendered as :func:`jsonable`
    renders values (so ``nan``, ``inf`` and ``-inf`` become ``"NaN"``, ``"Infinity"`` and
    ``"-Infinity"``, a lone surrogate U+FFFD, nesting past 100 levels a marker), and encoded
    with ``allow_nan=False`` (ASCII only, as :func:`json.dumps` does by default). A record
    whose values strict JSON can hold reads back (``converter.structure(json.loads(text),
    cls)``) as it was.
    """
    return json.dumps(jsonable(_unstructure.get().unstructure(value)), allow_nan=False)


_publish(__name__, globals(), include=("lionexec._jsonable",))
