"""The ``"command"`` subject kind: a shell command line, tokenised as :mod:`shlex` reads it
(POSIX rules) and analysed so that deny rules see every program the line would run (through
the wrappers, shells and command strings the tables of :mod:`._programs` list), while allow
and escalate rules match the line as written. See
:class:`~lionexec.governance.PermissionPolicy` for the rules this implements.

The analysis gives deny rules hints, never confinement, and runs on the trio thread: its
work is bounded (steps, characters parsed, characters given to deny rules; see
:class:`_Command`), and a line over a bound is refused, which denies it.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

import attrs

from ._glob import _fullmatch, _Subject, _whole_pattern, _WholePattern
from ._programs import (
    _COMMAND_OPTIONS,
    _COMMAND_VARIABLES,
    _ENV_BLANKS,
    _ENV_ESCAPES,
    _ENV_VALUES,
    _GIT_COMMAND_PREFIXES,
    _GIT_COMMAND_SUFFIXES,
    _GIT_VALUES,
    _LOADER,
    _OTHER_QUOTING,
    _STRING_RUNNERS,
    _WRAPPERS,
    _Assignments,
)
from .base import _WILDCARDS, Objection, ReadSubject, _quote, _Refusal, _unmarked

#: In a command, every ``$``, parenthesis and brace is refused too (any expansion,
#: substitution, subshell or brace expansion).
_COMMAND_CONTROL: Final = re.compile(r"[;&|`<>\n\r\x00$(){}]")
#: The longest command subject the policy analyses; a longer one is denied.
_MAX_COMMAND: Final = 65_536
#: How deeply wrappers and ``sh -c`` / ``eval`` strings are followed before giving up (deny).
_MAX_LAYERS: Final = 32

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


#: How each kind of assignment a wrapper takes (see :data:`._programs._WRAPPERS`) is told.
_ASSIGNMENT_READERS: Final[Mapping[_Assignments, Callable[[str], bool]]] = {
    "shell": _shell_assignment,
    "env": _env_assignment,
}


def _command_pattern(body: str, basename: bool) -> str:
    """A command pattern as commands are compared: a deny pattern's words joined by single
    spaces (argv[0] by basename), an allow or escalate pattern's by :data:`_WORD_BREAK`."""
    words = [w for w in re.split(r"[ \t]+", body) if w]
    if basename and words and "/" in words[0] and _WILDCARDS.search(words[0]) is None:
        words[0] = _basename(words[0])
    return (" " if basename else _WORD_BREAK).join(words)


@functools.lru_cache(maxsize=4096)
def _compile(source: str, basename: bool) -> _WholePattern:
    """The rule pattern *source* for command subjects: for a deny rule (*basename*) or an
    allow or escalate rule."""
    body, ignore_case = _unmarked(source)
    return _whole_pattern(source, body, ignore_case, _command_pattern(body, basename))


class _Refused(Exception):
    """A command the policy will not analyse further (the message says why)."""


def _basename(word: str) -> str:
    """*word*'s basename; without a leading ``=`` (zsh runs ``=rm`` as rm's full path)."""
    if word[:1] == "=" and len(word) > 1:
        word = word[1:]
    return posixpath.basename(word.rstrip("/")) or word


#: What a shell does not expand in a line: a quoted string or an escaped character.
_QUOTED: Final = re.compile(r"""'[^']*+'|"(?:[^"\\]++|\\.)*+"|\\.""", re.DOTALL)
#: An expansion a shell applies outside quotes: a glob character, or a tilde starting a word
#: (or after ``=`` or ``:`` in one: bash expands ``x=~/a`` and ``PATH=a:~/b`` too).
_EXPANSION: Final = re.compile(r"[*?\[]|(?:^|(?<=[ \t=:]))~")


def _unquoted_expansion(command: str) -> str | None:
    """The expansion a shell would apply outside quotes (pathname or tilde), if any.

    Only called on a line without ``$``, backticks or control operators, and that parsed.
    Each quoted string and escaped character is read as one plain character (``x``), so
    what remains is what the shell expands; two regular expression passes, linear.
    """
    found = _EXPANSION.search(_QUOTED.sub("x", command))
    if found is None:
        return None
    if found.group() == "~":
        return "a tilde expansion"
    return "an unquoted glob (pathname expansion)"


def _program(word: str) -> str:
    """How *word*, in a program's place, is looked up among wrappers and shells: by its
    basename, case folded (a case-insensitive file system runs ``ENV`` as ``env``)."""
    name = _basename(word).casefold()
    return "ld.so" if _LOADER.fullmatch(name) else name


