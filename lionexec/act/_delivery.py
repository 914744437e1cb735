"""A recorded call's messages told to the history's ``on_message_added`` callbacks: each
callback hears of each message exactly once, whatever is cancelled around it.

The callbacks are how evidence is mirrored (a server-sent-events stream, a copy elsewhere),
and a mirror that misses records is not a mirror. So a cancellation that arrives while a
call is announced (in a ``tool.post`` hook, say, or in one of the callbacks themselves) does
not skip them: the callbacks not yet told are told in a shielded scope, bounded by the
branch's ``cancel_grace``, and then the cancellation propagates.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from lionexec._failures import call_user
from lionexec.conversation import ActionRequest, ActionResponse, MessageCallback, MessageManager

__all__ = ["tell_callbacks", "tell_callbacks_shielded"]

_Pending = Sequence[tuple[ActionRequest | ActionResponse, MessageCallback]]


def _pending(
    history: MessageManager, messages: Sequence[ActionRequest | ActionResponse]
) -> list[tuple[ActionRequest | ActionResponse, MessageCallback]]:
    """Each (message, callback) pair to tell, in the history's order: each message to every
    callback, then the next message."""
    callbacks = list(history.on_message_added)
    return [(message, callback) for message in messages for callback in callbacks]


async def tell_callbacks(
    history: MessageManager,
    messages: Sequence[ActionRequest | ActionResponse],
    call_id: str,
    grace: float,
    deadline: float | None = None,
) -> None:
    """Tell every callback of *history* each of *messages*, in order. A callback's
    ``Exception`` is reported to the history's failures and the others still run.

    Not a checkpoint by itself (a plain callback runs without yielding). If a cancellation
    (or any ``BaseException``) comes out of a callback, the callbacks not yet told are told
    as :func:`tell_callbacks_shielded` says, then it propagates.
    """
    pending = _pending(history, messages)
    told = 0
    try:
        while told < len(pending):
            message, callback = pending[told]
            told += 1
            await _tell(history, message, callback, call_id)
    except BaseException:
        await _shielded(history, pending[told:], call_id, grace, deadline)
        raise


async def tell_callbacks_shielded(
    history: MessageManager,
    messages: Sequence[ActionRequest | ActionResponse],
    call_id: str,
    grace: float,
    deadline: float | None = None,
) -> None:
    """Tell every callback of *history* each of *messages* while a cancellation is in flight:
    each in a shielded scope, all by *deadline* (that of the announcement of a call being
    cancelled: its ``cancel_grace`` is not granted twice), else within *grace* seconds from
    now. Past that, an async callback is still called (it hears of the message) and
    cancelled at its first checkpoint; a plain one runs whole."""
    await _shielded(history, _pending(history, messages), call_id, grace, deadline)


async def _shielded(
    history: MessageManager,
    pending: _Pending,
    call_id: str,
    grace: float,
    deadline: float | None,
) -> None:
    if not pending:
        return
    if deadline is None:
        deadline = trio.current_time() + grace
    for message, callback in pending:
        # One scope each: a callback cut off by the deadline does not stop the next from
        # being called.
        with trio.CancelScope(shield=True, deadline=deadline):
            await _tell(history, message, callback, call_id)


async def _tell(
    history: MessageManager,
    message: ActionRequest | ActionResponse,
    callback: MessageCallback,
    call_id: str,
) -> None:
    try:
        await call_user(callback, message)
    except Exception as exc:
        history.failures.failed("message_callback", exc, call_id=call_id, culprit=callback)
