"""Allow / deny / escalate rules for tool calls, as their own phase of a call (DELTAS A3)."""

from __future__ import annotations

import fnmatch
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from .context import CallContext

__all__ = [
    "SHELL_CONTROL",
    "Behavior",
    "EscalationHandler",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "Rules",
]

Behavior: TypeAlias = Literal["allow", "deny", "escalate"]
PermissionMode: TypeAlias = Literal["allow_all", "deny_all", "rules"]
#: Tool name (or ``"*"`` for every tool) → glob patterns over the call's subject.
Rules: TypeAlias = Mapping[str, tuple[str, ...]]

_MODES: Final = ("allow_all", "deny_all", "rules")

#: Shell control operators and redirections: ``;`` ``&&`` ``||`` ``|`` backtick ``$(``
#: ``<`` ``>`` and newline (``\r`` too). A subject containing one is denied in rules mode
#: unless an allow rule without wildcards names it exactly.
SHELL_CONTROL: Final = re.compile(r"(;|&&|\|\||\||`|\$\(|[<>]|\n|\r)")
_WILDCARDS: Final = re.compile(r"[*?\[]")


@attrs.frozen
class PermissionDecision:
    """What a policy decided about one call.

    Attributes:
        behavior: ``"allow"``, ``"deny"`` or ``"escalate"``.
        tool_name: the tool, as asked about.
        action: the subject the rules were matched against.
        reason: a sentence a person (or model) can read.
        matched_rule: the pattern that decided, or ``None`` if no rule did.
    """

    behavior: Behavior
    tool_name: str
    action: str
    reason: str
    matched_rule: str | None = None

    @property
    def allowed(self) -> bool:
        return self.behavior == "allow"


#: Asked to settle an ``escalate`` decision: called with the decision and the call context;
#: only a result (or awaited result) that ``is True`` approves.
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
        key = tool.lower()
        normalized[key] = normalized.get(key, ()) + listed
    return MappingProxyType(normalized)


def _mode(value: str) -> PermissionMode:
    if value not in _MODES:
        raise ConfigurationError(f"mode must be one of {', '.join(_MODES)}; got {value!r}")
    return value  # type: ignore[return-value]  # checked just above


def _matches(subject: str, pattern: str) -> bool:
    """Whether *subject* matches the glob *pattern*, exactly or ignoring case."""
    return fnmatch.fnmatchcase(subject, pattern) or fnmatch.fnmatchcase(
        subject.lower(), pattern.lower()
    )


