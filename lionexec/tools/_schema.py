"""JSON Schema for tool parameters, from signatures, type hints, docstrings and attrs classes.

The mapping is deliberately small and exact: it covers the types a model can produce as JSON
(and a few that travel as strings), and refuses anything else with :class:`SchemaError`, so a
tool never advertises a schema that its validation cannot honour.

=========================================  ==================================================
Python                                     JSON Schema
=========================================  ==================================================
``str`` / ``int`` / ``float`` / ``bool``   ``string`` / ``integer`` / ``number`` / ``boolean``
``None``                                   ``null``
``list[T]``, ``Sequence[T]``, ``set[T]``   ``array`` of ``T``
``tuple[T, ...]`` / ``tuple[A, B]``        ``array`` of ``T`` / fixed ``prefixItems``
``dict[str, T]``, ``Mapping[str, T]``      ``object`` with ``additionalProperties: T``
``X | None``, ``X | Y``                    ``type: [x, "null"]`` or ``anyOf``
``Literal[...]``, ``Enum`` subclasses      ``enum`` (with ``type`` when uniform)
attrs classes and dataclasses              nested ``object`` (fields, required, no extras)
``pathlib.Path``, ``UUID``, ``datetime``   ``string`` (with ``format`` where one exists)
no annotation, ``Any``, ``object``         ``{}`` (anything)
=========================================  ==================================================
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import inspect
import pathlib
import types
import typing
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from lionexec._jsonable import jsonable
from lionexec._slots import builder
from lionexec._snapshot import snapshot
from lionexec.errors import SchemaError

from ._docstrings import parse_docstring
from ._strict import strict_parameters

__all__ = [
    "SCHEMA_FORMATS",
    "Parameter",
    "SchemaFormat",
    "anthropic_schema",
    "class_parameters",
    "openai_schema",
    "parameters_schema",
    "responses_schema",
    "signature_parameters",
    "tool_schema",
    "type_schema",
]

#: The tool formats :func:`tool_schema` writes: Chat Completions function tools
#: (``"openai"``), Anthropic Messages tools (``"anthropic"``) and Responses API function tools
#: (``"responses"``).
SchemaFormat: TypeAlias = Literal["openai", "anthropic", "responses"]
SCHEMA_FORMATS: Final[tuple[SchemaFormat, ...]] = ("openai", "anthropic", "responses")

_JSON_TYPES: Final[Mapping[type, str]] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}
_STRING_FORMATS: Final[Mapping[type, str | None]] = {
    pathlib.Path: None,
    pathlib.PurePath: None,
    pathlib.PurePosixPath: None,
    pathlib.PureWindowsPath: None,
    uuid.UUID: "uuid",
    _dt.datetime: "date-time",
    _dt.date: "date",
    _dt.time: "time",
}
_ARRAYS: Final = (list, set, frozenset, Sequence, Collection, Iterable)
_OBJECTS: Final = (dict, Mapping)
_SKIPPED_KINDS: Final = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
#: The default of a field built by a factory: not shown in the schema.
_FACTORY: Final = object()


@attrs.frozen
class Parameter:
    """One model-facing parameter of a tool: a signature parameter or a request-class field."""

    name: str
    annotation: Any = Any
    required: bool = True
    #: The default value of an optional parameter; shown in the schema when a JSON scalar.
    default: Any = None
    description: str | None = None


def signature_parameters(
    func: Callable[..., Any],
    *,
    exclude: Collection[str] = (),
    descriptions: Mapping[str, str] | None = None,
    lenient: bool = False,
) -> tuple[list[Parameter], bool]:
    """The parameters *func* exposes to a model, and whether it accepts ``**kwargs``.

    ``*args``, ``**kwargs`` and the names in *exclude* are left out. String annotations (as
    under ``from __future__ import annotations``) are evaluated in the function's module; one
    that cannot be (a class local to a function) raises :class:`SchemaError`, or reads as
    ``Any`` when *lenient*. A positional-only parameter without a default cannot be passed by
    keyword and raises :class:`SchemaError`; one with a default is left out.
    """
    declared = _plain_function_parameters(func)
    if declared is None:
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"cannot read the signature of {func!r}: {exc}") from exc
        declared = [
            (p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()
        ]
    namespace: dict[str, Any] | None = None  # read only for a string annotation
    descriptions = descriptions or {}
    params: list[Parameter] = []
    var_keyword = False
    for name, kind, default, annotation in declared:
        if kind is _VAR_KEYWORD:
            var_keyword = True
        if kind in _SKIPPED_KINDS or name in exclude:
            continue
        required = default is _EMPTY
        if kind is _POSITIONAL_ONLY:
            if required:
                raise SchemaError(
                    f"parameter {name!r} of {func!r} is positional-only; tools are called "
                    "with keyword arguments"
                )
            continue
        if annotation is _EMPTY:
            annotation = Any
        elif isinstance(annotation, str):
            if namespace is None:
                namespace = _globals_of(func)
            annotation = _evaluate(annotation, name, namespace, func, lenient)
        default = None if required else default
        description = descriptions.get(name) or None
        params.append(_build_parameter(name, annotation, required, default, description))
    return params, var_keyword


#: ``Parameter(...)`` without the attrs initializer (a third of its cost, and registering a
#: tool builds one per parameter): the values are final here.
_build_parameter: Final = builder(
    Parameter, "name", "annotation", "required", "default", "description"
)


_EMPTY: Final = inspect.Parameter.empty
_POSITIONAL_ONLY: Final = inspect.Parameter.POSITIONAL_ONLY
_POSITIONAL_OR_KEYWORD: Final = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL: Final = inspect.Parameter.VAR_POSITIONAL
_KEYWORD_ONLY: Final = inspect.Parameter.KEYWORD_ONLY
_VAR_KEYWORD: Final = inspect.Parameter.VAR_KEYWORD
_CO_VARARGS: Final = inspect.CO_VARARGS
_CO_VARKEYWORDS: Final = inspect.CO_VARKEYWORDS


def _plain_function_parameters(
    func: object,
) -> list[tuple[str, inspect._ParameterKind, Any, Any]] | None:
    """``(name, kind, default, annotation)`` of each parameter of a plain function, read from
    its code object as :func:`inspect.signature` reads it (``Parameter.empty`` for none), or
    ``None`` for anything else: a function with ``__signature__``, ``__wrapped__`` or
    ``_partialmethod`` (which :func:`inspect.signature` honours), a method, a partial, a
    callable object.

    About a sixth of :func:`inspect.signature`'s cost, which was itself a sixth of registering
    a tool; a property test checks it against :func:`inspect.signature`.
    """
    if type(func) is not types.FunctionType:
        return None
    attributes = func.__dict__
    if (
        "__signature__" in attributes
        or "__wrapped__" in attributes
        or "_partialmethod" in attributes
    ):
        return None
    code = func.__code__
    names = code.co_varnames
    positional = code.co_argcount
    positional_only = code.co_posonlyargcount
    keyword_only = code.co_kwonlyargcount
    annotations = func.__annotations__
    defaults = func.__defaults__ or ()
    kwdefaults = func.__kwdefaults__ or {}
    first_default = positional - len(defaults)
    out: list[tuple[str, inspect._ParameterKind, Any, Any]] = []
    for index in range(positional):
        name = names[index]
        kind = _POSITIONAL_ONLY if index < positional_only else _POSITIONAL_OR_KEYWORD
        default = defaults[index - first_default] if index >= first_default else _EMPTY
        out.append((name, kind, default, annotations.get(name, _EMPTY)))
    index = positional + keyword_only
    if code.co_flags & _CO_VARARGS:
        name = names[index]
        out.append((name, _VAR_POSITIONAL, _EMPTY, annotations.get(name, _EMPTY)))
        index += 1
    for name in names[positional : positional + keyword_only]:
        out.append(
            (name, _KEYWORD_ONLY, kwdefaults.get(name, _EMPTY), annotations.get(name, _EMPTY))
        )
    if code.co_flags & _CO_VARKEYWORDS:
        name = names[index]
        out.append((name, _VAR_KEYWORD, _EMPTY, annotations.get(name, _EMPTY)))
    return out


def _globals_of(func: object) -> dict[str, Any]:
    target = inspect.unwrap(func) if inspect.isfunction(func) else func
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.ismethod(target):
        target = target.__func__
    if not inspect.isfunction(target):
        target = getattr(type(target), "__call__", None)  # noqa: B004
    # the module's own dict, not a copy (a copy per tool made registering n tools of one
    # module O(n^2)); _resolve evaluates with separate locals, so an annotation cannot
    # assign into it
    return getattr(target, "__globals__", None) or {}


def _evaluate(
    annotation: str, name: str, namespace: dict[str, Any], func: object, lenient: bool
) -> Any:
    try:
        return eval(annotation, namespace, {})
    except Exception as exc:
        if lenient:
            return Any
        raise SchemaError(
            f"cannot resolve the annotation {annotation!r} of parameter {name!r} of "
            f"{func!r} ({exc}); define the type at module level or pass schema="
        ) from None


def class_parameters(cls: type) -> list[Parameter]:
    """The init fields of an attrs class or dataclass, as parameters.

    Descriptions come from the class docstring's ``Attributes:`` (or ``Args:``) section.
    """
    _, descriptions = parse_docstring(cls.__doc__)
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise SchemaError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from exc
    params: list[Parameter] = []
    if attrs.has(cls):
        for a in attrs.fields(cls):
            if not a.init:
                continue
            required = a.default is attrs.NOTHING
            default = _FACTORY if isinstance(a.default, attrs.Factory) else a.default  # type: ignore[arg-type]
            params.append(
                Parameter(
                    name=a.alias or a.name,
                    annotation=hints.get(a.name, Any),
                    required=required,
                    default=default,
                    description=descriptions.get(a.name) or None,
                )
            )
        return params
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            required = (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            params.append(
                Parameter(
                    name=f.name,
                    annotation=hints.get(f.name, Any),
                    required=required,
                    default=_FACTORY if f.default is dataclasses.MISSING else f.default,
                    description=descriptions.get(f.name) or None,
                )
            )
        return params
    raise SchemaError(f"{cls!r} is neither an attrs class nor a dataclass")


def parameters_schema(
    params: Iterable[Parameter], *, strict: bool = False, additional: bool = False
) -> dict[str, Any]:
    """The ``parameters`` object schema for *params*.

    Parameters with defaults are optional. ``additionalProperties`` is ``false`` unless
    *additional* (the callable takes ``**kwargs``). With *strict*, the schema follows the
    providers' strict rules (:func:`~lionexec.tools._strict.strict_parameters`): every object
    closed and all-required, optional parameters nullable; a parameter that cannot be strict
    raises :class:`SchemaError` naming it.
    """
    schema = _object_schema(params, (), "parameter", additional=additional)
    return strict_parameters(schema) if strict else schema


def _object_schema(
    params: Iterable[Parameter],
    seen: tuple[type, ...],
    label: str,
    *,
    additional: bool = False,
) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in params:
        try:
            prop = _type_schema(p.annotation, seen)
        except SchemaError as exc:
            raise SchemaError(f"{label} {p.name!r}: {exc}") from None
        # prop is a new dict (see _type_schema): completed in place, not copied per key
        if p.description:
            prop["description"] = p.description
        if not p.required and _is_json_scalar(p.default):
            prop["default"] = _scalar(p.default)
        properties[p.name] = prop
        if p.required:
            required.append(p.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if not additional:
        schema["additionalProperties"] = False
    return schema


def openai_schema(
    name: str, description: str | None, parameters: Mapping[str, Any], *, strict: bool = False
) -> dict[str, Any]:
    """The OpenAI function-tool shape: ``{"type": "function", "function": {...}}``.

    *strict* adds ``"strict": true`` to the function; *parameters* must then already be strict
    (:func:`~lionexec.tools._strict.strict_parameters`).
    """
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = dict(parameters)
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def anthropic_schema(openai: Mapping[str, Any]) -> dict[str, Any]:
    """Convert the OpenAI function shape to Anthropic's ``{name, description, input_schema}``.

    A strict function becomes a tool with ``"strict": true``.
    """
    function = openai["function"]
    schema: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        schema["description"] = function["description"]
    schema["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    if function.get("strict") is True:
        schema["strict"] = True
    return schema


def responses_schema(openai: Mapping[str, Any]) -> dict[str, Any]:
    """Convert the OpenAI function shape to a Responses API function tool.

    ``{"type": "function", "name", "description", "parameters", "strict"}``: the Responses
    API wants ``strict`` stated either way.
    """
    function = openai["function"]
    schema: dict[str, Any] = {"type": "function", "name": function["name"]}
    if function.get("description"):
        schema["description"] = function["description"]
    schema["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    schema["strict"] = function.get("strict") is True
    return schema


def tool_schema(openai: Mapping[str, Any], format: SchemaFormat = "openai") -> dict[str, Any]:
    """The tool described by the OpenAI function shape *openai*, in *format*, as a fresh copy.

    Raises:
        ValueError: *format* is not one of :data:`SCHEMA_FORMATS`.
    """
    if format == "openai":
        return snapshot(dict(openai))
    if format == "anthropic":
        return snapshot(anthropic_schema(openai))
    if format == "responses":
        return snapshot(responses_schema(openai))
    expected = ", ".join(repr(f) for f in SCHEMA_FORMATS)
    raise ValueError(f"unknown schema format {format!r}; expected one of {expected}")


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one Python type hint (see the module table); raises SchemaError."""
    return _type_schema(hint, ())


