"""Allow / deny / escalate rules for tool calls, as their own phase of a call: every phase
(gate, policy, hooks) sees the same normalised, read-only arguments.

A rule is a glob pattern over the call's *subject*, read according to the subject's kind
(:data:`SubjectKind`): a file-system **path** (normalised with POSIX rules, segment-wise
globbing), a shell **command** (tokenised with :mod:`shlex`, wrappers unwrapped, control
operators and expansions refused) or plain **text** (a glob over the whole string). How each
kind is read lives in :mod:`lionexec.governance.subjects`; this module owns the modes, the
order of the rules and the decisions.
"""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs
import trio

from .._failures import call_user
from ..errors import ConfigurationError
from .subjects import SubjectKind, ignoring_case, subject_kind_of
from .subjects._inference import _kind_for_name
from .subjects.base import (
    _READERS,
    _WILDCARDS,
    ReadSubject,
    _known_kinds,
    _quote,
    _reader_of,
    _unmarked,
)

if TYPE_CHECKING:
    from lionexec.tools import Tool

    from ._context import CallContext

__all__ = [
    "AwaitingApproval",
    "Behavior",
    "EscalationHandler",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "Rules",
]

Behavior: TypeAlias = Literal["allow", "deny", "escalate"]
PermissionMode: TypeAlias = Literal["allow_all", "deny_all", "rules"]
#: Tool name (exactly as registered, or ``"*"`` for every tool) → glob patterns over the
#: call's subject.
Rules: TypeAlias = Mapping[str, tuple[str, ...]]

_MODES: Final = ("allow_all", "deny_all", "rules")
#: :meth:`PermissionPolicy.check` keeps decisions about subjects up to this long, and up to
#: this many decisions (a tool without a subject argument is decided by its name, the same
#: subject every call: it is matched once).
_CACHED_SUBJECT: Final = 1_024
_DECISIONS_KEPT: Final = 1_024


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

    A journal's handler (the approval gate of :mod:`lionexec.journal`) returns it after
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


def _mode(value: str | None) -> PermissionMode:
    if value is None:  # follows from the rules: settled in __attrs_post_init__
        return None  # type: ignore[return-value]
    if value not in _MODES:
        raise ConfigurationError(f"mode must be one of {', '.join(_MODES)}; got {value!r}")
    return value  # type: ignore[return-value]  # checked just above


