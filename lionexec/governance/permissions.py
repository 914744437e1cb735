"""Allow / deny / escalate rules for tool calls, as their own phase of a call (DELTAS A3).

A rule is a glob pattern over the call's *subject*, read according to the subject's kind
(:data:`SubjectKind`): a file-system **path** (normalised with POSIX rules, segment-wise
globbing), a shell **command** (tokenised with :mod:`shlex`, wrappers unwrapped, control
operators and expansions refused) or plain **text** (a glob over the whole string).
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import pathlib
import posixpath
import re
import shlex
import sys
import types
import typing
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs
import trio

from .._failures import call_user
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..tools import Tool
    from .context import CallContext

__all__ = [
    "IGNORE_CASE",
    "SHELL_CONTROL",
    "AwaitingApproval",
    "Behavior",
    "EscalationHandler",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "Rules",
    "SubjectKind",
    "ignoring_case",
    "subject_kind_of",
]

Behavior: TypeAlias = Literal["allow", "deny", "escalate"]
PermissionMode: TypeAlias = Literal["allow_all", "deny_all", "rules"]
#: How a policy reads a subject: a file-system path, a shell command, or plain text.
SubjectKind: TypeAlias = Literal["path", "command", "text"]
#: Tool name (exactly as registered, or ``"*"`` for every tool) → glob patterns over the
#: call's subject.
Rules: TypeAlias = Mapping[str, tuple[str, ...]]

_MODES: Final = ("allow_all", "deny_all", "rules")

#: A pattern starting with this marker matches ignoring case (the only opt-in: matching is
#: case-sensitive otherwise). Build one with :func:`ignoring_case`.
IGNORE_CASE: Final = "(?i)"

#: Shell control operators, expansions and redirections in a *text* subject: ``;`` ``&``
#: (so ``&&`` too) ``|`` (so ``||`` too), a backtick, ``$(`` ``${`` ``$NAME`` (and ``$'`` ``$"``
#: and the special parameters), ``<`` ``>``, a newline, ``\r`` or NUL. A text subject
#: containing one is denied in rules mode unless an allow rule without wildcards names it
#: exactly. (A *command* subject is stricter: see :class:`PermissionPolicy`.)
SHELL_CONTROL: Final = re.compile(r"[;&|`<>\n\r\x00]|\$[({\w@*#?!$'\"-]")
#: In a command, every ``$``, parenthesis and brace is refused too (any expansion,
#: substitution, subshell or brace expansion).
_COMMAND_CONTROL: Final = re.compile(r"[;&|`<>\n\r\x00$(){}]")
_WILDCARDS: Final = re.compile(r"[*?\[]")
#: The longest command subject the policy analyses; a longer one is denied.
_MAX_COMMAND: Final = 65_536
#: :meth:`PermissionPolicy.check` keeps decisions about subjects up to this long, and up to
#: this many decisions (the governed act row of ``nox -s bench``: a tool without a subject
#: argument is decided by its name, the same subject every call).
_CACHED_SUBJECT: Final = 1_024
_DECISIONS_KEPT: Final = 1_024
#: The values of ``kind`` that :meth:`PermissionPolicy.check` accepts.
_CHECKED_KINDS: Final = (None, "path", "command", "text")
#: How deeply wrappers and ``sh -c`` / ``eval`` strings are followed before giving up (deny).
_MAX_LAYERS: Final = 32

#: Without a declared kind: parameters that hold a path ... (names as :func:`_plain_name`
#: spells them: ``filePath``, ``file_path`` and ``FILE-PATH`` are ``filepath``)
_PATH_PARAMETERS: Final = frozenset(
    {"path", "file", "filename", "filepath", "dir", "dirpath", "directory", "directorypath"}
    | {"folder", "folderpath"}
)
#: ... parameters that hold a command ...
_COMMAND_PARAMETERS: Final = frozenset({"command", "cmd", "commandline", "cmdline"})
#: ... and tools whose subject is a command whatever the parameter is called.
_COMMAND_TOOLS: Final = frozenset({"bash", "sh", "shell", "zsh"})


#: How much of a subject a decision's reason quotes (the reason goes back to the model and
#: into logs; the subject is in :attr:`PermissionDecision.action` whole).
_QUOTED: Final = 200


def _quote(subject: object) -> str:
    """``repr(subject)`` for a reason, cut to :data:`_QUOTED` characters; never raises."""
    try:
        text = repr(subject)
    except Exception:  # (a hostile object's __repr__, or one nested too deeply)
        text = f"<{type(subject).__name__}>"
    if len(text) > _QUOTED:
        text = f"{text[:_QUOTED]}... ({len(text)} characters)"
    return text


def _plain_name(name: str) -> str:
    """*name* case folded, without ``_`` and ``-``: how a parameter or tool name is compared
    with the names above."""
    return name.casefold().replace("_", "").replace("-", "")


def ignoring_case(pattern: str) -> str:
    """*pattern*, marked to match ignoring case (``IGNORE_CASE + pattern``).

    The mark is part of the pattern string, so it survives :meth:`PermissionPolicy.to_dict`.
    """
    if not isinstance(pattern, str):
        raise ConfigurationError(f"a pattern must be a string, not {pattern!r}")
    return pattern if pattern.startswith(IGNORE_CASE) else IGNORE_CASE + pattern


@attrs.frozen
class PermissionDecision:
    """What a policy decided about one call.

    Attributes:
        behavior: ``"allow"``, ``"deny"`` or ``"escalate"``.
        tool_name: the tool, as asked about.
        action: the subject the rules were matched against (a path as its POSIX string).
        reason: a sentence a person (or model) can read.
        matched_rule: the pattern that decided, or ``None`` if no rule did.
        approval: set when the escalation handler parked the call to wait for a durable
            approval (``behavior`` is ``"escalate"`` then); ``None`` otherwise.
    """

    behavior: Behavior
    tool_name: str
    action: str
    reason: str
    matched_rule: str | None = None
    approval: AwaitingApproval | None = None

    @property
    def allowed(self) -> bool:
        return self.behavior == "allow"


@attrs.frozen
class AwaitingApproval:
    """An escalation handler's answer: the call waits for durable approval *approval_id*.

    A journal's handler (:class:`lionexec.journal.approvals.ApprovalGate`) returns it after
    parking the call; :meth:`PermissionPolicy.decide` then returns an ``escalate`` decision
    carrying it, and the act transaction answers the call ``awaiting_approval`` (on a branch
    with a durable journal; on any other, nothing could resume the call, so it is denied).

    Attributes:
        approval_id: the approval that decides the call.
        expires_at: when it expires if nobody decides it (epoch seconds), or ``None``.
    """

    approval_id: str
    expires_at: float | None = None


#: Asked to settle an ``escalate`` decision: called with the decision and the call context;
#: only a result (or awaited result) that ``is True`` approves; an :class:`AwaitingApproval`
#: parks the call.
EscalationHandler: TypeAlias = Callable[
    ["PermissionDecision", "CallContext"], Awaitable[object] | object
]


def _rules(value: Mapping[str, Iterable[str]] | None) -> Rules:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"rules must map tool names to patterns, not {value!r}")
    normalized: dict[str, tuple[str, ...]] = {}
    for tool, patterns in value.items():
        if not isinstance(tool, str):
            raise ConfigurationError(f"a rule's tool name must be a string, not {tool!r}")
        if isinstance(patterns, str):
            raise ConfigurationError(
                f"rules for {tool!r} must be a list of patterns, not the string {patterns!r}"
            )
        listed = tuple(patterns)
        for pattern in listed:
            if not isinstance(pattern, str):
                raise ConfigurationError(
                    f"a pattern for {tool!r} must be a string, not {pattern!r}"
                )
        normalized[tool] = normalized.get(tool, ()) + listed
    return MappingProxyType(normalized)


def _mode(value: str) -> PermissionMode:
    if value not in _MODES:
        raise ConfigurationError(f"mode must be one of {', '.join(_MODES)}; got {value!r}")
    return value  # type: ignore[return-value]  # checked just above


# -- subject kinds --------------------------------------------------------------------------

_KINDS: weakref.WeakKeyDictionary[Tool, SubjectKind] = weakref.WeakKeyDictionary()


def subject_kind_of(tool: Tool | None) -> SubjectKind:
    """How a policy reads the subject of *tool*'s calls.

    1. The kind the tool declares (``Tool(..., subject_kind=...)``).
    2. No tool, or no subject argument (the subject is then the tool name): ``"text"``.
    3. A subject parameter annotated :class:`pathlib.PurePath` or a subclass (``Path``,
       ``Path | None``, ``Annotated[Path, ...]``): ``"path"``.
    4. A subject parameter named ``command``, ``cmd``, ``command_line`` or ``cmdline``, or
       a tool named ``bash``, ``sh``, ``shell`` or ``zsh``: ``"command"``.
    5. A subject parameter named ``path``, ``file``, ``filename``, ``filepath``, ``dir``,
       ``dirpath``, ``directory``, ``directory_path``, ``folder`` or ``folder_path``:
       ``"path"``.
    6. Otherwise ``"text"``.

    Names compare ignoring case, ``_`` and ``-``: ``filePath``, ``FILE_PATH`` and
    ``file-path`` are ``filepath``, ``Command`` is ``command``, a tool ``Bash`` is ``bash``.

    Declare the kind when in doubt: inference exists so that tools written before kinds
    existed keep their meaning, and so that the common names are read the safe way.
    """
    if tool is None or tool.subject is None:
        return "text"
    declared = tool.subject_kind
    if declared is not None:
        return declared
    try:
        return _KINDS[tool]
    except KeyError:
        pass
    kind: SubjectKind
    if _is_path_annotation(_subject_annotation(tool, tool.subject)):
        kind = "path"
    elif (
        _plain_name(tool.subject) in _COMMAND_PARAMETERS
        or _plain_name(tool.name) in _COMMAND_TOOLS
    ):
        kind = "command"
    elif _plain_name(tool.subject) in _PATH_PARAMETERS:
        kind = "path"
    else:
        kind = "text"
    _KINDS[tool] = kind
    return kind


def _kind_for_name(tool_name: str) -> SubjectKind:
    return "command" if _plain_name(tool_name) in _COMMAND_TOOLS else "text"


def _subject_annotation(tool: Tool, name: str) -> object:
    """The annotation of *tool*'s parameter *name*, resolved where possible."""
    target: Any = tool.request_class
    field = name
    if target is not None:
        if attrs.has(target):
            for a in attrs.fields(target):
                if (a.alias or a.name) == name:
                    field = a.name
    else:
        target = tool.func_callable
        while isinstance(target, functools.partial):
            target = target.func
        if isinstance(target, type):
            target = target.__init__  # type: ignore[misc]
        elif not (inspect.isfunction(target) or inspect.ismethod(target)):
            target = type(target).__call__
    try:
        return typing.get_type_hints(target, include_extras=True).get(field)
    except Exception:  # unresolvable string annotations: read them as written
        try:
            parameter = inspect.signature(tool.func_callable).parameters.get(name)
        except (TypeError, ValueError):
            return None
        return None if parameter is None else parameter.annotation


