"""``Tool``: one model-callable function, its schema, its argument rules and its sync policy.

:meth:`Tool.from_function` reads a function (signature, type hints, docstring) into a tool;
the argument rules live in :mod:`lionexec.tools._arguments`, the sync policy in
:mod:`lionexec.tools._runner`.
"""

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

from lionexec._slots import builder
from lionexec.errors import ConfigurationError, SchemaError

from ._arguments import ArgumentSpec, is_record_class
from ._docstrings import parse_docstring
from ._runner import is_async_callable, run_callable
from ._schema import (
    Parameter,
    SchemaFormat,
    class_parameters,
    openai_schema,
    parameters_schema,
    signature_parameters,
    tool_schema,
)
from ._strict import strict_parameters

__all__ = ["EFFECTS", "TOOL_NAME_PATTERN", "Effect", "Tool"]

#: What repeating a call of a tool means (see :attr:`Tool.effect`).
Effect: TypeAlias = Literal["pure", "idempotent", "keyed", "unsafe"]
#: Every effect class, safest first.
EFFECTS: Final[tuple[Effect, ...]] = ("pure", "idempotent", "keyed", "unsafe")

#: What a provider accepts as a function name (OpenAI and Anthropic agree).
TOOL_NAME_PATTERN: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")


def _callable_tool(_: object, __: object, func: Callable[..., Any]) -> None:
    if not callable(func):
        raise TypeError(f"a tool needs a callable, got {type(func).__name__}: {func!r}")
    if inspect.isasyncgenfunction(_unwrap(func)):
        raise ConfigurationError(f"{func!r} is an async generator; a tool returns a value")


def _valid_name(_: object, __: object, name: str) -> None:
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"invalid tool name {name!r}: a name is 1 to 64 letters, digits, '_' or '-' "
            f"(pattern {TOOL_NAME_PATTERN.pattern})"
        )


