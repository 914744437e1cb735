"""``Tool``: one model-callable function, its schema, its validation and its sync policy."""

from __future__ import annotations

import copy
import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, NoReturn, TypeAlias

import attrs
import cattrs
import trio

from lionexec.errors import ConfigurationError, SchemaError, ValidationError

from .docstrings import parse_docstring
from .jsonschema import SchemaValidator, compile_schema
from .runner import is_async_callable, run_callable
from .schema import (
    Parameter,
    SchemaFormat,
    class_parameters,
    openai_schema,
    parameters_schema,
    signature_parameters,
    tool_schema,
    type_schema,
)
from .strict import null_defaults, strict_parameters
from .validation import argument_converter, describe_error

__all__ = ["EFFECTS", "TOOL_NAME_PATTERN", "Effect", "Tool"]

#: What repeating a call of a tool means (see ``Tool(effect=...)``).
Effect: TypeAlias = Literal["pure", "idempotent", "keyed", "unsafe"]
#: Every effect class, safest first.
EFFECTS: Final[tuple[Effect, ...]] = ("pure", "idempotent", "keyed", "unsafe")

#: What a provider accepts as a function name (OpenAI and Anthropic agree).
TOOL_NAME_PATTERN: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _no_kwargs() -> dict[str, Any]:
    return {}