_PATH_WORD: Final = re.compile(r"\b(?:Pure(?:Posix|Windows)?Path|PosixPath|Path)\b")


def _is_path_annotation(annotation: object) -> bool:
    if isinstance(annotation, str):
        return _PATH_WORD.search(annotation) is not None
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_path_annotation(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_is_path_annotation(arg) for arg in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, pathlib.PurePath)


# -- patterns -------------------------------------------------------------------------------


#: A path pattern's segment: literal, a glob (case-sensitive, or case-ignoring), or ``None``
#: for ``**``.
_Segment: TypeAlias = "str | re.Pattern[str] | _FoldedGlob | None"


@attrs.frozen
class _Pattern:
    """One rule pattern, compiled for one subject kind."""

    source: str  # as written, with any IGNORE_CASE mark
    body: str  # without the mark
    ignore_case: bool
    literal: bool  # no wildcard: may name a subject containing control operators
    regex: re.Pattern[str] | None  # text and command kinds: the whole subject
    absolute: bool  # path kind
    segments: tuple[_Segment, ...]  # path kind
    base: int  # path kind: leading literal segments, which ".." may not climb out of
    anything: bool  # "*" or "**" alone: every well-formed subject
    # text and command kinds ignoring case, with a ? or [...]: the glob (else the regex is of
    # the folded pattern, for the folded subject)
    folded: _FoldedGlob | None = None


@functools.lru_cache(maxsize=4096)
def _compile(source: str, kind: SubjectKind, basename: bool = False) -> _Pattern:
    ignore_case = source.startswith(IGNORE_CASE)
    body = source[len(IGNORE_CASE) :] if ignore_case else source
    literal = _WILDCARDS.search(body) is None
    anything = body in ("*", "**")
    if kind != "path":
        text = _command_pattern(body, basename) if kind == "command" else body
        folded = None
        if not ignore_case:
            regex = re.compile(fnmatch.translate(text), re.DOTALL)
        else:  # by case folding, as a path segment (re.IGNORECASE does not take ß for ss)
            regex = re.compile(fnmatch.translate(text.casefold()), re.DOTALL)
            if "?" in text or "[" in text:  # one character as written: its folding may be longer
                folded = _FoldedGlob.of(text)
        return _Pattern(source, body, ignore_case, literal, regex, False, (), 0, anything, folded)
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
    return _Pattern(
        source, body, ignore_case, literal, None, absolute, tuple(segments), base, anything
    )


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


def _command_pattern(body: str, basename: bool) -> str:
    """A command pattern as commands are compared: a deny pattern's words joined by single
    spaces (argv[0] by basename), an allow or escalate pattern's by :data:`_WORD_BREAK`."""
    words = [w for w in re.split(r"[ \t]+", body) if w]
    if basename and words and "/" in words[0] and _WILDCARDS.search(words[0]) is None:
        words[0] = _basename(words[0])
    return (" " if basename else _WORD_BREAK).join(words)


# -- paths ----------------------------------------------------------------------------------


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


def _path_matches(path: _Path, pattern: _Pattern, *, deny: bool = False) -> bool:
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


# -- commands -------------------------------------------------------------------------------

_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")  # NAME=value, NAME+=value
#: What allow and escalate rules see between two words of a command (never in a command they
#: are compared with: NUL is refused), so that one word holding a space is not two words.
_WORD_BREAK: Final = "\x00"


class _Assignment(str):
    """A word the shell reads as an assignment: ``NAME=`` or ``NAME+=`` written bare (not
    quoted nor escaped: ``'A=/x/rm'`` is a program, a relative path)."""


def _shell_assignment(word: str) -> bool:
    return isinstance(word, _Assignment)


def _env_assignment(word: str) -> bool:
    """env (and sudo) read any word holding ``=`` as an assignment (``1=1``, ``a.b=1``),
    after ``--`` too."""
    return "=" in word


#: How a wrapper reads its arguments: the options that take a value (in the next word unless
#: attached; ``None``: not modelled, so every word after it may be the program), how many
#: positional arguments precede the program (options may follow each), and which words
#: before the program are assignments, if any.
_Wrapper: TypeAlias = tuple[frozenset[str] | None, int, Callable[[str], bool] | None]


def _wrapper(
    values: str | None = "", positional: int = 0, assignment: Callable[[str], bool] | None = None
) -> _Wrapper:
    return (None if values is None else frozenset(values.split()), positional, assignment)


