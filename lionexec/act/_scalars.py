"""Checks the act transaction makes of arguments that validation normalized: whether they
still hold what the request recorded (then the request's dict is shared), and whether a NaN
or an infinity got in (the reader refuses them in what the model sent; a normalizer may not)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["has_non_finite", "same_scalars"]

_SCALARS = frozenset({str, int, float, bool, type(None)})


def same_scalars(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether *a* and *b* hold the same scalar values of the same types under the same keys
    (``1``, ``1.0`` and ``True`` differ here); ``False`` for anything nested."""
    if len(a) != len(b):
        return False
    for key, value in a.items():
        other = b.get(key, a)
        if type(value) is not type(other) or type(value) not in _SCALARS or value != other:
            return False
    return True


def has_non_finite(value: object) -> bool:
    """Whether a NaN or an infinity is anywhere in *value* (JSON-shaped containers).

    Each container is walked once, however many paths lead to it (and a container inside
    itself ends the walk there): iterative, so no nesting depth can raise."""
    seen: set[int] = set()
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        cls = type(item)
        if cls is float:
            if not math.isfinite(item):
                return True
        elif (cls is dict or cls is list or cls is tuple) and id(item) not in seen:
            seen.add(id(item))
            stack.extend(item.values() if cls is dict else item)
    return False
