"""A branch's history as the journal keeps it: messages to records and back, call rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lionexec import _unstructure
from lionexec._jsonable import is_unicode, json_encoder
from lionexec.conversation import ActionResponse, ActionResponseContent, Message, MessageManager
from lionexec.errors import HistoryError

from ._keys import stored_json
from .backends.base import DONE, CallRow, MessageRow
from .errors import JournalError

__all__ = ["JournaledCall", "dumps_record", "load_history", "record_of", "recorded_content"]


@attrs.frozen(kw_only=True)
class JournaledCall:
    """A call the journal holds: it reached the write-ahead point at least once.

    Attributes:
        idempotency_key: its key.
        branch_id: the branch it belongs to.
        call_id: its tool-call id.
        request_id: the id of its request message.
        function: the tool name.
        arguments: the normalized arguments it was invoked with.
        effect: the tool's effect class when it was invoked.
        attempts: invocations started (across restarts).
        done: whether its outcome is recorded.
        outcome: the recorded outcome's value, or ``None``.
        requested_at: when it was first journaled (``time.time()``).
        finished_at: when its outcome was, or ``None``.
    """

    idempotency_key: str
    branch_id: str
    call_id: str
    request_id: str
    function: str
    arguments: Any
    effect: str
    attempts: int
    done: bool
    outcome: str | None
    requested_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: CallRow) -> JournaledCall:
        return cls(
            idempotency_key=row.key,
            branch_id=row.branch_id,
            call_id=row.call_id,
            request_id=row.request_id,
            function=row.function,
            arguments=stored_json(row.arguments, f"arguments of call {row.call_id!r}"),
            effect=row.effect,
            attempts=row.attempts,
            done=row.state == DONE,
            outcome=row.outcome,
            requested_at=row.requested_at,
            finished_at=row.finished_at,
        )


_HOOKS: dict[type, Callable[[Any], Any]] = {}


def record_of(message: Message) -> Any:
    """*message* unstructured by the converter, its class's hook looked up once (finding it
    again took a third of the converter's ``unstructure`` time, paid for every message
    journaled)."""
    cls = type(message)
    hook = _HOOKS.get(cls)
    if hook is None:
        hook = _HOOKS[cls] = _unstructure.converter.get_unstructure_hook(cls)
    return hook(message)


def recorded_content(row: CallRow) -> ActionResponseContent:
    """The response content recorded for a done call."""
    assert row.response is not None
    record = stored_json(row.response, f"response of call {row.call_id!r}")
    message = _unstructure.converter.structure(record, Message)
    assert isinstance(message, ActionResponse)
    return message.content


def load_history(branch_id: str, rows: Sequence[MessageRow]) -> MessageManager:
    """Rebuild a history from its rows (responses link their requests again).

    The rows hold positions 0, 1, 2, ... (a branch's messages are written in order, never
    removed); a position missing raises :class:`~lionexec.journal.JournalError` naming it.
    """
    history = MessageManager()
    for position, row in enumerate(rows):
        if row.seq != position:
            raise JournalError(
                f"branch {branch_id} has no message at position {position} (the next one "
                f"stored is at {row.seq}): the journal was changed or damaged outside lionexec"
            )
        try:
            message = _unstructure.converter.structure(json.loads(row.body), Message)
            history.add_message(message)
        except (ValueError, TypeError, KeyError, HistoryError, Exception) as exc:
            raise JournalError(
                f"message {row.seq} ({row.message_id}) of branch {branch_id} cannot be read: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    return history


def dumps_record(record: Any) -> str:
    """*record* (a message as the journal stores it) as compact strict JSON text that
    encodes as UTF-8.

    Non-ASCII text is kept as it is (readable in the database); a lone surrogate (a string a
    model or a tool produced, ``"\\ud800"``), which UTF-8 cannot hold, makes the whole record
    written with ``\\u`` escapes instead: lossless (reading it back gives the same string,
    so a branch's history after a restart is the one before) and stored like any other text.
    """
    text = _dumps(record)
    if is_unicode(text):
        return text
    return _dumps_ascii(record)


_dumps = json_encoder()
_dumps_ascii = json_encoder(ensure_ascii=True)