#: env's options that take a value (a cluster of short options ends at one of them).
_ENV_VALUES: Final = frozenset(
    {"-a", "-u", "-C", "-S", "--argv0", "--unset", "--chdir", "--split-string"}
)
#: uv's options that take a value (uv run, and uv tool run as uvx).
_UV_VALUES: Final = (
    "-p -f -C -P --python --with --with-editable --with-requirements --directory --project"
    " --env-file --extra --group --only-group --no-group --index --index-url --extra-index-url"
    " --default-index --find-links --package --config-file --cache-dir --color --config-setting"
    " --upgrade-package --reinstall-package --refresh-package --no-binary-package"
    " --no-build-package --index-strategy --keyring-provider --resolution --prerelease"
    " --exclude-newer --link-mode --python-platform --allow-insecure-host"
)
_SETARCH_ALIASES: Final = ("linux32", "linux64", "uname26", "i386", "x86_64", "aarch64")
#: Commands that run another command given after their options (each is looked up by its
#: basename, case folded; see :func:`_program`). Options are listed as the programs' manuals
#: give them (coreutils, util-linux, procps, strace, sudo...); a wrapper whose options are
#: too many or too irregular to list is not modelled (``None``).
_WRAPPERS: Final[Mapping[str, _Wrapper]] = {
    # bash keywords: the simple command after them may start with NAME=value words
    "!": _wrapper(assignment=_shell_assignment),
    "coproc": _wrapper(assignment=_shell_assignment),
    "time": _wrapper("-f -o --format --output", assignment=_shell_assignment),
    # zsh's precommand modifiers and short loop, csh's repeat, fish's keywords
    "-": _wrapper(),
    "noglob": _wrapper(),
    "nocorrect": _wrapper(),
    "repeat": _wrapper("", 1),
    "not": _wrapper(assignment=_shell_assignment),
    "and": _wrapper(assignment=_shell_assignment),
    "or": _wrapper(assignment=_shell_assignment),
    "builtin": _wrapper(),
    "command": _wrapper(),
    "exec": _wrapper("-a"),
    "nohup": _wrapper(),
    "setsid": _wrapper(),
    "unbuffer": _wrapper(),
    "catchsegv": _wrapper(),
    "valgrind": _wrapper(),  # its options take values as --name=value only
    "busybox": _wrapper(),
    "toybox": _wrapper(),
    "nice": _wrapper("-n --adjustment"),
    "ionice": _wrapper("-c -n -p -P -u --class --classdata --pid --pgid --uid"),
    "stdbuf": _wrapper("-i -o -e --input --output --error"),
    "timeout": _wrapper("-s -k --signal --kill-after", 1),
    "chroot": _wrapper("--userspec --groups", 1),
    "runcon": _wrapper("-u -r -t -l --user --role --type --range", 1),
    "chrt": _wrapper("-T -P -D --sched-runtime --sched-period --sched-deadline", 1),
    "taskset": _wrapper("", 1),
    "setarch": _wrapper("", 1),
    **dict.fromkeys(_SETARCH_ALIASES, _wrapper()),
    "prlimit": _wrapper("-p -o --pid --output"),  # its limits take attached values only
    "choom": _wrapper("-n -p --adjust --pid"),
    "uclampset": _wrapper("-m -M -p --pid"),
    # -d/--differences takes an optional value, attached only
    "watch": _wrapper("-n -q -s --interval --equexit --shotsdir"),
    "doas": _wrapper("-u -C"),
    "env": (_ENV_VALUES, 0, _env_assignment),
    "sudo": _wrapper(
        "-a -c -u -g -C -D -h -p -r -t -U -T -R --auth-type --login-class --user --group"
        " --close-from --chdir --host --prompt --role --type --other-user --command-timeout"
        " --chroot",
        assignment=_env_assignment,
    ),
    "pkexec": _wrapper("--user"),
    "run0": _wrapper(
        "-u -g -D --user --group --chdir --unit --property --description --slice --nice"
        " --setenv --background --machine --shell-prompt-prefix --lightweight --area",
        assignment=_env_assignment,
    ),
    "runuser": _wrapper(
        "-u -g -G -s -w -c --user --group --supp-group --shell --command --session-command"
        " --whitelist-environment"
    ),
    "su": _wrapper(
        "-c -s -g -G -w --command --session-command --shell --group --supp-group"
        " --whitelist-environment"
    ),
    "setpriv": _wrapper(
        "--ruid --euid --rgid --egid --reuid --regid --groups --inh-caps --ambient-caps"
        " --bounding-set --securebits --pdeathsig --selinux-label --apparmor-profile"
        " --landlock-access --landlock-rule --seccomp-filter"
    ),
    # the namespace options take optional values, attached only
    "unshare": _wrapper(
        "-R -w -S -G --root --wd --setuid --setgid --map-user --map-group --map-users"
        " --map-groups --propagation --setgroups --monotonic --boottime"
    ),
    "nsenter": _wrapper("-t -S -G -W --target --setuid --setgid --wdns"),
    "flock": _wrapper("-w -E -c --wait --timeout --conflict-exit-code --command", 1),
    "strace": _wrapper(
        "-a -b -e -E -I -o -O -p -P -s -S -u -U -X --columns --detach-on --trace --trace-fds"
        " --signal --status --quiet --abbrev --verbose --raw --read --write --fault --inject"
        " --kvm --trace-path --output --env --interruptible --attach --string-limit --user"
        " --summary-sort-by --summary-columns --const-print-style --summary-syscall-overhead"
        " --argv0 --decode-pids --decode-fds"
    ),
    "ltrace": _wrapper(
        "-a -A -D -e -F -l -n -o -p -s -u -w -x --align --debug --config --library --indent"
        " --output --where"
    ),
    "xargs": _wrapper(
        "-I -L -n -P -s -d -E -a -J -R -S --arg-file --delimiter --max-args --max-procs"
        " --max-chars --process-slot-var"
    ),
    "fakeroot": _wrapper("-l -i -s -b --lib --faked --fd-base"),
    "ssh-agent": _wrapper("-a -E -O -P -t"),
    "dbus-run-session": _wrapper("--config-file --dbus-daemon"),
    "ld.so": _wrapper(
        "--library-path --inhibit-rpath --audit --preload --argv0 --glibc-hwcaps-prefix"
        " --glibc-hwcaps-mask"
    ),
    "proxychains": _wrapper("-f"),
    "proxychains4": _wrapper("-f"),
    "torsocks": _wrapper("-u -p -a -P --user --pass --address --port"),
    "caffeinate": _wrapper("-t -w"),
    "daemonize": _wrapper("-c -e -o -p -l -u -E"),
    # container entry points and process supervisors (gosu, su-exec, tini, dumb-init,
    # catatonit; runit's chpst and the daemontools/s6 chain-loaders)
    "gosu": _wrapper("", 1),
    "su-exec": _wrapper("", 1),
    "tini": _wrapper("-p -e"),
    "dumb-init": _wrapper("-r --rewrite"),
    "catatonit": _wrapper(),
    "chpst": _wrapper("-u -U -b -e -/ -C -n -l -L -m -d -o -p -f -c"),
    "softlimit": _wrapper("-m -a -d -s -l -f -c -o -p -t -r"),
    "pgrphack": _wrapper(),
    **dict.fromkeys(("setuidgid", "envuidgid", "envdir", "s6-setuidgid"), _wrapper("", 1)),
    "s6-envdir": _wrapper("-c", 1),
    "setlock": _wrapper("", 1),
    # project and environment runners: their global options, the subcommand ("run",
    # "exec", "develop"...), its options, then the program. The options listed are the ones
    # that take a value; one missed is caught as a misread (see _suspects).
    "uv": _wrapper(_UV_VALUES, 1),
    "uvx": _wrapper(_UV_VALUES + " --from"),
    "poetry": _wrapper("-C --directory -P --project", 1),
    "pipenv": _wrapper("--python", 1),
    "pdm": _wrapper("-p --project", 1),
    "hatch": _wrapper("-e --env", 1),
    "rye": _wrapper("", 1),
    "pixi": _wrapper("-e --environment --manifest-path", 1),
    "tox": _wrapper("-e -c -x --conf --root --workdir --override", 1),
    **dict.fromkeys(("conda", "mamba", "micromamba"), _wrapper("-n -p --name --prefix --cwd", 1)),
    "npx": _wrapper("-p -c --package --call"),
    "npm": _wrapper("-p -c -w --package --call --workspace --prefix", 1),
    "pnpm": _wrapper("-C -F --dir --filter", 1),
    "pnpx": _wrapper(),
    "yarn": _wrapper("--cwd", 1),
    "bun": _wrapper("--cwd", 1),
    "bunx": _wrapper("-p --package"),
    "bundle": _wrapper("--gemfile", 1),
    "nix": _wrapper("-I --include --option --override-input --extra-experimental-features", 1),
    "direnv": _wrapper("", 2),  # direnv exec DIR PROGRAM
    "dotenv": _wrapper("-f -q -e --file --quote --export", 1),
    # launchers: X and D-Bus sessions, MPI and Slurm, GPU offload, compiler caches
    "xvfb-run": _wrapper(
        "-n -e -f -p -s -w --server-num --error-file --auth-file --xauth-protocol --server-args"
        " --wait"
    ),
    "dbus-launch": _wrapper("--config-file --autolaunch"),
    **dict.fromkeys(
        ("mpirun", "mpiexec"),
        _wrapper(
            "-n -c -N -H -f -x -np -ppn -wdir -hosts -hostfile -machinefile -mca --host"
            " --hostfile --machinefile --map-by --rank-by --bind-to --wdir --mca"
        ),
    ),
    "srun": _wrapper(
        "-N -n -c -p -t -J -A -q -w -x -o -e -D -C --nodes --ntasks --cpus-per-task --partition"
        " --time --job-name --account --qos --nodelist --exclude --output --error --chdir --mem"
        " --gres --constraint"
    ),
    **dict.fromkeys(("prime-run", "optirun", "primusrun", "ccache", "distcc"), _wrapper()),
    # moreutils, LD_PRELOAD shims, throttles
    "chronic": _wrapper(),
    "ifne": _wrapper(),
    "eatmydata": _wrapper(),
    "nocache": _wrapper(),
    "torify": _wrapper(),
    "tsocks": _wrapper(),
    "faketime": _wrapper("-p --date-prog", 1),
    "trickle": _wrapper("-d -u -w -t -l -n"),
    "cpulimit": _wrapper("-l -p -e --limit --pid --exe"),
    "systemd-inhibit": _wrapper("--what --who --why --mode"),
    "entr": _wrapper(),
    **dict.fromkeys(
        (
            "perf",
            "ip",
            "bwrap",
            "firejail",
            "proot",
            "numactl",
            "cgexec",
            "systemd-run",
            "start-stop-daemon",
            "parallel",  # GNU parallel, and sem (parallel --semaphore)
            "sem",
            "gdb",  # gdb -ex run --args PROGRAM
            "lldb",
            "rr",
        ),
        _wrapper(None),
    ),
}
#: Programs that run a string as a command line: name → the short option that says so (its
#: value, or an operand, is the string; ``""``: every operand may be one).
_STRING_RUNNERS: Final[Mapping[str, str]] = {
    **dict.fromkeys(
        ("sh", "bash", "rbash", "dash", "zsh", "ksh", "ksh93", "mksh", "oksh", "ash", "yash"),
        "c",
    ),
    **dict.fromkeys(("posh", "fish", "csh", "tcsh", "su", "runuser", "flock", "script"), "c"),
    "compgen": "C",  # bash builtins: compgen runs the string now, complete when completing
    "complete": "C",
    "mapfile": "C",  # and mapfile (readarray) for every few lines it reads
    "readarray": "C",
    "emulate": "c",  # zsh: emulate sh -c STRING
    "npx": "c",  # npx -c STRING, npm exec -c STRING: run in a shell
    "npm": "c",
    "sg": "",  # sg GROUP [-c] STRING
}
#: Shells that quote otherwise than POSIX shells (a backslash is an escape inside fish's single
#: quotes, ``\\x6d`` is ``m`` outside them; it is no escape inside csh's double quotes): a
#: string of theirs holding a backslash is not read (the line is denied).
_OTHER_QUOTING: Final = frozenset({"fish", "csh", "tcsh"})
#: The dynamic loader run as a program (``/lib64/ld-linux-x86-64.so.2 PROGRAM``).
_LOADER: Final = re.compile(r"ld(?:64)?(?:-[\w.-]+)?\.so(?:\.[\d.]+)?")


