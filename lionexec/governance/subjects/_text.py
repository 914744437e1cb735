"""The ``"text"`` subject kind: plain text, matched by a glob over the whole string."""

from __future__ import annotations

import functools
import re
from typing import Final

from ._glob import _fullmatch, _Subject, _whole_pattern, _WholePattern
from .base import Objection, ReadSubject, _unmarked

__all__ = ["SHELL_CONTROL"]

#: Shell control operators, expansions and redirections in a *text* subject: ``;`` ``&``
#: (so ``&&`` too) ``|`` (so ``||`` too), a backtick, ``$(`` ``${`` ``$NAME`` (and ``$'`` ``$"``
#: and the special parameters), ``<`` ``>``, a newline, ``\r`` or NUL. A text subject
#: containing one is denied in rules mode unless an allow rule without wildcards names it
#: exactly. (A *command* subject is stricter: see :class:`PermissionPolicy`.)
SHELL_CONTROL: Final = re.compile(r"[;&|`<>\n\r\x00]|\$[({\w@*#?!$'\"-]")


@functools.lru_cache(maxsize=4096)
def _compile(source: str) -> _WholePattern:
    body, ignore_case = _unmarked(source)
    return _whole_pattern(source, body, ignore_case, body)


class _TextSubject:
    """A text subject: the string as it is."""

    __slots__ = ("_action", "_subject")

    def __init__(self, action: str) -> None:
        self._action = action
        self._subject = _Subject(action)

    @property
    def objection(self) -> Objection | None:
        if SHELL_CONTROL.search(self._action):
            return Objection("a shell control operator", unless_named_exactly=True)
        return None

    def denied_by(self, pattern: str) -> bool:
        compiled = _compile(pattern)
        return compiled.anything or _fullmatch(compiled, self._subject)

    def admitted_by(self, pattern: str) -> bool:
        compiled = _compile(pattern)
        return compiled.anything or _fullmatch(compiled, self._subject)


def read_text(subject: str) -> ReadSubject:
    """The ``"text"`` kind's :class:`~lionexec.governance.SubjectReader`."""
    return _TextSubject(subject)
