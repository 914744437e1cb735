"""Strict JSON for everything the conversation layer writes out.

Every export and every serialized message must parse back with a strict JSON parser:
``json.dumps(value, allow_nan=False)`` always succeeds on what :func:`strict_json` returns.
It renders a value with :func:`lionexec._jsonable.jsonable` (cycles, depth and unknown objects
become markers) and then replaces what strict JSON cannot hold:

* a non-finite float becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``;
* an int with more than :data:`MAX_INT_DIGITS` decimal digits (Python refuses to print it)
  becomes the string ``"<int with N bits>"``.

Both passes build fresh containers, so the result shares nothing mutable with *value*.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from .._jsonable import jsonable

__all__ = ["MAX_INT_DIGITS", "dumps", "strict_json"]

#: Ints with more decimal digits than this are rendered as strings (CPython's default
#: ``sys.int_info.default_max_str_digits``; it refuses to print longer ones).
MAX_INT_DIGITS: Final = 4300
# Any int below this many bits has at most MAX_INT_DIGITS digits (log10(2) * 14284 < 4300).
_MAX_INT_BITS: Final = 14284

_SCALARS: Final = frozenset({str, bool, type(None)})


def strict_json(value: object) -> Any:
    """A strict-JSON rendering of *value* (fresh containers; never raises)."""
    rendered = jsonable(value)
    if type(rendered) in _SCALARS:
        return rendered
    return _strict(rendered)


def dumps(value: object) -> str:
    """``json.dumps`` of :func:`strict_json` of *value*, non-ASCII kept as is."""
    return json.dumps(strict_json(value), ensure_ascii=False, allow_nan=False)


def _strict(value: Any) -> Any:
    # jsonable's output is bounded in depth (it cuts at its MAX_DEPTH), so recursion is safe.
    cls = type(value)
    if cls is dict:
        return {str(k): _strict(v) for k, v in value.items()}
    if cls is list or cls is tuple:
        return [_strict(v) for v in value]
    if cls is float or isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if cls is int or (isinstance(value, int) and not isinstance(value, bool)):
        if value.bit_length() >= _MAX_INT_BITS and _too_long(value):
            return f"<int with {value.bit_length()} bits>"
        return int(value)
    if cls in _SCALARS or isinstance(value, str | bool):
        return value
    return str(value)


def _too_long(value: int) -> bool:
    try:
        return len(str(abs(value))) > MAX_INT_DIGITS
    except ValueError:  # more digits than the interpreter will print
        return True
