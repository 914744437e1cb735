"""The messages a conversation history holds.

Every message is a frozen attrs record with an ``id`` (a :class:`~uuid.UUID`), a ``created_at``
timestamp (``time.time()``), a ``role``, an optional ``sender`` and ``recipient``, and a
``content``. Messages compare by value and hash by id.

The only state that ever changes after construction is the pair of link fields inside action
contents (:attr:`ActionRequestContent.action_response_id` and
:attr:`ActionResponseContent.action_request_id`), which the history
(:class:`~lionexec.conversation.MessageManager`) writes when it records a request and its
response together.
"""

from __future__ import annotations

import enum
import math
import os
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final

import attrs

from .._ids import uuid4
from .._jsonable import jsonable as strict_json
from .._slots import builder
from ..engine._status import EventStatus

__all__ = [
    "OUTCOME_STATUS",
    "TURN_APIS",
    "ActionOutcome",
    "ActionRequest",
    "ActionRequestContent",
    "ActionResponse",
    "ActionResponseContent",
    "AssistantResponse",
    "ErrorInfo",
    "Instruction",
    "Message",
    "MessageRole",
    "System",
    "new_call_id",
]


class MessageRole(enum.StrEnum):
    """Who a message speaks for. Both halves of a tool call have the ``action`` role."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    ACTION = "action"


class ActionOutcome(enum.StrEnum):
    """What became of one proposed tool call, as the model is told.

    Each outcome has exactly one event status (:data:`OUTCOME_STATUS`):

    ============= =============== ===============================================
    outcome       event status    meaning
    ============= =============== ===============================================
    ``completed`` ``completed``   the tool ran and returned (``None`` included)
    ``failed``    ``failed``      the tool ran and raised
    ``denied``    ``skipped``     never ran: a gate, policy or pre-hook said no
    ``invalid``   ``aborted``     never ran: unknown tool or malformed arguments
    ``timed_out`` ``cancelled``   started, and was cancelled by our timeout
    ``cancelled`` ``cancelled``   started or queued, and was cancelled
    ============= =============== ===============================================

    ``interrupted`` (event status ``failed``): the call started and the process died before
    its outcome was recorded, so it may or may not have taken effect. Only journal recovery
    records it, for tools that are not safe to run again. It maps to ``failed``, not
    ``cancelled``: nothing in the process cancelled it, and it must not be redelivered as if
    it had not run.

    ``awaiting_approval`` (event status ``pending``, the one outcome that is not final): an
    ``escalate`` decision parked the call in a durable journal to wait for an approval. Only
    ``act()``'s result for that call carries it; it is never recorded in a history (the
    request stays unanswered until the approval is decided, then gets its one response).
    """

    COMPLETED = "completed"
    FAILED = "failed"
    DENIED = "denied"
    INVALID = "invalid"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    AWAITING_APPROVAL = "awaiting_approval"


#: The event status every outcome is recorded with.
OUTCOME_STATUS: Final[Mapping[ActionOutcome, EventStatus]] = MappingProxyType(
    {
        ActionOutcome.COMPLETED: EventStatus.COMPLETED,
        ActionOutcome.FAILED: EventStatus.FAILED,
        ActionOutcome.DENIED: EventStatus.SKIPPED,
        ActionOutcome.INVALID: EventStatus.ABORTED,
        ActionOutcome.TIMED_OUT: EventStatus.CANCELLED,
        ActionOutcome.CANCELLED: EventStatus.CANCELLED,
        ActionOutcome.INTERRUPTED: EventStatus.FAILED,
        ActionOutcome.AWAITING_APPROVAL: EventStatus.PENDING,
    }
)


def new_call_id() -> str:
    """A fresh tool-call id, valid for both OpenAI and Anthropic (``call_`` + 32 hex digits)."""
    return "call_" + os.urandom(16).hex()


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _call_id(value: str | None) -> str:
    if value is None:
        return new_call_id()
    if not isinstance(value, str) or not value:
        raise TypeError(f"call_id must be a non-empty string or None, not {value!r}")
    return value


def _arguments(value: Mapping[str, Any]) -> dict[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise TypeError(f"arguments must be a mapping, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"argument names must be strings, not {key!r}")
    return dict(value)


_SHARED: Final[dict[str, Any]] = {}  # placeholder replaced at once in ActionResponse.create


def _finite(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not math.isfinite(value):  # a saved history must stay strict JSON
        raise ValueError(f"{attribute.name} must be a finite timestamp, not {value!r}")


def _optional_uuid(value: uuid.UUID | str | None) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(value)


# -- contents ----------------------------------------------------------------------------------


@attrs.frozen(weakref_slot=False)  # one per failed call is kept: 8 B each
class ErrorInfo:
    """A failure as the model and the history see it: the exception type name and its text."""

    type: str = attrs.field(validator=attrs.validators.instance_of(str))
    message: str = attrs.field(validator=attrs.validators.instance_of(str))

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """Describe *exc*; never raises, even if its ``__str__`` does."""
        try:
            message = str(exc)
        except Exception:
            message = f"<unprintable {type(exc).__name__}>"
        # interned: a built-in exception type makes its __name__ anew each time, 59 B per
        # kept failure, and a history may keep many failures
        name = sys.intern(type(exc).__name__)
        if cls is ErrorInfo:  # both are strings: no validator to run (once per failed call)
            return _build_error(name, message)
        return cls(type=name, message=message)


@attrs.define(kw_only=True, weakref_slot=False)  # one per call is kept: 8 B each
class ActionRequestContent:
    """One tool call a model proposed.

    Attributes:
        function: the tool name as proposed (it may name no registered tool).
        arguments: the proposed keyword arguments (copied into a plain ``dict``).
        action_response_id: the id of the response that answers this call, once recorded.
        call_id: the provider's tool-call id (OpenAI ``tool_calls[].id``, Responses
            ``function_call.call_id``, Anthropic ``tool_use.id``). ``None`` generates one
            (:func:`new_call_id`), so every exported call has an id.
        raw_arguments: the argument string exactly as the model sent it (OpenAI Chat
            Completions and Responses send a JSON string), or ``None``. Exports to those two
            APIs replay it as it was, even when it was malformed and the call ended
            ``invalid`` (then ``arguments`` is empty).

    Only ``action_response_id`` can be assigned after construction; the history writes it when
    it links the pair.
    """

    function: str = attrs.field(
        validator=attrs.validators.instance_of(str), on_setattr=attrs.setters.frozen
    )
    arguments: dict[str, Any] = attrs.field(
        factory=dict, converter=_arguments, on_setattr=attrs.setters.frozen
    )
    # Converted when constructed (a record may name it as a string); the history assigns a
    # UUID when it links the pair, so assignment skips the converter.
    action_response_id: uuid.UUID | None = attrs.field(
        default=None, converter=_optional_uuid, on_setattr=attrs.setters.NO_OP
    )
    call_id: str = attrs.field(default=None, converter=_call_id, on_setattr=attrs.setters.frozen)
    raw_arguments: str | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(str)),
        on_setattr=attrs.setters.frozen,
    )


def _outcome(value: ActionOutcome | str) -> ActionOutcome:
    return value if type(value) is ActionOutcome else ActionOutcome(value)


def _status(value: EventStatus | str) -> EventStatus:
    return value if type(value) is EventStatus else EventStatus(value)


def _default_status(content: ActionResponseContent) -> EventStatus:
    return OUTCOME_STATUS[content.outcome]


@attrs.define(kw_only=True, weakref_slot=False)  # one per call is kept: 8 B each
class ActionResponseContent:
    """What became of one tool call.

    ``output`` is whatever the tool returned; ``None``, ``0``, ``""``, ``[]`` and ``{}`` are all
    real outputs. ``error`` is set exactly when the call did not complete, and ``status`` is
    always the event status of ``outcome`` (:data:`OUTCOME_STATUS`; it is filled in when not
    given). Both are checked at construction. Only ``action_request_id`` can be assigned
    afterwards; the history writes it when it links the pair.

    Attributes:
        function: the tool name, copied from the request.
        arguments: the arguments, copied from the request.
        output: the tool's return value, or ``None`` when it produced none.
        action_request_id: the id of the request this answers.
        error: why the call did not complete, or ``None`` if it did.
        outcome: what became of the call.
        status: the event status mirroring ``outcome``.
        attempts: how many times the tool was invoked (``0`` for a call that never ran).
    """

    function: str = attrs.field(
        validator=attrs.validators.instance_of(str), on_setattr=attrs.setters.frozen
    )
    arguments: dict[str, Any] = attrs.field(
        factory=dict, converter=_arguments, on_setattr=attrs.setters.frozen
    )
    output: Any = attrs.field(default=None, on_setattr=attrs.setters.frozen)
    action_request_id: uuid.UUID | None = attrs.field(
        default=None, converter=_optional_uuid, on_setattr=attrs.setters.NO_OP
    )
    error: ErrorInfo | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(ErrorInfo)),
        on_setattr=attrs.setters.frozen,
    )
    outcome: ActionOutcome = attrs.field(
        default=ActionOutcome.COMPLETED, converter=_outcome, on_setattr=attrs.setters.frozen
    )
    status: EventStatus = attrs.field(
        default=attrs.Factory(_default_status, takes_self=True),
        converter=_status,
        on_setattr=attrs.setters.frozen,
    )
    attempts: int = attrs.field(default=1, on_setattr=attrs.setters.frozen)

    def __attrs_post_init__(self) -> None:
        expected = OUTCOME_STATUS[self.outcome]
        if self.status is not expected:
            raise ValueError(
                f"an action response with outcome {self.outcome.value!r} has status "
                f"{expected.value!r}, not {self.status.value!r}"
            )
        completed = self.outcome is ActionOutcome.COMPLETED
        if completed and self.error is not None:
            raise ValueError("a completed action response cannot carry an error")
        if not completed and self.error is None:
            raise ValueError(
                f"an action response with outcome {self.outcome.value!r} must carry an error"
            )
        attempts = self.attempts
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0:
            raise ValueError(f"attempts must be a non-negative int, not {attempts!r}")

    @property
    def success(self) -> bool:
        """True only when the call completed (status ``completed``)."""
        return self.status is EventStatus.COMPLETED


# -- messages ----------------------------------------------------------------------------------


def _request_ids(values: Iterable[uuid.UUID | str | ActionRequest]) -> tuple[uuid.UUID, ...]:
    ids: list[uuid.UUID] = []
    for value in values:
        if isinstance(value, ActionRequest):
            ids.append(value.id)
        elif isinstance(value, uuid.UUID):
            ids.append(value)
        elif isinstance(value, str):
            ids.append(uuid.UUID(value))
        else:
            raise TypeError(
                f"tool_calls holds action requests or their ids, not {type(value).__name__}"
            )
    return tuple(ids)


@attrs.frozen(kw_only=True)
class Message:
    """Fields every message has. Use one of the concrete message classes."""

    #: The role every message of this class has.
    role: ClassVar[MessageRole]
    #: The tag that names this class in a serialized history.
    kind: ClassVar[str]

    id: uuid.UUID = attrs.field(factory=uuid4, validator=attrs.validators.instance_of(uuid.UUID))
    created_at: float = attrs.field(factory=time.time, converter=float, validator=_finite)
    sender: str | None = attrs.field(default=None, converter=_optional_str)
    recipient: str | None = attrs.field(default=None, converter=_optional_str)

    def __attrs_pre_init__(self) -> None:
        if type(self) is Message:
            raise TypeError("Message is a base class; create a System, Instruction, ...")


@attrs.frozen(kw_only=True)
class System(Message):
    """System instructions for the model."""

    role: ClassVar[MessageRole] = MessageRole.SYSTEM
    kind: ClassVar[str] = "system"

    content: str = attrs.field(validator=attrs.validators.instance_of(str))


@attrs.frozen(kw_only=True)
class Instruction(Message):
    """A user turn."""

    role: ClassVar[MessageRole] = MessageRole.USER
    kind: ClassVar[str] = "instruction"

    content: str = attrs.field(validator=attrs.validators.instance_of(str))


def _api(value: str | None) -> str | None:
    if value is not None and value not in TURN_APIS:
        raise ValueError(f"api must be one of {sorted(TURN_APIS)} or None, not {value!r}")
    return value


def _blocks(values: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    blocks: list[dict[str, Any]] = []
    for value in values:
        if not isinstance(value, Mapping):
            raise TypeError(f"blocks holds JSON objects, not {type(value).__name__}")
        blocks.append(strict_json(value))  # a private, strict-JSON copy
    return tuple(blocks)


#: The APIs an :class:`AssistantResponse` can be recorded from verbatim: OpenAI Chat
#: Completions, Anthropic Messages, OpenAI Responses (the provider format names,
#: :data:`lionexec.conversation.formats.FORMAT_NAMES`; a deprecated alias is not recorded).
TURN_APIS: Final = frozenset({"chat", "anthropic", "responses"})


@attrs.frozen(kw_only=True)
class AssistantResponse(Message):
    """A model turn: its text, and the tool calls it proposed.

    ``tool_calls`` holds the ids of the :class:`ActionRequest` messages for the calls this turn
    proposed, in the order proposed; pass the requests themselves or their ids. The requests
    may be recorded in the history later (they usually are: the turn is written, then each call
    runs). Exports place those calls, and their results, right after this turn.

    A turn read from a provider's own message (see ``Branch.act``) also keeps what that
    provider sent, so the export to the same API replays it:

    Attributes:
        content: the turn's text (text blocks or output messages joined by newlines).
        tool_calls: the ids of the requests this turn proposed, in order.
        api: ``"chat"``, ``"anthropic"`` or ``"responses"`` (the provider format): the API
            whose shape ``blocks`` has; ``None`` for a turn built by hand.
        blocks: the turn's content as the model sent it, verbatim as JSON objects: Anthropic
            content blocks (``text``, ``thinking`` and ``redacted_thinking`` with their
            signatures, ``tool_use``) or Responses output items (``reasoning`` with its
            ``encrypted_content``, ``message``, ``function_call``), in order. Empty for Chat
            Completions, whose text is ``content``. The tool-call blocks mark where each call
            stood; the export fills them from the recorded requests.
    """

    role: ClassVar[MessageRole] = MessageRole.ASSISTANT
    kind: ClassVar[str] = "assistant_response"

    content: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    tool_calls: tuple[uuid.UUID, ...] = attrs.field(default=(), converter=_request_ids)
    api: str | None = attrs.field(default=None, converter=_api)
    blocks: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=_blocks, hash=False)


@attrs.frozen(kw_only=True)
class ActionRequest(Message):
    """One tool call a model proposed. See :class:`ActionRequestContent`."""

    role: ClassVar[MessageRole] = MessageRole.ACTION
    kind: ClassVar[str] = "action_request"

    content: ActionRequestContent = attrs.field(
        validator=attrs.validators.instance_of(ActionRequestContent), hash=False
    )

    @classmethod
    def create(
        cls,
        function: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        raw_arguments: str | None = None,
        sender: object = None,
        recipient: object = None,
    ) -> ActionRequest:
        """A request for ``function(**arguments)``; *call_id* ``None`` generates one.

        *raw_arguments* is the argument string as the model sent it, if it sent one.
        """
        content = ActionRequestContent(
            function=function,
            arguments=arguments or {},
            call_id=call_id,
            raw_arguments=raw_arguments,
        )
        return cls(content=content, sender=sender, recipient=recipient)

    @classmethod
    def _proposed(
        cls,
        function: str,
        arguments: dict[str, Any],
        call_id: str,
        raw_arguments: str | None,
        sender: str | None,
        recipient: str | None,
    ) -> ActionRequest:
        """:meth:`create` for a proposal the act layer has read, which checked every value.

        Trusted: no converter or validator runs. *function* and *call_id* are non-empty
        strings, *arguments* is a private ``dict`` with string keys (the reader's deep copy:
        it is kept, not copied again), *raw_arguments* a string or ``None``, *sender* and
        *recipient* strings or ``None``. Building the request was the largest single cost of
        an ``act()`` call. A test checks it builds what :meth:`create` builds.
        """
        if cls is not ActionRequest:  # a subclass: its own initializer
            return cls.create(
                function,
                arguments,
                call_id=call_id,
                raw_arguments=raw_arguments,
                sender=sender,
                recipient=recipient,
            )
        content = _build_request_content(function, arguments, None, call_id, raw_arguments)
        return _build_request(uuid4(), time.time(), sender, recipient, content)

    @property
    def function(self) -> str:
        return self.content.function

    @property
    def arguments(self) -> dict[str, Any]:
        return self.content.arguments

    @property
    def call_id(self) -> str:
        return self.content.call_id

    @property
    def raw_arguments(self) -> str | None:
        return self.content.raw_arguments

    @property
    def action_response_id(self) -> uuid.UUID | None:
        return self.content.action_response_id


@attrs.frozen(kw_only=True)
class ActionResponse(Message):
    """What became of one tool call. See :class:`ActionResponseContent` and :class:`ActionOutcome`.

    How the act layer maps a call's fate to an outcome and the event status it records:
    completed → ``COMPLETED``; failed → ``FAILED``; denied → ``SKIPPED`` (never ran, by
    policy); invalid → ``ABORTED`` (never ran, malformed proposal); timed_out → ``CANCELLED``
    (the event was cancelled by our timeout); cancelled → ``CANCELLED``.
    """

    role: ClassVar[MessageRole] = MessageRole.ACTION
    kind: ClassVar[str] = "action_response"

    content: ActionResponseContent = attrs.field(
        validator=attrs.validators.instance_of(ActionResponseContent), hash=False
    )

    @classmethod
    def create(
        cls,
        request: ActionRequest,
        *,
        output: Any = None,
        error: ErrorInfo | None = None,
        outcome: ActionOutcome = ActionOutcome.COMPLETED,
        attempts: int = 1,
        sender: object = None,
        recipient: object = None,
    ) -> ActionResponse:
        """The response to *request*, copying its function and arguments and naming it.

        The request's side of the link is written when the pair is recorded
        (:meth:`MessageManager.record_action`).
        """
        content = ActionResponseContent(
            function=request.content.function,
            arguments=_SHARED,
            output=output,
            action_request_id=request.id,
            error=error,
            outcome=outcome,
            attempts=attempts,
        )
        # The request's arguments are already a private copy, and the pair records the same
        # call: share that dict rather than keep a second copy per call.
        object.__setattr__(content, "arguments", request.content.arguments)
        return cls(content=content, sender=sender, recipient=recipient)

    @property
    def function(self) -> str:
        return self.content.function

    @property
    def arguments(self) -> dict[str, Any]:
        return self.content.arguments

    @classmethod
    def _recorded(
        cls,
        request: ActionRequest,
        output: Any,
        error: ErrorInfo | None,
        outcome: ActionOutcome,
        attempts: int,
        sender: str | None,
        recipient: str | None,
    ) -> ActionResponse:
        """:meth:`create` for the act transaction, which produced every value itself.

        Trusted: no converter or validator runs (the outcome is an :class:`ActionOutcome`, the
        error matches it, *attempts* is an int, *sender*/*recipient* are strings). About a
        third of :meth:`create`'s cost, paid on every call ``act()`` answers. A test checks
        it builds what :meth:`create` builds.
        """
        if cls is not ActionResponse:  # a subclass: its own initializer
            return cls.create(
                request,
                output=output,
                error=error,
                outcome=outcome,
                attempts=attempts,
                sender=sender,
                recipient=recipient,
            )
        recorded = request.content
        content = _build_response_content(
            recorded.function,
            recorded.arguments,
            output,
            request.id,
            error,
            outcome,
            OUTCOME_STATUS[outcome],
            attempts,
        )
        return _build_response(uuid4(), time.time(), sender, recipient, content)

    @property
    def output(self) -> Any:
        return self.content.output

    @property
    def error(self) -> ErrorInfo | None:
        return self.content.error

    @property
    def outcome(self) -> ActionOutcome:
        return self.content.outcome

    @property
    def status(self) -> EventStatus:
        return self.content.status

    @property
    def success(self) -> bool:
        """True only when the call completed."""
        return self.content.success

    @property
    def action_request_id(self) -> uuid.UUID | None:
        return self.content.action_request_id


# The trusted constructors' builders (see lionexec._slots).
_build_error: Final = builder(ErrorInfo, "type", "message")
_build_request_content: Final = builder(
    ActionRequestContent, "function", "arguments", "action_response_id", "call_id", "raw_arguments"
)
_build_response_content: Final = builder(
    ActionResponseContent,
    "function",
    "arguments",
    "output",
    "action_request_id",
    "error",
    "outcome",
    "status",
    "attempts",
)
_build_request: Final = builder(
    ActionRequest, "id", "created_at", "sender", "recipient", "content"
)
_build_response: Final = builder(
    ActionResponse, "id", "created_at", "sender", "recipient", "content"
)
