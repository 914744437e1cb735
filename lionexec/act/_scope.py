"""What a batch's calls share: their scope (the branch's collaborators), and how each call's
request and idempotency key are made."""

from __future__ import annotations

import uuid
from typing import Any

import attrs

from lionexec._failures import FailureLog
from lionexec._snapshot import snapshot
from lionexec.conversation import ActionRequest, MessageManager
from lionexec.errors import ValidationError
from lionexec.governance import BoundSeams, HookBus, PermissionPolicy, SessionObserver
from lionexec.tools import ActionManager, Tool

from ._envelope import Proposal
from ._evidence import Evidence

__all__ = ["CallScope", "idempotency_key", "new_request"]


@attrs.frozen
class CallScope:
    """What a transaction may use: the branch's collaborators, not the branch.

    Attributes:
        branch_id: the branch's id.
        branch_name: ``str(branch_id)``, as messages and call contexts name it.
        registry: resolves tool names.
        hooks: ``tool.pre`` / ``tool.post`` / ``tool.error`` / ``message.add``.
        observer: the session gate and observer, if any.
        policy: the permission policy, if any.
        evidence: where the record is written.
        history: the conversation history (its callbacks are announced).
        failures: where isolated failures are reported.
        cancel_grace: seconds announcements of a cancelled call may take.
        seams: the governance seams, bound for the scope's calls (see
            :class:`~lionexec.governance.BoundSeams`).
    """

    branch_id: uuid.UUID
    branch_name: str
    registry: ActionManager
    hooks: HookBus
    observer: SessionObserver | None
    policy: PermissionPolicy | None
    evidence: Evidence
    history: MessageManager
    failures: FailureLog
    cancel_grace: float
    #: The governance seams, bound once per scope rather than looked up once per call and
    #: seam (five lookups per governed call, a cost every call of the branch would pay).
    seams: BoundSeams = attrs.field(init=False, eq=False, repr=False)
    #: No gate, no policy and no sink: nothing of the scope stands between a resolved call
    #: and its tool but ``tool.pre`` hooks (asked per call: they may be added at any time).
    plain: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "seams", BoundSeams(self.hooks, self.observer, self.policy))
        plain = self.observer is None and self.policy is None and not self.evidence.feeds
        object.__setattr__(self, "plain", plain)


def new_request(scope: CallScope, proposal: Proposal) -> ActionRequest:
    """The request message for *proposal* (the caller's own, when it passed one).

    For a proposal ``act()`` read itself (:func:`~lionexec.act.read_batch`), which nothing
    else holds: its arguments are already the reader's private deep copy, so the request
    keeps that dict rather than a second copy (one dict fewer per call, kept as long as the
    history keeps the request). The record keeps what the model proposed, and the raw
    argument string it sent.
    """
    if proposal.request is not None:
        return proposal.request
    return proposal._new_request(proposal.arguments or {}, scope.branch_name)


def idempotency_key(branch_name: str, call_id: str, tool: Tool, arguments: dict[str, Any]) -> str:
    """A call's idempotency key: the tool's own (``"<tool>:<key>"``) or ``"<branch>/<call id>"``.

    Raises :class:`~lionexec.errors.ValidationError` if the tool's ``idempotency_key`` does
    not return a non-empty string (the call is then ``invalid``).
    """
    derive = tool.idempotency_key
    if derive is None:
        return f"{branch_name}/{call_id}"
    key = derive(snapshot(arguments))
    if not isinstance(key, str) or not key:
        raise ValidationError(
            f"the idempotency_key of tool {tool.name!r} returned {key!r}, not a non-empty string"
        )
    return f"{tool.name}:{key}"