@attrs.frozen(init=False, eq=False)
class Tool:
    """A function a model may call: its name, JSON schema, argument rules and run policy.

    Build it from any callable: a function, an ``async def``, a bound method, a
    :func:`functools.partial`, an object with ``async def __call__``, or a lambda (partials,
    lambdas and objects without a ``__name__`` need an explicit *name*).

    Args:
        func: the callable, kept as :attr:`func_callable`.
        name: the function name a model calls; defaults to the schema's name, then
            ``func.__name__``. Must match :data:`TOOL_NAME_PATTERN`.
        description: defaults to the schema's, then the docstring's summary.
        schema: an explicit schema (the OpenAI function shape, or just its ``parameters``
            object); it replaces the generated one. Arguments are validated against it as
            JSON Schema, then still type-checked against the signature where annotations
            allow. A ``"strict": true`` in it makes the tool :attr:`strict`.
        request_class: an attrs class (or dataclass) describing the arguments: the schema
            is derived from it and arguments are structured through it.
        strict: emit a strict schema (``"strict": true``; every object closed and
            all-required, optional parameters nullable; see :mod:`lionexec.tools.strict`):
            the model must send exactly the declared parameters, ``null`` for one it leaves
            out. A parameter that cannot be strict raises :class:`SchemaError`. Otherwise
            the minimum-key rule holds: every required key present, no unknown key (unless
            the callable takes ``**kwargs``).
        preprocessor: ``preprocessor(arguments, **preprocessor_kwargs)`` returns the
            arguments to call with.
        postprocessor: ``postprocessor(response, **postprocessor_kwargs)`` returns the
            response to record.
        inline: run sync callables and processors on the trio thread instead of a worker
            thread. Only for quick, non-blocking functions.
        limiter: the :class:`trio.CapacityLimiter` for this tool's worker threads; by
            default :func:`current_tool_limiter`.
        idempotent: calling twice with the same arguments is safe; the act layer retries
            only idempotent tools. ``True`` with no *effect* means ``effect="idempotent"``.
        effect: what running the call again means, read by a durable journal's recovery
            (see :data:`EFFECTS`): ``"pure"`` (no side effect), ``"idempotent"`` (repeating
            it changes nothing more), ``"keyed"`` (safe to repeat when the call's idempotency
            key is passed downstream) or ``"unsafe"`` (never repeated; the default unless
            *idempotent*). The first three make the tool :attr:`idempotent`.
        idempotency_key: derives the call's idempotency key from its validated arguments
            (``idempotency_key(arguments) -> str``); by default a call's key is its branch id
            and tool-call id. The key is in the call context
            (:attr:`~lionexec.governance.CallContext.idempotency_key`).
        reconcile: for an ``unsafe`` tool whose call was running when the process died:
            ``reconcile(context)`` (sync or async) finds out what happened; see
            :mod:`lionexec.journal`.
        subject: the argument a permission rule matches on (``"path"``, ``"command"``).
        subject_kind: how a permission policy reads the subject: ``"path"``, ``"command"``
            or ``"text"``; ``None`` lets the policy infer it (see
            :func:`lionexec.governance.subject_kind_of`). Needs *subject*.
        context_param: a parameter that receives the call context at invocation; it is
            left out of the schema and a model may not supply it.
        converter: the cattrs converter for structuring arguments; by default
            :data:`~lionexec.tools.validation.argument_converter`.

    Tools compare by identity and are immutable; copying one returns the same tool.
    """

    func_callable: Callable[..., Any]
    name: str
    description: str | None
    schema: dict[str, Any]
    request_class: type | None
    strict: bool
    preprocessor: Callable[..., Any] | None
    preprocessor_kwargs: Mapping[str, Any]
    postprocessor: Callable[..., Any] | None
    postprocessor_kwargs: Mapping[str, Any]
    inline: bool
    limiter: trio.CapacityLimiter | None
    idempotent: bool
    effect: Effect
    idempotency_key: Callable[[dict[str, Any]], str] | None
    reconcile: Callable[..., Any] | None
    subject: str | None
    subject_kind: Literal["path", "command", "text"] | None
    context_param: str | None
    converter: cattrs.Converter = attrs.field(repr=False)
    _hints: Mapping[str, Any] = attrs.field(repr=False)
    _required: frozenset[str] = attrs.field(repr=False)
    _known: frozenset[str] = attrs.field(repr=False)
    _extra_ok: bool = attrs.field(repr=False)
    _aliases: Mapping[str, str] = attrs.field(repr=False)
    _func_async: bool = attrs.field(repr=False)
    _pre_async: bool = attrs.field(repr=False)
    _post_async: bool = attrs.field(repr=False)
    _arguments_schema: SchemaValidator | None = attrs.field(repr=False)
    _nulls: Callable[[dict[str, Any]], dict[str, Any]] | None = attrs.field(repr=False)

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        schema: Mapping[str, Any] | None = None,
        request_class: type | None = None,
        strict: bool = False,
        preprocessor: Callable[..., Any] | None = None,
        preprocessor_kwargs: Mapping[str, Any] | None = None,
        postprocessor: Callable[..., Any] | None = None,
        postprocessor_kwargs: Mapping[str, Any] | None = None,
        inline: bool = False,
        limiter: trio.CapacityLimiter | None = None,
        idempotent: bool = False,
        effect: Effect | None = None,
        idempotency_key: Callable[[dict[str, Any]], str] | None = None,
        reconcile: Callable[..., Any] | None = None,
        subject: str | None = None,
        subject_kind: Literal["path", "command", "text"] | None = None,
        context_param: str | None = None,
        converter: cattrs.Converter | None = None,
    ) -> None:
        if not callable(func):
            raise TypeError(f"a tool needs a callable, got {type(func).__name__}: {func!r}")
        for label, processor in (("preprocessor", preprocessor), ("postprocessor", postprocessor)):
            if processor is not None and not callable(processor):
                raise TypeError(f"{label} must be callable, got {type(processor).__name__}")
        if inspect.isasyncgenfunction(_unwrap(func)):
            raise ConfigurationError(f"{func!r} is an async generator; a tool returns a value")
        if request_class is not None and not _is_record_class(request_class):
            raise ConfigurationError(
                f"request_class must be an attrs class or a dataclass, got {request_class!r}"
            )
        summary, docs = parse_docstring(inspect.getdoc(_doc_target(func)))
        explicit = _explicit_function(schema) if schema is not None else None
        name = _tool_name(func, name, explicit)
        strict = strict or (explicit or {}).get("strict") is True  # a hand-written strict stays
        if description is None:
            description = (explicit or {}).get("description") or summary

        signature_params: list[Parameter] = []
        var_keyword = False
        if request_class is None:
            exclude = () if context_param is None else (context_param,)
            signature_params, var_keyword = signature_parameters(
                func, exclude=exclude, descriptions=docs, lenient=explicit is not None
            )
        if context_param is not None:
            _check_context_param(func, context_param)
        if explicit is not None:
            parameters = copy.deepcopy(dict(explicit.get("parameters") or _EMPTY_OBJECT))
        elif request_class is not None:
            parameters = parameters_schema(class_parameters(request_class))
        else:
            parameters = parameters_schema(signature_params, additional=var_keyword)
        if strict:
            parameters = strict_parameters(parameters, tool=name)

        properties = parameters.get("properties") or {}
        if subject is not None and subject not in properties:
            raise ConfigurationError(
                f"subject {subject!r} is not a parameter of tool {name!r} "
                f"(parameters: {', '.join(sorted(properties)) or 'none'})"
            )
        if subject_kind not in (None, "path", "command", "text") or (
            subject_kind is not None and subject is None
        ):
            raise ConfigurationError(
                f"subject_kind {subject_kind!r} of tool {name!r} must be 'path', 'command' or "
                "'text', with a subject"
            )
        if effect is None:
            effect = "idempotent" if idempotent else "unsafe"
        elif effect not in EFFECTS:
            raise ConfigurationError(
                f"effect {effect!r} of tool {name!r} must be one of {', '.join(EFFECTS)}"
            )
        for label, hook in (("idempotency_key", idempotency_key), ("reconcile", reconcile)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{label} must be callable, got {type(hook).__name__}")
        aliases: dict[str, str] = {}
        if request_class is not None and attrs.has(request_class):
            aliases = {a.alias or a.name: a.name for a in attrs.fields(request_class)}
        self.__attrs_init__(
            func_callable=func,
            name=name,
            description=description,
            schema=openai_schema(name, description, parameters, strict=strict),
            request_class=request_class,
            strict=strict,
            preprocessor=preprocessor,
            preprocessor_kwargs=dict(preprocessor_kwargs or {}),
            postprocessor=postprocessor,
            postprocessor_kwargs=dict(postprocessor_kwargs or {}),
            inline=inline,
            limiter=limiter,
            idempotent=idempotent or effect != "unsafe",
            effect=effect,
            idempotency_key=idempotency_key,
            reconcile=reconcile,
            subject=subject,
            subject_kind=subject_kind,
            context_param=context_param,
            converter=converter if converter is not None else argument_converter,
            hints=_checkable_hints(signature_params),
            required=frozenset(parameters.get("required") or ()),
            known=frozenset(properties),
            extra_ok=(
                request_class is None
                and var_keyword
                and parameters.get("additionalProperties", True) is not False
            ),
            aliases=aliases,
            func_async=is_async_callable(func),
            pre_async=is_async_callable(preprocessor),
            post_async=is_async_callable(postprocessor),
            arguments_schema=compile_schema(parameters) if explicit is not None else None,
            nulls=(
                null_defaults(
                    class_parameters(request_class) if request_class else signature_params,
                    request_class,
                )
                if strict
                else None
            ),
        )

    # -- arguments --------------------------------------------------------------------------

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema object of the arguments (``schema["function"]["parameters"]``)."""
        parameters: dict[str, Any] = self.schema["function"]["parameters"]
        return parameters

    def schema_for(self, format: SchemaFormat = "openai") -> dict[str, Any]:
        """This tool's schema in *format*, as a fresh copy.

        ``"openai"`` (Chat Completions function tool), ``"anthropic"`` (Messages tool) or
        ``"responses"`` (Responses API function tool); see
        :func:`~lionexec.tools.schema.tool_schema`. Raises ValueError for another format.
        """
        return tool_schema(self.schema, format)

    @property
    def required(self) -> frozenset[str]:
        """The argument names a call must supply (all declared ones when :attr:`strict`)."""
        return self._required

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check *arguments* against this tool and return them normalized, as a new dict.

        Keys: every required key must be present; unknown keys are refused unless the
        callable takes ``**kwargs``; a :attr:`strict` tool takes exactly its required keys.
        Values are structured (and lightly coerced, ``"3"`` → ``3``) through the converter,
        into the request class's fields or the signature's annotations; attrs and
        dataclass values become instances, enums members.

        An explicit *schema* is checked first, as JSON Schema
        (:mod:`lionexec.tools.jsonschema`). For a :attr:`strict` tool, ``null`` for a parameter
        that may be left out means "not given": it becomes the parameter's default.

        Validating already-validated arguments returns an equal dict.

        Raises:
            ValidationError: naming the first bad field (``field``); the message lists all.
        """
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            raise ValidationError(
                f"arguments for tool {self.name!r} must be an object, "
                f"got {type(arguments).__name__}"
            )
        self._check_keys(arguments)
        if self._arguments_schema is not None:
            self._arguments_schema.validate(arguments, label=f"arguments for tool {self.name!r}")
        if self._nulls is not None:
            arguments = self._nulls(dict(arguments))
        if self.request_class is not None:
            try:
                instance: Any = self.converter.structure(arguments, self.request_class)
            except Exception as exc:
                raise self._invalid(describe_error(exc)) from exc
            return {key: getattr(instance, self._aliases.get(key, key)) for key in arguments}
        hints = self._hints
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

    def _check_keys(self, arguments: Mapping[str, Any]) -> None:
        keys = arguments.keys()
        if (
            keys >= self._required
            # every known name is a string, so keys <= _known also checks the key types
            and (keys <= self._known or (self._extra_ok and all(type(k) is str for k in keys)))
            and not (self.strict and len(keys) != len(self._required))
            and (self.context_param is None or self.context_param not in keys)
        ):
            return  # the common case; the checks below name what is wrong otherwise
        for key in arguments:
            if not isinstance(key, str):
                raise ValidationError(f"argument names are strings, got {key!r}")
        if self.context_param is not None and self.context_param in arguments:
            raise ValidationError(
                f"argument {self.context_param!r} of tool {self.name!r} is supplied by the "
                "runtime, not by the caller",
                field=self.context_param,
            )
        if not self._extra_ok:
            for key in arguments:
                if key not in self._known:
                    accepted = ", ".join(sorted(self._known)) or "none"
                    raise ValidationError(
                        f"unexpected argument {key!r} for tool {self.name!r} "
                        f"(accepted: {accepted})",
                        field=key,
                    )
        for key in sorted(self._required):
            if key not in arguments:
                raise ValidationError(
                    f"missing required argument {key!r} for tool {self.name!r}", field=key
                )
        if self.strict:
            for key in arguments:
                if key not in self._required:
                    raise ValidationError(
                        f"tool {self.name!r} is strict and takes exactly "
                        f"{sorted(self._required)}; got {key!r} too",
                        field=key,
                    )

    def _invalid(self, problems: list[tuple[str | None, str]]) -> ValidationError:
        listing = "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems)
        return ValidationError(
            f"invalid arguments for tool {self.name!r}: {listing}",
            field=problems[0][0] if problems else None,
        )

    # -- running ----------------------------------------------------------------------------

    async def transform(self, arguments: dict[str, Any]) -> Any:
        """Run the :attr:`preprocessor` on *arguments* (per the sync policy); return its result.

        The caller checks the result: the act transaction revalidates it (schema and policy).
        """
        assert self.preprocessor is not None
        return await run_callable(
            self.preprocessor,
            self._pre_async,
            (arguments,),
            self.preprocessor_kwargs,
            inline=self.inline,
            limiter=self.limiter,
        )

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Call :attr:`func_callable` with *arguments* as keywords (per the sync policy)."""
        return await run_callable(
            self.func_callable,
            self._func_async,
            (),
            arguments,
            inline=self.inline,
            limiter=self.limiter,
        )

    async def postprocess(self, response: Any) -> Any:
        """Run the :attr:`postprocessor` on *response*; return what it returns."""
        assert self.postprocessor is not None
        return await run_callable(
            self.postprocessor,
            self._post_async,
            (response,),
            self.postprocessor_kwargs,
            inline=self.inline,
            limiter=self.limiter,
        )

    # -- records ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible record: name, description, schema and options; no callables."""
        from lionexec._unstructure import converter

        record: dict[str, Any] = converter.unstructure(self, Tool)
        return record

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NoReturn:
        """Always raises: a record carries no callable to rebuild a tool from."""
        raise NotImplementedError(
            f"cannot recreate a {cls.__name__} from a record: records hold no callables; "
            "construct Tool(func, ...) instead"
        )

    def __copy__(self) -> Tool:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Tool:
        return self

    @classmethod
    def from_function(cls, func: Callable[..., Any], **options: Any) -> Tool:
        """A tool for *func*: its name, description and schema read from the function.

        Transitional: the same as ``Tool(func, **options)`` until the constructor split.
        """
        return cls(func, **options)


_EMPTY_OBJECT: Final[Mapping[str, Any]] = {"type": "object", "properties": {}}


def _unwrap(func: object) -> object:
    while isinstance(func, functools.partial):
        func = func.func
    return func


def _doc_target(func: object) -> object:
    """Where the documentation of *func* lives (partials and callable objects unwrapped)."""
    target = _unwrap(func)
    if inspect.isfunction(target) or inspect.ismethod(target) or isinstance(target, type):
        return target
    call = getattr(type(target), "__call__", None)  # noqa: B004
    if call is not None and getattr(call, "__doc__", None):
        return call
    return type(target)


def _is_record_class(cls: object) -> bool:
    import dataclasses

    return isinstance(cls, type) and (attrs.has(cls) or dataclasses.is_dataclass(cls))


def _explicit_function(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The ``function`` part of an explicit schema (either accepted shape), deep-copied."""
    if not isinstance(schema, Mapping):
        raise ConfigurationError(f"schema must be a mapping, got {type(schema).__name__}")
    if "function" in schema:
        function = schema["function"]
        if not isinstance(function, Mapping):
            raise ConfigurationError("schema['function'] must be a mapping")
        return copy.deepcopy(dict(function))
    if schema.get("type") == "object" or "properties" in schema:
        return {"parameters": copy.deepcopy(dict(schema))}
    raise ConfigurationError(
        "schema must be the OpenAI function shape {'type': 'function', 'function': {...}} "
        "or a JSON Schema object for the parameters"
    )


def _tool_name(
    func: Callable[..., Any], name: str | None, explicit: Mapping[str, Any] | None
) -> str:
    declared = (explicit or {}).get("name")
    if name is not None and declared is not None and name != declared:
        raise ConfigurationError(f"name={name!r} contradicts the schema's name {declared!r}")
    if name is None:
        name = declared
    if name is None:
        name = _derived_name(func)
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.match(name):
        raise ConfigurationError(
            f"invalid tool name {name!r}: a name is 1 to 64 letters, digits, '_' or '-' "
            f"(pattern {TOOL_NAME_PATTERN.pattern})"
        )
    return name


def _derived_name(func: Callable[..., Any]) -> str:
    if isinstance(func, functools.partial):
        raise ConfigurationError(
            f"cannot name a tool after a functools.partial ({func!r}); pass name="
        )
    derived = getattr(func, "__name__", None)
    if derived == "<lambda>":
        raise ConfigurationError("a lambda has no usable name; pass name= to Tool")
    if not isinstance(derived, str):
        raise ConfigurationError(f"cannot derive a tool name from {func!r}; pass name=")
    if not TOOL_NAME_PATTERN.match(derived):
        raise ConfigurationError(
            f"{derived!r} is not a valid tool name (pattern {TOOL_NAME_PATTERN.pattern}); "
            "pass name="
        )
    return derived


def _check_context_param(func: Callable[..., Any], context_param: str) -> None:
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"cannot read the signature of {func!r}: {exc}") from exc
    param = parameters.get(context_param)
    if param is None or param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
        raise ConfigurationError(
            f"context_param {context_param!r} is not a keyword parameter of {func!r}"
        )


#: Hints a value of exactly that type satisfies with no conversion (``bool`` is not ``int``).
_EXACT: Final = frozenset({int, float, str, bool})


def _checkable_hints(params: list[Parameter]) -> dict[str, Any]:
    """Annotations worth structuring: describable ones other than ``Any``."""
    hints: dict[str, Any] = {}
    for p in params:
        try:
            described = type_schema(p.annotation)
        except SchemaError:  # only reachable with an explicit schema: leave it unchecked
            continue
        if described:
            hints[p.name] = p.annotation
    return hints
