"""Assigning the fields of frozen, slotted attrs instances without their ``__setattr__``.

A frozen attrs class refuses assignment, so its ``__init__`` and lionexec's trusted
constructors (the act layer's, for values it produced and checked itself) go through
``object.__setattr__``, which looks the slot up by name on every call. The slot's own
descriptor assigns it directly: about two thirds of the cost, and a tool call sets some 30
fields (the act rows of ``nox -s bench``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["slot_setters"]


def slot_setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The setters of the slots *names* of *cls* (declared on it or a base), in that order.

    ``set_name(instance, value)`` assigns the slot as ``object.__setattr__`` would, also on a
    frozen class. Raises :class:`TypeError` if a name is not a slot of *cls*.
    """
    setters = []
    for name in names:
        descriptor = inspect.getattr_static(cls, name, None)
        if type(descriptor).__name__ != "member_descriptor":
            raise TypeError(f"{cls.__name__}.{name} is not a slot")
        setters.append(descriptor.__set__)
    return tuple(setters)
