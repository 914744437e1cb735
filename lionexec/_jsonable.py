"""Total conversion of arbitrary Python values to JSON-compatible data.

This is the observational half of serialization (ADR-0003 D3): it turns whatever an event
produced into something a log can hold, and it never raises. The cattrs converter in
:mod:`lionexec.serialization` delegates here for values whose type is not known in advance
(responses, arguments, errors).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import pathlib
import uuid
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import attrs

__all__ = [
    "CIRCULAR",
    "MAX_DEPTH",
    "UNSERIALIZABLE",
    "JSONValue",
    "exception_record",
    "jsonable",
]

JSONValue: TypeAlias = (
    Any  # None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]
)

#: How deep nested containers and exception groups are followed before a marker is emitted.
#: Inherited from the reference implementation (ADR-0003 D3); it bounds diagnostic growth.
MAX_DEPTH: Final = 100
UNSERIALIZABLE: Final = "<unserializable>"
CIRCULAR: Final = "<circular reference>"
MAX_DEPTH_MARKER: Final = "<max depth exceeded>"

_PRIMITIVES: Final = frozenset({type(None), bool, int, float, str})
_CONTAINERS: Final = frozenset({dict, list, tuple})


def jsonable(value: object) -> JSONValue:
    """Return a JSON-compatible rendering of *value*; never raises.

    Simple values are returned as they are; mappings, sequences, sets, attrs instances and
    dataclasses are converted recursively; exceptions become ``{"error", "message"}`` records;
    a value reached again through its own contents becomes ``"<circular reference>"``; nesting
    deeper than :data:`MAX_DEPTH` becomes ``"<max depth exceeded>"``; anything else becomes
    ``"<unserializable>"``.
    """
    if type(value) in _PRIMITIVES:
        return value
    try:
        return _convert(value, 0, set())
    except Exception:  # a hostile __iter__, __eq__ or property; still never raise
        return UNSERIALIZABLE


def _convert(value: object, depth: int, path: set[int]) -> JSONValue:
    cls = type(value)
    if cls in _PRIMITIVES:
        return value
    if cls in _CONTAINERS:
        return _enter(value, depth, path)
    if isinstance(value, enum.Enum):
        return _convert(value.value, depth, path)
    if isinstance(value, bool | int | float | str):  # subclasses of the primitives
        return value
    if isinstance(value, BaseException):
        return _exception(value, depth, path)
    if isinstance(value, uuid.UUID | pathlib.PurePath):
        return str(value)
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    return _enter(value, depth, path)


def _enter(value: object, depth: int, path: set[int]) -> JSONValue:
    """Convert a container, minding the depth cap and cycles."""
    if type(value) in _CONTAINERS and not value:
        return {} if type(value) is dict else []
    if depth >= MAX_DEPTH:
        return MAX_DEPTH_MARKER
    key = id(value)
    if key in path:
        return CIRCULAR
    path.add(key)
    try:
        return _convert_container(value, depth + 1, path)
    finally:
        path.discard(key)


def _convert_container(value: object, depth: int, path: set[int]) -> JSONValue:
    if isinstance(value, Mapping):
        return {_key(k): _convert(v, depth, path) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_convert(v, depth, path) for v in value]
    cls = type(value)
    if attrs.has(cls):
        return {
            f.name: _convert(getattr(value, f.name), depth, path)
            for f in attrs.fields(cls)
            if not f.name.startswith("_")
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _convert(getattr(value, f.name), depth, path)
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    dump = getattr(value, "model_dump", None)  # pydantic-style models from user code
    if callable(dump):
        return _convert(dump(), depth, path)
    return UNSERIALIZABLE


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, enum.Enum):
        return str(key.value)
    return _safe_str(key)


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def exception_record(exc: BaseException) -> dict[str, JSONValue]:
    """Render an exception as ``{"error": <class name>, "message": <text>}``; never raises.

    An exception group adds ``"exceptions"``, its members rendered the same way. Groups nested
    deeper than :data:`MAX_DEPTH` end in a ``MaxDepthExceeded`` record, and a group that contains
    itself ends in a ``CircularReference`` record.
    """
    try:
        return _exception(exc, 0, set())
    except Exception:
        return {"error": "UnserializableError", "message": UNSERIALIZABLE}


def _exception(exc: BaseException, depth: int, path: set[int]) -> dict[str, JSONValue]:
    key = id(exc)
    if key in path:
        return {"error": "CircularReference", "message": CIRCULAR}
    if depth >= MAX_DEPTH:
        return {"error": "MaxDepthExceeded", "message": MAX_DEPTH_MARKER}
    record: dict[str, JSONValue] = {"error": type(exc).__name__, "message": _safe_str(exc)}
    if isinstance(exc, BaseExceptionGroup):
        path.add(key)
        try:
            record["exceptions"] = [_exception(e, depth + 1, path) for e in exc.exceptions]
        finally:
            path.discard(key)
    return record
