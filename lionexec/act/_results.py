"""A tool's result must be JSON data: what the model is sent and what a journal keeps are the
same value, and a restart gives it back.

A value JSON cannot hold (a ``Decimal``, a set, an object of a class of one's own, NaN or an
infinity, an int too long to print, a cycle, nesting past :data:`~lionexec._jsonable.MAX_DEPTH`)
would reach the model and the journal only as a placeholder or a string standing for it, and
be lost after a restart. So the call fails instead, recorded, naming the tool, the type and
where in the result it is. A tool converts such values itself, or in its ``postprocessor``
(``Tool.from_function(..., postprocessor=...)``), which is the encoder a tool registers.

Content parts (images, files and text parts, and the bytes of an image or a PDF: see
:mod:`lionexec.conversation._parts`) are rendered as each provider's blocks, and taken as
they are. The types :func:`~lionexec._jsonable.jsonable` renders as JSON by documented rules
are taken as the data they render to: attrs classes and dataclasses (their public fields),
pydantic-style models (``model_dump()``), enums (their value), UUIDs and paths (their text),
dates and times (ISO 8601), tuples (arrays), and subclasses of str, int and float.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
import pathlib
import uuid
from collections.abc import Mapping
from typing import Any, Final

import attrs

from lionexec._jsonable import MAX_DEPTH, is_flat_json
from lionexec._snapshot import snapshot
from lionexec.conversation._parts import content_parts

__all__ = ["not_json", "recorded_result", "unserializable_result"]

#: Ints below this many bits print in fewer digits than any limit Python allows.
_SMALL_INT_BITS: Final = 2000
_RENDERED_AS_TEXT: Final = uuid.UUID | pathlib.PurePath | _dt.datetime | _dt.date | _dt.time


def recorded_result(value: object) -> tuple[Any, str | None]:
    """The record's own copy of a tool's result *value* (:func:`~lionexec._snapshot.snapshot`)
    and what in it JSON cannot hold (:func:`not_json` of the copy), in one call: the usual
    results (text, a flag, nothing, an int) need neither a copy nor a walk. Never raises."""
    cls = type(value)
    if cls is str or cls is bool or value is None:
        return value, None
    if cls is int and value.bit_length() < _SMALL_INT_BITS:  # type: ignore[attr-defined]
        return value, None
    if cls is dict and is_flat_json(value):  # type: ignore[arg-type]
        return value.copy(), None  # type: ignore[attr-defined]
    copied = snapshot(value)
    return copied, not_json(copied)


def not_json(value: object) -> str | None:
    """What in *value* JSON cannot hold, and where (``"a decimal.Decimal at ['total']"``), or
    ``None`` if it is JSON data. Iterative (no nesting depth can raise); each container is
    read once. Never raises: a container whose reading raises is named as such."""
    cls = type(value)
    if cls is str or cls is bool or value is None:  # the usual results: no walk
        return None
    if cls is int:
        small = value.bit_length() < _SMALL_INT_BITS  # type: ignore[attr-defined]
        return None if small else _check(value)
    try:
        if content_parts(value) is not None:  # images, files, text parts: rendered as blocks
            return None
        return _check(value)
    except _KeyProblem as exc:
        return str(exc)
    except Exception as exc:  # a hostile __iter__, property or model_dump
        return f"a value whose reading raised {type(exc).__name__}"


def _check(value: object) -> str | None:
    # Each item carries the index of its node (parent node, name) so that the path of a
    # bad value is built only when one is found.
    nodes: list[tuple[int, Any]] = [(-1, None)]
    stack: list[tuple[Any, int, int]] = [(value, 0, 0)]
    on_path: set[int] = set()  # (containers entered: a cycle is one met again)
    exits: list[tuple[int, int]] = []  # (stack height, id) to leave on_path when popped to
    while stack:
        while exits and len(stack) <= exits[-1][0]:
            on_path.discard(exits.pop()[1])
        item, node, depth = stack.pop()
        problem = _leaf(item)
        if problem is not None:
            return _at(problem, nodes, node)
        children = _children(item)
        if children is None:
            continue
        if depth >= MAX_DEPTH:
            return _at(f"containers nested deeper than {MAX_DEPTH}", nodes, node)
        key = id(item)
        if key in on_path:
            return _at("a circular reference", nodes, node)
        on_path.add(key)
        exits.append((len(stack), key))
        for name, child in reversed(children):
            nodes.append((node, name))
            stack.append((child, len(nodes) - 1, depth + 1))
    return None


def _at(problem: str, nodes: list[tuple[int, Any]], node: int) -> str:
    """*problem* and where: the path of *node* (its first 200 characters)."""
    names: list[str] = []
    while node > 0:
        node, name = nodes[node]
        names.append(f"[{name!r}]")
    where = "".join(reversed(names))
    if len(where) > 200:
        where = where[:199] + "…"
    return f"{problem} at {where}" if where else problem


def _leaf(value: object) -> str | None:
    """Why the scalar *value* is not JSON, ``None`` if it is (or is a container)."""
    cls = type(value)
    if cls is str or cls is bool or value is None:  # (bool has no subclasses)
        return None
    if isinstance(value, int):
        if value.bit_length() >= _SMALL_INT_BITS and not _printable(value):
            return f"an int of {value.bit_length()} bits (too long to print)"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"the float {value!r} (not finite)"
    if isinstance(value, enum.Enum):
        return _leaf(value.value)
    if isinstance(value, str | _RENDERED_AS_TEXT):
        return None
    if _children(value) is not None:
        return None
    return f"a {_type_name(value)}"


def _printable(value: int) -> bool:
    """Whether Python prints *value* (it refuses past ``sys.get_int_max_str_digits()``)."""
    try:
        str(value)
    except ValueError:
        return False
    return True


def _children(value: object) -> list[tuple[Any, Any]] | None:
    """The (name, item) pairs of a container JSON holds (or that renders as one)."""
    cls = type(value)
    if cls is dict or isinstance(value, Mapping):
        for key in value:  # type: ignore[attr-defined]
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise _KeyProblem(key)
        return list(value.items())  # type: ignore[attr-defined]
    if cls is list or cls is tuple or isinstance(value, list | tuple):
        return list(enumerate(value))  # type: ignore[arg-type]
    if attrs.has(cls):
        return [(f.name, getattr(value, f.name)) for f in attrs.fields(cls) if f.name[:1] != "_"]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return [("model_dump()", dump())]
    return None


class _KeyProblem(Exception):
    """A mapping key JSON cannot hold (JSON keys are strings; scalars print as them)."""

    def __init__(self, key: object) -> None:
        super().__init__(f"a mapping key of type {_type_name(key)}")


def _type_name(value: object) -> str:
    cls = type(value)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def unserializable_result(tool_name: str, problem: str) -> TypeError:
    """The failure of a call whose tool returned *problem* (see :func:`not_json`)."""
    return TypeError(
        f"tool {tool_name!r} returned {problem}, which JSON cannot hold: the model and the "
        "journal would get a placeholder, lost after a restart; return JSON data (str, int, "
        "finite float, bool, None, list, dict with string keys) or convert the result in the "
        "tool's postprocessor (Tool.from_function(..., postprocessor=...))"
    )
