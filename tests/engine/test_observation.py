"""Observational serialization (strict JSON, never raises), add_error, from_dict, fresh events."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import uuid
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionexec import Event, EventStatus, Execution
from lionexec._jsonable import CIRCULAR, MAX_DEPTH, UNSERIALIZABLE, exception_record, jsonable
from lionexec.engine import MAX_GROUPED_ERRORS
from lionexec.serialization import converter, dumps


@attrs.define
class Point:
    x: int
    y: int
    _hidden: str = "private"


@dataclasses.dataclass
class Box:
    content: Any


class Color(enum.Enum):
    RED = "red"


class Opaque:
    pass


# -- the execution payload ----------------------------------------------------------------------


def test_execution_serializes_to_exactly_five_keys_with_unset_as_none() -> None:
    assert converter.unstructure(Execution()) == {
        "status": "pending",
        "duration": None,
        "response": None,
        "error": None,
        "retryable": None,
    }


def test_event_record_excludes_streaming_and_private_state() -> None:
    event = Event(streaming=True, metadata={"k": "v"})
    _ = event.completion_event
    record = event.to_dict()
    assert set(record) == {"id", "created_at", "metadata", "execution"}
    assert record["id"] == str(event.id)
    assert record["metadata"] == {"k": "v"}
    json.dumps(record)


@pytest.mark.parametrize("value", [None, True, 0, -3, 2.5, "", "text"])
def test_simple_responses_serialize_directly(value: Any) -> None:
    event = Event()
    event.execution.response = value
    assert event.to_dict()["execution"]["response"] == value


def test_complex_responses_convert_recursively() -> None:
    value = {
        "point": Point(1, 2),
        "box": Box([Color.RED, (1, 2), {3}]),
        "id": uuid.UUID(int=5),
        3: "int key",
    }
    assert jsonable(value) == {
        "point": {"x": 1, "y": 2},
        "box": {"content": ["red", [1, 2], [3]]},
        "id": str(uuid.UUID(int=5)),
        "3": "int key",
    }


def test_unserializable_values_become_the_marker() -> None:
    assert jsonable(Opaque()) == UNSERIALIZABLE
    assert jsonable({"nested": [Opaque()]}) == {"nested": [UNSERIALIZABLE]}


def test_self_referencing_response_gets_the_circular_marker() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert jsonable(loop) == [1, CIRCULAR]


def test_shared_but_acyclic_values_are_not_called_circular() -> None:
    shared = [1]
    assert jsonable([shared, shared]) == [[1], [1]]


def test_exception_serializes_as_error_and_message() -> None:
    assert exception_record(KeyError("k")) == {"error": "KeyError", "message": "'k'"}


def test_exception_group_serializes_recursively() -> None:
    group = ExceptionGroup("outer", [ValueError("a"), ExceptionGroup("inner", [TypeError("b")])])
    record = exception_record(group)
    assert record["error"] == "ExceptionGroup"
    assert record["exceptions"] == [
        {"error": "ValueError", "message": "a"},
        {
            "error": "ExceptionGroup",
            "message": "inner (1 sub-exception)",
            "exceptions": [{"error": "TypeError", "message": "b"}],
        },
    ]


def test_exception_group_deeper_than_the_cap_ends_in_a_max_depth_marker() -> None:
    exc: BaseException = ValueError("leaf")
    for _ in range(MAX_DEPTH + 20):
        exc = ExceptionGroup("level", [exc])
    record: Any = exception_record(exc)
    depth = 0
    while "exceptions" in record:
        record = record["exceptions"][0]
        depth += 1
    assert depth == MAX_DEPTH
    assert record["error"] == "MaxDepthExceeded"


def test_exception_group_containing_itself_gets_the_circular_marker() -> None:
    class Sneaky(ExceptionGroup):  # type: ignore[type-arg]
        @property
        def exceptions(self) -> tuple[BaseException, ...]:  # type: ignore[override]
            return (self,)

    record = exception_record(Sneaky("loop", [ValueError()]))
    assert record["exceptions"] == [{"error": "CircularReference", "message": CIRCULAR}]


def test_exception_with_a_broken_str_still_serializes() -> None:
    class Ugly(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert exception_record(Ugly()) == {"error": "Ugly", "message": "<unprintable Ugly>"}


def test_a_string_error_serializes_as_is() -> None:
    execution = Execution(error="plain text")
    assert converter.unstructure(execution)["error"] == "plain text"


def reject_constant(token: str) -> Any:
    raise ValueError(f"non-strict JSON token {token}")


def test_a_string_error_with_a_lone_surrogate_is_recorded_as_strict_json() -> None:
    event = Event()
    event.execution.error = "model said: \ud800"
    record = event.to_dict()
    assert record["execution"]["error"] == "model said: \ufffd"
    json.dumps(record, allow_nan=False, ensure_ascii=False).encode("utf-8")
    event.execution.error = "quota exceeded"
    assert event.to_dict()["execution"]["error"] == "quota exceeded"


def test_dumps_renders_non_finite_floats_as_strict_json() -> None:
    text = dumps({"score": math.nan, "limit": math.inf, "floor": -math.inf, "ok": 0.5})
    data = json.loads(text, parse_constant=reject_constant)
    assert data == {"score": "NaN", "limit": "Infinity", "floor": "-Infinity", "ok": 0.5}


async def test_dumps_of_an_event_record_is_strict_json() -> None:
    class Odd(Event):
        async def _invoke(self) -> list[float]:
            return [math.nan]

    event = Odd(metadata={"weight": math.inf})
    await event.invoke()
    data = json.loads(dumps(event), parse_constant=reject_constant)
    assert data["execution"]["response"] == ["NaN"]
    assert data["metadata"] == {"weight": "Infinity"}
    assert data["execution"]["status"] == "completed"


# -- add_error --------------------------------------------------------------------------------


def test_add_error_stores_first_groups_second_appends_later() -> None:
    execution = Execution()
    a, b, c = ValueError("a"), KeyError("b"), TypeError("c")
    execution.add_error(a)
    assert execution.error is a
    execution.add_error(b)
    assert isinstance(execution.error, ExceptionGroup)
    assert execution.error.exceptions == (a, b)
    execution.add_error(c)
    assert isinstance(execution.error, ExceptionGroup)
    assert execution.error.exceptions == (a, b, c)


def test_add_error_groups_base_exceptions_too() -> None:
    execution = Execution()
    execution.add_error(ValueError("a"))
    execution.add_error(KeyboardInterrupt())
    assert isinstance(execution.error, BaseExceptionGroup)
    assert not isinstance(execution.error, ExceptionGroup)


def test_add_error_does_not_append_into_a_group_it_did_not_make() -> None:
    execution = Execution()
    theirs = ExceptionGroup("from a nursery", [ValueError("x")])
    execution.add_error(theirs)
    execution.add_error(KeyError("y"))
    assert isinstance(execution.error, ExceptionGroup)
    assert execution.error.exceptions[0] is theirs


def test_add_error_caps_the_group_and_ignores_the_rest() -> None:
    execution = Execution()
    errors = [ValueError(str(i)) for i in range(MAX_GROUPED_ERRORS + 25)]
    for exc in errors:
        execution.add_error(exc)
    assert isinstance(execution.error, ExceptionGroup)
    assert execution.error.exceptions == tuple(errors[:MAX_GROUPED_ERRORS])


def test_add_error_groups_a_recorded_string_error() -> None:
    execution = Execution(error="quota exceeded")
    second = ValueError("second")
    execution.add_error(second)
    group = execution.error
    assert isinstance(group, BaseExceptionGroup)
    first, kept = group.exceptions
    assert (type(first), str(first)) == (Exception, "quota exceeded")
    assert kept is second
    third = KeyError("third")
    execution.add_error(third)  # appended to the same group
    assert isinstance(execution.error, BaseExceptionGroup)
    assert execution.error.exceptions[1:] == (second, third)


async def test_a_failure_after_a_string_error_keeps_both() -> None:
    class Partial(Event):
        async def _invoke(self) -> None:
            self.execution.error = "wrote 3 of 5 rows before failing"
            raise OSError("disk full")

    event = Partial()
    await event.invoke()
    assert event.status is EventStatus.FAILED
    record = event.to_dict()["execution"]["error"]
    messages = [member["message"] for member in record["exceptions"]]
    assert messages == ["wrote 3 of 5 rows before failing", "disk full"]


# -- records are not events -------------------------------------------------------------------


def test_from_dict_always_raises() -> None:
    record = Event().to_dict()
    with pytest.raises(NotImplementedError, match="cannot recreate"):
        Event.from_dict(record)


async def test_as_fresh_event_is_a_new_pending_event_of_the_same_class() -> None:
    @attrs.define(kw_only=True, eq=False)
    class Job(Event):
        payload: list[int] = attrs.field(factory=list)

        async def _invoke(self) -> int:
            return sum(self.payload)

    old = Job(payload=[1, 2], metadata={"who": "me"})
    await old.invoke()
    fresh = old.as_fresh_event()
    assert type(fresh) is Job
    assert fresh.id != old.id
    assert fresh.status is EventStatus.PENDING
    assert fresh.execution is not old.execution
    assert fresh.payload == [1, 2]
    assert fresh.payload is not old.payload
    assert fresh.metadata == {"original": {"id": str(old.id), "created_at": old.created_at}}
    await fresh.invoke()
    assert fresh.response == 3


async def test_as_fresh_event_of_a_plain_subclass_with_its_own_init() -> None:
    # The events guide's own example: an __init__ with parameters the base cannot know.
    class Divide(Event):
        def __init__(self, a: float, b: list[float]) -> None:
            super().__init__()
            self.a, self.b = a, b

        async def _invoke(self) -> float:
            await trio.lowlevel.checkpoint()
            return self.a / sum(self.b)

    old = Divide(6, [1, 2])
    await old.invoke()
    fresh = old.as_fresh_event()
    assert type(fresh) is Divide and fresh.id != old.id
    assert fresh.status is EventStatus.PENDING and fresh.execution is not old.execution
    assert (fresh.a, fresh.b) == (6, [1, 2]) and fresh.b is not old.b
    assert fresh.metadata["original"]["id"] == str(old.id)
    await fresh.invoke()
    assert fresh.response == 2


def test_as_fresh_event_copy_meta_deep_copies_metadata() -> None:
    old = Event(metadata={"tags": ["a"]})
    fresh = old.as_fresh_event(copy_meta=True)
    assert fresh.metadata["tags"] == ["a"]
    assert fresh.metadata["tags"] is not old.metadata["tags"]
    assert fresh.metadata["original"]["id"] == str(old.id)


# -- serialization never raises ---------------------------------------------------------------

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.builds(Opaque),
    st.builds(Point, st.integers(), st.integers()),
    st.sampled_from(list(Color)),
    st.builds(lambda m: ValueError(m), st.text(max_size=3)),
)
values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), children, max_size=4),
        st.builds(Box, children),
    ),
    max_leaves=30,
)


@given(values, st.booleans())
def test_any_value_serializes_to_json_without_raising(value: Any, make_cycle: bool) -> None:
    if make_cycle:
        holder: list[Any] = [value]
        holder.append(holder)
        value = {"cycle": holder}
    event = Event()
    event.execution.response = value
    event.metadata["value"] = value
    json.dumps(event.to_dict())


def _group_tree(depth: int, width: int) -> BaseException:
    if depth == 0:
        return ValueError("leaf")
    return ExceptionGroup(f"d{depth}", [_group_tree(depth - 1, width) for _ in range(width)])


@given(st.integers(0, MAX_DEPTH + 10), st.integers(1, 2), st.integers(0, MAX_GROUPED_ERRORS + 5))
def test_nested_groups_and_many_errors_stay_within_the_caps(
    depth: int, width: int, extra: int
) -> None:
    execution = Execution()
    execution.add_error(_group_tree(depth if width == 1 else min(depth, 6), width))
    for i in range(extra):
        execution.add_error(KeyError(i))
    record = converter.unstructure(execution)["error"]
    json.dumps(record)

    def depth_of(node: dict[str, Any]) -> int:
        children = node.get("exceptions", [])
        return 1 + max((depth_of(c) for c in children), default=0)

    assert depth_of(record) <= MAX_DEPTH + 1
    if extra:
        assert len(record["exceptions"]) <= MAX_GROUPED_ERRORS
