"""Structuring model-produced arguments into the types a tool declares (cattrs, lax but exact).

:data:`argument_converter` is a :class:`cattrs.Converter` tuned for JSON a model wrote:

* numbers may arrive as strings holding a JSON number (``"3"`` → ``3``, ``"2.5e3"`` →
  ``2500.0``; an integer's string has no fraction or exponent), an integral float is an
  integer (``2.0`` → ``2``), ``"true"``/``"false"`` are booleans; nothing else is coerced: a
  float with a fraction is not an integer, ``"nan"``, ``"1_000"``, non-ASCII digits and a
  string out of a float's range (``"1e999"``) are not numbers, a number is not a string,
  ``"yes"`` is not a boolean, and a string is never an array (cattrs would otherwise split
  it into characters);
* an enum (``IntEnum``, ``StrEnum`` and other mixins too) takes its members' values, exactly
  (``true`` is not ``1``), and gives the member; so does a ``Literal`` of enum members;
* ``X | Y`` tries an exact JSON type match first, then each member in order;
* attrs classes and dataclasses reject unknown keys; an instance passes through, so
  validating arguments that were already validated changes nothing;
* errors name the path of the bad value (``filters.limit``, ``points[2].x``).

Register hooks on it (or pass a converter of your own to ``Tool``) for further types.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
import pathlib
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import cattrs
from cattrs.cols import (
    is_any_set,
    is_mapping,
    is_sequence,
    list_structure_factory,
    mapping_structure_factory,
)
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, override

__all__ = ["argument_converter", "describe_error", "make_argument_converter"]

_StructureHook = Callable[[Any, Any], Any]
_QUOTED_FIELD: Final = re.compile(r"^'([A-Za-z_]\w*)' ")
# A JSON number (RFC 8259), ASCII only, with the whitespace JSON allows around it.
_JSON_INTEGER: Final = re.compile(r"[ \t\n\r]*-?(?:0|[1-9][0-9]*)[ \t\n\r]*")
_JSON_NUMBER: Final = re.compile(
    r"[ \t\n\r]*-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[ \t\n\r]*"
)
_TRUE: Final = frozenset({"true", "True", "TRUE"})
_FALSE: Final = frozenset({"false", "False", "FALSE"})
_JSON_NAMES: Final[Mapping[type, str]] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
    list: "an array",
    tuple: "an array",
    dict: "an object",
}


def make_argument_converter() -> cattrs.Converter:
    """A fresh converter configured as described in the module docstring."""
    conv = cattrs.Converter(forbid_extra_keys=True, use_alias=True)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook(str, _structure_str)
    for cls in (pathlib.Path, pathlib.PurePath, pathlib.PurePosixPath, pathlib.PureWindowsPath):
        conv.register_structure_hook(cls, _from_string(cls, cls))
    conv.register_structure_hook(uuid.UUID, _from_string(uuid.UUID, uuid.UUID))
    for moment in (_dt.datetime, _dt.date, _dt.time):
        conv.register_structure_hook(moment, _from_string(moment, moment.fromisoformat))
    conv.register_structure_hook_factory(_is_union, lambda t: _union_hook(conv, t))
    conv.register_structure_hook_factory(_is_literal, _literal_hook)
    conv.register_structure_hook_factory(_is_enum, lambda _: _structure_enum)
    conv.register_structure_hook_factory(_is_array, lambda t: _array_hook(conv, t))
    conv.register_structure_hook_factory(_is_object, lambda t: _mapping_hook(conv, t))
    conv.register_structure_hook_factory(_is_record, lambda t: _record_hook(conv, t))
    return conv


def describe_error(exc: BaseException, root: str | None = None) -> list[tuple[str | None, str]]:
    """Flatten a cattrs structuring error into ``(path, message)`` pairs, outermost first.

    *root* prefixes every path (the argument name when one argument was structured).
    """
    out: list[tuple[str | None, str]] = []
    _describe(exc, root, out)
    return out


def _describe(exc: BaseException, path: str | None, out: list[tuple[str | None, str]]) -> None:
    if isinstance(exc, ClassValidationError | IterableValidationError):
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            step = getattr(note, "name", None)
            if isinstance(note, cattrs.IterableValidationNote):
                step = f"[{note.index!r}]"
            _describe(sub, _join(path, step), out)
        for sub in without:
            _describe(sub, path, out)
    elif isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields):
            out.append((_join(path, key), "unexpected field"))
    elif isinstance(exc, KeyError):
        out.append((path, "required field missing"))
    else:
        out.append((_join(path, _attrs_field(exc)), str(exc) or type(exc).__name__))


def _attrs_field(exc: BaseException) -> str | None:
    """The field an attrs validator complained about, when its error says so.

    attrs' own validators pass the ``Attribute`` in the arguments (``instance_of``) or start
    the message with the quoted field name (``gt``, ``in_``, ...).
    """
    for arg in exc.args:
        if isinstance(arg, attrs.Attribute):
            return arg.name
    match = _QUOTED_FIELD.match(str(exc))
    return match[1] if match else None


def _join(path: str | None, step: object) -> str | None:
    if step is None:
        return path
    step = str(step)
    if path is None:
        return step
    return f"{path}{step}" if step.startswith("[") else f"{path}.{step}"


def _type_name(t: Any) -> str:
    return "None" if t is type(None) else str(getattr(t, "__name__", t))


def _got(value: object) -> str:
    text = repr(value)
    return f"{_JSON_NAMES.get(type(value), type(value).__name__)} {text[:40]}"


# -- scalars -------------------------------------------------------------------------------


# cattrs dispatches the subclasses of int, float and str to their hooks, IntEnum and
# StrEnum included: those go to _structure_enum.
def _structure_int(value: Any, cl: Any) -> Any:
    if cl is not int and _is_enum(cl):
        return _structure_enum(value, cl)
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        if _JSON_INTEGER.fullmatch(value):
            return int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise ValueError(f"expected an integer, got {_got(value)}")


def _structure_float(value: Any, cl: Any) -> Any:
    if cl is not float and _is_enum(cl):
        return _structure_enum(value, cl)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and _JSON_NUMBER.fullmatch(value):
        number = float(value)
        if math.isfinite(number):
            return number
        raise ValueError(f"expected a finite number, got {_got(value)}")
    raise ValueError(f"expected a number, got {_got(value)}")


def _structure_bool(value: Any, _: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected a boolean, got {_got(value)}")


def _structure_str(value: Any, cl: Any) -> Any:
    if cl is not str and _is_enum(cl):
        return _structure_enum(value, cl)
    if isinstance(value, str):
        return value
    raise ValueError(f"expected a string, got {_got(value)}")


def _from_string(cls: type, parse: Callable[[str], Any]) -> _StructureHook:
    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return parse(value)
        raise ValueError(f"expected a string ({cls.__name__}), got {_got(value)}")

    return hook


# -- literals, enums, unions ----------------------------------------------------------------


def _is_literal(t: Any) -> bool:
    return typing.get_origin(t) is typing.Literal


def _literal_hook(t: Any) -> _StructureHook:
    # (the value the schema advertises, what it structures into): an enum member by its value
    allowed = [(a.value if isinstance(a, enum.Enum) else a, a) for a in typing.get_args(t)]
    choices = ", ".join(repr(v) for v, _ in allowed)

    def hook(value: Any, _: Any) -> Any:
        for v, a in allowed:  # compare types too: True is not 1
            if (type(v) is type(value) and v == value) or value is a:  # or the member itself
                return a
        raise ValueError(f"expected one of {choices}, got {_got(value)}")

    return hook


def _is_enum(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, enum.Enum)


def _structure_enum(value: Any, t: type[enum.Enum]) -> Any:
    if isinstance(value, t):
        return value
    # a boolean is not 1 or 0 (Mode(True) is the member valued 1), unless a member is one
    if type(value) is not bool or any(type(m.value) is bool for m in t):
        try:
            return t(value)
        except (ValueError, TypeError):
            pass
    choices = ", ".join(repr(m.value) for m in t)
    raise ValueError(f"expected one of {choices}, got {_got(value)}")


def _is_union(t: Any) -> bool:
    origin = typing.get_origin(t)
    return origin is typing.Union or origin is types.UnionType


def _union_hook(conv: cattrs.Converter, t: Any) -> _StructureHook:
    members = typing.get_args(t)
    exact = {m for m in members if isinstance(m, type) and m in _JSON_NAMES}
    others = [m for m in members if m is not type(None)]
    if len(others) == 1:  # X | None: X's own errors are the informative ones
        (only,) = others

        def optional(value: Any, _: Any) -> Any:
            return None if value is None else conv.structure(value, only)

        return optional

    def hook(value: Any, _: Any) -> Any:
        if value is None and type(None) in members:
            return None
        if type(value) in exact:
            return conv.structure(value, type(value))
        for member in members:
            if member is type(None):
                continue
            try:
                return conv.structure(value, member)
            except Exception:  # try the next member
                continue
        names = " | ".join(_type_name(m) for m in members)
        raise ValueError(f"expected {names}, got {_got(value)}")

    return hook


# -- containers and records -----------------------------------------------------------------


def _is_array(t: Any) -> bool:
    origin = typing.get_origin(t) or t
    return origin is tuple or is_sequence(t) or is_any_set(t)


def _array_hook(conv: cattrs.Converter, t: Any) -> _StructureHook:
    origin = typing.get_origin(t) or t
    args = typing.get_args(t)
    accepted: tuple[type, ...] = (list, tuple)
    # tuple[()] has no args either (as bare tuple), but an empty __args__
    empty = origin is tuple and getattr(t, "__args__", None) == ()
    if origin is tuple and (args or empty) and not (len(args) == 2 and args[1] is Ellipsis):
        hetero = conv.gen_structure_hetero_tuple(t)
        expected = len(args)

        def fixed(value: Any, _: Any) -> Any:
            if not isinstance(value, list | tuple):
                raise ValueError(f"expected an array, got {_got(value)}")
            if len(value) != expected:
                raise ValueError(f"expected an array of {expected} items, got {len(value)}")
            return hetero(value, t)

        return fixed
    element = args[0] if args else Any
    items = list_structure_factory(list[element], conv)  # type: ignore[valid-type]
    final: Callable[[list[Any]], Any] = list
    if origin is tuple:
        final = tuple
    elif is_any_set(t):
        final = frozenset if origin is frozenset else set
        accepted = (list, tuple, set, frozenset)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, accepted):
            raise ValueError(f"expected an array, got {_got(value)}")
        result = items(value, list[element])  # type: ignore[valid-type]
        return result if final is list else final(result)

    return hook


def _is_object(t: Any) -> bool:
    return is_mapping(t)


def _mapping_hook(conv: cattrs.Converter, t: Any) -> _StructureHook:
    inner: _StructureHook = mapping_structure_factory(t, conv)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object, got {_got(value)}")
        return inner(value, t)

    return hook


def _is_record(t: Any) -> bool:
    return isinstance(t, type) and (attrs.has(t) or dataclasses.is_dataclass(t))


def _record_hook(conv: cattrs.Converter, cls: type) -> _StructureHook:
    inner: _StructureHook = make_dict_structure_fn(cls, conv, **_resolved(conv, cls))

    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object ({cls.__name__}), got {_got(value)}")
        return inner(value, cls)

    return hook


def _resolved(conv: cattrs.Converter, cls: type) -> dict[str, Any]:
    """Hooks for the fields of *cls* whose annotation holds a forward reference
    (``child: Optional["Node"]``: cattrs resolves whole-string annotations only)."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # unresolvable: cattrs' own error names the field when one is used
        return {}
    fields = attrs.fields(cls) if attrs.has(cls) else dataclasses.fields(cls)
    overrides: dict[str, Any] = {}  # field name -> cattrs.gen.override
    for field in fields:
        hint = hints.get(field.name, field.type)
        if hint != field.type and not isinstance(field.type, str):  # cattrs resolves a str

            def hook(value: Any, _: Any, hint: Any = hint) -> Any:
                return conv.structure(value, hint)

            overrides[field.name] = override(struct_hook=hook)
    return overrides


#: The converter tools use unless given their own.
argument_converter: Final = make_argument_converter()
