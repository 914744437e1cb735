"""What recovery and resuming report, and the registry they re-run calls with."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import attrs

from lionexec.conversation import ActionOutcome
from lionexec.tools import ActionManager, Tool

from .errors import JournalError

__all__ = ["Action", "RecoveryReport", "Resolution", "as_journal_error", "registry_of"]

#: What recovery (or resuming) did with one call: see :class:`Resolution`.
Action = Literal[
    "rerun",
    "interrupted",
    "reconciled",
    "not_started",
    "left",
    "approved",
    "rejected",
    "expired",
    "awaiting_approval",
    "resumed_elsewhere",
    "queued",
    "from_queue",
]


@attrs.frozen(kw_only=True)
class Resolution:
    """What recovery did with one unanswered call.

    Attributes:
        branch_id: the branch.
        call_id: the tool-call id.
        function: the tool name.
        effect: the effect class it was judged by.
        action: ``rerun``, ``interrupted``, ``reconciled``, ``not_started``, or ``left``
            (no tool was given to re-run it); for a call parked for approval
            (:meth:`Journal.resume <lionexec.journal.Journal.resume>`): ``approved`` (run
            now), ``rejected`` or ``expired`` (answered ``denied``), ``awaiting_approval``
            (left waiting), or ``resumed_elsewhere`` (another resume, in another process or
            journal object, holds the call: nothing was run or recorded here; *outcome* is
            the call's outcome if it was answered by then, else ``None``); for a call
            submitted to workers (:meth:`Journal.submit`): ``queued`` (left to them) or
            ``from_queue`` (the workers' answer recorded).
        outcome: the outcome of its response (``None`` when left).
        attempts: the attempts its response counts.
    """

    branch_id: str
    call_id: str
    function: str
    effect: str
    action: Action
    outcome: ActionOutcome | None
    attempts: int


@attrs.frozen
class RecoveryReport:
    """Every resolution, in the order the calls were found."""

    resolutions: tuple[Resolution, ...]

    def counts(self) -> dict[str, int]:
        """How many calls each action resolved."""
        counts: dict[str, int] = {}
        for resolution in self.resolutions:
            counts[resolution.action] = counts.get(resolution.action, 0) + 1
        return counts


def registry_of(
    tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None,
) -> ActionManager | None:
    """*tools* as a registry: an ``ActionManager`` as it is, tools registered in a new one."""
    if tools is None or isinstance(tools, ActionManager):
        return tools
    registry = ActionManager()
    registry.register_tools(list(tools))
    return registry


def as_journal_error(group: BaseExceptionGroup[Any]) -> JournalError | None:
    """The first of *group*'s errors if every one is a
    :class:`~lionexec.journal.JournalError` (a branch that recovery or a resume opened
    failed to commit as it closed: a journal fault, raised as itself), else ``None``."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    if leaves and all(isinstance(leaf, JournalError) for leaf in leaves):
        first = leaves[0]
        assert isinstance(first, JournalError)
        return first
    return None
