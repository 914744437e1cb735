"""``ArgumentSpec``: how one tool's arguments are checked and structured.

A spec is a value: the key rule (required, known and runtime-supplied names, whether extra
keys pass, strictness), an optional compiled JSON Schema, and how values are structured (the
signature's annotations or a request class, through a cattrs converter).
:meth:`ArgumentSpec.validate` applies it; :meth:`ArgumentSpec.from_parameters` derives one from
a tool's JSON Schema parameters. :class:`~lionexec.tools.Tool` holds one as
:attr:`~lionexec.tools.Tool.arguments`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

import attrs
import cattrs

from lionexec._slots import builder
from lionexec.errors import ConfigurationError, SchemaError, ValidationError

from ._jsonschema import SchemaValidator, compile_schema
from ._schema import Parameter, class_parameters, type_schema
from ._strict import null_defaults
from ._validation import argument_converter, describe_error

__all__ = ["ArgumentSpec"]


def _check_request_class(_: object, __: object, request_class: type | None) -> None:
    if request_class is not None and not is_record_class(request_class):
        raise ConfigurationError(
            f"request_class must be an attrs class or a dataclass, got {request_class!r}"
        )


def _aliases(spec: ArgumentSpec) -> Mapping[str, str]:
    return _aliases_of(spec.request_class)


def _exact(spec: ArgumentSpec) -> Mapping[str, type | None] | None:
    """For a spec whose whole rule is "known names, each of exactly its type": the type each
    known name needs (``None``: any value); otherwise ``None``. See ``ArgumentSpec.validate``.
    """
    if (
        spec.extra_keys
        or spec.strict
        or spec.context_param in spec.known
        or spec.request_class is not None
        or spec.json_schema is not None
        or spec.nulls is not None
        or not all(hint in _EXACT for hint in spec.hints.values())
    ):
        return None
    return {name: spec.hints.get(name) for name in spec.known}


def _aliases_of(cls: type | None) -> Mapping[str, str]:
    if cls is not None and attrs.has(cls):
        return {a.alias or a.name: a.name for a in attrs.fields(cls)}
    return {}


@attrs.frozen(kw_only=True, eq=False)
class ArgumentSpec:
    """The argument rules of the tool called :attr:`tool`; :meth:`validate` applies them.

    Build one with :meth:`from_parameters` (as :meth:`Tool.from_function
    <lionexec.tools.Tool.from_function>` does), or directly. Constructing one does no parsing.
    A spec is immutable and never blocks.
    """

    #: The tool's name, as error messages give it.
    tool: str
    #: Names a call must supply.
    required: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    #: Names a call may supply (every required one among them).
    known: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)
    #: Whether string keys outside :attr:`known` pass, unchecked (a callable with ``**kwargs``).
    extra_keys: bool = False
    #: A call supplies exactly :attr:`required` (a strict schema makes every name required).
    strict: bool = False
    #: A name the runtime supplies (the call context); a caller may not.
    context_param: str | None = None
    #: An attrs class or dataclass the arguments are structured into, if any.
    request_class: type | None = attrs.field(default=None, validator=_check_request_class)
    #: The annotation values are structured into, by name (without :attr:`request_class`).
    hints: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, repr=False)
    #: A JSON Schema the arguments must pass first (an explicit tool schema).
    json_schema: SchemaValidator | None = attrs.field(default=None, repr=False)
    #: For a strict tool: turns ``null`` for a parameter that may be left out into its default
    #: (see :func:`~lionexec.tools._strict.null_defaults`).
    nulls: Callable[[dict[str, Any]], dict[str, Any]] | None = attrs.field(
        default=None, repr=False
    )
    #: The converter values are structured with.
    converter: cattrs.Converter = attrs.field(default=argument_converter, repr=False)
    _aliases: Mapping[str, str] = attrs.field(
        init=False, repr=False, default=attrs.Factory(_aliases, takes_self=True)
    )
    # The types of a spec that only checks names and exact types (see _exact), or None.
    _exact: Mapping[str, type | None] | None = attrs.field(
        init=False, repr=False, default=attrs.Factory(_exact, takes_self=True)
    )

    @classmethod
    def from_parameters(
        cls,
        tool: str,
        parameters: Mapping[str, Any],
        *,
        signature: Sequence[Parameter] = (),
        var_keyword: bool = False,
        request_class: type | None = None,
        strict: bool = False,
        nullable: bool = False,
        check_schema: bool = False,
        context_param: str | None = None,
        converter: cattrs.Converter | None = None,
    ) -> ArgumentSpec:
        """The spec of a tool whose arguments are the JSON Schema object *parameters*.

        Args:
            tool: the tool's name, for error messages.
            parameters: the JSON Schema of the arguments (as sent to the model): its
                ``required`` and ``properties`` give the key rule.
            signature: the callable's parameters; their annotations structure the values
                (where they describe a JSON type other than "anything").
            var_keyword: the callable takes ``**kwargs``: string keys outside the properties
                pass, unless *parameters* says ``"additionalProperties": false``.
            request_class: structure the arguments into this attrs class or dataclass
                instead (extra keys never pass then).
            strict: a strict schema (``null`` for a parameter that may be left out means its
                default; a call supplies exactly the required names).
            nullable: the model was shown a strict copy of *parameters* (a tool strict by
                default): ``null`` for a parameter that may be left out means its default,
                and the key rule stays that of *parameters* (leaving it out still works).
            check_schema: compile *parameters* and check arguments against it first (for a
                hand-written schema; a generated one says nothing the annotations do not).
            context_param: the name the runtime supplies.
            converter: by default :data:`~lionexec.tools._validation.argument_converter`.

        Raises:
            SchemaError: *check_schema* and *parameters* is not a valid JSON Schema.
            ConfigurationError: *request_class* is not an attrs class or a dataclass.
        """
        _check_request_class(None, None, request_class)
        nulls = None
        if strict or nullable:
            fields = class_parameters(request_class) if request_class else signature
            nulls = null_defaults(fields, request_class)
        required = frozenset(parameters.get("required") or ())
        known = frozenset(parameters.get("properties") or ())
        extra_keys = (
            request_class is None
            and var_keyword
            and parameters.get("additionalProperties", True) is not False
        )
        hints = checkable_hints(signature)
        json_schema = compile_schema(parameters) if check_schema else None
        if converter is None:
            converter = argument_converter
        if cls is not ArgumentSpec:  # a subclass: its own initializer
            return cls(
                tool=tool,
                required=required,
                known=known,
                extra_keys=extra_keys,
                strict=strict,
                context_param=context_param,
                request_class=request_class,
                hints=hints,
                json_schema=json_schema,
                nulls=nulls,
                converter=converter,
            )
        # the values are final (the request class checked above, new frozensets and hints):
        # no initializer, converters or validator (registering a tool builds one spec, and
        # they would repeat the checks just made)
        spec = _build_spec(
            tool,
            required,
            known,
            extra_keys,
            strict,
            context_param,
            request_class,
            hints,
            json_schema,
            nulls,
            converter,
            _aliases_of(request_class),
            None,
        )
        object.__setattr__(spec, "_exact", _exact(spec))
        return spec

    def validate(self, arguments: Mapping[str, Any], *, share: bool = False) -> dict[str, Any]:
        """Check *arguments* and return them normalized, as a new dict (with *share*, a
        ``dict`` that needs no normalizing is returned itself: for a caller that owns it).

        Keys: every required key must be present; unknown keys are refused unless
        :attr:`extra_keys`; a :attr:`strict` spec takes exactly its required keys; the
        :attr:`context_param` may not be supplied. Then the :attr:`json_schema`, if any, is
        checked; for a strict spec, ``null`` for a parameter that may be left out becomes its
        default. Values are structured (and lightly coerced, ``"3"`` → ``3``) through the
        converter, into the request class's fields or the :attr:`hints`; attrs and dataclass
        values become instances, enums members.

        Validating already-validated arguments returns an equal dict.

        Raises:
            ValidationError: naming the first bad field (``field``); the message lists all.
        """
        exact = self._exact
        if exact is not None and type(arguments) is dict:
            # The usual rule (known names, values of exactly their type), in one pass over
            # the arguments, as every call validates them; anything else takes the path below.
            names = arguments.keys()
            if names >= self.required and names <= exact.keys():
                for key, value in arguments.items():
                    hint = exact[key]
                    if hint is not None and type(value) is not hint:
                        break
                else:
                    return arguments if share else arguments.copy()
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            raise ValidationError(
                f"arguments for tool {self.tool!r} must be an object, "
                f"got {type(arguments).__name__}"
            )
        keys = arguments.keys()
        required = self.required
        if not (
            keys >= required
            # every known name is a string, so keys <= known also checks the key types
            and (keys <= self.known or (self.extra_keys and all(isinstance(k, str) for k in keys)))
            and not (self.strict and len(keys) != len(required))
            and (self.context_param is None or self.context_param not in keys)
        ):
            self._refuse_keys(arguments)  # the uncommon case: name what is wrong
        if self.json_schema is not None:
            self.json_schema.validate(arguments, label=f"arguments for tool {self.tool!r}")
        if self.nulls is not None:
            arguments = self.nulls(dict(arguments))
        if self.request_class is not None:
            try:
                instance: Any = self.converter.structure(arguments, self.request_class)
            except Exception as exc:
                raise self._invalid(describe_error(exc)) from exc
            return {key: getattr(instance, self._aliases.get(key, key)) for key in arguments}
        hints = self.hints
        if share and type(arguments) is dict:
            for key, value in arguments.items():
                hint = hints.get(key)
                if not (hint is None or (type(value) is hint and hint in _EXACT)):
                    break
            else:  # every value is as it would be normalized: share it, no copy per call
                return arguments
        normalized: dict[str, Any] = {}
        for key, value in arguments.items():
            hint = hints.get(key)
            if hint is None or (type(value) is hint and hint in _EXACT):
                normalized[key] = value  # nothing to check, or already exactly that type
                continue
            try:
                normalized[key] = self.converter.structure(value, hint)
            except Exception as exc:
                raise self._invalid(describe_error(exc, key)) from exc
        return normalized

    def _refuse_keys(self, arguments: Mapping[str, Any]) -> NoReturn:
        """Raise the ValidationError naming what breaks the key rule in *arguments*."""
        required, known = self.required, self.known
        for key in arguments:
            if not isinstance(key, str):
                raise ValidationError(f"argument names are strings, got {key!r}")
        if self.context_param is not None and self.context_param in arguments:
            raise ValidationError(
                f"argument {self.context_param!r} of tool {self.tool!r} is supplied by the "
                "runtime, not by the caller",
                field=self.context_param,
            )
        if not self.extra_keys:
            for key in arguments:
                if key not in known:
                    accepted = ", ".join(sorted(known)) or "none"
                    raise ValidationError(
                        f"unexpected argument {key!r} for tool {self.tool!r} "
                        f"(accepted: {accepted})",
                        field=key,
                    )
        for key in sorted(required):
            if key not in arguments:
                raise ValidationError(
                    f"missing required argument {key!r} for tool {self.tool!r}", field=key
                )
        if self.strict:
            for key in arguments:
                if key not in required:
                    raise ValidationError(
                        f"tool {self.tool!r} is strict and takes exactly "
                        f"{sorted(required)}; got {key!r} too",
                        field=key,
                    )
        raise AssertionError(f"the key rule of tool {self.tool!r} holds for {list(arguments)!r}")

    def _invalid(self, problems: list[tuple[str | None, str]]) -> ValidationError:
        listing = "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems)
        return ValidationError(
            f"invalid arguments for tool {self.tool!r}: {listing}",
            field=problems[0][0] if problems else None,
        )


_build_spec: Final = builder(
    ArgumentSpec,
    "tool",
    "required",
    "known",
    "extra_keys",
    "strict",
    "context_param",
    "request_class",
    "hints",
    "json_schema",
    "nulls",
    "converter",
    "_aliases",
    "_exact",
)

#: Hints a value of exactly that type satisfies with no conversion (``bool`` is not ``int``).
_EXACT: Final = frozenset({int, float, str, bool})


def checkable_hints(params: Iterable[Parameter]) -> dict[str, Any]:
    """Annotations worth structuring, by name: describable ones other than ``Any``."""
    hints: dict[str, Any] = {}
    for p in params:
        if type(p.annotation) is type and p.annotation in _EXACT:
            hints[p.name] = p.annotation  # the common case, without describing it again
            continue
        try:
            described = type_schema(p.annotation)
        except SchemaError:  # only reachable with an explicit schema: leave it unchecked
            continue
        if described:
            hints[p.name] = p.annotation
    return hints


def is_record_class(cls: object) -> bool:
    """Whether *cls* is an attrs class or a dataclass."""
    return isinstance(cls, type) and (attrs.has(cls) or dataclasses.is_dataclass(cls))
