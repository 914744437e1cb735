"""jsonable() renders anything as strict JSON data, and never raises.

``json.dumps(jsonable(x), allow_nan=False)`` succeeds for every ``x`` (a NaN, a 5,000-digit
int or a deep structure from a model or a tool must not break exports and log lines), the
text encodes as UTF-8 even with ``ensure_ascii=False``, and it parses back to what jsonable
returned.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import pathlib
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lionexec._jsonable import (
    CIRCULAR,
    INFINITY,
    MAX_DEPTH,
    MAX_DEPTH_MARKER,
    NAN,
    NEG_INFINITY,
    UNSERIALIZABLE,
    _convert,
    _flat,
    exception_record,
    is_flat_json,
    is_unicode,
    json_encoder,
    jsonable,
    utf8_text,
)
from lionexec.engine import Event


def strict_dumps(value: Any) -> str:
    """Serialize as every lionexec export and log line must: strict, and UTF-8 encodable."""
    text = json.dumps(value, allow_nan=False)
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    return text


def assert_strict(value: object) -> Any:
    rendered = jsonable(value)
    text = strict_dumps(rendered)
    assert json.loads(text) == rendered  # no NaN in it, so equality is exact
    return rendered


# -- values of every kind ------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    NAN = math.nan
    HUGE = 10**5000


class Level(enum.IntEnum):
    LOW = 1


class MyInt(int):
    pass


class MyFloat(float):
    pass


class MyStr(str):
    pass


@attrs.define
class Point:
    x: Any
    y: Any


@dataclasses.dataclass
class Box:
    content: Any


class Opaque:
    pass


class HostileIterable:
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("no iteration for you")


@attrs.define
class HostileAttrs:
    value: Any

    def __getattribute__(self, name: str) -> Any:
        if name == "value":
            raise RuntimeError("no reading")
        return object.__getattribute__(self, name)


class HostileModel:
    def model_dump(self) -> Any:
        raise ValueError("cannot dump")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


def huge_ints() -> st.SearchStrategy[int]:
    return st.builds(
        lambda digits, sign: sign * (10**digits + 7),
        st.sampled_from([4299, 4300, 4301, 5000, 20_000]),
        st.sampled_from([1, -1]),
    )


def texts() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=8),
        st.text(st.characters(categories=["Cs", "Co", "Cc", "Lo"]), max_size=8),
        st.sampled_from(["\ud800", "a\udfffb", "\udcff", "\ud83d\ude00", "\x00"]),
    )


def exceptions(children: st.SearchStrategy[Any]) -> st.SearchStrategy[BaseException]:
    plain = st.builds(
        lambda cls, arg: cls(arg),
        st.sampled_from([ValueError, KeyError, RuntimeError, Unprintable, KeyboardInterrupt]),
        children,
    )
    groups = st.builds(
        lambda excs: ExceptionGroup("group", excs),
        st.lists(st.builds(ValueError, texts()), min_size=1, max_size=3),
    )
    return st.one_of(plain, groups)


def one_of_these(items: list[Any]) -> st.SearchStrategy[Any]:
    """Like sampled_from, without hypothesis printing the items (some reprs raise)."""

    def pick(index: int) -> Any:
        return items[index]

    return st.integers(0, len(items) - 1).map(pick)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    huge_ints(),
    st.floats(allow_nan=True, allow_infinity=True),
    texts(),
    st.binary(max_size=8),
    one_of_these(
        [
            Color.RED,
            Color.NAN,
            Color.HUGE,
            Level.LOW,
            MyInt(10**5000),
            MyFloat("nan"),
            MyFloat(-math.inf),
            MyStr("\ud800"),
            uuid.UUID(int=1),
            pathlib.PurePosixPath(b"/data/\xff".decode("utf-8", "surrogateescape")),
            datetime.datetime(2026, 1, 1, 12, 0),
            Opaque(),
            HostileIterable(),
            HostileAttrs(1),
            HostileModel(),
            ...,
            NotImplemented,
            1j,
        ]
    ),
)

keys = st.one_of(
    texts(),
    st.integers(),
    huge_ints(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    one_of_these([Color.RED, Color.HUGE, (1, 2), frozenset({1})]),
)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    hashable = st.one_of(st.integers(), texts(), st.floats(allow_nan=True), huge_ints())
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
        st.sets(hashable, max_size=4),
        st.frozensets(hashable, max_size=4),
        st.builds(Point, children, children),
        st.builds(Box, children),
        exceptions(children),
    )


values = st.recursive(scalars, containers, max_leaves=20)


def with_cycle(value: Any) -> Any:
    """Put *value* into a list and a dict that contain themselves and each other."""
    loop: list[Any] = [value]
    table: dict[str, Any] = {"loop": loop, "value": value}
    loop.append(loop)
    loop.append(table)
    table["self"] = table
    return loop


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


# -- the properties -----------------------------------------------------------------------------


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_anything_renders_as_strict_json(value: Any) -> None:
    assert_strict(value)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_anything_inside_a_cycle_renders_as_strict_json(value: Any) -> None:
    rendered = assert_strict(with_cycle(value))
    assert rendered[1] == CIRCULAR
    assert rendered[2]["self"] == CIRCULAR and rendered[2]["loop"] == CIRCULAR


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(MAX_DEPTH - 2, 3 * MAX_DEPTH), values)
def test_deep_nesting_is_cut_with_the_marker(depth: int, leaf: Any) -> None:
    assert_strict(nested(depth, leaf))


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_an_exception_record_is_strict_json(value: Any) -> None:
    exc = ValueError(value)
    strict_dumps(exception_record(exc))
    strict_dumps(exception_record(ExceptionGroup("g", [exc, KeyError(value)])))


# -- the renderings, exactly --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (math.nan, NAN),
        (math.inf, INFINITY),
        (-math.inf, NEG_INFINITY),
        (MyFloat("inf"), INFINITY),
        ([1.5, math.nan], [1.5, NAN]),
        ({"x": -math.inf}, {"x": NEG_INFINITY}),
    ],
)
def test_non_finite_floats_become_strings(value: Any, expected: Any) -> None:
    assert jsonable(value) == expected
    assert (NAN, INFINITY, NEG_INFINITY) == ("NaN", "Infinity", "-Infinity")


def test_an_int_python_cannot_print_becomes_a_marker_naming_its_size() -> None:
    widest = 10**4300 - 1  # 4,300 digits: printable
    assert jsonable(widest) == widest
    assert jsonable(-widest) == -widest
    too_wide = 10**4300  # 4,301 digits
    assert jsonable(too_wide) == f"<int with {too_wide.bit_length()} bits>"
    assert jsonable([-too_wide]) == [f"<int with {too_wide.bit_length()} bits>"]
    assert jsonable({too_wide: 1}) == {f"<int with {too_wide.bit_length()} bits>": 1}


def test_the_int_limit_is_the_interpreters_current_one() -> None:
    value = 10**700
    old = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(640)
        assert jsonable(value) == f"<int with {value.bit_length()} bits>"
        sys.set_int_max_str_digits(0)  # unlimited
        assert jsonable(10**5000) == 10**5000
    finally:
        sys.set_int_max_str_digits(old)


def test_lone_surrogates_become_the_replacement_character() -> None:
    assert jsonable("a\ud800b") == "a\ufffdb"
    assert jsonable({"\udfff": ["\ud83d\ude00"]}) == {"\ufffd": ["\U0001f600"]}
    assert jsonable("plain ascii") == "plain ascii"
    assert jsonable("déjà vu") == "déjà vu"


def test_deep_nesting_ends_in_the_marker_without_recursion_error() -> None:
    rendered = jsonable(nested(5 * sys.getrecursionlimit(), 1))
    strict_dumps(rendered)
    depth = 0
    while isinstance(rendered, dict | list):
        rendered = rendered["k"] if isinstance(rendered, dict) else rendered[0]
        depth += 1
    assert rendered == MAX_DEPTH_MARKER
    assert depth == MAX_DEPTH


def test_a_hostile_member_loses_only_itself() -> None:
    assert jsonable({"ok": 1, "bad": HostileIterable(), "worse": HostileModel()}) == {
        "ok": 1,
        "bad": UNSERIALIZABLE,
        "worse": UNSERIALIZABLE,
    }
    record = jsonable(Unprintable())
    assert record == {"error": "Unprintable", "message": "<unprintable Unprintable>"}


# -- event records ------------------------------------------------------------------------------


@attrs.define(kw_only=True, eq=False)
class Echo(Event):
    """Returns its payload (a subclass field, serialized with the record)."""

    payload: Any = None

    async def _invoke(self) -> Any:
        return self.payload


@attrs.define(kw_only=True, eq=False)
class Raise(Event):
    payload: Any = None

    async def _invoke(self) -> Any:
        raise ValueError(self.payload)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.booleans())
def test_an_event_record_is_strict_json(payload: Any, fails: bool) -> None:
    event = (Raise if fails else Echo)(payload=payload, metadata={"note": payload})
    trio.run(event.invoke)
    record = event.to_dict()
    strict_dumps(record)
    assert sorted(record["execution"]) == ["duration", "error", "response", "retryable", "status"]


def test_an_event_record_with_the_issue_values_is_strict_json() -> None:
    payload = {"nan": math.nan, "inf": math.inf, "big": 10**5000, "deep": nested(500, 1)}
    event = Echo(payload=with_cycle(payload))
    trio.run(event.invoke)
    record = event.to_dict()
    text = strict_dumps(record)
    assert "NaN" in text and "Infinity" in text and "<int with" in text
    assert record["execution"]["response"][1] == CIRCULAR


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**6000, max_value=2**6001),  # too many digits to print
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.sampled_from(["\ud800", "a\udfffb", "\U0001f600"]),  # lone surrogates, an emoji
)
_keys = st.one_of(st.text(), st.sampled_from(["\ud800", "k\udc00"]))


@settings(max_examples=300)
@given(st.dictionaries(_keys, _scalars, max_size=8))
def test_a_flat_dict_converts_exactly_as_the_general_path(value: dict[str, Any]) -> None:
    """The fast path for a dict of plain scalars gives what the general conversion gives."""
    fast = jsonable(value)
    assert fast == _convert(value, 0, set())  # (NaN and the infinities are strings by now)
    assert fast is not value
    json.dumps(fast, allow_nan=False, ensure_ascii=False).encode("utf-8")


@settings(max_examples=300)
@given(
    st.dictionaries(
        _keys,
        st.one_of(_scalars, st.builds(lambda: MyStr("s")), st.builds(lambda: MyInt(3))),
        max_size=8,
    )
)
@example({"k": math.nan})
@example({"k": -math.inf, "j": 1.5})
@example({"k": 2**7000})
@example({"k": "a\udfffb"})
@example({"\ud800": 1})
@example({"city": "Oslo", "high_c": 21, "rain": 0.5, "open": True, "note": None})
def test_a_flat_json_dict_is_exactly_its_own_rendering(value: dict[str, Any]) -> None:
    """is_flat_json says yes only where jsonable would change nothing (same items, same
    exact types): wherever it would change something, no."""
    rendered = jsonable(value)
    unchanged = list(rendered.items()) == list(value.items()) and all(
        type(a) is type(b) and type(k) is type(j)
        for (k, a), (j, b) in zip(rendered.items(), value.items(), strict=True)
    )
    if is_flat_json(value):
        assert unchanged, (value, rendered)
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        assert text == json.dumps(rendered, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")


@given(
    st.dictionaries(
        st.text(),
        st.one_of(
            st.lists(st.integers(), max_size=2),
            st.builds(lambda: Color.RED),
            st.builds(lambda: MyInt(3)),
            st.builds(lambda: MyStr("s")),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_dict_with_anything_else_takes_the_general_path(value: dict[str, Any]) -> None:
    assert _flat(value) is None
    assert jsonable(value) == _convert(value, 0, set())


def test_a_dict_with_keys_that_are_not_plain_strings_takes_the_general_path() -> None:
    for value in ({1: "a"}, {True: 1}, {None: 1}, {MyStr("k"): 1}):
        assert _flat(value) is None
        assert jsonable(value) == _convert(value, 0, set())
    assert jsonable({2: "a", True: 1}) == {"2": "a", "True": 1}  # not what json.dumps says


class Color(enum.Enum):
    RED = "red"


class MyInt(int):
    pass


class MyStr(str):
    pass


_JSON_DATA = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(_JSON_DATA, st.booleans(), st.booleans(), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_the_json_encoder_writes_what_json_dumps_writes(
    value: Any, sort_keys: bool, ensure_ascii: bool, separators: tuple[str, str]
) -> None:
    """Byte for byte, for JSON data (and so for anything :func:`jsonable` returns)."""
    encode = json_encoder(separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    expected = json.dumps(
        value,
        allow_nan=False,
        separators=separators,
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
    )
    assert encode(value) == expected
    assert encode(jsonable(value)) == expected


def test_the_json_encoder_refuses_what_strict_json_dumps_refuses() -> None:
    encode = json_encoder()
    for bad in (math.nan, [math.inf], {"x": -math.inf}):
        with pytest.raises(ValueError, match="not JSON compliant"):
            encode(bad)
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode({"x": object()})
    assert encode("é") == '"é"'
    assert json_encoder(ensure_ascii=True)("é") == '"\\u00e9"'


def test_a_str_subclass_cannot_vouch_for_its_own_unicode() -> None:
    class Sneaky(str):
        def isascii(self) -> bool:
            return True

        def encode(self, *args: Any, **kwargs: Any) -> bytes:
            return b""

    sneaky = Sneaky("a\ud800")
    assert not is_unicode(sneaky)
    assert utf8_text(sneaky) == "a\ufffd"
    assert is_unicode(Sneaky("plain"))