class _Refused(Exception):
    """A command the policy will not analyse further (the message says why)."""


def _basename(word: str) -> str:
    """*word*'s basename; without a leading ``=`` (zsh runs ``=rm`` as rm's full path)."""
    if word[:1] == "=" and len(word) > 1:
        word = word[1:]
    return posixpath.basename(word.rstrip("/")) or word


def _unquoted_expansion(command: str) -> str | None:
    """The expansion a shell would apply outside quotes (pathname or tilde), if any.

    Only called on a line without ``$``, backticks or control operators, and that parsed.
    """
    quote = ""
    escaped = False
    word_start = True
    after_equals = False  # bash expands ~ after = or : in a word too (x=~/a, PATH=a:~/b)
    for c in command:
        if escaped:
            escaped, word_start = False, False
        elif quote == "'":
            quote = "" if c == "'" else quote
        elif quote == '"':
            if c == "\\":
                escaped = True
            elif c == '"':
                quote = ""
        elif c == "\\":
            escaped = True
        elif c in "'\"":
            quote, word_start = c, False
        elif c in " \t":
            word_start = True
        elif c in "*?[":
            return "an unquoted glob (pathname expansion)"
        elif c == "~" and (word_start or after_equals):
            return "a tilde expansion"
        else:
            word_start = False
            after_equals = c in "=:"
            continue
        after_equals = False
    return None


def _program(word: str) -> str:
    """How *word*, in a program's place, is looked up among wrappers and shells: by its
    basename, case folded (a case-insensitive file system runs ``ENV`` as ``env``)."""
    name = _basename(word).casefold()
    return "ld.so" if _LOADER.fullmatch(name) else name


#: shlex's blanks, and the characters :func:`_tokens` makes control operators of.
_BLANKS: Final = " \t\r\n"
_PUNCTUATION: Final = "();<>|&"


def _words(command: str) -> Iterator[tuple[str, int]]:
    """The words of *command* as :func:`_tokens` reads them (shlex's POSIX rules), each with
    how many of its first characters were written bare (not quoted, not escaped); and, for
    each newline outside quotes (which shlex reads as a blank, but ends a command as ``;``
    does), ``(";", -1)``."""
    i, n = 0, len(command)
    while i < n:
        if command[i] in _BLANKS:
            if command[i] == "\n":
                yield ";", -1
            i += 1
            continue
        if command[i] in _PUNCTUATION:
            start = i
            while i < n and command[i] in _PUNCTUATION:
                i += 1
            yield command[start:i], 0
            continue
        chars: list[str] = []
        bare: int | None = None  # set at the first quote or escape
        while i < n and command[i] not in _BLANKS and command[i] not in _PUNCTUATION:
            c = command[i]
            if bare is None and c in "'\"\\":
                bare = len(chars)
            if c == "'":
                end = command.index("'", i + 1)
                chars.append(command[i + 1 : end])
                i = end + 1
            elif c == '"':
                i += 1
                while command[i] != '"':
                    if command[i] == "\\" and command[i + 1] in '"\\':
                        i += 1
                    chars.append(command[i])
                    i += 1
                i += 1
            elif c == "\\":
                chars.append(command[i + 1])
                i += 2
            else:
                chars.append(c)
                i += 1
        word = "".join(chars)
        yield word, len(word) if bare is None else bare


