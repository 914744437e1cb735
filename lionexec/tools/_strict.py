"""Strict tool schemas: the form OpenAI's and Anthropic's ``strict`` function tools require.

With ``"strict": true`` a provider constrains the model's arguments to the schema exactly. In
exchange, the schema must follow rules that plain JSON Schema does not impose:

* every object, nested ones too, has ``"additionalProperties": false`` and lists *all* its
  properties as ``required``;
* a parameter that may be left out is instead required and *nullable*
  (``"type": ["integer", "null"]``, or ``anyOf`` with ``{"type": "null"}``): the model sends
  ``null`` to mean "not given". :meth:`Tool.validate <lionexec.tools.Tool.validate>` turns that
  ``null`` back into the parameter's default (see :func:`null_defaults`);
* objects with free keys (``dict[str, T]``, ``additionalProperties: {...}``), free-form
  objects (``dict``, ``dict[str, Any]``), fixed-length arrays (``tuple[A, B]``) and values of
  any type (``Any``, ``{}``) cannot be expressed: :func:`strict_parameters` raises
  :class:`~lionexec.errors.SchemaError` naming the parameter, so a tool never advertises a
  strict schema the provider would refuse.

Anthropic's strict mode (``strict: true`` on the tool) accepts the same form, so lionexec
emits one strict schema for every provider format.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

import attrs

from lionexec.errors import SchemaError

__all__ = [
    "ParameterLike",
    "accepts_none",
    "accepts_null",
    "null_defaults",
    "record_defaults",
    "strict_parameters",
]

_SCALAR_TYPES: Final = frozenset({"string", "number", "integer", "boolean"})
_NULL: Final[Mapping[str, Any]] = {"type": "null"}
_SHAPES: Final = ("type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref")


def strict_parameters(parameters: Mapping[str, Any], *, tool: str | None = None) -> dict[str, Any]:
    """A strict copy of the *parameters* object schema (see the module docstring).

    Properties missing from an object's ``required`` become required and nullable, and their
    description says which default ``null`` stands for. ``default`` keywords are dropped: some
    strict endpoints refuse them, and in a strict schema every property is sent anyway. A
    schema that is already strict comes back equal.

    Raises:
        SchemaError: naming the parameter (``'filters.tags'``, ``'points[]'``) that cannot be
            strict, and why.
    """
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        raise SchemaError(_where(tool, None) + "the parameters of a strict tool are an object")
    strict: dict[str, Any] = _strict(copy.deepcopy(dict(parameters)), (), tool)
    return strict


def _where(tool: str | None, path: tuple[str, ...] | None) -> str:
    owner = f"tool {tool!r}" if tool else "tool"
    if not path:
        return f"{owner} cannot be strict: "
    dotted = ""
    for step in path:
        dotted += step if step.startswith("[") or not dotted else f".{step}"
    return f"parameter {dotted!r} of {owner} cannot be strict: "


def _strict(schema: Any, path: tuple[str, ...], tool: str | None) -> Any:
    if schema is True or schema == {}:
        raise SchemaError(
            _where(tool, path) + "it accepts any JSON value; annotate it with a concrete type"
        )
    if not isinstance(schema, dict):
        return schema
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            schema[key] = {
                name: _strict(sub, (*path, f"{key}/{name}"), tool)
                for name, sub in schema[key].items()
            }
    if not any(k in schema for k in _SHAPES):
        raise SchemaError(
            _where(tool, path) + "it accepts any JSON value; annotate it with a concrete type"
        )
    declared = schema.get("type")
    is_object = declared == "object" or (isinstance(declared, list) and "object" in declared)
    if is_object or "properties" in schema:
        _strict_object(schema, path, tool)
    if isinstance(schema.get("items"), dict | bool):
        schema["items"] = _strict(schema["items"], (*path, "[]"), tool)
    if "prefixItems" in schema or isinstance(schema.get("items"), list):
        raise SchemaError(
            _where(tool, path) + "a fixed-length array (tuple[A, B]) cannot be strict "
            "(Anthropic allows minItems 0 or 1 only); use list[T] or an attrs class"
        )
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            schema[key] = [
                sub if sub == _NULL else _strict(sub, path, tool) for sub in schema[key]
            ]
    schema.pop("default", None)
    return schema


def _strict_object(schema: dict[str, Any], path: tuple[str, ...], tool: str | None) -> None:
    extra = schema.get("additionalProperties")
    if "patternProperties" in schema:
        raise SchemaError(_where(tool, path) + "patternProperties cannot be strict")
    if (isinstance(extra, dict) and extra) or extra is True:
        raise SchemaError(
            _where(tool, path)
            + "an object with free keys (dict[str, T], additionalProperties) cannot be strict "
            "on OpenAI; declare its fields (an attrs class) or use strict=False"
        )
    properties = schema.get("properties")
    if properties is None and extra is None:
        raise SchemaError(
            _where(tool, path)
            + "a free-form object (dict, dict[str, Any]) cannot be strict; declare its fields "
            "(an attrs class) or use strict=False"
        )
    required_raw = schema.get("required") or ()
    if not isinstance(properties or {}, Mapping) or not isinstance(required_raw, list | tuple):
        raise SchemaError(_where(tool, path) + "properties must be an object, required a list")
    properties = dict(properties or {})
    required = set(required_raw)
    for name, sub in properties.items():
        default = sub.get("default") if isinstance(sub, dict) else None
        strict_sub = _strict(sub, (*path, name), tool)
        if name not in required and not accepts_null(strict_sub):
            if default is not None:
                note = f"null means the default, {json.dumps(default, default=str)}"
                text = strict_sub.get("description")
                strict_sub["description"] = f"{text} ({note})" if text else note.capitalize()
            strict_sub = _nullable(strict_sub)
        properties[name] = strict_sub
    schema["properties"] = properties
    schema["required"] = list(properties)
    schema["additionalProperties"] = False


def accepts_null(schema: Any) -> bool:
    """Whether *schema* visibly admits ``null`` (in its ``type``, ``anyOf`` or ``enum``)."""
    if not isinstance(schema, Mapping):
        return schema is True
    declared = schema.get("type")
    if declared == "null" or (isinstance(declared, list) and "null" in declared):
        return "enum" not in schema or None in schema["enum"]
    if declared is None and "enum" in schema and None in schema["enum"]:
        return True
    return any(accepts_null(s) for s in schema.get("anyOf") or ())


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else declared
    if (
        isinstance(names, list)
        and names
        and all(n in _SCALAR_TYPES for n in names)
        and not schema.keys() & {"anyOf", "oneOf", "allOf", "$ref", "const"}
    ):
        out = {**schema, "type": [*names, "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    if schema.keys() <= {"anyOf", "description"}:
        return {**schema, "anyOf": [*schema["anyOf"], dict(_NULL)]}
    inner = dict(schema)
    outer = {"description": inner.pop("description")} if "description" in inner else {}
    return {"anyOf": [inner, dict(_NULL)], **outer}


# -- null means "not given" -----------------------------------------------------------------

Fixer = Callable[[Any], Any]


class ParameterLike(Protocol):
    """What :func:`null_defaults` reads of a parameter (a :class:`~lionexec.tools.Parameter`)."""

    @property
    def name(self) -> str: ...
    @property
    def annotation(self) -> Any: ...
    @property
    def required(self) -> bool: ...
    @property
    def default(self) -> Any: ...


def null_defaults(
    parameters: Iterable[ParameterLike], request_class: type | None = None
) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """How a strict tool reads ``null`` for a parameter that may be left out, or ``None``.

    *parameters* are the tool's signature parameters, or the fields of its *request_class*.
    The returned function takes the arguments (after the key check) and returns them, as a new
    dict when anything changed:

    * a top-level ``null`` for an optional parameter whose type does not admit ``None``
      becomes a copy of its default (the key stays, so validating the result again gives the
      same result);
    * inside attrs classes and dataclasses (also in lists and optional values), such a
      ``null`` field is dropped, so the class's own default applies.
    """
    defaults = record_defaults(request_class) if request_class is not None else None
    top: dict[str, Any] = {}
    nested: dict[str, Fixer] = {}
    for p in parameters:
        name, annotation = p.name, p.annotation
        default = p.default if defaults is None else defaults.get(name, _NO_DEFAULT)
        if not p.required and not accepts_none(annotation) and default is not _NO_DEFAULT:
            top[name] = default
        fixer = _fixer(annotation, ())
        if fixer is not None:
            nested[name] = fixer
    if not top and not nested:
        return None

    def apply(arguments: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] | None = None
        for name, value in arguments.items():
            if value is None and name in top:
                fixed = copy.deepcopy(top[name])
                if name in nested:
                    fixed = nested[name](fixed)
            elif name in nested:
                fixed = nested[name](value)
            else:
                continue
            if fixed is not value:
                if out is None:
                    out = dict(arguments)
                out[name] = fixed
        return arguments if out is None else out

    return apply


#: A default that cannot be reproduced (a factory that needs the instance).
_NO_DEFAULT: Final = object()


def record_defaults(cls: type) -> dict[str, Any]:
    """The init defaults of an attrs class or dataclass by argument name (factories called)."""
    out: dict[str, Any] = {}
    if attrs.has(cls):
        for a in attrs.fields(cls):
            if not a.init or a.default is attrs.NOTHING:
                continue
            default: Any = a.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = _NO_DEFAULT if default.takes_self else default.factory()
            out[a.alias or a.name] = default
    elif dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
    return out


def accepts_none(hint: Any) -> bool:
    """Whether a value of type *hint* may be ``None``."""
    if hint is None or hint is type(None) or hint is Any or hint is object:
        return True
    if hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return accepts_none(typing.get_args(hint)[0])
    if origin is typing.Union or origin is types.UnionType or origin is typing.Literal:
        return any(a is None or accepts_none(a) for a in typing.get_args(hint))
    return False


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and (attrs.has(hint) or dataclasses.is_dataclass(hint))


def _fixer(hint: Any, seen: tuple[type, ...]) -> Fixer | None:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _fixer(args[0], seen)
    if origin is typing.Union or origin is types.UnionType:
        others = [a for a in args if a is not type(None)]
        if len(others) != 1:
            return None
        inner = _fixer(others[0], seen)
        if inner is None:
            return None
        return lambda v: v if v is None else inner(v)
    if _is_record(hint):
        if hint in seen:
            return None
        return _record_fixer(hint, (*seen, hint))
    container = origin if origin is not None else hint
    if container in (list, set, frozenset, tuple) or (
        origin is not None
        and isinstance(origin, type)
        and issubclass(origin, Iterable)
        and not issubclass(origin, Mapping | str | bytes)
    ):
        if not args or (container is tuple and not (len(args) == 2 and args[1] is Ellipsis)):
            return None
        item = _fixer(args[0], seen)
        if item is None:
            return None

        def items(value: Any) -> Any:
            if not isinstance(value, list):
                return value
            fixed = [item(v) for v in value]
            return value if all(a is b for a, b in zip(fixed, value, strict=True)) else fixed

        return items
    return None


def _record_fixer(cls: type, seen: tuple[type, ...]) -> Fixer | None:
    hints = typing.get_type_hints(cls)
    droppable: set[str] = set()
    nested: dict[str, Fixer] = {}
    if attrs.has(cls):
        fields = [
            (a.alias or a.name, hints.get(a.name, Any), a.default is not attrs.NOTHING)
            for a in attrs.fields(cls)
            if a.init
        ]
    else:
        fields = [
            (
                f.name,
                hints.get(f.name, Any),
                f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
            if f.init
        ]
    for name, hint, has_default in fields:
        if has_default and not accepts_none(hint):
            droppable.add(name)
        fixer = _fixer(hint, seen)
        if fixer is not None:
            nested[name] = fixer
    if not droppable and not nested:
        return None

    def fix(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] | None = None
        for name, item in value.items():
            if item is None and name in droppable:
                if out is None:
                    out = dict(value)
                del out[name]
            elif name in nested:
                fixed = nested[name](item)
                if fixed is not item:
                    if out is None:
                        out = dict(value)
                    out[name] = fixed
        return value if out is None else out

    return fix
