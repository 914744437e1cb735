"""How a permission policy reads the subject of a call: the :class:`SubjectReader` contract,
the registry of subject kinds, and the pattern syntax every kind shares.

A rule is a glob pattern over the call's *subject* (the tool's declared subject argument, or
else the tool name), read according to the subject's *kind*: a file-system **path**, a shell
**command** or plain **text** are built in, and :func:`register_subject_kind` adds others.
The policy (:class:`~lionexec.governance.PermissionPolicy`) owns the order of the rules and
the decisions; a kind's reader owns what a subject and a pattern of that kind mean.
"""

from __future__ import annotations

import re
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from ...errors import ConfigurationError

__all__ = [
    "IGNORE_CASE",
    "Objection",
    "ReadSubject",
    "SubjectKind",
    "SubjectReader",
    "ignoring_case",
    "register_subject_kind",
    "subject_kinds",
]

#: How a policy reads a subject: a file-system path, a shell command, or plain text (the
#: built-in kinds; :func:`register_subject_kind` adds others).
SubjectKind: TypeAlias = Literal["path", "command", "text"]

#: A pattern starting with this marker matches ignoring case (the only opt-in: matching is
#: case-sensitive otherwise). Build one with :func:`ignoring_case`.
IGNORE_CASE: Final = "(?i)"

_WILDCARDS: Final = re.compile(r"[*?\[]")

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


def ignoring_case(pattern: str) -> str:
    """*pattern*, marked to match ignoring case (``IGNORE_CASE + pattern``).

    The mark is part of the pattern string, so it survives :meth:`PermissionPolicy.to_dict`.
    """
    if not isinstance(pattern, str):
        raise ConfigurationError(f"a pattern must be a string, not {pattern!r}")
    return pattern if pattern.startswith(IGNORE_CASE) else IGNORE_CASE + pattern


def _unmarked(source: str) -> tuple[str, bool]:
    """``(the pattern without its IGNORE_CASE mark, whether it had one)``."""
    ignore_case = source.startswith(IGNORE_CASE)
    return (source[len(IGNORE_CASE) :] if ignore_case else source), ignore_case


# -- the contract ---------------------------------------------------------------------------


@attrs.frozen
class Objection:
    """Why a subject that no deny rule matched is not left to the allow and escalate rules.

    A :class:`ReadSubject` returns one from :attr:`~ReadSubject.objection`: a command that
    cannot be parsed, an empty path, a text holding a shell control operator...

    Attributes:
        reason: with ``unless_named_exactly`` false, the sentence the denial gives (``"command
            'a \\'b' cannot be parsed (No closing quotation)"``); with it true, what the
            subject holds (``"a shell control operator"``), which the denial's sentence names.
        unless_named_exactly: the subject is still allowed by an allow rule without
            wildcards that names the whole subject exactly (so that a rule may admit one
            line with an operator, ``"ls | wc -l"``); otherwise it is denied.
    """

    reason: str
    unless_named_exactly: bool = False


@runtime_checkable
class ReadSubject(Protocol):
    """A subject as its kind's :class:`SubjectReader` read it: what the rules of one decision
    are matched against.

    The policy asks, in this order, and the first answer that decides is the decision:

    1. :meth:`denied_by` for each deny rule (the tool's own patterns, then those under
       ``"*"``): a true result denies, naming the rule.
    2. :attr:`objection`: an :class:`Objection` denies (or, if it says so, leaves the subject
       to an allow rule naming it exactly); ``None`` goes on.
    3. :meth:`admitted_by` for each allow rule, then each escalate rule: ``True`` decides
       (allow, or escalate), naming the rule; a string means the pattern matches but may not
       admit this subject: the string is the reason of the denial if no later rule admits
       it (the first such string is kept); anything else is no match.
    4. Nothing admitted it: denied.

    Each method is called once per rule the order reaches, on the thread that read the
    subject, right after the reader returned. A pattern is given as written in the rules,
    with any :data:`IGNORE_CASE` mark: what a pattern means is the kind's to say. Deny rules
    err towards denying (any true result denies), allow and escalate rules towards not
    admitting (only ``True`` admits).
    """

    @property
    def objection(self) -> Objection | None:
        """Why the subject must not be left to the allow and escalate rules, or ``None``."""
        ...

    def denied_by(self, pattern: str) -> bool:
        """Whether the deny rule *pattern* matches the subject."""
        ...

    def admitted_by(self, pattern: str) -> bool | str:
        """Whether the allow or escalate rule *pattern* admits the subject (``True``), does
        not match it (``False``), or matches it but may not admit it (the reason, a string).
        """
        ...


