"""Tool: naming, async recognition, argument validation, and its record."""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import json
from typing import Any

import attrs
import pytest
import trio

from lionexec.errors import ConfigurationError, ValidationError
from lionexec.tools import ActionManager, ArgumentSpec, Tool, is_async_callable


async def async_func(a: int) -> int:
    return a


def sync_func(a: int) -> int:
    return a


class Service:
    async def fetch(self, url: str) -> str:
        return url

    def size(self, url: str) -> int:
        return len(url)


class AsyncCallable:
    async def __call__(self, q: str) -> str:
        return q


class SyncCallable:
    def __call__(self, q: str) -> str:
        return q


# -- names --------------------------------------------------------------------------------


def test_name_is_derived_from_the_function() -> None:
    assert Tool.from_function(sync_func).name == "sync_func"
    assert Tool.from_function(Service().fetch).name == "fetch"


@pytest.mark.parametrize(
    "func",
    [
        lambda q: q,
        functools.partial(sync_func, a=1),
        AsyncCallable(),
    ],
    ids=["lambda", "partial", "callable-object"],
)
def test_unnamed_callables_need_an_explicit_name(func: Any) -> None:
    with pytest.raises(ConfigurationError, match="name="):
        Tool.from_function(func)
    assert Tool.from_function(func, name="explicit").name == "explicit"


@pytest.mark.parametrize(
    "name", ["has space", "", "x" * 65, "dot.ted", "ünï", "add\n", "x" * 64 + "\n"]
)
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid tool name"):
        Tool.from_function(sync_func, name=name)


def test_name_of_sixty_four_characters_is_accepted() -> None:
    assert Tool.from_function(sync_func, name="a-_" * 21 + "z").name == "a-_" * 21 + "z"


def test_non_callables_are_refused() -> None:
    with pytest.raises(TypeError):
        Tool.from_function(42)  # type: ignore[arg-type]


def test_subject_must_be_a_parameter() -> None:
    def shell(command: str) -> None: ...

    assert Tool.from_function(shell, subject="command").subject == "command"
    with pytest.raises(ConfigurationError, match="'path'"):
        Tool.from_function(shell, subject="path")


# -- async recognition --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (async_func, True),
        (Service().fetch, True),
        (functools.partial(async_func, a=1), True),
        (functools.partial(functools.partial(Service().fetch), url="x"), True),
        (AsyncCallable(), True),
        (sync_func, False),
        (Service().size, False),
        (SyncCallable(), False),
        (AsyncCallable, False),  # the class: calling it constructs
        (None, False),
    ],
    ids=lambda v: getattr(v, "__name__", type(v).__name__),
)
def test_async_callables_are_recognised_from_their_declaration(func: Any, expected: bool) -> None:
    assert is_async_callable(func) is expected


# -- validation ---------------------------------------------------------------------------


class Unit(enum.Enum):
    CM = "cm"
    IN = "in"


@attrs.define
class Point:
    x: int
    y: int = 0


def place(name: str, at: Point, unit: Unit = Unit.CM, tags: list[str] | None = None) -> None:
    """Place a thing."""


def test_validate_coerces_structures_and_returns_a_new_dict() -> None:
    tool = Tool.from_function(place)
    given = {"name": "pin", "at": {"x": "3"}, "unit": "in", "tags": ["a"]}
    snapshot = copy.deepcopy(given)
    result = tool.validate(given)
    assert result == {"name": "pin", "at": Point(3, 0), "unit": Unit.IN, "tags": ["a"]}
    assert result is not given
    assert given == snapshot
    assert tool.validate(result) == result  # revalidation is a no-op on valid arguments