#: shlex's blanks, and the characters :func:`_tokens` makes control operators of.
_BLANKS: Final = " \t\r\n"
_PUNCTUATION: Final = "();<>|&"
#: One token of a command line as shlex reads it (POSIX rules, ``punctuation_chars``,
#: ``whitespace_split``, no comments), after any blanks: a newline, a run of control-operator
#: characters or a word, made of bare runs, single-quoted strings, double-quoted strings (where a
#: backslash escapes only ``"`` and ``\\``) and backslash escapes. Possessive quantifiers:
#: each character is read once, so a line is tokenised in linear time, by the regular
#: expression engine rather than character by character in Python.
_TOKEN: Final = re.compile(
    r"""[ \t\r]*+(?:(?P<newline>\n)"""
    r"""|(?P<punct>[();<>|&]++)"""
    r"""|(?P<bare>[^ \t\r\n();<>|&'"\\]++)?+"""
    r"""(?P<rest>(?:[^ \t\r\n();<>|&'"\\]++|'[^']*+'|"(?:[^"\\]++|\\.)*+"|\\.)++)?+)""",
    re.DOTALL,
)
#: One piece of a word that is not bare (see :data:`_TOKEN`), to decode it.
_PIECE: Final = re.compile(r"""([^'"\\]++)|'([^']*+)'|"((?:[^"\\]++|\\.)*+)"|\\(.)""", re.DOTALL)
_DOUBLE_QUOTED_ESCAPE: Final = re.compile(r'\\(["\\])')


def _decode(written: str) -> str:
    """The word *written* (quoted or escaped somewhere) as shlex reads it."""
    out: list[str] = []
    for bare, single, double, escaped in _PIECE.findall(written):
        if double:
            out.append(_DOUBLE_QUOTED_ESCAPE.sub(r"\1", double))
        else:
            out.append(bare or single or escaped)
    return "".join(out)


def _words(command: str, result: _Command) -> Iterator[tuple[str, int]]:
    """The words of *command* as shlex reads them (POSIX rules), each with how many of its
    first characters were written bare (not quoted, not escaped), and the control operators
    (``(token, 0)``); for each newline outside quotes (which shlex reads as a blank, but
    ends a command as ``;`` does), ``(";", -1)``. Each token counts as a step of *result*.

    Raises :class:`_Refused` for an unbalanced quote or a trailing backslash.
    """
    i, n = 0, len(command)
    match = _TOKEN.match
    while i < n:
        m = match(command, i)  # (blanks, then one token or nothing)
        assert m is not None  # (every part of the pattern is optional)
        end = m.end()
        newline, punct, bare, rest = m.group("newline", "punct", "bare", "rest")
        if newline is None and punct is None and bare is None and rest is None:
            if end == n:  # trailing blanks
                return
            what = "No escaped character" if command[end] == "\\" else "No closing quotation"
            raise _Refused(f"cannot be parsed ({what})")
        i = end
        result.step()
        if newline is not None:
            yield ";", -1
        elif punct is not None:
            yield punct, 0
        elif rest is None:
            yield bare, len(bare)
        else:
            bare = bare or ""
            yield bare + _decode(rest), len(bare)


