"""Schema regular expressions (``pattern``, ``patternProperties``) that run in linear time.

A schema's pattern comes from a tool's author or an MCP server; the string it is matched
against comes from the model. Python's :mod:`re` backtracks, on the trio thread and holding the
GIL, so no timeout can stop it: ``^(a+)+$`` spends seconds on 28 characters, and even ``a*b``
is quadratic under ``search`` (seconds on 64 KiB). So:

* with RE2 installed (the ``google-re2`` package, ``pip install 'lionexec[re2]'``), a pattern
  runs on RE2, whose time is linear in the input. A pattern RE2 cannot compile (lookaround,
  backreferences, a counted repetition over 1000) falls back to Python's ``re`` only if the
  check below proves it linear there, and is refused otherwise.
* without RE2, a pattern is accepted only where a conservative static check proves that
  Python's ``re`` matches it in linear time, and refused otherwise.

Refused means :class:`~lionexec.errors.SchemaError` when the schema is compiled (when the tool
is defined or imported), never a slow call later. Every pattern must first be a valid Python
regular expression (as ``jsonschema`` reads it), whichever engine then runs it.
"""

from __future__ import annotations

import array
import functools
import importlib
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol

from lionexec.errors import SchemaError

__all__ = ["Pattern", "compile_pattern"]

_sre: Any = importlib.import_module("re._parser")  # Python's own parser (no public stubs)

_NO_RE2: Final = (
    "could take exponential or polynomial time on hostile input; install the linear-time "
    "engine: pip install 'lionexec[re2]'"
)
_MAX_PATHS: Final = 1000  # ways a repetition-free pattern may try to match at one position
_TOP: Final = 0x10FFFF
_Set = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent code point ranges


class Pattern(Protocol):
    """A compiled schema pattern: ``search(value)`` is truthy when ``value`` matches."""

    @property
    def pattern(self) -> str: ...

    def search(self, string: str, /) -> object: ...


