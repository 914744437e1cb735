"""The governance seams bound once for a caller that runs many tool calls through them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from .._failures import ReportedFailure
from ._context import CallContext, ToolInvocation
from ._gates import SessionObserver
from ._hooks import HookBus, HookPoint, PreHookResult
from ._policy import PermissionDecision, PermissionPolicy

if TYPE_CHECKING:
    from lionexec.tools import Tool

__all__ = ["BoundSeams"]

#: How many tools' decisions :attr:`BoundSeams.decided` keeps (past that it starts over).
_TOOLS_DECIDED: Final = 1_024


def _quiet(seam: object, method: Any) -> Any:
    """*seam*'s variant of *method* without its own checkpoint (the ``_``-prefixed one),
    unless *seam*'s class overrides *method* (a function of HookBus, SessionObserver or
    PermissionPolicy): then the override, which its author may rely on."""
    name = method.__name__
    return getattr(seam, "_" + name if getattr(type(seam), name) is method else name)


def _never_kept(record: Any, detach: Callable[[Any], Any]) -> bool:
    """:attr:`BoundSeams.keep_event` of an observer whose ``emit`` is its own: every event
    goes through that ``emit``."""
    return False


class BoundSeams:
    """A branch's hook bus, session observer and permission policy, bound for its calls.

    The act layer builds one per set of collaborators (a :class:`~lionexec.act.Branch` makes
    a new one when its ``hooks``, ``observer`` or ``policy`` is replaced) and calls the
    seams of every tool call through it. Binding decides, once, how each seam is called;
    what the seams hold (the gate, the handlers, the rules) is still read at each call, so a
    gate set or a handler added later applies.

    **No checkpoint of their own.** The public methods of the seams
    (:meth:`SessionObserver.authorize`, :meth:`PermissionPolicy.decide`,
    :meth:`HookBus.run_pre`, :meth:`HookBus.emit`, :meth:`SessionObserver.emit`) each begin
    with a checkpoint. A caller that yields once per call already (a call's task starting,
    or the checkpoint before each call of a sequential batch) does not need one per seam,
    so the callables bound here are the seams' work without it. They are therefore not
    always checkpoints: with nothing to run (no gate set, no handler at the point, a
    decision that needs no escalation) one returns without yielding, and a caller already
    cancelled is not stopped before it runs. Cancellation is delivered at the first
    checkpoint inside (a gate, a handler, a subscriber or an escalation handler that awaits)
    and propagates; nothing is swallowed.

    **Blocking.** Each blocks as long as the code it runs does: the gate, the ``tool.pre``
    handlers one after another, the escalation handler (which may wait for a human), the
    non-blocking points' handlers, the observer's subscribers.

    **Overrides.** A seam whose class overrides the public method (a subclass of
    :class:`SessionObserver`, :class:`HookBus` or :class:`PermissionPolicy` defining its own
    ``authorize``, ``decide``, ``run_pre`` or ``emit``) is bound to that override, checkpoint
    and all: its author may rely on it being called.

    Args:
        hooks: the hook bus.
        observer: the session gate and observer, if any.
        policy: the permission policy, if any.

    Attributes:
        hooks: the hook bus bound.
        observer: the observer bound, or ``None``.
        policy: the policy bound, or ``None``.
        authorize: ``await authorize(invocation)``: whether the observer's gate allows a
            :class:`ToolInvocation` (see :meth:`SessionObserver.authorize`; a denial is
            recorded in its store); ``None`` without an observer. Ask it only when
            :meth:`must_authorize` says so.
        decide: ``await decide(context)``: the policy's final
            :class:`PermissionDecision` for a :class:`CallContext` (see
            :meth:`PermissionPolicy.decide`); ``None`` without a policy.
        run_pre: ``await run_pre(**kwargs)``: the ``tool.pre`` handlers' verdict, a
            :class:`PreHookResult` (see :meth:`HookBus.run_pre`).
        emit: ``await emit(point, **kwargs)``: run the handlers of a non-blocking
            :class:`HookPoint`; returns their isolated failures (see :meth:`HookBus.emit`).
        emit_event: ``await emit_event(payload, call_id=...)``: store, route and dispatch a
            payload in the observer (see :meth:`SessionObserver.emit`); ``None`` without an
            observer.
        keep_event: ``keep_event(record, detach)``: store an event synchronously, if it
            may be (see below); ``None`` without an observer.
        ask_gate: ``ask_gate(invocation)``: :attr:`authorize` as far as it gets without
            awaiting: ``True``, or an awaitable of the verdict; ``None`` without an
            observer.
        decide_now: ``decide_now(context)``: :attr:`decide` likewise: the
            :class:`PermissionDecision`, or an awaitable of it; ``None`` without a policy.
        pre_now: ``pre_now(kwargs)``: :attr:`run_pre` likewise: the
            :class:`PreHookResult`, or an awaitable of it.
        emit_now: ``emit_now(point, kwargs)``: :attr:`emit` for a :class:`HookPoint` other
            than ``tool.pre``, likewise: the failures (a ``list``; ``None`` for none), or an
            awaitable of them.
        asks_always: whether the observer is asked about every call, gate or no gate: its
            class overrides :class:`SessionObserver`'s check (``authorize`` or
            ``_authorize``), which its author may rely on. ``False`` without an observer.
            :meth:`must_authorize` is this, or a gate set on the observer.
        decided: the policy's decisions that depend on the tool alone, by tool (see
            :meth:`keep_decision`): a call of a tool found here is decided without asking
            the policy. Empty, and left so, for a policy of a subclass.

    **Without a coroutine.** The ``*_now`` callables of a seam of the class itself
    (not a subclass) call its synchronous gate, rules and handlers directly and return
    their result; only one that must be awaited (an async handler, an escalation) costs a
    coroutine. The caller awaits a result that is not of the plain type. A subclass's seam
    is awaited as :attr:`authorize`, :attr:`decide`, :attr:`run_pre` and :attr:`emit` are.

    :attr:`keep_event` stores *record* in the observer's store as it is, to be
    copied with ``detach(record)`` each time it is read, when nothing would see it at once
    (no route, no subscription) and the observer's ``emit`` is
    :class:`SessionObserver`'s own; it returns whether it did. Otherwise (``False``) the
    caller emits ``detach(record)`` with :attr:`emit_event`. Synchronous: it never blocks and
    is not a checkpoint. An observer keeps every call's event and most are never read, so a
    copy made only when one is read saves one per call.
    """

    __slots__ = (
        "_plain_policy",
        "ask_gate",
        "asks_always",
        "authorize",
        "decide",
        "decide_now",
        "decided",
        "emit",
        "emit_event",
        "emit_now",
        "hooks",
        "keep_event",
        "observer",
        "policy",
        "pre_now",
        "run_pre",
    )

    def __init__(
        self,
        hooks: HookBus,
        observer: SessionObserver | None = None,
        policy: PermissionPolicy | None = None,
    ) -> None:
        self.hooks: Final = hooks
        self.observer: Final = observer
        self.policy: Final = policy
        self.run_pre: Final[Callable[..., Awaitable[PreHookResult]]] = _quiet(
            hooks, HookBus.run_pre
        )
        self.emit: Final[Callable[..., Awaitable[list[ReportedFailure]]]] = _quiet(
            hooks, HookBus.emit
        )
        self.decide: Final[Callable[[CallContext], Awaitable[PermissionDecision]] | None] = (
            None if policy is None else _quiet(policy, PermissionPolicy.decide)
        )
        run_pre, emit, decide = self.run_pre, self.emit, self.decide
        self.pre_now: Final[Callable[[dict[str, Any]], Any]] = (
            hooks._pre_now if type(hooks) is HookBus else lambda kwargs: run_pre(**kwargs)
        )
        self.emit_now: Final[Callable[[HookPoint, dict[str, Any]], Any]] = (
            hooks._emit_now
            if type(hooks) is HookBus
            else lambda point, kwargs: emit(point, **kwargs)
        )
        self.decide_now: Final[Callable[[CallContext], Any] | None] = (
            None
            if policy is None
            else policy._decide_now
            if type(policy) is PermissionPolicy
            else decide
        )
        authorize: Callable[[ToolInvocation], Awaitable[bool]] | None = None
        emit_event: Callable[..., Awaitable[list[ReportedFailure]]] | None = None
        keep_event: Callable[[Any, Callable[[Any], Any]], bool] | None = None
        plain_gate = True
        if observer is not None:
            cls = type(observer)
            authorize = _quiet(observer, SessionObserver.authorize)
            emit_event = _quiet(observer, SessionObserver.emit)
            # SessionObserver's own check allows everything without a gate: an observer
            # without one then need not be asked (nor its invocation built)
            plain_gate = (
                cls.authorize is SessionObserver.authorize
                and cls._authorize is SessionObserver._authorize
            )
            # with SessionObserver's own emit, an event may be stored as recorded and copied
            # when read (see SessionObserver._keep)
            plain_emit = (
                cls.emit is SessionObserver.emit
                and cls._emit is SessionObserver._emit
                and cls._keep is SessionObserver._keep
            )
            keep_event = observer._keep if plain_emit else _never_kept
        self.authorize: Final = authorize
        self.ask_gate: Final[Callable[[ToolInvocation], Any] | None] = (
            observer._ask if type(observer) is SessionObserver else authorize
        )
        self.emit_event: Final = emit_event
        self.keep_event: Final = keep_event
        self.asks_always: Final = not plain_gate
        self._plain_policy: Final = type(policy) is PermissionPolicy
        self.decided: Final[dict[Tool, PermissionDecision]] = {}

    def __repr__(self) -> str:
        return (
            f"BoundSeams(hooks={self.hooks!r}, observer={self.observer!r}, policy={self.policy!r})"
        )

    def keep_decision(self, tool: Tool, decision: PermissionDecision) -> None:
        """Keep the policy's *decision* about a call of *tool* in :attr:`decided`, if it is
        the decision for every call of *tool* under this policy.

        It is when the policy is :class:`PermissionPolicy` itself (a subclass may read the
        arguments, or anything else: it is asked every call), *tool* declares no subject
        argument (the rules then match the tool's name, read as text: no argument is read),
        and the decision is not ``escalate`` (the escalation handler is asked each time).
        Nothing it depends on can change under the same seams: a policy's rules and mode
        are fixed, a subject kind is never registered again, a :class:`~lionexec.tools.Tool`
        is frozen and registering another under its name makes a new one (another key), and
        a branch binds new seams when its policy or registry is replaced. Up to 1,024 tools
        are kept; past that the store starts over. Synchronous; never blocks.
        """
        if (
            self._plain_policy
            and tool.subject is None
            and type(decision) is PermissionDecision
            and decision.behavior != "escalate"
        ):
            decided = self.decided
            if len(decided) >= _TOOLS_DECIDED:
                decided.clear()
            decided[tool] = decision

    def must_authorize(self) -> bool:
        """Whether a call must be shown to the observer's gate (:attr:`authorize`) at all.

        ``False`` without an observer, and when the observer's check is
        :class:`SessionObserver`'s own and no gate is set: it would allow the call and
        record nothing, so the caller may skip it (and building its invocation). Read at
        each call: a gate set later applies. Synchronous; never blocks.
        """
        observer = self.observer
        # (its gate read directly: the property would cost a call per governed call)
        return observer is not None and (self.asks_always or observer._gate is not None)
