"""Calls a stopped batch left without a response: each recorded, then announced.

A batch stopped by a cancellation (or another ``BaseException``), or a sequential batch
stopped by a failure, leaves calls that never started, or never finished; each gets its one
response here, synchronously and KI-protected, and is then announced in a shielded scope
bounded by the branch's ``cancel_grace``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from lionexec.conversation import ActionOutcome, ErrorInfo

from ._scope import CallScope

if TYPE_CHECKING:
    from ._transaction import CallTransaction

__all__ = [
    "announce_interrupted",
    "answer_unanswered",
    "interruption",
    "record_unanswered",
]


def interruption(exc: BaseException) -> ErrorInfo:
    """How a call cut short by *exc* is described (a stable text, with no task addresses)."""
    if isinstance(exc, trio.Cancelled):
        return ErrorInfo("Cancelled", "the call was cancelled before it finished")
    name = type(exc).__name__
    return ErrorInfo(name, f"the call was interrupted by {name} before it finished")


async def answer_unanswered(
    scope: CallScope, transactions: Sequence[CallTransaction], exc: BaseException
) -> None:
    """Record ``cancelled`` for every call of a stopped batch that has no response yet.

    Those are the calls that never started (queued behind a limiter or a throttle, or after
    the failure that stopped a sequential batch). Recorded synchronously
    (:func:`record_unanswered`), then announced, shielded and bounded.
    """
    stopped = record_unanswered(scope, transactions, exc)
    if stopped:
        await announce_interrupted(scope, stopped)


@trio.lowlevel.enable_ki_protection
def record_unanswered(
    scope: CallScope, transactions: Sequence[CallTransaction], exc: BaseException
) -> list[CallTransaction]:
    """Record every unanswered call of a batch stopped by *exc*; return those calls.

    One synchronous, KI-protected step, reason included: call it first thing in the
    handler, so that no ``KeyboardInterrupt`` can come between the stop and the record. A
    call whose request never reached the history (the batch was stopped before it was
    admitted) is left out: there is nothing to answer. Each is recorded as
    :meth:`CallTransaction._cut_short` says (its event decides: completed, failed, or
    ``cancelled``).
    """
    reason = (
        interruption(exc)
        if not isinstance(exc, Exception)
        else ErrorInfo("NotStarted", f"the batch stopped at an earlier failure: {exc!r}")
    )
    history = scope.history
    stopped = [t for t in transactions if t.response is None and t.request.id in history]
    for transaction in stopped:
        transaction._cut_short(ActionOutcome.CANCELLED, reason)
    return stopped


async def announce_interrupted(scope: CallScope, transactions: list[CallTransaction]) -> None:
    """Announce recorded calls while a cancellation is in flight: shielded, but bounded.

    The scope is shielded so the hooks, observer and callbacks can run at all, and its
    deadline (``cancel_grace`` seconds) keeps the cancellation from being held up by a slow
    one.
    """
    with trio.CancelScope(shield=True) as cancel_scope:
        cancel_scope.deadline = trio.current_time() + scope.cancel_grace
        for transaction in transactions:
            try:
                await transaction.announce(cancel_scope.deadline)
            except Exception as exc:  # (announce reports its seams' failures: a last guard)
                scope.failures.failed("announce", exc, call_id=transaction.call_id)
