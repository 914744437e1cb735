"""Building and copying slotted attrs instances without their ``__init__`` or ``__setattr__``.

lionexec's trusted constructors (the act layer's, for values it produced and checked itself)
skip attrs' initializer: its converters and validators, its keyword parsing and, on a frozen
class, an ``object.__setattr__`` per field, which looks the slot up by name each time. A
:func:`builder` stores the fields plainly instead, into an instance of a mutable *twin* of the
class (a subclass adding no slots, with ``object``'s ``__setattr__`` and ``__delattr__``,
which share one type slot), and then gives the instance its real class: a ``__class__``
assignment, which CPython allows between a class and a subclass of the same layout. A frozen
class is frozen again from that moment. For a log record, a third of the cost of the attrs
initializer, which matters because a tool call builds some seven such objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["builder", "shallow_copy"]

T = TypeVar("T")


def builder(cls: type[T], *names: str) -> Callable[..., T]:
    """A function ``build(*values)`` returning a new *cls* whose fields *names* have *values*.

    *cls* is a slotted attrs class and *names* every one of its fields, in the order the
    values come. Nothing of the class runs: no initializer, converter, validator, default or
    ``__setattr__`` hook, so the values must be what the initializer would have stored.
    Raises :class:`TypeError` if *cls* is not slotted or *names* are not its fields.
    """
    fields = [field.name for field in attrs.fields(cls)]  # type: ignore[arg-type]
    if sorted(names) != sorted(fields):
        raise TypeError(
            f"a builder of {cls.__name__} sets exactly its fields {fields}, not {names}"
        )
    return _compile(cls, "builder", ", ".join(names), {name: name for name in names})


def _compile(cls: type[T], kind: str, parameters: str, values: dict[str, str]) -> Callable[..., T]:
    """A function of *parameters* returning a new *cls* whose field *name* is the expression
    ``values[name]``, stored plainly (see the module docstring)."""
    if "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted class")
    twin: type = cls
    if cls.__setattr__ is not object.__setattr__:  # stores plainly; given cls at the end
        twin = type(
            cls.__name__,
            (cls,),
            {
                "__slots__": (),
                "__setattr__": object.__setattr__,
                "__delattr__": object.__delattr__,
            },
        )
    namespace: dict[str, Any] = {"_new": object.__new__, "cls": cls, "twin": twin}
    lines = [f"def make({parameters}):", "    obj = _new(twin)"]
    lines.extend(f"    obj.{name} = {value}" for name, value in values.items())
    if twin is not cls:
        lines.append("    obj.__class__ = cls")
    lines.append("    return obj")
    exec(
        compile("\n".join(lines), f"<lionexec {kind} of {cls.__qualname__}>", "exec"),
        namespace,
    )
    return namespace["make"]  # type: ignore[no-any-return]


_COPIERS: dict[type, Callable[[Any], Any]] = {}


def shallow_copy(obj: T) -> T:
    """A shallow copy of the slotted attrs instance *obj*: a new instance of its class with
    the same field values, made by a :func:`builder` (no initializer, validator or
    ``__setattr__``).

    Each class gets a copier compiled once. About a sixth of a loop of ``getattr`` and
    ``object.__setattr__`` for an event, which matters because observers and callbacks get
    copies of each call.
    """
    cls = type(obj)
    copier = _COPIERS.get(cls)
    if copier is None:
        copier = _COPIERS[cls] = _compile_copier(cls)
    return copier(obj)  # type: ignore[no-any-return]


def _compile_copier(cls: type) -> Callable[[Any], Any]:
    # the builder's stores, reading from the original: one call per copy, not two
    names = [field.name for field in attrs.fields(cls)]
    return _compile(cls, "shallow copy", "source", {name: f"source.{name}" for name in names})
