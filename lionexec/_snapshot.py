"""Private copies of values lionexec records, so nothing outside can rewrite evidence.

:func:`snapshot` is a deep copy with a fast path for the JSON-shaped values tool calls are made
of (dicts with string keys, lists, tuples and scalars); anything else goes through
:func:`copy.deepcopy`. A leaf that cannot be copied (a socket, a lock) is kept by reference,
and the containers around it are still copied; containers nested past the interpreter's
recursion limit are kept by reference whole. Recording a value must never fail.
"""

from __future__ import annotations

import copy
from typing import Any, Final, TypeVar

__all__ = ["atoms_only", "snapshot"]

T = TypeVar("T")

#: Immutable scalars: returned as they are.
_ATOMS: Final = frozenset({str, int, float, bool, type(None), bytes, complex})


def snapshot(value: T) -> T:
    """A deep copy of *value* that shares nothing mutable with it; never raises.

    Cost: one dict or list per container for JSON-shaped values (about 0.3 µs for a small
    argument dict); ``copy.deepcopy`` for other objects.
    """
    cls = type(value)
    if cls in _ATOMS:
        return value
    if cls is dict and atoms_only(value):  # the usual arguments: a shallow copy is enough
        return value.copy()  # type: ignore[attr-defined, no-any-return]
    try:
        copied: T = _copy(value, {})
        return copied
    except Exception:  # uncopyable, or too deep (RecursionError): recording must not fail
        return value


def atoms_only(mapping: Any) -> bool:
    """Whether every value of the ``dict`` *mapping* is an immutable scalar (nothing in it
    can be changed through it)."""
    for item in mapping.values():  # noqa: SIM110 (a loop is faster than all())
        if type(item) not in _ATOMS:
            return False
    return True


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    """Deep-copy *value*; a container met again (shared, or inside itself) is copied once
    and shared in the copy too, as :func:`copy.deepcopy` does: a value of *n* distinct
    containers costs *n* copies, however many paths lead to them."""
    cls = type(value)
    if cls in _ATOMS:
        return value
    if cls is dict or cls is list:
        key = id(value)
        copied = memo.get(key)
        # A scalar item is kept without a call: schemas() copies every schema, and the
        # call per item was a sixth of registering tools and listing their schemas.
        if copied is None:
            if cls is dict:
                copied = memo[key] = {}
                for name, item in value.items():
                    copied[name] = item if type(item) in _ATOMS else _copy(item, memo)
            else:
                copied = memo[key] = []
                for item in value:
                    copied.append(item if type(item) in _ATOMS else _copy(item, memo))
        return copied
    if cls is tuple:
        return tuple(_copy(item, memo) for item in value)
    try:
        return copy.deepcopy(value)
    except Exception:  # this leaf cannot be copied (or is too deep): it alone is kept
        return value