def _type_schema(hint: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    # Every branch returns a new dict: _object_schema adds its keys to the one it gets.
    if type(hint) is type:  # the common case, a plain class: str, int, float, bool
        json_type = _JSON_TYPES.get(hint)
        if json_type is not None:
            return {"type": json_type}
    if hint is Any or hint is object or hint is _EMPTY:
        return {}
    if hint is None:
        return {"type": "null"}
    if isinstance(hint, type) and hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _type_schema(args[0], seen)
    if origin is typing.Union or origin is types.UnionType:
        return _union_schema([_type_schema(a, seen) for a in args])
    if origin is typing.Literal:
        return _enum_schema(list(args))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint])
    if isinstance(hint, type) and hint in _STRING_FORMATS:
        fmt = _STRING_FORMATS[hint]
        return {"type": "string", "format": fmt} if fmt else {"type": "string"}
    if isinstance(hint, type) and (attrs.has(hint) or dataclasses.is_dataclass(hint)):
        return _record_schema(hint, seen)
    container = origin if origin is not None else hint
    if container is tuple:
        return _tuple_schema(hint, args, seen)
    if container in _ARRAYS:
        if not args:
            return {"type": "array"}
        return {"type": "array", "items": _type_schema(args[0], seen)}
    if container in _OBJECTS:
        if not args:
            return {"type": "object"}
        if args[0] is not str:
            raise SchemaError(f"JSON object keys are strings; cannot describe {hint!r}")
        value = _type_schema(args[1], seen)
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    raise SchemaError(
        f"cannot describe {hint!r} in JSON Schema; annotate it with a JSON-compatible type, "
        "an attrs class, or pass an explicit schema"
    )