@pytest.mark.parametrize(
    ("arguments", "field", "fragment"),
    [
        ({"at": {"x": 1}}, "name", "missing required argument 'name'"),
        ({"name": "p", "at": {"x": 1}, "colour": "red"}, "colour", "unexpected argument"),
        ({"name": 5, "at": {"x": 1}}, "name", "expected a string"),
        ({"name": "p", "at": {"x": 1.5}}, "at.x", "expected an integer"),
        ({"name": "p", "at": {"x": 1, "z": 2}}, "at.z", "unexpected field"),
        ({"name": "p", "at": {}}, "at.x", "required field missing"),
        ({"name": "p", "at": "here"}, "at", "expected an object"),
        ({"name": "p", "at": {"x": 1}, "unit": "mm"}, "unit", "expected one of 'cm', 'in'"),
        ({"name": "p", "at": {"x": 1}, "tags": ["a", 2]}, "tags[1]", "expected a string"),
        ({"name": "p", "at": {"x": 1}, "tags": "a,b"}, "tags", "expected"),
    ],
)
def test_validation_errors_name_the_bad_field(
    arguments: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(ValidationError, match=fragment) as caught:
        Tool.from_function(place).validate(arguments)
    assert caught.value.field == field


def test_non_mapping_arguments_are_refused_without_a_field() -> None:
    with pytest.raises(ValidationError, match="must be an object") as caught:
        Tool.from_function(place).validate(["pin"])  # type: ignore[arg-type]
    assert caught.value.field is None


def test_kwargs_callable_accepts_unknown_keys_unchanged() -> None:
    def f(a: int, **extra: Any) -> None: ...

    assert Tool.from_function(f).validate({"a": "1", "b": object}) == {"a": 1, "b": object}


def test_strict_tool_takes_exactly_the_declared_keys() -> None:
    def f(a: int, b: int = 0) -> None: ...

    tool = Tool.from_function(f, strict=True)
    assert tool.required == {"a", "b"}
    assert tool.validate({"a": 1, "b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(ValidationError) as caught:
        tool.validate({"a": 1})
    assert caught.value.field == "b"


def test_minimum_key_rule_needs_only_required_keys() -> None:
    def f(a: int, b: int = 0) -> None: ...

    assert Tool.from_function(f).validate({"a": 1}) == {"a": 1}


@attrs.define
class Move:
    steps: int = attrs.field(validator=attrs.validators.gt(0))
    unit: Unit = Unit.CM


@dataclasses.dataclass
class Resize:
    width: float
    height: float = 1.0


def test_request_class_structures_arguments_and_keeps_only_given_keys() -> None:
    async def move(**kwargs: Any) -> None: ...

    tool = Tool.from_function(move, request_class=Move)
    assert tool.validate({"steps": "2"}) == {"steps": 2}
    assert tool.validate({"steps": 2, "unit": "in"}) == {"steps": 2, "unit": Unit.IN}
    with pytest.raises(ValidationError) as caught:
        tool.validate({"steps": 0})  # the attrs validator runs
    assert caught.value.field == "steps"
    with pytest.raises(ValidationError) as caught:
        tool.validate({"steps": 1, "speed": 3})
    assert caught.value.field == "speed"
    dc = Tool.from_function(move, name="resize", request_class=Resize)
    assert dc.validate({"width": 2}) == {"width": 2.0}


def test_request_class_must_be_a_record_class() -> None:
    with pytest.raises(ConfigurationError, match="request_class"):
        Tool.from_function(sync_func, request_class=dict)


def test_context_parameter_cannot_be_supplied_by_the_caller() -> None:
    def f(a: int, ctx: object = None) -> None: ...

    tool = Tool.from_function(f, context_param="ctx")
    with pytest.raises(ValidationError, match="supplied by the runtime") as caught:
        tool.validate({"a": 1, "ctx": "forged"})
    assert caught.value.field == "ctx"
    with pytest.raises(ConfigurationError, match="context_param"):
        Tool.from_function(f, context_param="missing")


# -- records ------------------------------------------------------------------------------


def test_to_dict_is_a_json_record_without_callables() -> None:
    def pre(arguments: dict[str, Any], *, scale: int) -> dict[str, Any]:
        return arguments

    tool = Tool.from_function(
        place,
        preprocessor=pre,
        preprocessor_kwargs={"scale": 2},
        idempotent=True,
        subject="name",
        limiter=trio.CapacityLimiter(3),
    )
    record = tool.to_dict()
    assert json.loads(json.dumps(record)) == record
    assert record["name"] == "place"
    assert record["description"] == "Place a thing."
    assert record["schema"] == tool.schema
    assert record["options"]["idempotent"] is True
    assert record["options"]["subject"] == "name"
    assert record["options"]["preprocessor_kwargs"] == {"scale": 2}
    assert record["options"]["limiter_tokens"] == 3
    assert record["options"]["preprocessor"].endswith("pre")


def test_from_dict_always_raises() -> None:
    record = Tool.from_function(sync_func).to_dict()
    with pytest.raises(NotImplementedError):
        Tool.from_dict(record)


def test_tools_are_immutable_and_copy_to_themselves() -> None:
    tool = Tool.from_function(sync_func)
    assert copy.copy(tool) is tool
    assert copy.deepcopy(tool) is tool
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tool.name = "other"  # type: ignore[misc]


# -- the plain constructor and the named one ----------------------------------------------


class Unreadable:
    """A callable whose signature and documentation cannot be read: any parsing fails."""

    @property
    def __signature__(self) -> Any:
        raise AssertionError("the signature was read")

    @property
    def __doc__(self) -> Any:  # type: ignore[override]
        raise AssertionError("the docstring was read")

    async def __call__(self, **arguments: Any) -> dict[str, Any]:
        return arguments


LOOKUP_SCHEMA = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a key up.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["key"],
            "additionalProperties": False,
        },
    },
}