def _optional_callable(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{attribute.name} must be callable, got {type(value).__name__}")


def _valid_effect(tool: Tool, _: object, effect: object) -> None:
    if effect not in EFFECTS:
        raise ConfigurationError(
            f"effect {effect!r} of tool {tool.name!r} must be one of {', '.join(EFFECTS)}"
        )


def _consistent_idempotent(tool: Tool, _: object, idempotent: bool) -> None:
    if not idempotent and tool.effect != "unsafe":
        raise ConfigurationError(
            f"a tool with effect {tool.effect!r} is idempotent; tool {tool.name!r} says it is not"
        )


def _valid_subject(tool: Tool, _: object, subject: str | None) -> None:
    if subject is None:
        return
    properties = tool.parameters.get("properties") or {}
    if subject not in properties:
        raise ConfigurationError(
            f"subject {subject!r} is not a parameter of tool {tool.name!r} "
            f"(parameters: {', '.join(sorted(properties)) or 'none'})"
        )


def _valid_subject_kind(tool: Tool, _: object, kind: str | None) -> None:
    # Kinds are registered in governance (a higher layer), so a name is checked there, when a
    # policy reads a call: an unregistered kind is denied, naming the registered ones.
    if kind is not None and (not isinstance(kind, str) or not kind or tool.subject is None):
        raise ConfigurationError(
            f"subject_kind {kind!r} of tool {tool.name!r} must be the name of a subject kind "
            "('path', 'command', 'text', or one registered with "
            "lionexec.governance.register_subject_kind), with a subject"
        )


def _valid_binding(tool: Tool, _: object, binding: str | None) -> None:
    if binding is not None and (not isinstance(binding, str) or not binding):
        raise ConfigurationError(
            f"approval_binding {binding!r} of tool {tool.name!r} must be a non-empty string "
            "(a digest of how the tool runs) or None"
        )


def _same_tool(tool: Tool, _: object, spec: ArgumentSpec) -> None:
    if spec.tool != tool.name:
        raise ConfigurationError(
            f"the arguments of tool {tool.name!r} are the spec of tool {spec.tool!r}"
        )


def _kwargs(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return {} if value is None else dict(value)


def _bare_schema(tool: Tool) -> dict[str, Any]:
    return openai_schema(tool.name, tool.description, {"type": "object", "properties": {}})


def _function_of(name: str, schema: object) -> Mapping[str, Any]:
    """The ``function`` part of the stored schema of tool *name*, checked for shape."""
    function = None
    if isinstance(schema, Mapping) and schema.get("type") == "function":
        function = schema.get("function")
    if not isinstance(function, Mapping) or not isinstance(function.get("parameters"), Mapping):
        raise ConfigurationError(
            f"the schema of tool {name!r} must be the OpenAI function shape "
            "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}"
        )
    return function


def _valid_schema(tool: Tool, _: object, schema: dict[str, Any]) -> None:
    declared = _function_of(tool.name, schema).get("name")
    if declared != tool.name:
        raise ConfigurationError(
            f"the schema of tool {tool.name!r} names the function {declared!r}"
        )


def _schema_arguments(tool: Tool) -> ArgumentSpec:
    """The rules of a tool given only its schema: the schema itself, enforced (values and any
    ``additionalProperties`` schema included): it is all the tool says of its arguments, and
    the model is shown it."""
    function = _function_of(tool.name, tool.schema)
    parameters = function["parameters"]
    return ArgumentSpec.from_parameters(
        tool.name,
        parameters,
        var_keyword=parameters.get("additionalProperties", False) is not False,
        strict=function.get("strict") is True,
        check_schema=True,
    )


def _not_unsafe(tool: Tool) -> bool:
    return tool.effect != "unsafe"


def _is_async(attribute: str) -> Callable[[Tool], bool]:
    def derive(tool: Tool) -> bool:
        value = getattr(tool, attribute)
        return value is not None and is_async_callable(value)

    return derive


@attrs.frozen(kw_only=True, eq=False)
class Tool:
    """A function a model may call: its name, JSON schema, argument rules and run policy.

    Build one from a function with :meth:`from_function`, which reads the name, description
    and schema from it. The constructor takes the fields as they are and parses nothing:
    ``Tool(func_callable=f, name="add", schema=...)`` (it checks only what is cheap: the
    callables are callable, the name matches :data:`TOOL_NAME_PATTERN`, the effect and the
    subject are valid). Without *schema* the tool takes no arguments; without *arguments* the
    schema is enforced, all of it (keys and values, compiled once when the tool is built):
    it is all the tool says of its arguments, and what the model is shown.

    Tools compare by identity and are immutable; copying one returns the same tool.
    """

    #: The callable a call runs, with the validated arguments as keywords.
    func_callable: Callable[..., Any] = attrs.field(validator=_callable_tool)
    #: The function name a model calls (see :data:`TOOL_NAME_PATTERN`).
    name: str = attrs.field(validator=_valid_name)
    #: What the tool does, for the model.
    description: str | None = None
    #: The OpenAI function shape ``{"type": "function", "function": {"name", "description",
    #: "parameters"[, "strict"]}}``; :meth:`schema_for` gives the other formats.
    schema: dict[str, Any] = attrs.field(
        default=attrs.Factory(_bare_schema, takes_self=True), validator=_valid_schema
    )
    #: How a call's arguments are checked and structured (:meth:`validate` applies it).
    arguments: ArgumentSpec = attrs.field(
        default=attrs.Factory(_schema_arguments, takes_self=True),
        validator=_same_tool,
        repr=False,
    )
    #: ``preprocessor(arguments, **preprocessor_kwargs)`` returns the arguments to call with.
    preprocessor: Callable[..., Any] | None = attrs.field(
        default=None, validator=_optional_callable
    )
    preprocessor_kwargs: Mapping[str, Any] = attrs.field(factory=dict, converter=_kwargs)
    #: ``postprocessor(response, **postprocessor_kwargs)`` returns the response to record.
    postprocessor: Callable[..., Any] | None = attrs.field(
        default=None, validator=_optional_callable
    )
    postprocessor_kwargs: Mapping[str, Any] = attrs.field(factory=dict, converter=_kwargs)
    #: Run sync callables and processors on the trio thread instead of a worker thread.
    inline: bool = False
    #: The limiter of this tool's worker threads; ``None``: :func:`current_tool_limiter`.
    limiter: trio.CapacityLimiter | None = None
    #: What running a call again means (see :data:`EFFECTS`).
    effect: Effect = attrs.field(default="unsafe", validator=_valid_effect)
    #: Calling twice with the same arguments is safe; the act layer retries only these.
    #: Always true for an effect other than ``"unsafe"``.
    idempotent: bool = attrs.field(
        default=attrs.Factory(_not_unsafe, takes_self=True),
        validator=_consistent_idempotent,
    )
    #: ``idempotency_key(arguments) -> str``: the call's idempotency key.
    idempotency_key: Callable[[dict[str, Any]], str] | None = attrs.field(
        default=None, validator=_optional_callable
    )
    #: ``reconcile(context)``: what happened to an ``unsafe`` call the process died in.
    reconcile: Callable[..., Any] | None = attrs.field(default=None, validator=_optional_callable)
    #: The argument a permission rule matches on.
    subject: str | None = attrs.field(default=None, validator=_valid_subject)
    #: How a permission policy reads the subject; ``None``: inferred.
    subject_kind: str | None = attrs.field(default=None, validator=_valid_subject_kind)
    #: What an approval of a call binds besides its arguments: a digest of how the tool runs
    #: (a sandboxed command tool's profile, say), so an approval given under one binding does
    #: not approve the same arguments under another. ``None``: the arguments alone.
    approval_binding: str | None = attrs.field(default=None, validator=_valid_binding)
    #: Why the tool's schema is not strict though strict was the default (the part of the
    #: schema a strict provider would refuse); ``None`` when it is strict, or was asked not
    #: to be.
    strict_reason: str | None = None
    _func_async: bool = attrs.field(
        init=False, repr=False, default=attrs.Factory(_is_async("func_callable"), takes_self=True)
    )
    _pre_async: bool = attrs.field(
        init=False, repr=False, default=attrs.Factory(_is_async("preprocessor"), takes_self=True)
    )
    _post_async: bool = attrs.field(
        init=False, repr=False, default=attrs.Factory(_is_async("postprocessor"), takes_self=True)
    )

    @classmethod
    def from_function(
        cls,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        schema: Mapping[str, Any] | None = None,
        request_class: type | None = None,
        strict: bool | None = None,
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
        subject_kind: str | None = None,
        context_param: str | None = None,
        converter: cattrs.Converter | None = None,
    ) -> Tool:
        """A tool for *func*: its name, description and schema read from the function.

        *func* may be a function, an ``async def``, a bound method, a
        :func:`functools.partial`, an object with ``async def __call__``, or a lambda
        (partials, lambdas and objects without a ``__name__`` need an explicit *name*). The
        signature, type hints and docstring are read once, here; nothing is parsed per call.

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
            strict: ``True``: emit a strict schema (``"strict": true``; every object closed
                and all-required, optional parameters nullable; see
                :mod:`lionexec.tools._strict`): the model must send exactly the declared
                parameters, ``null`` for one it leaves out. A parameter that cannot be strict
                raises :class:`SchemaError`. ``None`` (the default): the schema shown to the
                model is strict whenever it can be, while the arguments keep the minimum-key
                rule (``null`` for an optional parameter still means its default); when it
                cannot be (a ``dict[str, T]``, an ``Any``, a tuple, ``**kwargs``, a
                hand-written schema without ``"strict": true``), the schema is sent
                non-strict and :attr:`strict_reason` says why. ``False``: never strict; the
                minimum-key rule: every required key present, no unknown key (unless the
                callable takes ``**kwargs``).
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
                (see :data:`EFFECTS`): ``"pure"`` (no side effect), ``"idempotent"``
                (repeating it changes nothing more), ``"keyed"`` (safe to repeat when the
                call's idempotency key is passed downstream) or ``"unsafe"`` (never repeated;
                the default unless *idempotent*). The first three make the tool
                :attr:`idempotent`.
            idempotency_key: derives the call's idempotency key from its validated arguments
                (``idempotency_key(arguments) -> str``); by default a call's key is its branch
                id and tool-call id. The key is in the call context
                (:attr:`~lionexec.governance.CallContext.idempotency_key`).
            reconcile: for an ``unsafe`` tool whose call was running when the process died:
                ``reconcile(context)`` (sync or async) finds out what happened; see
                :mod:`lionexec.journal`.
            subject: the argument a permission rule matches on (``"path"``, ``"command"``).
            subject_kind: how a permission policy reads the subject: ``"path"``,
                ``"command"``, ``"text"`` or a kind registered with
                :func:`lionexec.governance.register_subject_kind`; ``None`` lets the policy
                infer it (see
                :func:`lionexec.governance.subject_kind_of`). Needs *subject*.
            context_param: a parameter that receives the call context at invocation; it is
                left out of the schema and a model may not supply it.
            converter: the cattrs converter for structuring arguments; by default
                :data:`~lionexec.tools._validation.argument_converter`.

        Raises:
            TypeError: *func* or a hook is not callable.
            ConfigurationError: a bad name, option or combination of options.
            SchemaError: the signature or schema cannot be described or made strict.
        """
        _callable_tool(None, None, func)
        for label, processor in (("preprocessor", preprocessor), ("postprocessor", postprocessor)):
            if processor is not None and not callable(processor):
                raise TypeError(f"{label} must be callable, got {type(processor).__name__}")
        if request_class is not None and not is_record_class(request_class):
            raise ConfigurationError(
                f"request_class must be an attrs class or a dataclass, got {request_class!r}"
            )
        summary, docs = parse_docstring(_doc_of(_doc_target(func)))
        explicit = _explicit_function(schema) if schema is not None else None
        name = _tool_name(func, name, explicit)
        if (explicit or {}).get("strict") is True:  # a hand-written strict stays
            strict = True
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
        strict_reason = None
        shown = parameters
        if strict:
            parameters = shown = strict_parameters(parameters, tool=name)
        elif strict is None:
            shown, strict_reason = _strict_if_possible(parameters, name, explicit, var_keyword)
        if effect is None:
            effect = "idempotent" if idempotent else "unsafe"
        idempotent = idempotent or effect != "unsafe"
        shown_strict = strict is True or shown is not parameters
        function_schema = openai_schema(name, description, shown, strict=shown_strict)
        arguments = ArgumentSpec.from_parameters(
            name,
            parameters,
            signature=signature_params,
            var_keyword=var_keyword,
            request_class=request_class,
            strict=strict is True,
            nullable=shown is not parameters,
            check_schema=explicit is not None,
            context_param=context_param,
            converter=converter,
        )
        if cls is not Tool:  # a subclass: its own initializer
            return cls(
                func_callable=func,
                name=name,
                description=description,
                schema=function_schema,
                arguments=arguments,
                preprocessor=preprocessor,
                preprocessor_kwargs=preprocessor_kwargs,
                postprocessor=postprocessor,
                postprocessor_kwargs=postprocessor_kwargs,
                inline=inline,
                limiter=limiter,
                effect=effect,
                idempotent=idempotent,
                idempotency_key=idempotency_key,
                reconcile=reconcile,
                subject=subject,
                subject_kind=subject_kind,
                strict_reason=strict_reason,
            )
        # Built without the attrs initializer (it was a tenth of registering a tool, and would
        # repeat the checks made above): the callable, name, schema, spec and processors
        # were checked above or are right by construction (idempotent too); the validators of
        # the remaining fields run after, in the initializer's order (_check_options).
        tool = _build_tool(
            func,
            name,
            description,
            function_schema,
            arguments,
            preprocessor,
            _kwargs(preprocessor_kwargs),
            postprocessor,
            _kwargs(postprocessor_kwargs),
            inline,
            limiter,
            effect,
            idempotent,
            idempotency_key,
            reconcile,
            subject,
            subject_kind,
            None,
            strict_reason,
            is_async_callable(func),
            preprocessor is not None and is_async_callable(preprocessor),
            postprocessor is not None and is_async_callable(postprocessor),
        )
        _check_options(tool)
        return tool

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
        :func:`~lionexec.tools._schema.tool_schema`. Raises ValueError for another format.
        """
        return tool_schema(self.schema, format)

    @property
    def required(self) -> frozenset[str]:
        """The argument names a call must supply (all declared ones when :attr:`strict`)."""
        return self.arguments.required

    @property
    def strict(self) -> bool:
        """The schema shown to the model is strict (``"strict": true``): the provider makes
        the model send every declared argument, ``null`` for one it leaves out."""
        function = self.schema.get("function")
        return isinstance(function, Mapping) and function.get("strict") is True

    @property
    def request_class(self) -> type | None:
        """The attrs class or dataclass the arguments are structured into, if any."""
        return self.arguments.request_class

    @property
    def context_param(self) -> str | None:
        """The parameter that receives the call context at invocation, if any."""
        return self.arguments.context_param

    @property
    def converter(self) -> cattrs.Converter:
        """The cattrs converter the arguments are structured with."""
        return self.arguments.converter

    def validate(self, arguments: Mapping[str, Any], *, share: bool = False) -> dict[str, Any]:
        """Check *arguments* against this tool and return them normalized, as a new dict
        (with *share*, a ``dict`` that needs no normalizing is returned itself).

        Keys: every required key must be present; unknown keys are refused unless the
        callable takes ``**kwargs``; a :attr:`strict` tool takes exactly its required keys.
        Values are structured (and lightly coerced, ``"3"`` → ``3``) through the converter,
        into the request class's fields or the signature's annotations; attrs and
        dataclass values become instances, enums members.

        An explicit *schema* is checked first, as JSON Schema
        (:mod:`lionexec.tools._jsonschema`). For a :attr:`strict` tool, ``null`` for a parameter
        that may be left out means "not given": it becomes the parameter's default.

        Validating already-validated arguments returns an equal dict. The rules are
        :attr:`arguments` (:meth:`ArgumentSpec.validate`).

        Raises:
            ValidationError: naming the first bad field (``field``); the message lists all.
        """
        return self.arguments.validate(arguments, share=share)

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
            name=self.name,
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
            name=self.name,
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
            name=self.name,
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
            "construct Tool.from_function(func, ...) instead"
        )

    def __copy__(self) -> Tool:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Tool:
        return self


_EMPTY_OBJECT: Final[Mapping[str, Any]] = {"type": "object", "properties": {}}

#: ``Tool(...)`` without its initializer, for :meth:`Tool.from_function`; every field, in order.
_build_tool: Final = builder(
    Tool,
    "func_callable",
    "name",
    "description",
    "schema",
    "arguments",
    "preprocessor",
    "preprocessor_kwargs",
    "postprocessor",
    "postprocessor_kwargs",
    "inline",
    "limiter",
    "effect",
    "idempotent",
    "idempotency_key",
    "reconcile",
    "subject",
    "subject_kind",
    "approval_binding",
    "strict_reason",
    "_func_async",
    "_pre_async",
    "_post_async",
)


def _check_options(tool: Tool) -> None:
    """The validators :meth:`Tool.from_function` leaves to the built *tool*: those of the
    options it takes as given, in the initializer's order, with the same errors."""
    _valid_effect(tool, None, tool.effect)
    if tool.idempotency_key is not None or tool.reconcile is not None:
        fields = attrs.fields(Tool)
        _optional_callable(tool, fields.idempotency_key, tool.idempotency_key)
        _optional_callable(tool, fields.reconcile, tool.reconcile)
    if tool.subject is not None or tool.subject_kind is not None:
        _valid_subject(tool, None, tool.subject)
        _valid_subject_kind(tool, None, tool.subject_kind)


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


def _doc_of(target: object) -> str | None:
    """*target*'s own docstring, else the inherited one :func:`inspect.getdoc` finds.

    Uncleaned: :func:`parse_docstring` cleans it (getdoc would clean it a second time, which
    cost a tenth of registering a tool).
    """
    doc = getattr(target, "__doc__", None)
    return doc if isinstance(doc, str) else inspect.getdoc(target)


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
        return _derived_name(func)  # checked there
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
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
    if not TOOL_NAME_PATTERN.fullmatch(derived):
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


def _strict_if_possible(
    parameters: dict[str, Any], name: str, explicit: object, var_keyword: bool
) -> tuple[dict[str, Any], str | None]:
    """The strict copy of *parameters* to show the model and ``None``, or *parameters* and why
    they cannot be strict (a tool strict by default)."""
    if explicit is not None:
        return parameters, (
            f"tool {name!r} has a hand-written schema, sent as written; "
            'add "strict": true to it (or pass strict=True) to make it strict'
        )
    if var_keyword:
        return parameters, (
            f"tool {name!r} takes **kwargs (free argument names), which a strict schema "
            "cannot express; pass strict=False to say so, or declare the parameters"
        )
    try:
        return strict_parameters(parameters, tool=name), None
    except SchemaError as exc:
        return parameters, str(exc)