def _union_schema(members: list[dict[str, Any]]) -> dict[str, Any]:
    if any(m == {} for m in members):
        return {}
    if all(m.keys() == {"type"} and isinstance(m["type"], str) for m in members):
        names = list(dict.fromkeys(m["type"] for m in members))
        return {"type": names[0] if len(names) == 1 else names}
    return {"anyOf": members}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    for value in values:
        if not _is_json_scalar(value):
            raise SchemaError(f"enum value {value!r} is not a JSON scalar")
    values = [_scalar(v) for v in values]
    kinds = {_JSON_TYPES[type(v)] for v in values}
    if len(kinds) == 1:
        return {"type": kinds.pop(), "enum": values}
    return {"enum": values}


def _tuple_schema(hint: Any, args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    if not args:  # tuple[()] has no args either, as bare tuple has, but an empty __args__
        if getattr(hint, "__args__", None) == ():
            return {"type": "array", "maxItems": 0}
        return {"type": "array"}
    if len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _type_schema(args[0], seen)}
    return {
        "type": "array",
        "prefixItems": [_type_schema(a, seen) for a in args],
        "items": False,
        "minItems": len(args),
        "maxItems": len(args),
    }


def _record_schema(cls: type, seen: tuple[type, ...]) -> dict[str, Any]:
    if cls in seen:  # a recursive record: describe the inner occurrence loosely
        return {"type": "object"}
    label = f"field of {cls.__qualname__}"
    schema = _object_schema(class_parameters(cls), (*seen, cls), label)
    summary, _ = parse_docstring(cls.__doc__)
    if summary and not summary.startswith(f"{cls.__name__}("):  # not a generated __doc__
        schema = {"description": summary, **schema}
    return schema


def _is_json_scalar(value: object) -> bool:
    """Whether *value* (an enum member: its value) is a JSON scalar that strict JSON can hold
    as it is (not ``inf``, nor a string with a lone surrogate, nor an int too long to print)."""
    if isinstance(value, enum.Enum):
        value = value.value
    return value is None or (type(value) in _JSON_TYPES and jsonable(value) == value)


def _scalar(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value