def _tokens(command: str, result: _Command) -> list[str]:
    """The words of *command* (control operators apart), each shell assignment an
    :class:`_Assignment`."""
    return [
        _Assignment(word) if (m := _ASSIGNMENT.match(word)) and m.end() <= bare else word
        for word, bare in _words(command, result)
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
#: program the line may run is read with the rest of its words: a copy) is denied: eight
#: times the longest line, so that every deny rule reads a bounded multiple of the line.
_MAX_FORMS: Final = 16 * _MAX_COMMAND
#: A line whose analysis would take more steps than this (a step is a token read, or a word
#: a wrapper's options are read over: the line, then each nested string, each in Python) is
#: denied: this bounds one check at a few milliseconds of the trio thread.
_MAX_STEPS: Final = 4_096


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
    #: tokens read and words visited so far (bounded by _MAX_STEPS)
    steps: int = 0
    #: (id of an argv, index) of each program form given to deny rules so far, and those argvs
    forms_seen: set[tuple[int, int]] = attrs.field(factory=set)
    argvs: list[list[str]] = attrs.field(factory=list)

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > _MAX_LAYERS:
            raise _Refused("nests commands too deeply")

    def step(self, count: int = 1) -> None:
        """Count *count* steps of the analysis (tokens read, words visited)."""
        self.steps += count
        if self.steps > _MAX_STEPS:
            raise _Refused(
                f"is too costly to analyse (over {_MAX_STEPS} words and operators, "
                "counting the strings nested in it)"
            )

    def parse(self, text: str) -> None:
        """Count *text* as parsed."""
        self.parsed += len(text)
        if self.parsed > _MAX_PARSED:
            raise _Refused(
                "is too costly to analyse (it and the strings nested in it add up to more "
                f"than {_MAX_PARSED} characters)"
            )

    def program_form(self, argv: list[str], start: int) -> None:
        """Have deny rules read ``argv[start]`` (by its basename) run with the words after
        it, once: a wrapper's suspects and the programs found after its options are often
        the same words, and each form is a copy of the rest of the line."""
        key = (id(argv), start)
        if key in self.forms_seen:
            return
        self.forms_seen.add(key)
        self.argvs.append(argv)  # (alive until the analysis ends: its id stays its own)
        self.deny_form(" ".join([_basename(argv[start]), *argv[start + 1 :]]))

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
    for argv in _simple_commands(_tokens(command, result)):
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
        result.program_form(argv, start)
    if basenamed != argv or (id(argv), 0) not in result.forms_seen:  # (else that same form)
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
            words = argv[i + 1 :]
            if words[:1] == ["--"]:  # eval takes "--" as the end of its (no) options
                words = words[1:]
            _nested(" ".join(words), result)
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
        values, positional, assigns = wrapper
        assignment = None if assigns is None else _ASSIGNMENT_READERS[assigns]
        first = i + 1
        if values is None:
            _each_word(argv, first, result)
            return
        i = first
        options = True  # until "--"
        while i < len(argv):
            result.step()
            word = argv[i]
            split = _split_string(argv, i) if options and name == "env" else None
            if split is not None:  # env -S STRING: its words are env's arguments again
                _suspects(argv, first, i + 1, result)
                value, rest = split
                result.deeper()
                result.parse(value)
                _analyse_words(["env", *_env_split(value), *argv[rest:]], result)
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
        result.step()
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
            result.program_form(argv, j)


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
    result.step(len(words))
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


def _split_string(argv: list[str], i: int) -> tuple[str, int] | None:
    """``(string, the index of the words after it)`` if ``argv[i]`` is env's
    ``-S``/``--split-string`` (also ``-S`` inside a cluster of short options, ``-iS...``, or
    ``--split=...``). (Indexes, not copies: this is asked of each of env's words.)"""
    word = argv[i]
    if word.startswith("--"):
        option = word.split("=", 1)[0]
        if not _abbreviates(option, ("--split-string",)):
            return None
        if "=" in word:
            return word.split("=", 1)[1], i + 1
        return (argv[i + 1] if i + 1 < len(argv) else ""), i + 2
    if not word.startswith("-"):
        return None
    for k, letter in enumerate(word[1:], start=2):
        if letter == "S":
            if k < len(word):
                return word[k:], i + 1
            return (argv[i + 1] if i + 1 < len(argv) else ""), i + 2
        if f"-{letter}" in _ENV_VALUES:
            return None  # the rest of the word is that option's value
    return None


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


class _CommandSubject:
    """A command line, analysed (*command*), or why it could not be (*problem*)."""

    __slots__ = ("_action", "_candidates", "_command", "_problem")

    def __init__(self, action: str, command: _Command | None, problem: str | None) -> None:
        self._action = action
        self._command = command
        self._problem = problem
        forms = [action] if command is None else [action, *command.denied_forms]
        self._candidates = [_Subject(form) for form in forms]

    def denied_by(self, pattern: str) -> bool:
        compiled = _compile(pattern, True)
        return compiled.anything or any(_fullmatch(compiled, c) for c in self._candidates)

    @property
    def objection(self) -> Objection | None:
        action, command = self._action, self._command
        if command is None:
            return Objection(f"command {_quote(action)} {self._problem}")
        if _COMMAND_CONTROL.search(action):
            return Objection(
                "a shell control operator, expansion or substitution", unless_named_exactly=True
            )
        if command.globbed:
            return Objection("a glob in place of a program name", unless_named_exactly=True)
        expansion = _unquoted_expansion(action)
        if expansion is not None:
            return Objection(expansion, unless_named_exactly=True)
        if len(command.written) != 1:  # pragma: no cover - only operators and newlines split one
            return Objection(f"command {_quote(action)} is not one command")
        return None

    def admitted_by(self, pattern: str) -> bool:
        assert self._command is not None  # (else the objection denied the subject)
        [full] = self._command.written
        compiled = _compile(pattern, False)
        return compiled.anything or _fullmatch(compiled, _Subject(full))


def read_command(subject: str) -> ReadSubject:
    """The ``"command"`` kind's :class:`~lionexec.governance.SubjectReader`."""
    if not subject.strip(" \t"):
        return _Refusal("command is empty")
    if len(subject) > _MAX_COMMAND:
        return _Refusal(f"command is longer than {_MAX_COMMAND} characters")
    try:
        command: _Command | None = _analyse(subject)
        problem = None
    except _Refused as exc:
        command, problem = None, str(exc)
    return _CommandSubject(subject, command, problem)
