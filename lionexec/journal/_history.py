"""A branch's history as the journal keeps it: messages to records and back, call rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from lionexec import _unstructure
from lionexec._jsonable import is_flat_json, is_unicode, json_encoder, jsonable
from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionRequestContent,
    ActionResponse,
    ActionResponseContent,
    ErrorInfo,
    Message,
    MessageManager,
)
from lionexec.conversation._serde import _output_json
from lionexec.engine import EventStatus
from lionexec.errors import HistoryError

from ._keys import stored_json
from .backends.base import DONE, CallRow, MessageRow
from .errors import JournalError

__all__ = [
    "JournaledCall",
    "dumps_record",
    "extend_history",
    "load_history",
    "message_body",
    "read_message",
    "record_of",
    "recorded_content",
]


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


def message_body(message: Message, message_id: str | None = None) -> str:
    """*message* as the journal stores it: :func:`dumps_record` of its record (a request's
    ``action_response_id`` left out as ``null``: it is linked again on loading).
    *message_id*: the text of its id, if the caller has it already.

    A request or a response of the act layer's own classes (what every journaled call
    writes, twice) is written straight to its text, without the converter's generic path
    (about a quarter of a journaled call's Python on the trio thread went to it): the same
    text, field for field (a test compares the two on hostile values). Any other message, a
    subclass, or text that UTF-8 cannot hold takes the converter's path.
    """
    cls = type(message)
    if cls is ActionRequest or cls is ActionResponse:
        sender, recipient = message.sender, message.recipient
        head = (
            f'{{"id":"{str(message.id) if message_id is None else message_id}",'
            f'"created_at":{_float(message.created_at)},'
            f'"sender":{"null" if sender is None else _string(sender)},'
            f'"recipient":{"null" if recipient is None else _string(recipient)},'
        )
    if cls is ActionRequest:
        content = message.content  # type: ignore[attr-defined]
        if type(content) is ActionRequestContent:
            raw = content.raw_arguments
            text = (
                f'{head}"content":{{"function":{_string(content.function)},'
                f'"arguments":{arguments_json(content.arguments)},"action_response_id":null,'
                f'"call_id":{_string(content.call_id)},'
                f'"raw_arguments":{"null" if raw is None else _string(raw)}}},'
                '"kind":"action_request","role":"action"}'
            )
            if is_unicode(text):  # (else a lone surrogate: the converter's path)
                return text
    elif cls is ActionResponse:
        content = message.content  # type: ignore[attr-defined]
        error = content.error
        if type(content) is ActionResponseContent and (error is None or type(error) is ErrorInfo):
            output = _output(content.output)
            request_id = content.action_request_id
            linked = "null" if request_id is None else f'"{request_id}"'
            text = (
                f'{head}"content":{{"function":{_string(content.function)},'
                f'"arguments":{arguments_json(content.arguments)},"output":{output},'
                f'"action_request_id":{linked},'
                f'"error":{"null" if error is None else _error(error)},'
                # (str enums: their text is their value)
                f'"outcome":{_string(content.outcome)},"status":{_string(content.status)},'
                f'"attempts":{_int(content.attempts)}}},'
                '"kind":"action_response","role":"action"}'
            )
            if is_unicode(text):  # (else a lone surrogate: the converter's path)
                return text
    record = record_of(message)
    if isinstance(message, ActionRequest):
        record["content"]["action_response_id"] = None  # linked again on loading
    return dumps_record(record)


def arguments_json(arguments: Any) -> str:
    """``_dumps(jsonable(arguments))``: a call's arguments as compact strict JSON, in their
    order. A flat dict of plain values (most calls' arguments) is its own rendering
    (:func:`~lionexec._jsonable.is_flat_json`): encoded as it is, without a converted copy."""
    if type(arguments) is dict and is_flat_json(arguments):
        return _dumps(arguments)
    return _dumps(jsonable(arguments))


def _output(output: Any) -> str:
    """A response's output as the converter's hook renders it, as JSON text. (A string, or a
    small int, is written as it is: a lone surrogate in the string fails the caller's UTF-8
    check, which then takes the converter's path, where it becomes U+FFFD.)"""
    kind = type(output)
    if kind is str:
        return _string(output)
    if kind is int and output.bit_length() < _SMALL_INT_BITS:
        return _int(output)
    if kind is dict:  # (a mapping is no content part: the hook is jsonable)
        return arguments_json(output)
    # (an output of these types is no content part: the converter's hook is jsonable)
    return _dumps(jsonable(output) if kind in _PLAIN else _output_json(output))


def _error(error: ErrorInfo) -> str:
    return f'{{"type":{_string(error.type)},"message":{_string(error.message)}}}'


_string = json.encoder.encode_basestring
#: How json writes a float and an int (the C encoder calls the same methods).
_float = float.__repr__
_int = int.__repr__
_PLAIN = frozenset({float, bool, type(None)})
#: Ints of fewer bits print in fewer digits than Python's limit (as in lionexec._jsonable).
_SMALL_INT_BITS = 2000


def recorded_content(row: CallRow) -> ActionResponseContent:
    """The response content recorded for a done call."""
    assert row.response is not None
    record = stored_json(row.response, f"response of call {row.call_id!r}")
    message = read_message(record)
    assert isinstance(message, ActionResponse)
    return message.content


def load_history(branch_id: str, rows: Sequence[MessageRow]) -> MessageManager:
    """Rebuild a history from its rows (responses link their requests again).

    The rows hold positions 0, 1, 2, ... (a branch's messages are written in order, never
    removed); a position missing raises :class:`~lionexec.journal.JournalError` naming it.
    """
    return extend_history(MessageManager(), branch_id, rows)


def extend_history(
    history: MessageManager, branch_id: str, rows: Sequence[MessageRow]
) -> MessageManager:
    """Append the messages of *rows* to *history*, which holds positions ``0`` to
    ``len(history) - 1`` of branch *branch_id*; the rows hold the positions after, in order.
    Returns *history*. Raises as :func:`load_history` (*history* then holds the messages
    before the one that failed)."""
    for position, row in enumerate(rows, len(history)):
        if row.seq != position:
            raise JournalError(
                f"branch {branch_id} has no message at position {position} (the next one "
                f"stored is at {row.seq}): the journal was changed or damaged outside lionexec"
            )
        try:
            message = read_message(json.loads(row.body))
            history.add_message(message)
        except (ValueError, TypeError, KeyError, HistoryError, Exception) as exc:
            raise JournalError(
                f"message {row.seq} ({row.message_id}) of branch {branch_id} cannot be read: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    return history


def read_message(record: Any) -> Message:
    """The message a stored *record* (parsed JSON) holds, as the converter structures it.

    A request or a response in the shape :func:`message_body` writes, every value of the
    JSON type its field takes, is built by its classes directly, without the converter's
    generic path (a message loads in about 10 µs instead of 14 µs; a journaled server loads
    its conversation's whole history for every request); the classes' own converters and
    validators still run. Anything else (another kind, a key more or less, a value of
    another type, or one the classes refuse) is structured by the converter, whose errors
    are the ones raised: the same message, or the same error, either way (a test compares
    the two paths).
    """
    if type(record) is dict and record.get("role") == "action" and record.keys() == _KEYS:
        try:
            message = _read_call_message(record)
        except Exception:  # (the converter says what is wrong with it)
            message = None
        if message is not None:
            return message
    return _unstructure.converter.structure(record, Message)


def _read_call_message(record: dict[str, Any]) -> Message | None:
    """:func:`read_message`'s direct path, or ``None`` where the record is not in the shape
    it reads."""
    kind, content = record["kind"], record["content"]
    created_at, sender, recipient = record["created_at"], record["sender"], record["recipient"]
    if (
        type(content) is not dict
        or type(record["id"]) is not str
        or (type(created_at) is not float and type(created_at) is not int)
        or not (sender is None or type(sender) is str)
        or not (recipient is None or type(recipient) is str)
        or type(content.get("function")) is not str
        or type(content.get("arguments")) is not dict
    ):
        return None
    cls: Callable[..., Message]
    built: Any  # (its content, of the class the message takes)
    if kind == "action_request" and content.keys() == _REQUEST_KEYS:
        link, call_id, raw = (
            content["action_response_id"],
            content["call_id"],
            content["raw_arguments"],
        )
        if (
            not (link is None or type(link) is str)
            or type(call_id) is not str
            or not (raw is None or type(raw) is str)
        ):
            return None
        cls, built = (
            ActionRequest,
            ActionRequestContent(
                function=content["function"],
                arguments=content["arguments"],
                action_response_id=link,
                call_id=call_id,
                raw_arguments=raw,
            ),
        )
    elif kind == "action_response" and content.keys() == _RESPONSE_KEYS:
        link, error, attempts = content["action_request_id"], content["error"], content["attempts"]
        outcome, status = content["outcome"], content["status"]
        if (
            not (link is None or type(link) is str)
            or type(outcome) is not str
            or type(status) is not str
            or type(attempts) is not int
            or not (error is None or (type(error) is dict and error.keys() == _ERROR_KEYS))
        ):
            return None
        if error is not None:
            name, text = error["type"], error["message"]
            if type(name) is not str or type(text) is not str:
                return None
            error = ErrorInfo(type=name, message=text)
        cls, built = (
            ActionResponse,
            ActionResponseContent(
                function=content["function"],
                arguments=content["arguments"],
                output=content["output"],
                action_request_id=link,
                error=error,
                outcome=ActionOutcome(outcome),
                status=EventStatus(status),
                attempts=attempts,
            ),
        )
    else:
        return None
    return cls(
        id=uuid.UUID(record["id"]),
        created_at=created_at,
        sender=sender,
        recipient=recipient,
        content=built,
    )


#: The keys of a stored request or response, of their contents, of an error (spelled out,
#: not read from the classes: a field added to them sends records to the converter, rather
#: than being left out by the direct path).
_KEYS: Final = frozenset(("id", "created_at", "sender", "recipient", "content", "kind", "role"))
_REQUEST_KEYS: Final = frozenset(
    ("function", "arguments", "action_response_id", "call_id", "raw_arguments")
)
_RESPONSE_KEYS: Final = frozenset(
    (
        "function",
        "arguments",
        "output",
        "action_request_id",
        "error",
        "outcome",
        "status",
        "attempts",
    )
)
_ERROR_KEYS: Final = frozenset(("type", "message"))


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