def test_constructor_takes_derived_fields_and_parses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import lionexec.tools._tool as tool_module

    def parsed(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Tool(...) parsed something")

    for helper in ("parse_docstring", "signature_parameters", "parameters_schema"):
        monkeypatch.setattr(tool_module, helper, parsed)
    func = Unreadable()
    tool = Tool(
        func_callable=func, name="lookup", description="Look a key up.", schema=LOOKUP_SCHEMA
    )
    assert tool.func_callable is func
    assert tool.schema is LOOKUP_SCHEMA  # stored as given
    assert tool.required == {"key"}
    assert tool.effect == "unsafe" and tool.idempotent is False
    # without an ArgumentSpec the schema is the rule, values included (a constructed tool
    # must not pass what its schema refuses: the model is shown that schema)
    assert tool.validate({"key": "k", "limit": 3}) == {"key": "k", "limit": 3}
    with pytest.raises(ValidationError, match="limit: expected integer"):
        tool.validate({"key": "k", "limit": "3"})
    with pytest.raises(ValidationError, match="missing required argument 'key'"):
        tool.validate({})
    with pytest.raises(ValidationError, match="unexpected argument 'other'"):
        tool.validate({"key": "k", "other": 1})
    with pytest.raises(AssertionError, match="parsed something"):
        Tool.from_function(func, name="lookup")  # the named constructor is the one that reads


async def test_a_constructed_tool_runs() -> None:
    tool = Tool(func_callable=Unreadable(), name="lookup", schema=LOOKUP_SCHEMA)
    assert await tool.call({"key": "k"}) == {"key": "k"}
    bare = Tool(func_callable=sync_func, name="bare")  # no schema: no arguments
    assert bare.parameters == {"type": "object", "properties": {}}
    assert bare.validate({}) == {}
    with pytest.raises(ValidationError, match="unexpected argument 'a'"):
        bare.validate({"a": 1})


def test_constructor_checks_what_is_cheap() -> None:
    def make(**fields: Any) -> Tool:
        return Tool(
            **{"func_callable": sync_func, "name": "lookup", "schema": LOOKUP_SCHEMA, **fields}
        )

    with pytest.raises(TypeError, match="a tool needs a callable"):
        make(func_callable=42)
    with pytest.raises(ConfigurationError, match="invalid tool name"):
        make(name="has space")
    with pytest.raises(TypeError, match="postprocessor must be callable"):
        make(postprocessor="x")
    with pytest.raises(ConfigurationError, match="effect 'often'"):
        make(effect="often")
    with pytest.raises(ConfigurationError, match="is idempotent"):
        make(effect="pure", idempotent=False)
    assert make(effect="pure").idempotent is True
    assert make(idempotent=True).effect == "unsafe"  # retried in process, never by recovery
    with pytest.raises(ConfigurationError, match="subject 'path' is not a parameter"):
        make(subject="path")
    with pytest.raises(ConfigurationError, match="subject_kind"):
        make(subject_kind="path")
    with pytest.raises(ConfigurationError, match="spec of tool 'other'"):
        make(arguments=ArgumentSpec(tool="other"))
    with pytest.raises(ConfigurationError, match="names the function 'lookup'"):
        make(name="other")
    with pytest.raises(ConfigurationError, match="OpenAI function shape"):
        make(schema={"type": "object", "properties": {}})
    with pytest.raises(TypeError):
        Tool(sync_func)  # type: ignore[call-arg]  # the function is from_function's


def test_from_function_gives_the_fields_the_constructor_takes() -> None:
    def pre(arguments: dict[str, Any]) -> dict[str, Any]:
        return arguments

    built = Tool.from_function(
        place, strict=True, preprocessor=pre, subject="name", effect="keyed", inline=True
    )
    fields = {a.alias: getattr(built, a.name) for a in attrs.fields(Tool) if a.init and a.alias}
    again = Tool(**fields)
    assert again.to_dict() == built.to_dict()
    assert again.arguments is built.arguments
    arguments = {"name": "pin", "at": {"x": "3"}, "unit": None, "tags": None}
    assert again.validate(arguments) == built.validate(arguments)
    assert built.strict and built.required == {"name", "at", "unit", "tags"}
    assert built.idempotent and built.effect == "keyed"
    assert built.arguments.tool == "place" and built.arguments.hints["at"] is Point


def test_from_function_checks_its_options_as_the_constructor_does() -> None:
    # from_function builds its tool without the initializer; the option checks still run
    with pytest.raises(ConfigurationError, match="effect 'often'"):
        Tool.from_function(sync_func, effect="often")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="idempotency_key must be callable"):
        Tool.from_function(sync_func, idempotency_key="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reconcile must be callable"):
        Tool.from_function(sync_func, reconcile="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="subject 'path' is not a parameter"):
        Tool.from_function(sync_func, subject="path")
    with pytest.raises(ConfigurationError, match="subject_kind"):
        Tool.from_function(sync_func, subject_kind="path")
    with pytest.raises(ConfigurationError, match="subject_kind ''"):
        Tool.from_function(sync_func, subject="a", subject_kind="")
    with pytest.raises(ConfigurationError, match="subject_kind 3"):
        Tool.from_function(sync_func, subject="a", subject_kind=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("func", [sync_func, async_func, AsyncCallable()])
def test_from_function_builds_what_the_constructor_builds(func: Any) -> None:
    async def pre(arguments: dict[str, Any]) -> dict[str, Any]:
        return arguments

    def post(response: Any, scale: int = 1) -> Any:
        return response

    built = Tool.from_function(
        func, name="t", preprocessor=pre, postprocessor=post, postprocessor_kwargs={"scale": 2}
    )
    again = Tool(
        **{a.alias: getattr(built, a.name) for a in attrs.fields(Tool) if a.init and a.alias}
    )
    for field in attrs.fields(Tool):  # the private ones (sync policy flags) included
        assert getattr(again, field.name) == getattr(built, field.name), field.name
    assert built.postprocessor_kwargs == {"scale": 2}
    assert type(built) is Tool
    spec = built.arguments  # from_parameters builds it without the initializer too
    init = {a.alias or a.name: getattr(spec, a.name) for a in attrs.fields(ArgumentSpec) if a.init}
    spec_again = ArgumentSpec(**init)
    for field in attrs.fields(ArgumentSpec):
        assert getattr(spec_again, field.name) == getattr(spec, field.name), field.name


def test_from_function_reads_the_function_once() -> None:
    reads = 0

    class Counting:
        __name__ = "counting"

        @property
        def __signature__(self) -> Any:
            nonlocal reads
            reads += 1
            import inspect

            return inspect.signature(sync_func)

        def __call__(self, a: int) -> int:
            return a

    tool = Tool.from_function(Counting())
    assert reads == 1
    for _ in range(3):
        assert tool.validate({"a": "2"}) == {"a": 2}
    assert reads == 1


def test_register_tools_wraps_plain_callables_with_from_function() -> None:
    manager = ActionManager([place])
    (tool,) = manager
    assert tool.to_dict() == Tool.from_function(place).to_dict()


def test_a_constructed_tool_enforces_an_additional_properties_schema() -> None:
    schema = {
        "type": "function",
        "function": {
            "name": "tag",
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
        },
    }
    tool = Tool(func_callable=Unreadable(), name="tag", schema=schema)
    assert tool.validate({"key": "k", "colour": "red"}) == {"key": "k", "colour": "red"}
    with pytest.raises(ValidationError):
        tool.validate({"key": "k", "dangerous": True})
    with pytest.raises(ValidationError):
        tool.validate({"key": "k", "nested": {"deep": [1, 2]}})


def test_bare_tools_do_not_share_their_schema() -> None:
    a = Tool(func_callable=sync_func, name="a")
    b = Tool(func_callable=sync_func, name="b")
    assert a.parameters == b.parameters
    assert a.parameters["properties"] is not b.parameters["properties"]


def test_an_argument_spec_copies_and_converts_its_fields() -> None:
    hints = {"a": int}
    spec = ArgumentSpec(tool="t", required=["a"], known=["a", "b"], hints=hints)
    assert spec.required == frozenset({"a"}) and spec.known == frozenset({"a", "b"})
    hints["b"] = str  # the caller's dict is not the spec's
    assert spec.validate({"a": "3", "b": 4}) == {"a": 3, "b": 4}


def test_a_str_subclass_key_passes_a_kwargs_tool_as_a_plain_key_would() -> None:
    class Key(enum.StrEnum):
        EXTRA = "extra"

    def takes_anything(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    tool = Tool.from_function(takes_anything)
    assert tool.validate({Key.EXTRA: 1}) == {"extra": 1}