def compile_pattern(pattern: object, where: str, *, use_re2: bool = True) -> Pattern:
    """Compile a schema pattern for an engine that runs it in linear time, or refuse it.

    ``use_re2=False`` acts as if RE2 were not installed. Raises :class:`SchemaError` naming
    ``where`` for a non-string, an invalid pattern, or one no linear-time engine here runs.
    """
    if not isinstance(pattern, str):
        raise SchemaError(f"{where}: a pattern is a string, got {pattern!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SchemaError(f"{where}: invalid regular expression {pattern!r}: {exc}") from None
    re2 = _import_re2() if use_re2 else None
    why = _NO_RE2
    if re2 is not None:
        options = re2.Options()
        options.log_errors = False  # RE2 would print every refused pattern to stderr
        options.never_capture = True  # a yes or no is all a search here needs
        try:  # as UTF-8 bytes, so that a lone surrogate is RE2's to judge
            source = _for_re2(pattern).encode("utf-8", "surrogatepass")
            return _RE2Pattern(pattern, re2.compile(source, options))
        except re2.error as exc:
            reason = exc.args[0] if exc.args else ""
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            why = f"is beyond the linear-time engine RE2 ({reason})"
    parsed = _sre.parse(pattern)
    if _linear(parsed):
        return compiled
    found = sorted({name for name in map(_backtracking, _walk(parsed)) if name})
    if found:
        why = (
            f"needs backtracking ({', '.join(found)}), which lionexec does not run on model input"
        )
    raise SchemaError(f"{where}: the pattern {pattern!r} {why}")


def _import_re2() -> Any:
    try:
        import re2
    except ImportError:
        return None
    return re2


class _RE2Pattern:
    """An RE2 pattern searched over UTF-8 (surrogates passed through, as JSON may carry)."""

    __slots__ = ("_search", "pattern")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self._search = compiled.search

    def search(self, string: str, /) -> bool:
        return self._search(string.encode("utf-8", "surrogatepass")) is not None

    def __repr__(self) -> str:
        return f"<RE2 pattern {self.pattern!r}>"


def _for_re2(pattern: str) -> str:
    """Python escapes RE2 spells differently: ``\\uXXXX``, ``\\UXXXXXXXX``, ``\\Z``."""

    def one(m: re.Match[str]) -> str:
        text = m.group()
        if text[1] in "uU" and len(text) > 2:
            return f"\\x{{{text[2:]}}}"
        return "\\z" if text == "\\Z" else text

    return re.sub(r"\\(?:u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", one, pattern, flags=re.DOTALL)


def _walk(items: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
    """Every node of a parsed pattern, nested ones included."""
    for op, av in items:
        yield op, av
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
            yield from _walk(av[2])
        elif op is _sre.SUBPATTERN:
            yield from _walk(av[3])
        elif op is _sre.BRANCH:
            for branch in av[1]:
                yield from _walk(branch)
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            yield from _walk(av[1])
        elif op is _sre.ATOMIC_GROUP:
            yield from _walk(av)
        elif op is _sre.GROUPREF_EXISTS:
            yield from _walk(av[1])
            yield from _walk(av[2] or ())


def _backtracking(node: tuple[Any, Any]) -> str | None:
    op, av = node
    if op in (_sre.ASSERT, _sre.ASSERT_NOT):
        kind = "lookahead" if av[0] == 1 else "lookbehind"
        return kind if op is _sre.ASSERT else f"negative {kind}"
    return {
        _sre.GROUPREF: "backreference",
        _sre.GROUPREF_EXISTS: "conditional group",
        _sre.ATOMIC_GROUP: "atomic group",
        _sre.POSSESSIVE_REPEAT: "possessive quantifier",
    }.get(op)


# -- the static check: does Python's re match this pattern in linear time? ------------------


def _linear(parsed: Any) -> bool:
    """True only where ``re.search`` provably takes time linear in the string's length.

    Either (a) nothing repeats more than once, so each start position has a bounded number of
    ways to match; or (b) the pattern is anchored at the start (one start position) and is a
    sequence of single characters, each possibly repeated, where every variable repetition's
    characters are disjoint from those that can start what follows it: the repetition then
    stops exactly where the rest must begin, and each character it gives back on a failure
    is refused at once by what follows.
    """
    return _paths(parsed) <= _MAX_PATHS or _anchored_sequence(parsed, parsed.state.flags)


def _paths(items: Sequence[Any]) -> int:
    total = 1
    for op, av in items:
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
            low, high, sub = av
            if high > 1:
                return _MAX_PATHS + 1
            n = 1 if high == 0 else _paths(sub) + (low == 0)
        elif op is _sre.SUBPATTERN:
            n = _paths(av[3])
        elif op is _sre.BRANCH:
            n = sum(_paths(branch) for branch in av[1])
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            n = _paths(av[1])
        elif op is _sre.ATOMIC_GROUP:
            n = _paths(av)
        elif op is _sre.GROUPREF_EXISTS:
            n = _paths(av[1]) + _paths(av[2] or ())
        else:  # one character, a zero-width assertion, a backreference to bounded text
            n = 1
        total *= n
        if total > _MAX_PATHS:
            return total
    return total


def _anchored_sequence(parsed: Any, flags: int) -> bool:
    if flags & (re.IGNORECASE | re.MULTILINE) or not len(parsed):
        return False
    if parsed[0] not in ((_sre.AT, _sre.AT_BEGINNING), (_sre.AT, _sre.AT_BEGINNING_STRING)):
        return False
    units = _units(parsed, flags)
    if units is None:
        return False
    for i, (low, high, chars) in enumerate(units):
        if low != high and not _disjoint(chars, _first(units[i + 1 :])):
            return False
    return True


def _units(items: Sequence[Any], flags: int) -> list[tuple[int, int, _Set]] | None:
    """The pattern as (min, max, characters) units, or None if it is not such a sequence."""
    out: list[tuple[int, int, _Set]] = []
    for op, av in items:
        if op is _sre.AT:
            out.append((0, 0, ()))  # zero width: nothing to consume, nothing to give back
        elif op is _sre.SUBPATTERN and not av[1] and not av[2]:
            inner = _units(av[3], flags)
            if inner is None:
                return None
            out += inner
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT):
            chars = _chars(av[2], flags)
            if chars is None:
                return None
            out.append((av[0], av[1], chars))
        else:
            chars = _chars([(op, av)], flags)
            if chars is None:
                return None
            out.append((1, 1, chars))
    return out


def _first(units: Sequence[tuple[int, int, _Set]]) -> _Set:
    """The characters that can start a match of ``units``."""
    found: _Set = ()
    for low, _, chars in units:
        found = _union(found, chars)
        if low:
            break
    return found


def _chars(items: Sequence[Any], flags: int) -> _Set | None:
    """The characters one single-character item matches, or None if it is something else."""
    if len(items) != 1:
        return None
    op, av = items[0]
    if op is _sre.SUBPATTERN and not av[1] and not av[2]:
        return _chars(av[3], flags)
    if op is _sre.LITERAL:
        return ((av, av),)
    if op is _sre.NOT_LITERAL:
        return _complement(((av, av),))
    if op is _sre.ANY:
        return ((0, _TOP),) if flags & re.DOTALL else _complement(((10, 10),))
    if op is not _sre.IN:
        return None
    found: _Set = ()
    for kind, value in av:
        if kind is _sre.LITERAL:
            found = _union(found, ((value, value),))
        elif kind is _sre.RANGE:
            found = _union(found, (value,))
        elif kind is _sre.CATEGORY:
            name = value.name.removeprefix("CATEGORY_")
            positive = _categories(bool(flags & re.ASCII)).get(name.removeprefix("NOT_"))
            if positive is None:
                return None
            negated = name.startswith("NOT_")
            found = _union(found, _complement(positive) if negated else positive)
        elif kind is not _sre.NEGATE:
            return None
    return _complement(found) if av[0][0] is _sre.NEGATE else found


@functools.cache
def _categories(ascii: bool) -> dict[str, _Set]:
    """The exact code points of ``\\d``, ``\\s`` and ``\\w``, as ``re`` reads them."""
    every = array.array("I", range(_TOP + 1)).tobytes().decode("utf-32-le", "surrogatepass")
    flags = re.ASCII if ascii else re.NOFLAG
    return {
        name: tuple((m.start(), m.end() - 1) for m in re.finditer(f"{code}+", every, flags))
        for name, code in (("DIGIT", r"\d"), ("SPACE", r"\s"), ("WORD", r"\w"))
    }


def _union(a: _Set, b: _Set) -> _Set:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(a + b):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _complement(a: _Set) -> _Set:
    out, start = [], 0
    for low, high in a:
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= _TOP:
        out.append((start, _TOP))
    return tuple(out)


def _disjoint(a: _Set, b: _Set) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return False
    return True
