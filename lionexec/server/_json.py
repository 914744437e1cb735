"""Strict JSON both ways: :func:`loads` refuses what a hostile body may carry,
:func:`dumps` writes only what every JSON reader accepts."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any, Final

from .._jsonable import json_encoder, repeated_name, utf8_text

__all__ = ["BadJSON", "dumps", "loads"]

# -- strict JSON, both ways ----------------------------------------------------------------------


class BadJSON(ValueError):
    """A JSON text was refused. ``hostile``: it broke a limit (as opposed to a plain syntax
    error), so it is refused even where a syntax error is the model's to correct."""

    def __init__(self, message: str, *, hostile: bool) -> None:
        super().__init__(message)
        self.hostile = hostile


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON number (NaN and Infinity are refused)", hostile=True)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"the number {text[:40]} is too large for a float", hostile=True)
    return value


class _Repeated(BadJSON):
    """An object repeats a name: JSON readers differ on which value counts (Python's keeps
    the last, others the first), so it is refused rather than read one way."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        name = str(repeated_name(pairs))
        raise _Repeated(f"repeats the name {name[:40]!r} within one object", hostile=False)
    return mapping


#: One decoder for every parse (building one per call costs more than a small body's parse).
_DECODER: Final = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_object
)


def loads(data: str | bytes, *, max_depth: int, what: str = "body") -> Any:
    """Parse strict JSON (UTF-8): no ``NaN``/``Infinity``, no float overflow, bounded nesting.

    Raises :class:`BadJSON` whose message starts with *what*. Never raises anything else for
    bad input (deep nesting, 5,000-digit integers and undecodable bytes included).
    """
    try:
        text = data.decode() if isinstance(data, bytes) else data
        value = _DECODER.decode(text)
    except _Repeated as exc:  # not a limit broken: arguments are left to Branch.act's reader
        raise BadJSON(f"{what} {exc}", hostile=False) from None
    except BadJSON as exc:
        raise BadJSON(f"{what}: {exc}", hostile=True) from None
    except RecursionError:
        raise BadJSON(
            f"{what} is nested more than {max_depth} levels deep", hostile=True
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadJSON(f"{what} is not valid JSON: {exc}", hostile=False) from None
    except ValueError as exc:  # int conversion limits: a number with thousands of digits
        limit = sys.get_int_max_str_digits()
        message = f"{what} has an integer longer than {limit} digits"
        if "digits" not in str(exc):
            message = f"{what} is not valid JSON: {exc}"
        raise BadJSON(message, hostile=True) from None
    # Each level opens with a bracket, so a text with no more brackets than max_depth (in
    # strings or not) cannot nest deeper: counted in C, that spares the walk for almost
    # every body (a Python walk of each body would be a large part of a request's CPU).
    if (
        type(value) in (dict, list)
        and text.count("[") + text.count("{") > max_depth
        and _depth_exceeds(value, max_depth)
    ):
        raise BadJSON(f"{what} is nested more than {max_depth} levels deep", hostile=True)
    return value


def _depth_exceeds(value: dict[str, Any] | list[Any], max_depth: int) -> bool:
    """Whether *value* nests containers more than *max_depth* levels (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            return True
        for item in container.values() if type(container) is dict else container:
            if type(item) is dict or type(item) is list:
                stack.append((item, depth + 1))
    return False


def dumps(value: object) -> bytes:
    """Strict JSON bytes for *value* (``allow_nan=False`` holds; never raises).

    A non-finite float becomes ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, an int too long to
    print ``"<int with N bits>"``, anything else JSON cannot hold ``"<unserializable T>"``.
    The fast path is one encoding (``json.dumps``'s text); only a value it refuses is rewritten.
    """
    try:
        return _ENCODE(value).encode()
    except (ValueError, TypeError, RecursionError):
        return _ENCODE(_strict(value, 0)).encode()


#: ``json.dumps(value, ensure_ascii=False, allow_nan=False)``'s text with its encoder built once,
#: not per reply (building one costs more than encoding a small reply); a cycle raises
#: RecursionError, which :func:`dumps` rewrites like any value it refuses.
_ENCODE: Final = json_encoder(separators=(", ", ": "))


def _strict(value: Any, depth: int) -> Any:
    if depth > 200:
        return "<max depth exceeded>"
    if isinstance(value, str):
        return utf8_text(value)  # a lone surrogate cannot be sent as UTF-8: U+FFFD
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:
            return f"<int with {value.bit_length()} bits>"
        return value
    if isinstance(value, Mapping):
        return {utf8_text(str(k)): _strict(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v, depth + 1) for v in value]
    return f"<unserializable {type(value).__name__}>"


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _preview(value: object) -> str:
    text = repr(value) if isinstance(value, str) else dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."
