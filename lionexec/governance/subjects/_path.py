"""The ``"path"`` subject kind: a file-system path, normalised with POSIX rules and matched
segment by segment (see :class:`~lionexec.governance.PermissionPolicy` for the rules)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TypeAlias

import attrs

from ._glob import _FoldedGlob, _segment_regex
from .base import _WILDCARDS, ReadSubject, _quote, _Refusal, _unmarked

#: A path pattern's segment: literal, a glob (case-sensitive, or case-ignoring), or ``None``
#: for ``**``.
_Segment: TypeAlias = "str | re.Pattern[str] | _FoldedGlob | None"


@attrs.frozen
class _PathPattern:
    """One rule pattern, compiled for path subjects."""

    source: str  # as written, with any IGNORE_CASE mark
    ignore_case: bool
    absolute: bool
    segments: tuple[_Segment, ...]
    base: int  # leading literal segments, which ".." may not climb out of
    anything: bool  # "*" or "**" alone: every well-formed subject


@functools.lru_cache(maxsize=4096)
def _compile(source: str) -> _PathPattern:
    body, ignore_case = _unmarked(source)
    anything = body in ("*", "**")
    absolute = body.startswith("/")
    parts = [part for part in body.split("/") if part not in ("", ".")]
    segments: list[_Segment] = []
    base = 0
    in_base = True
    for part in parts:
        if part == "**":
            segments.append(None)
            in_base = False
        elif _WILDCARDS.search(part) is None:
            segments.append(part.casefold() if ignore_case else part)
            base += in_base
        elif ignore_case:
            segments.append(_FoldedGlob.of(part))
            in_base = False
        else:
            segments.append(re.compile(_segment_regex(part), re.DOTALL))
            in_base = False
    return _PathPattern(source, ignore_case, absolute, tuple(segments), base, anything)


@attrs.frozen
class _Path:
    absolute: bool
    segments: tuple[str, ...]
    lowest: int  # the shallowest depth a ".." climbed from (a large number if none did)


def _parse_path(subject: str) -> _Path | str:
    """*subject* normalised, or why it is refused."""
    if not subject:
        return "is empty"
    if "\x00" in subject:
        return "contains NUL"
    absolute = subject.startswith("/")
    stack: list[str] = []
    lowest = 1 << 30
    for part in subject.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not stack and not absolute:
                return "climbs above its starting directory with '..'"
            lowest = min(lowest, len(stack))
            if stack:
                stack.pop()
            continue
        stack.append(part)
    return _Path(absolute, tuple(stack), lowest)


def _path_matches(path: _Path, pattern: _PathPattern, *, deny: bool = False) -> bool:
    if pattern.anything:
        return True
    # a relative deny pattern starting with "**" (**/.ssh/**) names a place at any depth,
    # under the root too: it must not be walked around by an absolute path (an allow or
    # escalate rule so written admits relative paths only, as it always did)
    if path.absolute != pattern.absolute and not (
        deny and path.absolute and pattern.segments[:1] == (None,)
    ):
        return False
    segments = path.segments
    if pattern.ignore_case:
        segments = tuple(s.casefold() for s in segments)  # as re.IGNORECASE folds (ſ is s)
    return _segments_match(segments, pattern.segments)


def _segments_match(segments: Sequence[str], pattern: Sequence[_Segment]) -> bool:
    # reachable[j]: the first i segments can be matched by the first j pattern items
    reachable = [True] + [False] * len(pattern)
    for j, item in enumerate(pattern):
        if item is None:
            reachable[j + 1] = reachable[j]
    for segment in segments:
        previous = reachable
        reachable = [False] * (len(pattern) + 1)
        for j, item in enumerate(pattern):
            if item is None:
                reachable[j + 1] = previous[j + 1] or reachable[j]
            elif previous[j] and (
                item == segment if isinstance(item, str) else item.fullmatch(segment)
            ):
                reachable[j + 1] = True
        if not any(reachable):
            return False
    return reachable[-1]


class _PathSubject:
    """A path subject, normalised."""

    __slots__ = ("_action", "_path")

    objection = None

    def __init__(self, action: str, path: _Path) -> None:
        self._action = action
        self._path = path

    def denied_by(self, pattern: str) -> bool:
        return _path_matches(self._path, _compile(pattern), deny=True)

    def admitted_by(self, pattern: str) -> bool | str:
        compiled = _compile(pattern)
        if not _path_matches(self._path, compiled):
            return False
        if self._path.lowest <= compiled.base:
            return (
                f"path {_quote(self._action)} climbs out of the base of rule "
                f"{compiled.source!r} with '..'"
            )
        return True


def read_path(subject: str) -> ReadSubject:
    """The ``"path"`` kind's :class:`~lionexec.governance.SubjectReader`."""
    path = _parse_path(subject)
    if isinstance(path, str):
        return _Refusal(f"path {_quote(subject)} {path}")
    return _PathSubject(subject, path)
