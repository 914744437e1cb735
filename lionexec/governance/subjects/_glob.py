"""Glob matching shared by the subject kinds: one path segment's glob as a regular
expression, whole-string globs (text and command subjects), and globs matched ignoring case
by Unicode case folding (``ß`` folds to ``ss``), which a regular expression cannot do.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import sys
from collections.abc import Callable, Iterator
from typing import TypeAlias

import attrs


@attrs.frozen
class _WholePattern:
    """A rule pattern over a whole text or command subject, compiled."""

    source: str  # as written, with any IGNORE_CASE mark
    ignore_case: bool
    regex: re.Pattern[str]  # the whole subject (of the folded pattern, when ignoring case)
    anything: bool  # "*" or "**" alone: every well-formed subject
    # ignoring case, with a ? or [...]: the glob (else the regex is of the folded pattern, for
    # the folded subject)
    folded: _FoldedGlob | None = None
    # "*TEXT*" with no other wildcard: TEXT (folded, ignoring case), found by a substring
    # search: a regular expression would try TEXT at each position of a long subject
    contains: str | None = None


def _whole_pattern(source: str, body: str, ignore_case: bool, text: str) -> _WholePattern:
    """The pattern *source* (*body* without its mark) matching a whole subject as the glob
    *text* (*body* as the kind compares it)."""
    anything = body in ("*", "**")
    folded = None
    inner = text[1:-1]
    contains = None
    if len(text) > 2 and text[0] == text[-1] == "*" and not re.search(r"[*?\[]", inner):
        contains = inner.casefold() if ignore_case else inner
    if not ignore_case:
        regex = re.compile(fnmatch.translate(text), re.DOTALL)
    else:  # by case folding, as a path segment (re.IGNORECASE does not take ß for ss)
        regex = re.compile(fnmatch.translate(text.casefold()), re.DOTALL)
        if "?" in text or "[" in text:  # one character as written: its folding may be longer
            folded = _FoldedGlob.of(text)
    return _WholePattern(source, ignore_case, regex, anything, folded, contains)


def _segment_regex(glob: str) -> str:
    """A regular expression for one path segment (segments never contain ``/``).

    ``*`` is any run of characters, ``?`` one character, ``[...]`` (``[!...]``) one character
    of (not of) a set; an unclosed ``[`` is literal. The chunks between stars are matched
    lazily inside atomic groups, as :func:`fnmatch.translate` does, so no pattern backtracks
    catastrophically on a long hostile segment.
    """
    pieces: list[str] = []  # "" is a star
    for wildcard, text, negate in _glob_tokens(glob):
        if wildcard == "*":
            if not pieces or pieces[-1]:
                pieces.append("")
        elif wildcard == "?":
            pieces.append(".")
        elif wildcard == "[":
            pieces.append(f"[^{text}]" if negate else f"[{text}]")
        else:
            pieces.append(re.escape(text))
    out: list[str] = []
    k = 0
    while k < len(pieces) and pieces[k]:
        out.append(pieces[k])
        k += 1
    while k < len(pieces):
        k += 1  # the star
        chunk: list[str] = []
        while k < len(pieces) and pieces[k]:
            chunk.append(pieces[k])
            k += 1
        if k == len(pieces):  # the last star: its chunk ends the segment
            out.append(".*" + "".join(chunk))
        else:
            out.append(f"(?>.*?{''.join(chunk)})")
    return "".join(out)


def _glob_tokens(glob: str) -> Iterator[tuple[str, str, bool]]:
    """The segment glob *glob* read: ``("*", "", False)``, ``("?", "", False)``,
    ``("[", set, negated)`` (the set as a regular expression set holds it) or
    ``("", character, False)``; an unclosed ``[`` is a literal character."""
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c in "*?":
            yield c, "", False
        elif c == "[":
            j = i
            if j < n and glob[j] in "!^":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                yield "", c, False
                continue
            inner = glob[i:j]
            i = j + 1
            negate = inner[:1] in ("!", "^")
            if negate:
                inner = inner[1:]
            yield "[", inner.replace("\\", "\\\\").replace("[", "\\["), negate
        else:
            yield "", c, False


@functools.cache
def _foldings() -> tuple[tuple[str, str], ...]:
    """Every character whose case folding is not itself, with its folding (found once, when
    the first case-ignoring path pattern with a wildcard is compiled)."""
    changed: list[tuple[str, str]] = []
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    for start in range(0, len(everything), 256):
        block = everything[start : start + 256]
        if block.casefold() != block:  # (most blocks fold to themselves)
            changed.extend((c, c.casefold()) for c in block if c.casefold() != c)
    return tuple(changed)


#: A step of a :class:`_FoldedGlob`: ``None`` is a star, a string a run of folded literal
#: characters, and a pair one character of the subject as written (``?`` or a set): a
#: regular expression for one folded character (``None``: any) and the longer foldings.
_Step: TypeAlias = "str | tuple[re.Pattern[str] | None, tuple[str, ...]] | None"


@attrs.frozen
class _FoldedGlob:
    """A segment glob with wildcards of a case-ignoring path pattern, matched against the
    case-folded segment: its literal characters folded, ``?`` and ``[...]`` each one
    character of the subject as written, so its folding, which may be longer (``ß`` folds to
    ``ss``): ``?`` any character's, ``[...]`` (``[!...]``) that of a character the set
    matches (does not match) ignoring case.

    The foldings vary in length, so chunks between stars cannot be committed to as
    :func:`_segment_regex` does; the segment is read once per step instead, keeping every
    position reachable so far as one bit of an integer (no backtracking).
    """

    steps: tuple[_Step, ...]

    @classmethod
    def of(cls, glob: str) -> _FoldedGlob:
        steps: list[_Step] = []
        longer = tuple(sorted({f for _, f in _foldings() if len(f) > 1}))
        for wildcard, text, negate in _glob_tokens(glob):
            if wildcard == "*":
                if not steps or steps[-1] is not None:
                    steps.append(None)
            elif wildcard == "?":
                steps.append((None, longer))
            elif wildcard == "[":
                member = re.compile(f"[{text}]", re.IGNORECASE | re.DOTALL)
                folds = {f for c, f in _foldings() if (member.match(c) is None) == negate}
                one = f"(?i:[^{text}])" if negate else f"(?i:[{text}])"
                singles = "".join(re.escape(f) for f in sorted(folds) if len(f) == 1)
                if singles:
                    one += f"|[{singles}]"
                longer_ones = tuple(sorted(f for f in folds if len(f) > 1))
                steps.append((re.compile(one, re.DOTALL), longer_ones))
            elif steps and isinstance(steps[-1], str):
                steps[-1] += text.casefold()
            else:
                steps.append(text.casefold())
        return cls(tuple(steps))

    def fullmatch(self, segment: str) -> bool:
        """Whether the case-folded *segment* matches."""
        n = len(segment)
        present = set(segment)

        def where(test: Callable[[str], object]) -> int:
            """The positions of the characters passing *test*, as bits."""
            table = {ord(c): "1" if test(c) else "0" for c in present}
            return int(segment.translate(table)[::-1] or "0", 2)

        @functools.cache
        def starts(text: str) -> int:
            """The positions *text* starts at, as bits."""
            if not set(text) <= present:
                return 0
            bits = (1 << n) - 1
            for k, c in enumerate(text):
                bits &= where(c.__eq__) >> k
            return bits

        reachable = 1  # bit i: the steps so far can match segment[:i]
        for step in self.steps:
            if step is None:  # a star: every position from the first reachable one
                reachable = ((1 << (n + 1)) - 1) & ~((reachable & -reachable) - 1)
            elif isinstance(step, str):
                reachable = (reachable & starts(step)) << len(step)
            else:
                one, folds = step
                bits = (1 << n) - 1 if one is None else where(one.fullmatch)
                after = (reachable & bits) << 1
                for fold in folds:
                    after |= (reachable & starts(fold)) << len(fold)
                reachable = after
            if not reachable:
                return False
        return bool(reachable >> n & 1)


class _Subject:
    """A text or command subject and, once a pattern asks, its case folding (folded once per
    check, however many case-ignoring rules ask)."""

    __slots__ = ("_folded", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._folded: str | None = None

    @property
    def folded(self) -> str:
        if self._folded is None:
            self._folded = self.text.casefold()
        return self._folded


def _fullmatch(pattern: _WholePattern, subject: _Subject) -> bool:
    if pattern.contains is not None:
        return pattern.contains in (subject.folded if pattern.ignore_case else subject.text)
    if pattern.folded is not None:
        return pattern.folded.fullmatch(subject.folded)
    text = subject.folded if pattern.ignore_case else subject.text
    return pattern.regex.match(text) is not None
