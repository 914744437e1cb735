"""Summaries and per-parameter descriptions from Google, NumPy and reST docstrings."""

from __future__ import annotations

import inspect
import re
from typing import Final

__all__ = ["parse_docstring"]

#: Section titles (Google and NumPy) whose entries describe parameters or fields.
_PARAM_SECTIONS: Final = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
     "attributes", "other parameters"}
)  # fmt: skip
#: Any other section title ends the summary and the parameter section before it.
_OTHER_SECTIONS: Final = frozenset(
    {"returns", "return", "yields", "yield", "raises", "raise", "examples", "example",
     "notes", "note", "see also", "warnings", "warning", "references", "todo", "methods"}
)  # fmt: skip

_GOOGLE_HEADER = re.compile(r"^(?P<title>[A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_NAME = re.compile(r"\*{0,2}(?P<name>\w+)\s*")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
# "x : int", or several names sharing one entry: "x, y : int"
_NUMPY_ENTRY = re.compile(r"^(?P<names>\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")
_REST_FIELD = re.compile(r"^:(?P<kind>\w+)(?:\s+(?P<rest>[^:]+))?:\s*(?P<text>.*)$")


def parse_docstring(doc: str | None) -> tuple[str | None, dict[str, str]]:
    """Split a docstring into its summary and the descriptions of its parameters.

    The summary is the text before the first section (``Args:``, a NumPy ``Parameters``
    heading, a reST ``:param ...:`` field, ...), paragraphs separated by blank lines and
    each paragraph joined into one line. Descriptions come from Google ``Args:`` /
    ``Attributes:`` entries, NumPy ``Parameters`` entries and reST ``:param name:`` fields,
    continuation lines joined with single spaces. Either part may be missing.
    """
    if not doc:
        return None, {}
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    titles = _section_titles(lines, "---" in text)
    summary: list[str] = []
    params: dict[str, str] = {}
    in_summary = True
    i = 0
    while i < len(lines):
        title = titles[i]
        if title is not None:
            in_summary = False
            numpy = _is_numpy_header(lines, i)
            i = _read_section(lines, titles, i + (2 if numpy else 1), title, numpy, params)
            continue
        line = lines[i].strip()
        field = _REST_FIELD.match(line) if line[:1] == ":" else None
        if field is not None:
            in_summary = False
            i = _read_rest_field(lines, i, field, params)
            continue
        if in_summary:
            summary.append(line)
        i += 1
    return _paragraphs(summary), params


def _section_titles(lines: list[str], rules: bool) -> list[str | None]:
    """The section title each line starts (see :func:`_section_title`), else ``None``;
    *rules*: some line may be a NumPy rule (``---``).

    Worked out once per line, in one loop: most lines are neither a Google title (it ends
    with a colon) nor above a NumPy rule, and are rejected here with no call at all (the
    parser would otherwise ask again for every line of a section, and every tool registered
    parses its docstring).
    """
    titles: list[str | None] = [None] * len(lines)
    last = len(lines) - 1
    for i, raw in enumerate(lines):
        end = raw[-1:]
        if end.isspace():
            end = raw.rstrip()[-1:]
        if end == ":" or (rules and i < last and lines[i + 1][:3] == "---"):
            titles[i] = _section_title(lines, i)
    return titles


def _section_title(lines: list[str], i: int) -> str | None:
    line = lines[i].strip()
    # Most lines are neither a Google title (it ends with a colon) nor above a NumPy rule:
    # rejected before any regex, which is most of the cost of this check (about a seventh of
    # parsing a docstring, and every tool registered parses one).
    numpy = _is_numpy_header(lines, i)
    if not numpy and line[-1:] != ":":
        return None
    if numpy:
        title = line.lower()
    else:
        match = _GOOGLE_HEADER.match(line)
        if match is None or lines[i] != lines[i].lstrip():
            return None
        title = match["title"].strip().lower()
    return title if title in _PARAM_SECTIONS or title in _OTHER_SECTIONS else None


def _is_numpy_header(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and lines[i + 1][:3] == "---"
        and bool(lines[i].strip())
        and bool(_NUMPY_RULE.match(lines[i + 1]))
    )


def _read_section(
    lines: list[str],
    titles: list[str | None],
    i: int,
    title: str,
    numpy: bool,
    params: dict[str, str],
) -> int:
    """Consume one section starting at line *i*; return the index after it."""
    wanted = title in _PARAM_SECTIONS
    names: list[str] = []  # the entry being read (several for NumPy's "x, y : int")
    entry_indent = -1
    while i < len(lines):
        if titles[i] is not None:
            break
        raw = lines[i]
        text = raw.strip()
        if not text:
            i += 1
            continue
        indent = len(raw) - len(raw.lstrip())
        if not numpy and indent == 0:  # a Google section ends at the first dedent
            break
        if entry_indent < 0:
            entry_indent = indent
        entry: dict[str, str] | None = None
        if indent > entry_indent:  # a continuation line
            pass
        elif not numpy:
            # "name: text" with an ASCII identifier for a name, as most entries are: what
            # _google_entry finds, without a regex (the regex was a tenth of parsing a
            # docstring, which every tool registered does)
            head, colon, tail = text.partition(":")
            if colon and head.isascii() and head.isidentifier():
                names = [head]
                if wanted:
                    params[head] = tail.strip()
                i += 1
                continue
            entry = _google_entry(text)
        else:
            match = _NUMPY_ENTRY.match(text)
            if match is not None:
                entry = {n.strip().lstrip("*"): "" for n in match["names"].split(",")}
        if entry is not None:
            names = list(entry)
            if wanted:
                params.update(entry)
        elif wanted:
            for name in names:
                params[name] = f"{params[name]} {text}".strip()
        i += 1
    return i


def _google_entry(text: str) -> dict[str, str] | None:
    """``{name: description}`` from a Google entry, ``name (type): description`` (the type
    may hold parentheses: ``key (Callable(str) -> str): ...``), or ``None``."""
    match = _GOOGLE_NAME.match(text)
    if match is None:
        return None
    rest = text[match.end() :]
    if rest[:1] == "(":
        end = _closing(rest)
        if end < 0:  # unbalanced: not an entry
            return None
        rest = rest[end + 1 :].lstrip()
    if rest[:1] != ":":
        return None
    return {match["name"]: rest[1:].strip()}


def _closing(text: str) -> int:
    """The index of the ``)`` closing the ``(`` that *text* starts with, or -1."""
    depth = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _read_rest_field(
    lines: list[str], i: int, field: re.Match[str], params: dict[str, str]
) -> int:
    kind, rest = field["kind"], (field["rest"] or "").split()
    parts = [field["text"].strip()]
    i += 1
    while i < len(lines) and lines[i][:1].isspace() and lines[i].strip():
        parts.append(lines[i].strip())
        i += 1
    if kind in {"param", "parameter", "arg", "argument", "key", "keyword"} and rest:
        params[rest[-1]] = " ".join(p for p in parts if p)
    return i


def _paragraphs(lines: list[str]) -> str | None:
    paragraphs: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    return "\n\n".join(paragraphs) or None