@attrs.frozen(kw_only=True)
class PermissionPolicy:
    """Which tool calls may run.

    ``mode`` is ``"allow_all"`` (every call allowed), ``"deny_all"`` (every call denied) or
    ``"rules"``. In rules mode, :meth:`check` matches the call's *subject* (the tool's declared
    subject argument, such as a command or a path; else the tool name) against glob patterns
    (:func:`fnmatch.fnmatchcase`, then again with both sides lower-cased):

    1. ``deny`` rules, then ``allow`` rules, then ``escalate`` rules; within each, the tool's
       own patterns before those under ``"*"`` (every tool). The first match decides.
    2. A subject containing a shell control operator (:data:`SHELL_CONTROL`) that no deny rule
       matched is denied, unless an allow rule *without wildcards* names it exactly: a glob
       such as ``"ls *"`` never admits ``"ls; rm -rf /"``.
    3. Nothing matched: denied.

    Tool names in rules are matched ignoring case. ``escalate`` asks :attr:`on_escalate`
    (see :meth:`decide`). The handler is not part of the policy's value: it is left out of
    equality and of :meth:`to_dict`.
    """

    mode: PermissionMode = attrs.field(default="allow_all", converter=_mode)
    allow: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    deny: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    escalate: Rules = attrs.field(factory=dict, converter=_rules, hash=False)
    on_escalate: EscalationHandler | None = attrs.field(default=None, eq=False, hash=False)

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
        ``rm``, ``sudo``, ``chmod``, ``kill`` or ``mkfs`` (nor anything with a shell control
        operator). Other tools are denied.
        """
        return cls(
            mode="rules",
            allow={"reader": ["*"], "editor": ["*"], "search": ["*"], "context": ["*"]},
            deny={"bash": ["rm *", "sudo *", "chmod *", "kill *", "mkfs *"]},
            escalate={"bash": ["*"]},
        )

    # -- records ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """``{"mode", "allow", "deny", "escalate"}`` as JSON data; the handler is left out."""
        from lionexec.serialization import converter

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

    def check(self, tool_name: str, action: str, args: Mapping[str, Any]) -> PermissionDecision:
        """Decide about calling *tool_name* on the subject *action*; never asks anyone.

        *args* (the call's arguments) are not consulted by these rules; they are passed so a
        subclass can.
        """
        if self.mode == "allow_all":
            return PermissionDecision("allow", tool_name, action, "mode allow_all allows all")
        if self.mode == "deny_all":
            return PermissionDecision("deny", tool_name, action, "mode deny_all denies all")
        tool = tool_name.lower()

        def first(rules: Rules, literal_only: bool = False) -> tuple[str, str] | None:
            for key in (tool, "*"):
                for pattern in rules.get(key, ()):
                    if literal_only and _WILDCARDS.search(pattern):
                        continue
                    if _matches(action, pattern):
                        return key, pattern
            return None

        def decision(behavior: Behavior, verb: str, hit: tuple[str, str]) -> PermissionDecision:
            key, pattern = hit
            reason = f"{verb} by rule {pattern!r} for {key!r}"
            return PermissionDecision(behavior, tool_name, action, reason, pattern)

        hit = first(self.deny)
        if hit is not None:
            return decision("deny", "denied", hit)
        if SHELL_CONTROL.search(action):
            hit = first(self.allow, literal_only=True)
            if hit is not None:
                return decision("allow", "allowed", hit)
            reason = (
                f"subject {action!r} contains a shell control operator and no allow rule "
                "without wildcards names it"
            )
            return PermissionDecision("deny", tool_name, action, reason)
        hit = first(self.allow)
        if hit is not None:
            return decision("allow", "allowed", hit)
        hit = first(self.escalate)
        if hit is not None:
            return decision("escalate", "escalated", hit)
        return PermissionDecision("deny", tool_name, action, "no rule matched; denied by default")

    async def decide(self, ctx: CallContext) -> PermissionDecision:
        """The final decision for the call *ctx*: ``allow`` or ``deny``, never ``escalate``.

        The subject is ``ctx.arguments[tool.subject]`` when the tool declares a subject
        argument, else the tool name. In rules mode, a declared subject that is missing or not
        a string is denied. An ``escalate`` is settled by :attr:`on_escalate`: a result that
        ``is True`` allows; anything else, no handler, or a handler that raises an
        :class:`Exception` denies (the reason says which). Cancellation propagates.
        """
        subject_argument = ctx.subject_argument
        if subject_argument is None:
            action = ctx.function
        else:
            value = ctx.arguments.get(subject_argument)
            if not isinstance(value, str):
                if self.mode == "rules":
                    problem = "is missing" if value is None else "is not a string"
                    reason = f"subject argument {subject_argument!r} {problem}"
                    return PermissionDecision("deny", ctx.function, "", reason)
                value = "" if value is None else repr(value)
            action = value
        decision = self.check(ctx.function, action, ctx.arguments)
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
            verdict = handler(decision, ctx)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:
            reason = (
                f"{decision.reason}; the escalation handler raised {type(exc).__name__}: {exc}"
            )
            return attrs.evolve(decision, behavior="deny", reason=reason)
        if verdict is True:
            return attrs.evolve(decision, behavior="allow", reason=f"{decision.reason}; approved")
        reason = f"{decision.reason}; the escalation handler declined ({verdict!r})"
        return attrs.evolve(decision, behavior="deny", reason=reason)
