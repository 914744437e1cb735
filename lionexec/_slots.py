"""Assigning and copying the fields of slotted attrs instances without their ``__setattr__``.

A frozen attrs class refuses assignment, so its ``__init__`` and lionexec's trusted
constructors (the act layer's, for values it produced and checked itself) go through
``object.__setattr__``, which looks the slot up by name on every call. The slot's own
descriptor assigns it directly: about two thirds of the cost, and a tool call sets some 30
fields (the act rows of ``nox -s bench``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["shallow_copy", "slot_setters"]

T = TypeVar("T")


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


_COPIERS: dict[type, Callable[[Any], Any]] = {}


def shallow_copy(obj: T) -> T:
    """A shallow copy of the slotted attrs instance *obj*: a new instance of its class with
    the same field values, made without its initializer, validators or ``__setattr__``.

    Each class gets a copier compiled once (as attrs compiles its methods): plain attribute
    stores when the class keeps ``object.__setattr__``, the slots' own setters otherwise.
    About a sixth of a loop of ``getattr``/``object.__setattr__`` for an event (the act
    governed row of ``nox -s bench``: observers and callbacks get copies of each call).
    """
    cls = type(obj)
    copier = _COPIERS.get(cls)
    if copier is None:
        copier = _COPIERS[cls] = _compile_copier(cls)
    return copier(obj)  # type: ignore[no-any-return]


def _compile_copier(cls: type) -> Callable[[Any], Any]:
    names = [field.name for field in attrs.fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "cls": cls}
    lines = ["def copy(obj):", "    clone = _new(cls)"]
    if cls.__setattr__ is object.__setattr__:  # type: ignore[comparison-overlap]
        for name in names:
            if not name.isidentifier():  # pragma: no cover - attrs field names are identifiers
                raise TypeError(f"{cls.__name__}.{name} is not an identifier")
            lines.append(f"    clone.{name} = obj.{name}")
    else:
        for index, set_field in enumerate(slot_setters(cls, *names)):
            namespace[f"set_{index}"] = set_field
            lines.append(f"    set_{index}(clone, obj.{names[index]})")
    lines.append("    return clone")
    exec(
        compile("\n".join(lines), f"<lionexec shallow copy of {cls.__qualname__}>", "exec"),
        namespace,
    )
    return namespace["copy"]  # type: ignore[no-any-return]
