"""Total conversion of arbitrary Python values to strict JSON data.

This is the observational half of serialization (an event's outcome is written out for logs
and diagnostics, never loaded back): it turns whatever an event produced into something a log
can hold, and it never raises. The cattrs converter in
:mod:`lionexec.serialization` delegates here for values whose type is not known in advance
(responses, arguments, errors).

What it returns is *strict* JSON data: ``json.dumps(jsonable(x), allow_nan=False)`` succeeds
for every ``x``, with or without ``ensure_ascii``, and the text encodes as UTF-8. Values strict
JSON cannot hold are rendered as strings:

* ``nan``, ``inf`` and ``-inf`` become ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the
  spellings of the JavaScript and Python JSON dialects, as strings);
* an int with more decimal digits than ``sys.get_int_max_str_digits()`` (4,300 by default;
  Python refuses to print it) becomes ``"<int with N bits>"``: its digits are never computed;
* a lone surrogate in a string (``"\\ud800"`` is valid JSON input) becomes U+FFFD.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import json
import math
import pathlib
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

import attrs

__all__ = [
    "CIRCULAR",
    "INFINITY",
    "MAX_DEPTH",
    "NAN",
    "NEG_INFINITY",
    "UNSERIALIZABLE",
    "JSONValue",
    "exception_record",
    "is_flat_json",
    "is_unicode",
    "json_encoder",
    "jsonable",
    "repeated_name",
    "utf8_text",
]

JSONValue: TypeAlias = (
    Any  # None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]
)

#: How deep nested containers and exception groups are followed before a marker is emitted.
#: The same bound as the reference implementation's; it bounds diagnostic growth.
MAX_DEPTH: Final = 100
UNSERIALIZABLE: Final = "<unserializable>"
CIRCULAR: Final = "<circular reference>"
MAX_DEPTH_MARKER: Final = "<max depth exceeded>"

_CONTAINERS: Final = frozenset({dict, list, tuple})
NAN: Final = "NaN"
INFINITY: Final = "Infinity"
NEG_INFINITY: Final = "-Infinity"
# Ints below this many bits have at most 603 digits, fewer than any limit Python allows
# (sys.int_info.str_digits_check_threshold is 640): no need to look the limit up.
_SMALL_INT_BITS: Final = 2000


def jsonable(value: object) -> JSONValue:
    """Return a strict-JSON rendering of *value*; never raises.

    Strings, bools, ``None``, finite floats and printable ints are returned as they are (the
    exceptions are listed in the module docstring); mappings, sequences, sets, attrs instances
    and dataclasses are converted recursively (mapping keys become strings); exceptions
    become ``{"error", "message"}`` records; a value reached again through its own contents
    becomes ``"<circular reference>"``; nesting deeper than :data:`MAX_DEPTH` becomes
    ``"<max depth exceeded>"``; anything else, or a container whose conversion raised (a
    hostile ``__iter__``, ``__eq__`` or property), becomes ``"<unserializable>"``.
    """
    cls = type(value)
    if cls is str:
        return utf8_text(value)  # type: ignore[arg-type]
    if cls is bool or value is None:
        return value
    if cls is dict:
        flat = _flat(value)  # type: ignore[arg-type]
        if flat is not None:
            return flat
    try:
        return _convert(value, 0, set())
    except Exception:  # even the marker logic failed (say, RecursionError); still never raise
        return UNSERIALIZABLE


def _flat(value: dict[Any, Any]) -> dict[str, JSONValue] | None:
    """A dict of plain scalars under plain string keys (a tool's usual arguments and many
    outputs) converted exactly as :func:`_convert` would, without its per-container
    machinery; ``None`` for any other dict. (The journal converts each call's arguments
    twice and its output once, so this is on every journaled call's path.)"""
    out: dict[str, JSONValue] = {}
    for key, item in value.items():
        if type(key) is not str:
            return None
        kind = type(item)
        if kind is str:
            item = utf8_text(item)
        elif kind is int:
            item = _int(item)
        elif kind is float:
            item = _float(item)
        elif kind is not bool and item is not None:
            return None
        out[utf8_text(key)] = item
    return out


def is_flat_json(value: dict[Any, Any]) -> bool:
    """Whether :func:`jsonable` renders the dict *value* as an equal dict, changing nothing:
    keys that are valid Unicode strings, values that are valid Unicode strings, booleans,
    ``None``, ints below 2,000 bits or finite floats, each of its exact type. Such a dict is
    its own rendering (a tool's usual output: encoded as it is, without a converted copy)."""
    for key, item in value.items():
        if type(key) is not str or not (_isascii(key) or is_unicode(key)):
            return False
        kind = type(item)
        if kind is str:
            if _isascii(item) or is_unicode(item):
                continue
            return False
        if kind is int:
            if item.bit_length() < _SMALL_INT_BITS:
                continue
            return False
        if kind is float:
            if math.isfinite(item):
                continue
            return False
        if kind is not bool and item is not None:
            return False
    return True


def _convert(value: object, depth: int, path: set[int]) -> JSONValue:
    cls = type(value)
    if cls is str:
        return utf8_text(value)  # type: ignore[arg-type]
    if cls is bool or value is None:
        return value
    if cls is int:
        return _int(value)  # type: ignore[arg-type]
    if cls is float:
        return _float(value)  # type: ignore[arg-type]
    if cls in _CONTAINERS:
        return _enter(value, depth, path)
    if isinstance(value, enum.Enum):
        return _convert(value.value, depth, path)
    # Subclasses of the primitives (bool has none): json.dumps reads them as their base type.
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return utf8_text(value)
    if isinstance(value, BaseException):
        return _exception(value, depth, path)
    if isinstance(value, uuid.UUID | pathlib.PurePath):
        return utf8_text(str(value))  # a path may hold surrogate escapes
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
    except Exception:  # a hostile container: only this value is lost, not its parent
        return UNSERIALIZABLE
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


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return NAN if math.isnan(value) else (INFINITY if value > 0 else NEG_INFINITY)


def _int(value: int) -> int | str:
    bits = value.bit_length()
    if bits < _SMALL_INT_BITS:
        return value
    limit = sys.get_int_max_str_digits()
    if limit == 0 or abs(value) < _power_of_ten(limit):  # at most `limit` digits
        return value
    return f"<int with {bits} bits>"


@functools.lru_cache(maxsize=4)
def _power_of_ten(exponent: int) -> int:
    return int(10**exponent)


def repeated_name(pairs: list[tuple[str, Any]]) -> str | None:
    """The first name a JSON object's *pairs* (``object_pairs_hook``'s argument) repeat, or
    ``None``: JSON readers differ on which value of a repeated name counts (Python's
    keeps the last, others the first), so a reader that must agree with others refuses it."""
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            return name
        seen.add(name)
    return None


def is_unicode(value: str) -> bool:
    """Whether *value* encodes as UTF-8: it holds no lone surrogate (``"\\ud800"`` is valid
    JSON input, and so can reach a string a model sent)."""
    # str's own methods: a str subclass cannot vouch for itself by overriding them
    if _isascii(value):
        return True
    try:
        _encode(value, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_text(value: str) -> str:
    """*value*, with any lone surrogate replaced by U+FFFD (so it encodes as UTF-8)."""
    if is_unicode(value):
        return value
    # Pairs written as two code points are joined, lone halves become U+FFFD.
    return _encode(value, "utf-16", "surrogatepass").decode("utf-16", "replace")


_isascii: Final = str.isascii
_encode: Final = str.encode


def _key(key: object) -> str:
    if isinstance(key, str):
        return utf8_text(key)
    if isinstance(key, enum.Enum):
        return _key(key.value)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(_int(key))
    return _safe_str(key)


def _safe_str(value: object) -> str:
    try:
        return utf8_text(str(value))
    except Exception:
        return f"<unprintable {utf8_text(type(value).__name__)}>"


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
    record: dict[str, JSONValue] = {
        "error": utf8_text(type(exc).__name__),
        "message": _safe_str(exc),
    }
    if isinstance(exc, BaseExceptionGroup):
        path.add(key)
        try:
            record["exceptions"] = [_exception(e, depth + 1, path) for e in exc.exceptions]
        finally:
            path.discard(key)
    return record


def json_encoder(
    *,
    separators: tuple[str, str] = (",", ":"),
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> Callable[[Any], str]:
    """``json.dumps(value, allow_nan=False, separators=..., sort_keys=..., ensure_ascii=...)``
    as one reusable function (compact by default), for values that hold no reference cycle
    (what :func:`jsonable` returns, and records built from it).

    The text is the same as ``json.dumps``'s (the same C encoder makes it); the encoder is
    built once instead of on every call, which halves the time for a message-sized record
    (the journal and the server encode one or more per call). A
    cycle raises ``RecursionError`` rather than ``ValueError``: there is no
    circular-reference check.
    """
    item_separator, key_separator = separators
    encoder = json.JSONEncoder(
        separators=separators,
        ensure_ascii=ensure_ascii,
        allow_nan=False,
        sort_keys=sort_keys,
        check_circular=False,
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return encoder.encode
    strings = (
        json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    )
    # (the arguments JSONEncoder.iterencode passes: markers, default, string encoder, indent,
    # key separator, item separator, sort_keys, skipkeys, allow_nan)
    chunks = make(
        None, encoder.default, strings, None, key_separator, item_separator, sort_keys,
        False, False,
    )  # fmt: skip
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode
