"""Schema patterns run in linear time on the model's input, or are refused when compiled.

Python's ``re`` backtracks while holding the GIL: ``^(a+)+$`` on 34 ``a`` and a ``!`` runs for
minutes, ``a*b`` on 64 KiB for seconds, and no trio timeout can interrupt either. These tests
send exactly such input: without the linear-time engine (or the refusal) they hang until the
time budget ends them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec import Branch
from lionexec.errors import SchemaError, ValidationError
from lionexec.tools import Tool
from lionexec.tools._jsonschema import compile_schema
from lionexec.tools._patterns import compile_pattern

pytestmark = pytest.mark.timeout(10)

#: Patterns whose backtracking time on hostile input is exponential or polynomial, with input
#: that Python's re takes from tens of seconds to forever on (measured: ``a*b`` takes 4 s on
#: 64 Ki characters, so over a minute on these 256 Ki).
HOSTILE = [
    ("^(a+)+$", "a" * 34 + "!"),
    ("a*b", "a" * 2**18),
    (r"\S+@\S+\.\S+$", "a." * 2**16 + "!"),
    (r"^\w+\s*\w+$", "a" * 2**17 + "!"),
    ("^(a|aa)*$", "a" * 5000 + "!"),
]
#: Patterns the static check proves linear on Python's ``re``: accepted without RE2.
PROVEN = [
    r"^[a-z0-9_-]+$",
    r"^\d{4}-\d{2}-\d{2}$",
    r"^[A-Z][a-z]*$",
    r"^\S+$",
    r"\A[a-z]+\Z",
    r"^(\+|-)?\d+$",
    r"^\d+\s+\w+$",
    r"^[^@ ]+@",
    r"^[a-z]{0,2000}$",
    # no repetition: bounded work at each start position
    "abc",
    "[0-9]",
    "(?i)^(get|post)$",
    "^$",
    # the patterns test_jsonschema's generated schemas use
    "^a",
    "b$",
    "é",
    "^(a|b)+$",
]
#: A sample alphabet on which RE2 and Python's ``re`` read every pattern above alike (ASCII,
#: no newline; see docs/concepts/schemas.md for where they differ).
ALPHABET = "aAbz09_-+ .@!\t"


@pytest.fixture
def no_re2(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if the ``re2`` extra were not installed: ``import re2`` fails."""
    monkeypatch.setitem(sys.modules, "re2", None)
    yield


def _string_schema(pattern: str) -> dict[str, Any]:
    return {"type": "string", "pattern": pattern}


# -- with RE2 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "hostile"), HOSTILE)
def test_re2_validates_hostile_input_without_backtracking(pattern: str, hostile: str) -> None:
    validator = compile_schema(_string_schema(pattern))
    assert not validator.is_valid(hostile)
    with pytest.raises(ValidationError, match="does not match the pattern"):
        validator.validate(hostile)


def test_re2_still_matches_what_the_pattern_describes() -> None:
    assert compile_schema(_string_schema("^(a+)+$")).is_valid("aaaa")
    assert compile_schema(_string_schema("a*b")).is_valid("a" * 65536 + "b")
    assert compile_schema(_string_schema(r"\S+@\S+\.\S+$")).is_valid("ada@example.org")


@settings(max_examples=200)
@given(st.sampled_from(PROVEN + [p for p, _ in HOSTILE]), st.text(ALPHABET, max_size=12))
def test_re2_agrees_with_python_re_on_plain_text(pattern: str, value: str) -> None:
    assert bool(compile_pattern(pattern, "#").search(value)) == bool(re.search(pattern, value))


def test_re2_refuses_patterns_that_need_backtracking() -> None:
    with pytest.raises(SchemaError, match=r"needs backtracking \(lookahead\), which lionexec"):
        compile_schema(_string_schema(r"^(?=.*\d).+$"))
    with pytest.raises(SchemaError, match=r"#/properties/p/pattern: .*\(backreference\)"):
        compile_schema({"properties": {"p": _string_schema(r"^(\w+) \1$")}})
    with pytest.raises(SchemaError, match=r"patternProperties: .*\(negative lookbehind\)"):
        compile_schema({"patternProperties": {r"(?<!x)a+b": {}}})


def test_re2_falls_back_to_python_re_only_for_a_pattern_proven_linear() -> None:
    # RE2 compiles neither (lookaround, a repetition over 1000); Python's re runs both in
    # linear time, so they are accepted
    assert compile_schema(_string_schema("^(?!-)[a-z]")).is_valid("ab")
    assert not compile_schema(_string_schema("^(?!-)[a-z]")).is_valid("-ab")
    long_ok = compile_schema(_string_schema("^[a-z]{0,2000}$"))
    assert long_ok.is_valid("a" * 2000)
    assert not long_ok.is_valid("a" * 2001)
    assert not long_ok.is_valid("a" * 65536 + "!")
    with pytest.raises(SchemaError, match=r"beyond the linear-time engine RE2 \(.*\{0,2000\}"):
        compile_schema(_string_schema("^(ab){0,2000}$"))


def test_re2_reads_python_escapes_and_any_string() -> None:
    assert compile_schema(_string_schema(r"^[\u00e0-\u00ff]+\Z")).is_valid("éè")
    assert not compile_schema(_string_schema(r"^\u00e9\Z")).is_valid("é!")
    assert compile_schema(_string_schema(r"^\U0001F600$")).is_valid("\U0001f600")
    assert compile_schema(_string_schema("^.$")).is_valid("\ud800")  # JSON may carry one


def test_re2_reads_classes_and_anchors_as_ecma_262_does() -> None:
    # The differences from Python's re that docs/concepts/schemas.md lists.
    assert not compile_schema(_string_schema(r"^\d$")).is_valid("٣")
    assert not compile_schema(_string_schema(r"^\w$")).is_valid("é")
    assert not compile_schema(_string_schema("^a$")).is_valid("a\n")
    assert re.search(r"^\d$", "٣") and re.search(r"^\w$", "é") and re.search("^a$", "a\n")


def test_pattern_properties_with_re2() -> None:
    validator = compile_schema(
        {"patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}
    )
    assert validator.is_valid({"aaa": 1})
    assert not validator.is_valid({"aaa": "1"})
    assert not validator.is_valid({"a" * 34 + "!": 1})


# -- without RE2 ------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_re2")
@pytest.mark.parametrize("pattern", [p for p, _ in HOSTILE])
def test_without_re2_a_pattern_not_proven_linear_is_refused(pattern: str) -> None:
    message = (
        rf"#/properties/p/pattern: the pattern {re.escape(repr(pattern))} could take "
        r"exponential or polynomial time on hostile input; install the linear-time engine: "
        r"pip install 'lionexec\[re2\]'"
    )
    with pytest.raises(SchemaError, match=message):
        compile_schema({"properties": {"p": _string_schema(pattern)}})
    keyed = r"#/patternProperties: the pattern .* 'lionexec\[re2\]'"
    with pytest.raises(SchemaError, match=keyed):
        compile_schema({"patternProperties": {pattern: {}}})


@pytest.mark.usefixtures("no_re2")
@pytest.mark.parametrize(
    "pattern",
    [
        r"^[^0-9]+\d$",  # [^0-9] holds non-ASCII digits, which \d matches
        r"^\w+\d$",
        "(?m)^a*$",  # every line start is a start
        "(?i)^a*A$",
        "^(ab)+$",
        "^a*?a$",
        r"^(?=.*\d).+$",
    ],
)
def test_without_re2_the_check_refuses_what_it_cannot_prove(pattern: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(repr(pattern))):
        compile_schema(_string_schema(pattern))


@pytest.mark.parametrize("pattern", [*PROVEN, r"(?a)^[^0-9]+\d$", r"^\d+\D", "^(?!-)"])
def test_without_re2_a_pattern_proven_linear_runs_on_python_re(pattern: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "re2", None)
        compiled = compile_pattern(pattern, "#/pattern")
    assert isinstance(compiled, re.Pattern)
    assert compiled.pattern == pattern


@settings(max_examples=300)
@given(st.sampled_from(PROVEN), st.text(ALPHABET + "é٣\n", max_size=12))
def test_without_re2_validation_is_python_re_search(pattern: str, value: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "re2", None)
        validator = compile_schema(_string_schema(pattern))
        keyed = compile_schema({"patternProperties": {pattern: False}})
    assert validator.is_valid(value) == bool(re.search(pattern, value))
    assert keyed.is_valid({value: 1}) == (not re.search(pattern, value))


@pytest.mark.usefixtures("no_re2")
@pytest.mark.parametrize(
    ("pattern", "hostile"),
    [
        (r"^[a-z0-9_-]+$", "a" * 65536 + "!"),
        (r"^\d+\s+\w+$", "1" * 30000 + " " * 30000 + "!"),
        (r"^[A-Z][a-z]*$", "A" + "a" * 65536 + "!"),
        (r"^\S+$", "a" * 65536 + " "),
    ],
)
def test_without_re2_proven_patterns_are_quick_on_hostile_input(
    pattern: str, hostile: str
) -> None:
    assert not compile_schema(_string_schema(pattern)).is_valid(hostile)


# -- the same rules for both ------------------------------------------------------------------


@pytest.mark.parametrize("use_re2", [True, False])
def test_a_pattern_must_be_a_valid_python_regular_expression(use_re2: bool) -> None:
    with pytest.raises(SchemaError, match=r"#/pattern: a pattern is a string, got 3"):
        compile_pattern(3, "#/pattern", use_re2=use_re2)
    with pytest.raises(SchemaError, match=r"#/pattern: invalid regular expression '\(': "):
        compile_pattern("(", "#/pattern", use_re2=use_re2)
    with pytest.raises(SchemaError, match="invalid regular expression"):
        compile_pattern(r"\p{L}", "#/pattern", use_re2=use_re2)  # RE2 syntax, not Python's


# -- a tool schema, as an MCP server sends one ------------------------------------------------

_MCP_SCHEMA = {
    "type": "object",
    "properties": {"name": _string_schema("^([a-zA-Z0-9]+)*$")},
    "required": ["name"],
}


async def _lookup(**arguments: object) -> str:
    return "found"


def test_without_re2_a_tool_with_a_hostile_pattern_is_refused_when_defined(
    no_re2: None,
) -> None:
    with pytest.raises(SchemaError, match=r"lionexec\[re2\]"):
        Tool.from_function(_lookup, name="lookup", schema=_MCP_SCHEMA)


async def test_with_re2_a_tool_with_a_hostile_pattern_ends_the_call_invalid() -> None:
    tool = Tool.from_function(_lookup, name="lookup", schema=_MCP_SCHEMA)
    branch = Branch()
    branch.register_tools(tool)
    with trio.fail_after(10):
        hostile, fine = await branch.act(
            [
                {"function": "lookup", "arguments": {"name": "a" * 34 + "!"}},
                {"function": "lookup", "arguments": {"name": "Ada"}},
            ]
        )
    assert hostile.outcome.value == "invalid"
    assert "does not match the pattern" in hostile.error.message
    assert fine.output == "found"