@attrs.frozen(kw_only=True)
class PermissionPolicy:
    """Which tool calls may run.

    ``mode`` is ``"allow_all"`` (every call allowed), ``"deny_all"`` (every call denied) or
    ``"rules"``. Left out, it follows from the rules: ``"rules"`` when any ``allow``, ``deny``
    or ``escalate`` rule is given, else ``"allow_all"``. Rules with ``mode="allow_all"`` or
    ``mode="deny_all"``, which would ignore them, are a
    :class:`~lionexec.errors.ConfigurationError`. In rules mode, :meth:`check` matches the
    call's *subject* (the tool's declared subject argument, else the tool name) against glob
    patterns, reading the subject by its kind (:func:`subject_kind_of`):

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
        in ``lionexec/governance/subjects/_programs.py``) unwrapped with their options (read
        as getopt reads them: clusters, abbreviated long options; for a few whose options
        are not listed, ``perf``, ``ip``, ``bwrap``, ``systemd-run``, GNU ``parallel``,
        ``gdb``..., every later word is tried as the program; container entry points and
        supervisors too: ``gosu``, ``tini``, ``chpst``..., and project runners: ``uv run``,
        ``poetry run``, ``npx``, ``npm exec``
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
        longer than 64 KiB, or is too costly to analyse (over 4,096 words and operators,
        counting the strings nested in it; the line and those strings adding up to more than
        256 Ki characters; or the commands it may run, each read with the rest of its words,
        to more than 1 Mi) is denied, whatever the allow and escalate rules say: the
        analysis is a hint for deny rules, never confinement, and a line it did not read
        is not one they cleared. One check costs a few milliseconds at most.
    ``"text"``
        A glob over the whole string (:func:`fnmatch.translate`: ``*`` matches anything). As
        for commands, a subject containing a shell control operator (:data:`SHELL_CONTROL`)
        is denied unless an allow rule without wildcards names it exactly.

    A kind added with :func:`register_subject_kind` is read as its
    :class:`~lionexec.governance.SubjectReader` says, in the same order of rules.

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

    mode: PermissionMode = attrs.field(default=None, converter=_mode)
    allow: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    deny: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    escalate: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    on_escalate: EscalationHandler | None = attrs.field(default=None, eq=False, hash=False)
    #: Decisions of :meth:`check` by ``(tool name, subject, kind)``: a pure function of the
    #: rules, which a policy cannot change. Not part of the policy's value.
    _decided: dict[tuple[str, str, str | None], PermissionDecision] = attrs.field(
        init=False, factory=dict, eq=False, hash=False, repr=False
    )
    #: A preset's rules name conventional tools; not part of the policy's value.
    _conventional: bool = attrs.field(init=False, default=False, eq=False, hash=False, repr=False)

    def __attrs_post_init__(self) -> None:
        ruled = [
            name
            for name in ("allow", "deny", "escalate")
            if any(getattr(self, name).values())  # a tool listed with no pattern is no rule
        ]
        if self.mode is None:
            object.__setattr__(self, "mode", "rules" if ruled else "allow_all")
        elif ruled and self.mode != "rules":
            raise ConfigurationError(
                f"mode={self.mode!r} ignores rules, but {' and '.join(ruled)} rules were given "
                f"(for {', '.join(repr(t) for t in self._ruled_tools())}): leave mode out "
                f"(rules imply mode='rules'), or drop the rules"
            )

    def unknown_tools(self, registered: Iterable[str]) -> list[str]:
        """The tool names the rules mention (``"*"`` aside) that are not in *registered*, in
        rule order: rules that can never apply, most often a typo of a tool's name. A
        branch logs them, with the closest registered name, the first time it acts with this
        policy and its tools. The presets (:meth:`read_only`, :meth:`safe`) name
        conventional tools that need not exist, so they report nothing."""
        if self._conventional:
            return []
        names = set(registered)
        return [tool for tool in self._ruled_tools() if tool != "*" and tool not in names]

    def _ruled_tools(self) -> list[str]:
        """The tool names the rules mention, in order, once each."""
        return list(
            dict.fromkeys(t for rules in (self.deny, self.allow, self.escalate) for t in rules)
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
        policy = cls(
            mode="rules",
            allow={"reader": ["*"], "search": ["*"], "context": ["*"]},
            deny={"editor": ["*"], "bash": ["*"]},
        )
        object.__setattr__(policy, "_conventional", True)
        return policy

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
        policy = cls(
            mode="rules",
            allow={"reader": ["*"], "editor": ["*"], "search": ["*"], "context": ["*"]},
            deny={"bash": list(_SAFE_DENIED)},
            escalate={"bash": ["*"]},
        )
        object.__setattr__(policy, "_conventional", True)
        return policy

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
        kind: SubjectKind | str | None = None,
    ) -> PermissionDecision:
        """Decide about calling *tool_name* on the subject *action*; never asks anyone.

        *kind* is how to read *action*; by default ``"command"`` for a tool named ``bash``,
        ``sh``, ``shell`` or ``zsh`` and ``"text"`` otherwise (:meth:`decide` passes the
        tool's kind, :func:`subject_kind_of`). Any kind :func:`subject_kinds` lists is
        accepted (:func:`register_subject_kind` adds kinds); another raises
        :class:`ValueError`. *args* (the call's arguments) are not consulted by these rules;
        they are passed so a subclass can.

        The rules are fixed, so a decision depends on nothing else: one made before for the
        same tool, subject (of at most 1,024 characters) and *kind* is returned again. Up to
        1,024 of them are kept; past that the store starts over (at most a few megabytes).
        """
        if (
            type(action) is not str
            or type(tool_name) is not str
            or len(action) > _CACHED_SUBJECT
            or (kind is not None and (type(kind) is not str or kind not in _READERS))
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

    def _check(
        self, tool_name: str, action: str, kind: SubjectKind | str | None
    ) -> PermissionDecision:
        """:meth:`check`, decided now."""
        if self.mode == "allow_all":
            return PermissionDecision("allow", tool_name, action, "mode allow_all allows all")
        if self.mode == "deny_all":
            return PermissionDecision("deny", tool_name, action, "mode deny_all denies all")
        if kind is None:
            kind = _kind_for_name(tool_name)
        reader = _reader_of(kind)
        if reader is None:
            raise ValueError(f"kind must be {_known_kinds()}, not {kind!r}")
        if not isinstance(action, str):
            return self._deny(tool_name, "", f"subject {_quote(action)} is not a string")
        try:
            return self._match(tool_name, action, reader(action))
        except Exception as exc:  # a reader's bug denies (fail closed), as a value
            reason = f"the reader of subject kind {kind!r} raised {_quote(exc)}"
            return self._deny(tool_name, action, reason)

    def _patterns(self, behavior: Behavior, tool_name: str) -> Iterator[tuple[str, str]]:
        """The rules of *behavior* that apply to *tool_name*: its own, then ``"*"``'s."""
        rules = {"allow": self.allow, "deny": self.deny, "escalate": self.escalate}[behavior]
        for key in (tool_name, "*") if tool_name != "*" else ("*",):
            for source in rules.get(key, ()):
                yield key, source

    @staticmethod
    def _decision(
        behavior: Behavior, tool_name: str, action: str, key: str, source: str
    ) -> PermissionDecision:
        verb = {"allow": "allowed", "deny": "denied", "escalate": "escalated"}[behavior]
        reason = f"{verb} by rule {source!r} for {key!r}"
        return PermissionDecision(behavior, tool_name, action, reason, source)

    @staticmethod
    def _deny(tool_name: str, action: str, reason: str) -> PermissionDecision:
        return PermissionDecision("deny", tool_name, action, reason)

    def _by_default(self, tool_name: str, action: str) -> PermissionDecision:
        return self._deny(tool_name, action, "no rule matched; denied by default")

    def _match(self, tool_name: str, action: str, subject: ReadSubject) -> PermissionDecision:
        """The rules in their order against *subject*, *action* as its kind read it (see
        :class:`~lionexec.governance.ReadSubject` for what each step asks)."""
        for key, source in self._patterns("deny", tool_name):
            if subject.denied_by(source):
                return self._decision("deny", tool_name, action, key, source)
        objection = subject.objection
        if objection is not None:
            if objection.unless_named_exactly:
                return self._operators(tool_name, action, objection.reason)
            return self._deny(tool_name, action, objection.reason)
        refused: str | None = None  # why the first rule that matched may not admit it
        for behavior in _ADMITTING:
            for key, source in self._patterns(behavior, tool_name):
                admitted = subject.admitted_by(source)
                if admitted is True:
                    return self._decision(behavior, tool_name, action, key, source)
                if refused is None and isinstance(admitted, str):
                    refused = admitted
        if refused is not None:
            return self._deny(tool_name, action, refused)
        return self._by_default(tool_name, action)

    def _operators(self, tool_name: str, action: str, what: str) -> PermissionDecision:
        """Allowed only by an allow rule without wildcards naming *action* exactly."""
        for key, source in self._patterns("allow", tool_name):
            body, ignore_case = _unmarked(source)
            if _WILDCARDS.search(body) is None and (
                body == action or (ignore_case and body.casefold() == action.casefold())
            ):
                return self._decision("allow", tool_name, action, key, source)
        reason = (
            f"subject {_quote(action)} contains {what} and no allow rule without wildcards "
            "names it"
        )
        return self._deny(tool_name, action, reason)

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
        decision = self._judge(ctx.function, ctx.tool, ctx.subject_argument, ctx.arguments)
        if decision.behavior != "escalate":
            return decision
        return await self._escalate(decision, ctx)

    def _decide_now(self, ctx: CallContext) -> PermissionDecision | Awaitable[PermissionDecision]:
        """:meth:`_decide` as far as it gets without awaiting: the decision, or for an
        ``escalate`` the coroutine that asks :attr:`on_escalate`. Only for this class's own
        rules (a subclass may decide otherwise: its :meth:`decide` is awaited instead).

        A tool without a subject argument is judged by its name alone, and the rules are
        fixed: the decision :meth:`check` keeps for it is taken as it is, without judging
        again (once per tool, in effect)."""
        tool = ctx.tool
        if tool is None or tool.subject is None:
            function = ctx.function
            decision = self._decided.get((function, function, "text"))  # as check() keys it
            if decision is None:
                decision = self._judge(function, tool, None, ctx.arguments)
        else:
            decision = self._judge(ctx.function, tool, tool.subject, ctx.arguments)
        if decision.behavior != "escalate":
            return decision
        return self._escalate(decision, ctx)

    def explain(self, tool: Tool | str, arguments: Mapping[str, Any]) -> PermissionDecision:
        """What the rules decide about calling *tool* with *arguments*, and why.

        *tool* is a :class:`~lionexec.tools.Tool` (its subject argument and kind are read as
        :meth:`decide` reads them) or a tool name (the subject is then the name, read as
        text). The decision's :attr:`~PermissionDecision.reason` says which rule decided
        (``matched_rule``), or that none matched; an ``escalate`` is returned as it is,
        without asking :attr:`on_escalate`. Synchronous and never blocks: for a person or a
        test checking a policy, and what the denial recorded for a call says too.
        """
        if isinstance(tool, str):
            return self._judge(tool, None, None, arguments)
        return self._judge(tool.name, tool, tool.subject, arguments)

    def _judge(
        self,
        function: str,
        tool: Tool | None,
        subject_argument: str | None,
        arguments: Mapping[str, Any],
    ) -> PermissionDecision:
        """The rules' decision for one call, ``escalate`` included (nobody is asked)."""
        kind: SubjectKind | str = "text"
        if subject_argument is None:
            action = function
        else:
            kind = subject_kind_of(tool)
            value = arguments.get(subject_argument)
            if isinstance(value, pathlib.PurePath):
                value = value.as_posix()
            if not isinstance(value, str):
                if self.mode == "rules":
                    problem = "is missing" if value is None else "is not a string or a path"
                    reason = f"subject argument {subject_argument!r} {problem}"
                    return PermissionDecision("deny", function, "", reason)
                value = "" if value is None else repr(value)
            action = value
        if _reader_of(kind) is None:  # a tool's kind that was never registered: fail closed
            known = _known_kinds()
            reason = f"subject kind {kind!r} of tool {function!r} is not registered ({known})"
            return PermissionDecision("deny", function, action, reason)
        return self.check(function, action, arguments, kind=kind)

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


_ADMITTING: Final[tuple[Behavior, ...]] = ("allow", "escalate")

#: What :meth:`PermissionPolicy.safe` never lets ``bash`` run, in any case (a case-insensitive
#: file system runs ``RM`` as ``rm``).
_SAFE_DENIED: Final = tuple(
    ignoring_case(p)
    for p in ("rm", "rm *", "sudo", "sudo *", "chmod", "chmod *", "kill", "kill *", "mkfs",
              "mkfs *", "mkfs.*")
)  # fmt: skip