@runtime_checkable
class SubjectReader(Protocol):
    """Reads the subjects of one kind: ``reader(subject) -> ReadSubject``.

    **When it is called.** By :meth:`PermissionPolicy.check
    <lionexec.governance.PermissionPolicy.check>` in ``"rules"`` mode, for a decision the
    policy does not already keep; never in ``"allow_all"`` or ``"deny_all"`` mode. In
    ``Branch.act`` that is the permission phase of each call
    (:meth:`PermissionPolicy.decide <lionexec.governance.PermissionPolicy.decide>`), and
    again after a tool's preprocessor transformed the arguments. A policy keeps its
    decisions by tool name, subject and kind, so the reading must be a pure function of the
    subject string: the same string, the same answers.

    **What it is given.** The subject, always a :class:`str`: the value of the tool's subject
    argument (a :class:`pathlib.PurePath` as its POSIX string), or the tool name for a tool
    without one. A missing or non-string subject is denied before any reader is asked. The
    string comes from a model: it may be hostile, huge, or hold any character.

    **What it returns.** A :class:`ReadSubject`, whose methods the policy then calls with
    the patterns of the rules (see there for the order). To refuse a subject outright
    (empty, malformed, too costly to read), return one that matches no pattern and whose
    :attr:`~ReadSubject.objection` gives the reason.

    **Thread and blocking.** Called synchronously, with the rest of the decision, on the
    thread that asks for it: in ``Branch.act``, the trio thread, inside the call's task, with
    no checkpoint until the decision is made, so no other task of the run goes on while it
    runs. It must be fast and never block: no I/O, no waiting on locks or other threads, and
    a bound on its work for any input (the built-in command reader caps what it parses).

    **Cancellation.** None reaches it: it never awaits, so it cannot be cancelled part-way;
    a cancelled call stops at a checkpoint before or after the decision, never inside it.

    **Errors.** A reader should not raise for any string. An :class:`Exception` raised by
    the reader or by the :class:`ReadSubject` it returned denies the call (a policy's
    decision is a value, never an exception): the reason names the kind and the exception.
    Other exceptions (:class:`KeyboardInterrupt`...) propagate.

    Register a reader with :func:`register_subject_kind`; the built-in kinds are ``"path"``,
    ``"command"`` and ``"text"``.
    """

    def __call__(self, subject: str, /) -> ReadSubject:
        """The subject *subject*, read."""
        ...


@attrs.frozen
class _Refusal:
    """A subject refused outright: no rule matches it; denied with *reason*."""

    reason: str

    @property
    def objection(self) -> Objection:
        return Objection(self.reason)

    def denied_by(self, pattern: str) -> bool:
        return False

    def admitted_by(self, pattern: str) -> bool:
        return False


# -- the registry ---------------------------------------------------------------------------

#: Kind name → its reader, in registration order (the built-in kinds first). Only ever
#: added to (the policy holds this very dict).
_READERS: dict[str, SubjectReader] = {}


def register_subject_kind(name: str, reader: SubjectReader) -> None:
    """Have policies read subjects of kind *name* with *reader* (a :class:`SubjectReader`).

    The kind is then accepted by :meth:`PermissionPolicy.check
    <lionexec.governance.PermissionPolicy.check>`'s ``kind``. Register at import time, before
    any policy reads a subject of that kind; a kind cannot be registered twice nor removed.

    Raises:
        ConfigurationError: *name* is not a non-empty string or is already registered, or
            *reader* is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a subject kind's name must be a non-empty string, not {name!r}")
    if name in _READERS:
        raise ConfigurationError(
            f"subject kind {name!r} is already registered (registered kinds: {_known_kinds()})"
        )
    if not callable(reader):
        raise ConfigurationError(
            f"the reader of subject kind {name!r} must be callable, not {reader!r}"
        )
    _READERS[name] = reader


def subject_kinds() -> tuple[str, ...]:
    """The registered subject kinds, in registration order: ``("path", "command", "text")``
    and then those added with :func:`register_subject_kind`."""
    return tuple(_READERS)


def _reader_of(kind: object) -> SubjectReader | None:
    """The reader of *kind*, or ``None`` if *kind* is not a registered kind's name."""
    return _READERS.get(kind) if isinstance(kind, str) else None


def _known_kinds() -> str:
    """The registered kinds, for a sentence: ``'path', 'command' or 'text'``."""
    names = [repr(name) for name in _READERS]
    if len(names) < 2:
        return "".join(names) or "none"
    return f"{', '.join(names[:-1])} or {names[-1]}"