def _tokens(command: str) -> list[str]:
    """The words of *command* (control operators apart), each shell assignment an
    :class:`_Assignment`."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
        words = list(_words(command))
    except (ValueError, IndexError) as exc:
        raise _Refused(f"cannot be parsed ({exc})") from None
    if [word for word, bare in words if bare >= 0] != tokens:  # pragma: no cover - alike
        raise _Refused("cannot be parsed (its quoting reads two ways)")
    return [
        _Assignment(word) if (m := _ASSIGNMENT.match(word)) and m.end() <= bare else word
        for word, bare in words
    ]


def _simple_commands(tokens: list[str]) -> Iterator[list[str]]:
    """*tokens* split at control operators (the tokens made only of ``();<>|&``)."""
    current: list[str] = []
    for token in tokens:
        if token and all(c in _PUNCTUATION for c in token):
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


#: Words after the ones a wrapper's options were read to span that deny rules also read as a
#: command, in case those options were misread (so is every word they spanned).
_SUSPECT_WORDS: Final = 8
#: A wrapper whose options span more words than this is not read (the line is denied): each
#: suspect is a copy of the rest of the line, and a line holds up to 64 KiB.
_MAX_SUSPECTS: Final = 128
#: A line whose analysis would parse more characters than this (the line, then each nested
#: string: ``eval``'s words, ``sh -c``'s string... are parsed again) is denied: at most four
#: times the work of the longest line, however the strings nest.
_MAX_PARSED: Final = 4 * _MAX_COMMAND
#: A line whose analysis would give deny rules more characters than this to read (each
#: program the line may run is read with the rest of its words: a copy) is denied: as many
#: as one wrapper's suspects in the longest line, however many wrappers there are.
_MAX_FORMS: Final = _MAX_SUSPECTS * _MAX_COMMAND


@attrs.define
class _Command:
    """What a command line runs: as written, and every command it would run."""

    #: each top-level simple command, its words joined by _WORD_BREAK, as written
    written: list[str] = attrs.field(factory=list)
    #: what deny rules see: every command (wrapped, nested, any program by its basename)
    denied_forms: list[str] = attrs.field(factory=list)
    #: a program-name position holds a glob (pathname expansion would choose the program)
    globbed: bool = False
    #: program-name positions and nested strings seen so far (bounded by _MAX_LAYERS)
    depth: int = 0
    #: characters parsed so far (bounded by _MAX_PARSED)
    parsed: int = 0
    #: characters of denied_forms so far (bounded by _MAX_FORMS)
    formed: int = 0

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > _MAX_LAYERS:
            raise _Refused("nests commands too deeply")

    def parse(self, text: str) -> None:
        """Count *text* as parsed."""
        self.parsed += len(text)
        if self.parsed > _MAX_PARSED:
            raise _Refused(
                "is too costly to analyse (it and the strings nested in it add up to more "
                f"than {_MAX_PARSED} characters)"
            )

    def deny_form(self, form: str) -> None:
        """Have deny rules read *form*."""
        self.formed += len(form)
        if self.formed > _MAX_FORMS:
            raise _Refused(
                "is too costly to analyse (the commands it may run add up to more than "
                f"{_MAX_FORMS} characters)"
            )
        self.denied_forms.append(form)


def _nested(command: str, result: _Command) -> None:
    """Have deny rules read *command*, a command line another runs (a ``sh -c`` string, an
    ``eval``, a variable's value...): one more layer of *result*."""
    result.deeper()
    _analyse(command, result, nested=True)


def _analyse(command: str, into: _Command | None = None, nested: bool = False) -> _Command:
    result = _Command() if into is None else into
    result.parse(command)
    for argv in _simple_commands(_tokens(command)):
        _analyse_words(argv, result)
        if not nested:
            result.written.append(_WORD_BREAK.join(argv))
    return result


#: No program name holds one: a line naming such a program is denied.
_CONTROL_CHARACTER: Final = re.compile(r"[\x00-\x1f\x7f]")


def _analyse_words(argv: list[str], result: _Command, *, guessed: bool = False) -> None:
    """Have deny rules see each program the simple command *argv* runs (*guessed*: its
    first word is only tried as one, see :func:`_each_word`)."""
    basenamed = list(argv)
    for start in _command_positions(argv, result):
        result.deeper()
        if _WILDCARDS.search(argv[start]):
            result.globbed = True
        # (env -S '\rm x' runs the program named carriage return, m)
        if _CONTROL_CHARACTER.search(argv[start]) and not (guessed and start == 0):
            raise _Refused(f"names a program with a control character: {_quote(argv[start])}")
        basenamed[start] = _basename(argv[start])
        result.deny_form(" ".join([basenamed[start], *argv[start + 1 :]]))
    result.deny_form(" ".join(basenamed))


def _command_positions(argv: list[str], result: _Command) -> Iterator[int]:
    """The index of each program *argv* runs (a wrapper's program, then its program's...)."""
    i = 0
    while i < len(argv) and _shell_assignment(argv[i]):
        _variable_command(argv[i], result)
        i += 1
    while i < len(argv):
        yield i
        name = _program(argv[i])
        if name == "git":  # git -c KEY=VALUE: git runs some values (aliases, pagers...)
            _git_config_commands(argv[i + 1 :], result)
            return
        if name == "eval":
            _nested(" ".join(argv[i + 1 :]), result)
            return
        if name == "trap":  # trap STRING SIGNAL...: the shell runs STRING later
            for word in argv[i + 1 :]:
                if word[:1] != "-":
                    _nested(word, result)
                    break
            return
        letter = _STRING_RUNNERS.get(name)
        if letter is not None:
            _command_strings(argv[i + 1 :], letter, result, name)
        wrapper = _WRAPPERS.get(name)
        if wrapper is None:
            return
        values, positional, assignment = wrapper
        first = i + 1
        if values is None:
            _each_word(argv, first, result)
            return
        i = first
        options = True  # until "--"
        while i < len(argv):
            word = argv[i]
            split = _split_string(argv, i) if options and name == "env" else None
            if split is not None:  # env -S STRING: its words are env's arguments again
                _suspects(argv, first, i + 1, result)
                value, rest = split
                result.deeper()
                result.parse(value)
                _analyse_words(["env", *_env_split(value), *rest], result)
                return
            if options and word == "--":
                options = False
                i += 1
            elif options and name == "env" and word == "-":  # a lone "-" is env's -i
                i += 1
            elif options and word.startswith("-") and len(word) > 1:
                i += _option_words(word, values)
            elif assignment is not None and assignment(word):
                _variable_command(word, result)
                i += 1
            elif positional:  # (setarch ARCH -R PROGRAM: options may follow)
                positional -= 1
                i += 1
            else:
                break
        _suspects(argv, first, i, result)
        if name == "watch":  # runs its words with sh -c, from where its options end (or,
            # were they misread, from another word near there that is not an option)
            for j in range(first, min(len(argv), i + _SUSPECT_WORDS)):
                if j == i or argv[j][:1] != "-":
                    _nested(" ".join(argv[j:]), result)


#: Variables whose value a program runs as a command line (pagers, editors, git's ssh and
#: askpass, less's preprocessor...): in ``NAME=value`` words, deny rules read the value too.
_COMMAND_VARIABLES: Final = frozenset(
    {
        "PAGER",
        "MANPAGER",
        "SYSTEMD_PAGER",
        "GIT_PAGER",
        "EDITOR",
        "VISUAL",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "GIT_EXTERNAL_DIFF",
        "LESSOPEN",
        "LESSCLOSE",
        "BROWSER",
    }
)
#: git's global options that take a value in the next word (``-c`` aside).
_GIT_VALUES: Final = frozenset(
    {"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
#: git configuration keys whose value git runs (compared case folded): by prefix (any
#: alias, ``pager.<command>``) or by the end of the key (``core.pager``, ``core.editor``,
#: ``core.sshCommand``, ``credential.helper``, ``diff.external``, ``gpg.program``,
#: ``diff.<driver>.textconv``, ``filter.<driver>.smudge``, ``mergetool.<tool>.cmd``,
#: ``sendemail.toCmd``, ``uploadpack.packObjectsHook``...).
_GIT_COMMAND_PREFIXES: Final = ("alias.", "pager.")
_GIT_COMMAND_SUFFIXES: Final = (
    "pager",
    "editor",
    "command",
    "cmd",
    "program",
    "helper",
    "external",
    "textconv",
    "driver",
    "clean",
    "smudge",
    "process",
    "askpass",
    "fsmonitor",
    "gitproxy",
    "difffilter",
    "hook",
    "pack",
    "smtpserver",
)


def _variable_command(word: str, result: _Command) -> None:
    """Have deny rules read the value of the assignment *word* as a command line if its
    variable is one a program runs (:data:`_COMMAND_VARIABLES`; ``LESSOPEN``'s leading
    ``|`` dropped)."""
    name, _, value = word.partition("=")
    if name.removesuffix("+") in _COMMAND_VARIABLES and value.strip("| "):
        _nested(value.lstrip("|"), result)


def _git_config_commands(words: list[str], result: _Command) -> None:
    """Have deny rules read the value of each ``-c KEY=VALUE`` among git's global options
    (before its subcommand) whose key holds a command git runs (an alias's ``!`` dropped;
    see :data:`_GIT_COMMAND_SUFFIXES`) as a command line."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" or (word.startswith("-c") and len(word) > 2):
            setting = words[i + 1] if word == "-c" and i + 1 < len(words) else word[2:]
            i += 2 if word == "-c" else 1
            key, _, value = setting.partition("=")
            key = key.casefold()
            runs = key.startswith(_GIT_COMMAND_PREFIXES) or key.endswith(_GIT_COMMAND_SUFFIXES)
            value = value.lstrip("!")
            if runs and value.strip():
                _nested(value, result)
        elif word in _GIT_VALUES:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return  # the subcommand


def _suspects(argv: list[str], first: int, program: int, result: _Command) -> None:
    """Have deny rules also read as a command each word from *first* (after a wrapper) to
    some words past *program* (where its options were read to end), but *program* itself:
    in case the options were misread. Every word they were read to span is one, however
    many: padding with options read right cannot push the real program out of reach."""
    stop = min(len(argv), program + _SUSPECT_WORDS)
    if stop - first > _MAX_SUSPECTS:
        raise _Refused(f"has a wrapper with more than {_MAX_SUSPECTS} words of options")
    for j in range(first, stop):
        if j != program:
            result.deny_form(" ".join([_basename(argv[j]), *argv[j + 1 :]]))


def _each_word(argv: list[str], first: int, result: _Command) -> None:
    """For a wrapper whose options are not modelled: analyse each word from *first* on (and
    the value of each ``--option=VALUE`` or ``-oVALUE``) as the program, run with the words
    after it. (Each costs a layer: a long line behind such a wrapper is denied.)"""
    if len(argv) - first > _MAX_SUSPECTS:
        raise _Refused(f"has a wrapper with more than {_MAX_SUSPECTS} words of arguments")
    for j in range(first, len(argv)):
        word = argv[j]
        if word[:2] == "--":
            word = word.partition("=")[2]
        elif word[:1] == "-":
            word = word[2:]
        if word:
            _analyse_words([str(word), *argv[j + 1 :]], result, guessed=True)  # (not NAME=)


def _command_strings(words: list[str], letter: str, result: _Command, name: str) -> None:
    """Analyse what a shell (or su, flock, compgen, sg...) *name* given *words* runs as a
    command line: a ``--command=STRING`` (``--session-command``, abbreviated too), a value
    attached to the option *letter* (``su -c'...'``), and, once that option (or
    ``--command``) is there, or for an empty *letter*, every operand: which one is the string
    depends on the options."""
    strings: list[str] = []
    every = not letter
    for word in words:
        value = _long_value(word, _COMMAND_OPTIONS)
        if value is not None:
            strings.append(value)
        elif _abbreviates(word, _COMMAND_OPTIONS):
            every = True
        elif letter and word[:1] == "-" and word[:2] != "--" and letter in word:
            every = True
            strings.append(word.partition(letter)[2])
    if every:
        strings.extend(word for word in words if word[:1] not in ("-", "+"))
    for string in strings:
        if string:
            if name in _OTHER_QUOTING and "\\" in string:
                raise _Refused(f"has a backslash in a {name} string (not quoted as sh quotes)")
            _nested(string, result)


#: The long options of a shell (or su) whose value is a command line.
_COMMAND_OPTIONS: Final = ("--command", "--session-command")


def _long_value(word: str, options: tuple[str, ...]) -> str | None:
    """The value of *word* if it is ``--OPTION=VALUE`` for one of *options* (abbreviated
    as getopt allows: a prefix of at least three characters), else ``None``."""
    if not word.startswith("--") or "=" not in word:
        return None
    option, value = word.split("=", 1)
    return value if _abbreviates(option, options) else None


def _abbreviates(option: str, options: Iterable[str]) -> bool:
    """Whether *option* (``--xyz``) names one of *options*, in full or abbreviated."""
    return len(option) >= 3 and any(full.startswith(option) for full in options)


def _split_string(argv: list[str], i: int) -> tuple[str, list[str]] | None:
    """``(string, the words after it)`` if ``argv[i]`` is env's ``-S``/``--split-string``
    (also ``-S`` inside a cluster of short options, ``-iS...``, or ``--split=...``)."""
    word = argv[i]
    nxt, after = (argv[i + 1] if i + 1 < len(argv) else ""), argv[i + 2 :]
    if word.startswith("--"):
        option = word.split("=", 1)[0]
        if not _abbreviates(option, ("--split-string",)):
            return None
        return (word.split("=", 1)[1], argv[i + 1 :]) if "=" in word else (nxt, after)
    if not word.startswith("-"):
        return None
    for k, letter in enumerate(word[1:], start=2):
        if letter == "S":
            return (word[k:], argv[i + 1 :]) if k < len(word) else (nxt, after)
        if f"-{letter}" in _ENV_VALUES:
            return None  # the rest of the word is that option's value
    return None


#: What ``env -S`` splits at, outside quotes.
_ENV_BLANKS: Final = " \t\n\v\f\r"
#: ``env -S``'s escapes: the character each stands for (``None``: ``\\_``, see
#: :func:`_env_split`).
_ENV_ESCAPES: Final[Mapping[str, str | None]] = {
    **{c: c for c in "\"#$'\\"},
    **{"f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "_": None},
}


def _env_split(string: str) -> list[str]:
    """The words ``env -S`` splits *string* into, by its own rules (GNU coreutils), which
    are not the shell's: outside quotes, blanks (``\\v``, ``\\f`` and ``\\r`` too) and
    ``\\_`` separate words, and a ``#`` starting a word, or ``\\c``, ends the string; in
    single quotes ``\\'`` and ``\\\\`` are escapes (so ``'a\\' b'`` is one word); elsewhere
    a backslash escapes ``" # $ ' \\`` and makes ``\\n`` a newline (which a shell given the
    word runs as a line break), ``\\t`` a tab... (``\\_`` a space in double quotes).

    Raises :class:`_Refused` where env would refuse the string, and for ``${NAME}``
    (expanded from the environment, unknown here).
    """
    words: list[list[str]] = []
    single = double = False
    separated = True  # the next character starts a word
    i, n = 0, len(string)
    while i < n:
        c = string[i]
        i += 1
        if (c == "'" and not double) or (c == '"' and not single):
            if c == "'":
                single = not single
            else:
                double = not double
            if separated:
                words.append([])
                separated = False
            continue
        if not (single or double) and c in _ENV_BLANKS:
            separated = True
            continue
        if c == "#" and separated:
            return ["".join(w) for w in words]
        if c == "\\" and (not single or string[i : i + 1] in ("\\", "'")):
            if i == n:
                raise _Refused("has an env -S string ending in a backslash")
            escape = string[i]
            i += 1
            if escape not in _ENV_ESCAPES and escape != "c":
                raise _Refused(f"has an env -S string with the invalid escape \\{escape}")
            if escape == "c":
                if double:
                    raise _Refused("has an env -S string with \\c in double quotes")
                return ["".join(w) for w in words]
            escaped = _ENV_ESCAPES[escape]
            if escaped is None and not double:
                separated = True
                continue
            c = " " if escaped is None else escaped
        elif c == "$" and not single:
            raise _Refused("has an env -S string that expands a variable")
        if separated:
            words.append([])
            separated = False
        words[-1].append(c)
    if single or double:
        raise _Refused("has an env -S string with an unbalanced quote")
    return ["".join(w) for w in words]


def _option_words(word: str, takes_value: frozenset[str]) -> int:
    """How many words the option *word* (and its value, if it takes one) spans; a long
    option may be abbreviated, as getopt allows."""
    if word.startswith("--"):
        if "=" in word:
            return 1
        return 2 if _abbreviates(word, [v for v in takes_value if v[:2] == "--"]) else 1
    for k, letter in enumerate(word[1:], start=2):
        if f"-{letter}" in takes_value:
            return 1 if k < len(word) else 2  # a value attached ("-uroot") or the next word
    return 1


@attrs.frozen(kw_only=True)
class PermissionPolicy:
    """Which tool calls may run.

    ``mode`` is ``"allow_all"`` (every call allowed), ``"deny_all"`` (every call denied) or
    ``"rules"``. In rules mode, :meth:`check` matches the call's *subject* (the tool's declared
    subject argument, else the tool name) against glob patterns, reading the subject by its
    kind (:func:`subject_kind_of`):

    ``"path"``
        Refused outright if empty, containing NUL, or a relative path whose ``..`` climbs
        above its start. Otherwise normalised with POSIX rules (repeated ``/``, ``.`` and
        trailing ``/`` dropped, ``..`` applied; symbolic links are *not* resolved) and
        matched segment by segment: ``*``, ``?`` and ``[...]`` stay within one segment,
        a ``**`` segment matches any number of segments (zero included). An absolute
        pattern matches absolute paths, a relative one relative paths, except that a
        relative *deny* pattern starting with ``**`` (``**/.ssh/**``) matches absolute paths
        too.
        An allow or escalate rule also requires that no ``..`` in the subject climbs back to
        or above the rule's literal base (``/data`` for ``/data/*``): ``/data/a/../b`` is
        under ``/data/*``, ``/data/../data/b`` is not. Deny rules match the normalised path.
    ``"command"``
        Tokenised with :mod:`shlex` (POSIX rules, ``punctuation_chars``) and compared word by
        word, a space or tab in a pattern standing for the break between two words (write
        patterns that way: ``"git status"``, ``"ls *"``). *Deny* rules see every program the
        line would run, each by its basename (``/bin/rm`` is ``rm``): leading ``NAME=value``
        (and ``NAME+=value``) words written bare are skipped (a quoted ``'A=/x/rm'`` is a
        program), the wrappers the analysis knows (``command``, ``env``, ``sudo``, ``nice``,
        ``nohup``, ``time``, ``timeout N``, ``xargs``, ``exec``, ``stdbuf``, ``setarch``,
        ``unshare``, ``strace``, ``fakeroot``, the dynamic loader...: the table ``_WRAPPERS``
        in this module) unwrapped with their options (read as getopt reads them: clusters,
        abbreviated long options; for a few whose options are not listed, ``perf``, ``ip``,
        ``bwrap``, ``systemd-run``, GNU ``parallel``, ``gdb``..., every later word is tried
        as the program; container entry points and supervisors too: ``gosu``, ``tini``,
        ``chpst``..., and project runners: ``uv run``, ``poetry run``, ``npx``, ``npm exec``
        (and its ``-c`` string), ``nix develop -c``...), the commands held in
        ``NAME=value`` words for variables programs run (``PAGER``, ``GIT_PAGER``,
        ``EDITOR``, ``GIT_SSH_COMMAND``, ``LESSOPEN``...) and in ``git -c KEY=VALUE`` for
        keys git runs (aliases, ``core.pager``, ``core.sshCommand``, ``credential.helper``,
        drivers and filters...), other
        shells' keywords that run the words after them (zsh's ``noglob``, ``nocorrect``,
        ``-`` and ``repeat N``, fish's ``not``, ``and``, ``or``) and zsh's ``=rm`` (rm's
        full path) read through, ``sh -c``, ``su -c``/``--command``, ``sg``, ``script -c``,
        ``compgen -C``, ``mapfile -C``, zsh's ``emulate -c``, ``eval``, ``trap`` and
        ``watch`` strings parsed in turn (a newline ends a command, as ``;`` does; a fish or
        csh string holding a backslash, quoted otherwise, is not read: denied), ``env -S``
        strings split as env splits them, and, in case a wrapper's options were
        misread, every word they were read to span (and a few after) is tried as a program
        too: ``"rm *"`` denies ``sudo -u root /bin/rm -rf /``. Wrapper and shell names are
        compared case folded (a case-insensitive file system runs ``ENV`` as ``env``).
        *Allow* and *escalate* rules must match the whole line as written, wrappers,
        assignments and program paths included: ``"ls *"`` admits neither ``sudo ls``, nor
        ``/tmp/x/ls``, nor ``'ls /x' y`` (one word holding a space). A line containing any of
        ``; & | ` $ < > ( ) { }``, a newline, ``\\r`` or NUL, a glob where a program name
        goes, or an unquoted ``*``, ``?``, ``[`` or a ``~`` at a word's start or after ``=``
        or ``:`` (pathname and tilde expansion), that no deny rule matched, is denied
        unless an allow rule *without wildcards* names the whole string exactly. A line that
        cannot be parsed (an unbalanced quote), is empty, nests more than 32 programs, is
        longer than 64 KiB, or is too costly to analyse (the line and the strings nested in
        it add up to more than 256 Ki characters, or the commands it may run, each read with
        the rest of its words, to more than 8 Mi) is denied.
    ``"text"``
        A glob over the whole string (:func:`fnmatch.translate`: ``*`` matches anything). As
        for commands, a subject containing a shell control operator (:data:`SHELL_CONTROL`)
        is denied unless an allow rule without wildcards names it exactly.

    The pattern ``"*"`` (or ``"**"``) alone matches every well-formed subject of any kind.
    Matching is case-sensitive; a pattern marked with :data:`IGNORE_CASE` (see
    :func:`ignoring_case`) matches ignoring case (Unicode case folding: ``ſ`` is ``s``). A
    path pattern then matches exactly the subjects whose case folding (:meth:`str.casefold`:
    ``ß`` is ``ss``) its folding matches, ``?`` and ``[...]`` each standing for one character
    of the subject as written, whose folding may be longer: ``(?i)/x/stra?e`` matches
    ``/x/straße``, so ``/x/STRASSE`` and ``/x/strasse`` too, which fold alike; ``[...]``
    compares ignoring case (``[!...]``: it does not match).
    Tool names in rules are compared exactly with the registered name.

    The order: ``deny`` rules, then ``allow`` rules, then ``escalate`` rules; within each,
    the tool's own patterns before those under ``"*"`` (every tool). The first match decides;
    nothing matched: denied. ``escalate`` asks :attr:`on_escalate` (see :meth:`decide`). The
    handler is not part of the policy's value: it is left out of equality and of
    :meth:`to_dict`.

    The policy matches strings; it does not sandbox. See the security section of the
    governance guide for what it does and does not promise.
    """

    mode: PermissionMode = attrs.field(default="allow_all", converter=_mode)
    allow: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    deny: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    escalate: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    on_escalate: EscalationHandler | None = attrs.field(default=None, eq=False, hash=False)
    #: Decisions of :meth:`check` by ``(tool name, subject, kind)``: a pure function of the
    #: rules, which a policy cannot change. Not part of the policy's value.
    _decided: dict[tuple[str, str, SubjectKind | None], PermissionDecision] = attrs.field(
        init=False, factory=dict, eq=False, hash=False, repr=False
    )

    # -- presets ------------------------------------------------------------------------------

    @classmethod
    def allow_all(cls) -> PermissionPolicy:
        """Every call allowed."""
        return cls(mode="allow_all")

    @classmethod
    def deny_all(cls) -> PermissionPolicy:
        """Every call denied."""
        return cls(mode="deny_all")

    @classmethod
    def read_only(cls) -> PermissionPolicy:
        """Tools named ``reader``, ``search`` or ``context`` allowed; everything else denied.

        The names are the conventional ones of the reference implementation's built-in tools;
        build your own rules for tools named otherwise.
        """
        return cls(
            mode="rules",
            allow={"reader": ["*"], "search": ["*"], "context": ["*"]},
            deny={"editor": ["*"], "bash": ["*"]},
        )

    @classmethod
    def safe(cls) -> PermissionPolicy:
        """Reading, searching and editing allowed; ``bash`` asks first, and never runs
        ``rm``, ``sudo``, ``chmod``, ``kill`` or ``mkfs`` (in any case, by any path, behind
        the wrappers and shells the analysis knows: see :class:`PermissionPolicy`), nor
        anything with a shell control operator or expansion. Other tools are denied. A
        program that runs another in a way the analysis does not know (``find -exec``,
        ``python -c``...) is only escalated: approve with care.

        The ``bash`` tool's subject must be read as a command (a subject parameter named
        ``command`` or ``cmd``, a tool named ``bash``, or ``subject_kind="command"``).
        """
        return cls(
            mode="rules",
            allow={"reader": ["*"], "editor": ["*"], "search": ["*"], "context": ["*"]},
            deny={"bash": list(_SAFE_DENIED)},
            escalate={"bash": ["*"]},
        )

    # -- records ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"mode", "allow", "deny", "escalate"}`` as JSON data; the handler is left out."""
        from lionexec._unstructure import converter

        data: dict[str, Any] = converter.unstructure(self)
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, on_escalate: EscalationHandler | None = None
    ) -> PermissionPolicy:
        """The policy *data* describes (as written by :meth:`to_dict`); missing keys default.

        Unknown keys are refused with :class:`~lionexec.errors.ConfigurationError`.
        """
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"a policy record is a mapping, not {data!r}")
        unknown = set(data) - {"mode", "allow", "deny", "escalate"}
        if unknown:
            raise ConfigurationError(f"unknown permission policy keys: {sorted(unknown)}")
        return cls(
            mode=data.get("mode", "allow_all"),
            allow=data.get("allow"),
            deny=data.get("deny"),
            escalate=data.get("escalate"),
            on_escalate=on_escalate,
        )

    # -- deciding -----------------------------------------------------------------------------

    def check(
        self,
        tool_name: str,
        action: str,
        args: Mapping[str, Any],
        *,
        kind: SubjectKind | None = None,
    ) -> PermissionDecision:
        """Decide about calling *tool_name* on the subject *action*; never asks anyone.

        *kind* is how to read *action*; by default ``"command"`` for a tool named ``bash``,
        ``sh``, ``shell`` or ``zsh`` and ``"text"`` otherwise (:meth:`decide` passes the
        tool's kind, :func:`subject_kind_of`). *args* (the call's arguments) are not
        consulted by these rules; they are passed so a subclass can.

        The rules are fixed, so a decision depends on nothing else: one made before for the
        same tool, subject (of at most 1,024 characters) and *kind* is returned again. Up to
        1,024 of them are kept; past that the store starts over (at most a few megabytes).
        """
        if (
            type(action) is not str
            or type(tool_name) is not str
            or len(action) > _CACHED_SUBJECT
            or kind not in _CHECKED_KINDS
        ):  # not kept (a bad kind is refused by _check)
            return self._check(tool_name, action, kind)
        decided = self._decided
        key = (tool_name, action, kind)
        decision = decided.get(key)
        if decision is None:
            decision = self._check(tool_name, action, kind)
            if len(decided) >= _DECISIONS_KEPT:
                decided.clear()
            decided[key] = decision
        return decision

    def _check(self, tool_name: str, action: str, kind: SubjectKind | None) -> PermissionDecision:
        """:meth:`check`, decided now."""
        if self.mode == "allow_all":
            return PermissionDecision("allow", tool_name, action, "mode allow_all allows all")
        if self.mode == "deny_all":
            return PermissionDecision("deny", tool_name, action, "mode deny_all denies all")
        if kind is None:
            kind = _kind_for_name(tool_name)
        elif kind not in ("path", "command", "text"):
            raise ValueError(f"kind must be 'path', 'command' or 'text', not {kind!r}")
        if not isinstance(action, str):
            return self._deny(tool_name, "", f"subject {_quote(action)} is not a string")
        if kind == "path":
            return self._check_path(tool_name, action)
        if kind == "command":
            return self._check_command(tool_name, action)
        return self._check_text(tool_name, action)

    def _patterns(
        self, behavior: Behavior, tool_name: str, kind: SubjectKind
    ) -> Iterator[tuple[str, _Pattern]]:
        """The rules of *behavior* that apply to *tool_name*: its own, then ``"*"``'s."""
        rules = {"allow": self.allow, "deny": self.deny, "escalate": self.escalate}[behavior]
        for key in (tool_name, "*") if tool_name != "*" else ("*",):
            for source in rules.get(key, ()):
                yield key, _compile(source, kind, behavior == "deny")

    @staticmethod
    def _decision(
        behavior: Behavior, tool_name: str, action: str, key: str, pattern: _Pattern
    ) -> PermissionDecision:
        verb = {"allow": "allowed", "deny": "denied", "escalate": "escalated"}[behavior]
        reason = f"{verb} by rule {pattern.source!r} for {key!r}"
        return PermissionDecision(behavior, tool_name, action, reason, pattern.source)

    @staticmethod
    def _deny(tool_name: str, action: str, reason: str) -> PermissionDecision:
        return PermissionDecision("deny", tool_name, action, reason)

    def _by_default(self, tool_name: str, action: str) -> PermissionDecision:
        return self._deny(tool_name, action, "no rule matched; denied by default")

    def _check_text(self, tool_name: str, action: str) -> PermissionDecision:
        subject = _Subject(action)
        for key, pattern in self._patterns("deny", tool_name, "text"):
            if pattern.anything or _fullmatch(pattern, subject):
                return self._decision("deny", tool_name, action, key, pattern)
        if SHELL_CONTROL.search(action):
            return self._operators(tool_name, action, "a shell control operator")
        for behavior in _ADMITTING:
            for key, pattern in self._patterns(behavior, tool_name, "text"):
                if pattern.anything or _fullmatch(pattern, subject):
                    return self._decision(behavior, tool_name, action, key, pattern)
        return self._by_default(tool_name, action)

    def _operators(self, tool_name: str, action: str, what: str) -> PermissionDecision:
        """Allowed only by an allow rule without wildcards naming *action* exactly."""
        for key, pattern in self._patterns("allow", tool_name, "text"):
            if pattern.literal and (
                pattern.body == action
                or (pattern.ignore_case and pattern.body.casefold() == action.casefold())
            ):
                return self._decision("allow", tool_name, action, key, pattern)
        reason = (
            f"subject {_quote(action)} contains {what} and no allow rule without wildcards "
            "names it"
        )
        return self._deny(tool_name, action, reason)

    def _check_command(self, tool_name: str, action: str) -> PermissionDecision:
        if not action.strip(" \t"):
            return self._deny(tool_name, action, "command is empty")
        if len(action) > _MAX_COMMAND:
            return self._deny(
                tool_name, action, f"command is longer than {_MAX_COMMAND} characters"
            )
        try:
            command: _Command | None = _analyse(action)
            problem = None
        except _Refused as exc:
            command, problem = None, str(exc)
        forms = [action] if command is None else [action, *command.denied_forms]
        candidates = [_Subject(form) for form in forms]
        for key, pattern in self._patterns("deny", tool_name, "command"):
            if pattern.anything or any(_fullmatch(pattern, c) for c in candidates):
                return self._decision("deny", tool_name, action, key, pattern)
        if command is None:
            return self._deny(tool_name, action, f"command {_quote(action)} {problem}")
        if _COMMAND_CONTROL.search(action):
            return self._operators(
                tool_name, action, "a shell control operator, expansion or substitution"
            )
        if command.globbed:
            return self._operators(tool_name, action, "a glob in place of a program name")
        expansion = _unquoted_expansion(action)
        if expansion is not None:
            return self._operators(tool_name, action, expansion)
        if len(command.written) != 1:  # pragma: no cover - only operators and newlines split one
            return self._deny(tool_name, action, f"command {_quote(action)} is not one command")
        [full] = command.written
        written = _Subject(full)
        for behavior in _ADMITTING:
            for key, pattern in self._patterns(behavior, tool_name, "command"):
                if pattern.anything or _fullmatch(pattern, written):
                    return self._decision(behavior, tool_name, action, key, pattern)
        return self._by_default(tool_name, action)

    def _check_path(self, tool_name: str, action: str) -> PermissionDecision:
        path = _parse_path(action)
        if isinstance(path, str):
            return self._deny(tool_name, action, f"path {_quote(action)} {path}")
        for key, pattern in self._patterns("deny", tool_name, "path"):
            if _path_matches(path, pattern, deny=True):
                return self._decision("deny", tool_name, action, key, pattern)
        climbed: _Pattern | None = None
        for behavior in _ADMITTING:
            for key, pattern in self._patterns(behavior, tool_name, "path"):
                if _path_matches(path, pattern):
                    if path.lowest <= pattern.base:
                        climbed = climbed or pattern
                        continue
                    return self._decision(behavior, tool_name, action, key, pattern)
        if climbed is not None:
            reason = (
                f"path {_quote(action)} climbs out of the base of rule {climbed.source!r} "
                "with '..'"
            )
            return self._deny(tool_name, action, reason)
        return self._by_default(tool_name, action)

    async def decide(self, ctx: CallContext) -> PermissionDecision:
        """The final decision for the call *ctx*: ``allow`` or ``deny``, never ``escalate``.

        The subject is ``ctx.arguments[tool.subject]`` when the tool declares a subject
        argument (read by :func:`subject_kind_of`), else the tool name (read as text). A
        :class:`pathlib.PurePath` value is read as its POSIX string. In rules mode, a declared
        subject that is missing or neither a string nor a path is denied. An ``escalate`` is
        settled by :attr:`on_escalate`: a result that ``is True`` allows; an
        :class:`AwaitingApproval` returns the ``escalate`` decision with
        :attr:`~PermissionDecision.approval` set (the call waits for a durable approval: the
        only ``escalate`` this returns); anything else, no handler, or a handler that raises
        an :class:`Exception` denies (the reason says which).

        Always a checkpoint (it yields to trio once before deciding). Cancellation
        propagates.
        """
        await trio.lowlevel.checkpoint()
        return await self._decide(ctx)

    async def _decide(self, ctx: CallContext) -> PermissionDecision:
        """:meth:`decide` without its own checkpoint (for the act transaction, which yields once
        per call; see ``HookBus._run_pre``)."""
        subject_argument = ctx.subject_argument
        kind: SubjectKind = "text"
        if subject_argument is None:
            action = ctx.function
        else:
            kind = subject_kind_of(ctx.tool)
            value = ctx.arguments.get(subject_argument)
            if isinstance(value, pathlib.PurePath):
                value = value.as_posix()
            if not isinstance(value, str):
                if self.mode == "rules":
                    problem = "is missing" if value is None else "is not a string or a path"
                    reason = f"subject argument {subject_argument!r} {problem}"
                    return PermissionDecision("deny", ctx.function, "", reason)
                value = "" if value is None else repr(value)
            action = value
        decision = self.check(ctx.function, action, ctx.arguments, kind=kind)
        if decision.behavior != "escalate":
            return decision
        return await self._escalate(decision, ctx)

    async def _escalate(
        self, decision: PermissionDecision, ctx: CallContext
    ) -> PermissionDecision:
        handler = self.on_escalate
        if handler is None:
            reason = f"{decision.reason}; no escalation handler is configured"
            return attrs.evolve(decision, behavior="deny", reason=reason)
        try:
            verdict = await call_user(handler, decision, ctx)
        except Exception as exc:
            reason = (
                f"{decision.reason}; the escalation handler raised {type(exc).__name__}: {exc}"
            )
            return attrs.evolve(decision, behavior="deny", reason=reason)
        if verdict is True:
            return attrs.evolve(decision, behavior="allow", reason=f"{decision.reason}; approved")
        if isinstance(verdict, AwaitingApproval):
            reason = f"{decision.reason}; awaiting approval {verdict.approval_id}"
            return attrs.evolve(decision, reason=reason, approval=verdict)
        reason = f"{decision.reason}; the escalation handler declined ({verdict!r})"
        return attrs.evolve(decision, behavior="deny", reason=reason)


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


def _fullmatch(pattern: _Pattern, subject: _Subject) -> bool:
    if pattern.folded is not None:
        return pattern.folded.fullmatch(subject.folded)
    assert pattern.regex is not None
    text = subject.folded if pattern.ignore_case else subject.text
    return pattern.regex.match(text) is not None


_ADMITTING: Final[tuple[Behavior, ...]] = ("allow", "escalate")

#: What :meth:`PermissionPolicy.safe` never lets ``bash`` run, in any case (a case-insensitive
#: file system runs ``RM`` as ``rm``).
_SAFE_DENIED: Final = tuple(
    ignoring_case(p)
    for p in ("rm", "rm *", "sudo", "sudo *", "chmod", "chmod *", "kill", "kill *", "mkfs",
              "mkfs *", "mkfs.*")
)  # fmt: skip
