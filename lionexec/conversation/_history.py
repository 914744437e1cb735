"""The conversation history: an ordered, id-indexed, linked record of messages."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TypeAlias, TypeVar

import attrs
import trio

from .._failures import FailureLog, ReportedFailure, call_user
from ..errors import HistoryError, MessageNotFoundError
from . import formats
from ._messages import ActionRequest, ActionResponse, AssistantResponse, Message, System

__all__ = ["CallbackFailure", "MessageCallback", "MessageManager"]

#: Called with each message added through :meth:`MessageManager.a_add_message` or passed to
#: :meth:`MessageManager.notify`. It may be a plain function or return an awaitable.
MessageCallback: TypeAlias = Callable[[Message], Awaitable[object] | object]

M = TypeVar("M", bound=Message)

_set = object.__setattr__

#: ``id()`` of every request an ``act()`` is running now, in any history of this process
#: (each is alive while here: its act holds it). Kept by the act layer; only that act answers
#: such a request, and the history refuses a response from anyone else meanwhile (a message
#: callback, say), which would replace the call's real outcome and drop its log record.
running: set[int] = set()


#: The failure record :meth:`MessageManager.notify` returns: a
#: :class:`~lionexec.ReportedFailure` whose ``where`` is ``"message_callback"``. (The name of
#: its older, callback-only predecessor.)
CallbackFailure: TypeAlias = ReportedFailure


class MessageManager:
    """An ordered conversation history, indexed by message id.

    The history keeps three invariants, checked before anything is written, so a refused change
    (:class:`~lionexec.errors.HistoryError`) leaves it exactly as it was:

    * message ids are unique;
    * every :class:`ActionResponse` comes after the :class:`ActionRequest` it answers, and the
      two name each other (``request.content.action_response_id`` and
      ``response.content.action_request_id``);
    * a request is answered at most once;
    * a tool-call id is used by one request (providers refuse a conversation that uses one
      twice). Adding a request with a call id already here is refused; a history loaded with
      one id twice (written before this rule) is kept as it is, and
      :meth:`request_for_call_id` returns the first.

    Writing is synchronous and never awaits (:meth:`add_message`, :meth:`record_action`), so it
    is never half-done, even under cancellation. Notifying is separate and comes after:
    :meth:`a_add_message` and :meth:`notify` run the ``on_message_added`` callbacks once the
    history is written. Each callback's failure is isolated, reported once to
    :attr:`failures` (which keeps it and logs it on the ``lionexec`` logger) and returned as
    a :class:`~lionexec.ReportedFailure`; none is raised, and none undoes a write. Cancellation
    (and any other non-``Exception``) raised by a callback propagates at once, leaving the
    remaining callbacks unrun and the history intact.

    Two histories are equal when they hold equal messages in the same order. Serialize one with
    ``lionexec.serialization.converter.unstructure(history)`` and load it with
    ``converter.structure(data, MessageManager)``.
    """

    __slots__ = (
        "_appended",
        "_by_call_id",
        "_messages",
        "_repeated_call_ids",
        "failures",
        "on_message_added",
    )

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        on_message_added: Iterable[MessageCallback] = (),
        failures: FailureLog | None = None,
    ) -> None:
        """Start a history holding *messages*, in order.

        Links between the given requests and responses must already be consistent, as in a
        history that was saved and loaded; otherwise :class:`~lionexec.errors.HistoryError`.
        The history holds the messages themselves, and a request's link to its response is
        state of the request, written when the pair is recorded: a request belongs to one
        history. Start a second history from this one's messages with :meth:`copy`, not
        ``MessageManager(history.messages)``: a call answered in one would read as answered
        in the other, whose response it would lack.
        Callback failures are reported to *failures*, by default a
        :class:`~lionexec.FailureLog` of the history's own (a branch passes its shared one).
        """
        self._messages: dict[uuid.UUID, Message] = _checked_history(messages)
        self._appended = len(self._messages)
        self._by_call_id: dict[str, ActionRequest] = {}
        #: Whether a loaded request shares its call id with an earlier one (trim_calls then
        #: re-indexes what stays).
        self._repeated_call_ids = False
        for message in self._messages.values():
            if (
                isinstance(message, ActionRequest)
                and self._by_call_id.setdefault(message.content.call_id, message) is not message
            ):
                self._repeated_call_ids = True
        #: The callbacks :meth:`a_add_message` and :meth:`notify` run, in order. A plain list:
        #: append and remove as you please.
        self.on_message_added: list[MessageCallback] = list(on_message_added)
        #: Callback failures, oldest first (bounded; see :class:`~lionexec.FailureLog`).
        self.failures: FailureLog = FailureLog() if failures is None else failures

    # -- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(list(self._messages.values()))

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Message):
            existing = self._messages.get(item.id)
            return existing is item or existing == item
        return item in self._messages

    def __getitem__(self, message_id: uuid.UUID) -> Message:
        try:
            return self._messages[message_id]
        except KeyError:
            raise MessageNotFoundError(message_id) from None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageManager):
            return NotImplemented
        return list(self._messages.values()) == list(other._messages.values())

    __hash__ = None  # type: ignore[assignment]  # mutable container

    def __repr__(self) -> str:
        return f"<MessageManager of {len(self._messages)} messages>"

    @property
    def messages(self) -> tuple[Message, ...]:
        """Every message, in order."""
        return tuple(self._messages.values())

    @property
    def appended(self) -> int:
        """How many messages this history has held in all (the ones it started with and every
        one appended since, trimmed ones included). It never decreases; O(1)."""
        return self._appended

    def appended_since(self, mark: int) -> tuple[Message, ...]:
        """The messages appended after the first *mark* (a former :attr:`appended`), in
        order; O(number returned).

        A reader that follows the history this way (the journal does) must not let
        :meth:`trim_calls` remove what it has not read yet: trimmed messages are not returned,
        and older ones would be returned in their place.
        """
        count = self._appended - mark
        if count <= 0:
            return ()
        if count >= len(self._messages):
            return tuple(self._messages.values())
        newest = reversed(self._messages.values())
        return tuple(reversed([next(newest) for _ in range(count)]))

    def copy(self) -> MessageManager:
        """A history of its own holding these messages, in order: each request and response
        a copy (their links are written into them), the other messages shared (they never
        change). Callbacks and failures are not carried over. O(n)."""
        return MessageManager(map(_own_copy, self._messages.values()))

    def requests(self) -> list[ActionRequest]:
        """Every action request, in order."""
        return [m for m in self._messages.values() if isinstance(m, ActionRequest)]

    def responses(self) -> list[ActionResponse]:
        """Every action response, in order."""
        return [m for m in self._messages.values() if isinstance(m, ActionResponse)]

    def response_for(self, request: ActionRequest | uuid.UUID) -> ActionResponse | None:
        """The recorded response to *request* (a request or its id), or ``None`` if unanswered.

        Raises :class:`~lionexec.errors.MessageNotFoundError` if the request is not here.
        """
        request_id = request.id if isinstance(request, ActionRequest) else request
        found = self[request_id]
        if not isinstance(found, ActionRequest):
            raise TypeError(f"message {request_id} is a {type(found).__name__}, not a request")
        response_id = found.content.action_response_id
        if response_id is None:
            return None
        response = self._messages.get(response_id)
        return response if isinstance(response, ActionResponse) else None

    @property
    def calls(self) -> int:
        """How many tool calls (distinct call ids) the history holds; O(1)."""
        return len(self._by_call_id)

    def trim_calls(self, keep: int, *, before: int | None = None) -> tuple[Message, ...]:
        """Forget the oldest tool calls so that at most *keep* remain; return what was removed.

        Whole request/response pairs go, oldest first, never one half: trimming stops at the
        first request still unanswered (a call in flight), and with *before* (a mark of
        :attr:`appended`) at the first message appended after the first *before*. Every
        other message older than the last pair removed (instructions, assistant turns) goes
        with them, except :class:`System` messages, which are kept. An assistant turn goes
        only with every call it proposed: trimming stops before a turn some of whose calls
        would stay (so a turn of more than *keep* calls stays whole). What remains is a suffix
        of the conversation, so its exports stay well-formed. Synchronous; callbacks are not
        run.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep must be an int >= 0, got {keep!r}")
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise ValueError(f"before must be an int or None, got {before!r}")
        excess = len(self._by_call_id) - keep
        if excess <= 0:
            return ()
        # the messages appended after the first *before* (the newest ones) may not go
        late = {m.id for m in self.appended_since(before)} if before is not None else set()
        chosen: list[ActionRequest] = []
        older: list[Message] = []  # non-action messages older than the last chosen request
        pending: list[Message] = []
        position: dict[uuid.UUID, int] = {}  # of the chosen requests and the older messages
        for index, message in enumerate(self._messages.values()):
            if message.id in late:
                break
            if isinstance(message, ActionRequest):
                response_id = message.content.action_response_id
                if len(chosen) == excess or response_id is None or response_id in late:
                    break
                chosen.append(message)
                older.extend(pending)
                pending.clear()
            elif not isinstance(message, ActionResponse | System):
                pending.append(message)
            position[message.id] = index
        while chosen:  # keep a turn that would go without all its calls, and what follows it
            going = {request.id for request in chosen}
            split = next((m for m in older if _keeps_a_call(m, going, self._messages)), None)
            if split is None:
                break
            cut = position[split.id]
            chosen = [request for request in chosen if position[request.id] < cut]
            last = position[chosen[-1].id] if chosen else -1
            older = [message for message in older if position[message.id] < last]
        if not chosen:
            return ()
        removed_ids: set[uuid.UUID] = {m.id for m in older}
        for request in chosen:
            removed_ids.add(request.id)
            response_id = request.content.action_response_id
            assert response_id is not None
            removed_ids.add(response_id)
        removed = tuple(m for m in self._messages.values() if m.id in removed_ids)
        for message in removed:  # nothing below can fail
            del self._messages[message.id]
            if (
                isinstance(message, ActionRequest)
                and self._by_call_id.get(message.content.call_id) is message
            ):
                del self._by_call_id[message.content.call_id]
        if self._repeated_call_ids:  # a later request with a removed one's id now comes first
            for message in self._messages.values():
                if isinstance(message, ActionRequest):
                    self._by_call_id.setdefault(message.content.call_id, message)
        return removed

    def request_for_call_id(self, call_id: str) -> ActionRequest | None:
        """The request in this history with tool-call id *call_id*, or ``None``; O(1).

        Providers reject a conversation that uses one call id twice, so the history refuses a
        second request with an id already here (and the act layer a proposal). Should a
        loaded history hold one id twice, the first request still here is returned.
        """
        return self._by_call_id.get(call_id)

    def unanswered(self) -> list[ActionRequest]:
        """The requests that have no recorded response yet, in order."""
        return [r for r in self.requests() if self.response_for(r) is None]

    # -- exporting ----------------------------------------------------------------------------

    def to_openai(self) -> list[formats.ChatMessageParam]:
        """The history as OpenAI chat ``messages``; see :mod:`lionexec.conversation.formats`."""
        return formats.to_openai(self._messages.values())

    def to_anthropic(self) -> formats.AnthropicExport:
        """``{"system": ..., "messages": [...]}`` for Anthropic's Messages API.

        See :mod:`lionexec.conversation.formats`.
        """
        return formats.to_anthropic(self._messages.values())

    def to_responses(self) -> list[formats.ResponsesInputItem]:
        """The history as OpenAI Responses API ``input`` items.

        See :mod:`lionexec.conversation.formats`.
        """
        return formats.to_responses(self._messages.values())

    # -- writing (synchronous, all-or-nothing) ------------------------------------------------

    def add_message(self, message: M) -> M:
        """Append *message* and return it.

        Adding a message that is already here (the same object) changes nothing and keeps its
        position. A different message with the same id is refused, and so is a request whose
        call id another request here uses. An :class:`ActionResponse` must name a request
        already here that it may answer; it is linked both ways. Use :meth:`record_action` to
        write a request and its response together. Callbacks are not run; see
        :meth:`a_add_message`.
        """
        self._add(message)
        return message

    def record_action(self, request: ActionRequest, response: ActionResponse) -> None:
        """Write *request* (if it is not here yet) and *response*, linked both ways.

        Synchronous and all-or-nothing: every check happens before the first write, and
        nothing after it can fail. Recording the same pair again changes nothing. Callbacks are
        not run; call :meth:`notify` afterwards.

        Raises:
            HistoryError: the response names another request, the request is already answered
                by another response or is being run by ``act()``, the function names differ,
                a different message already uses one of the ids, or another request here
                uses the request's call id.
        """
        self._record(request, response, by_act=False)

    def _record(self, request: ActionRequest, response: ActionResponse, *, by_act: bool) -> None:
        """:meth:`record_action`; *by_act*: the ``act()`` running *request* answers it."""
        if not isinstance(request, ActionRequest):
            raise TypeError(f"request must be an ActionRequest, not {type(request).__name__}")
        if not isinstance(response, ActionResponse):
            raise TypeError(f"response must be an ActionResponse, not {type(response).__name__}")
        self._check_identity(request)
        self._check_identity(response)
        named_request = response.content.action_request_id
        if named_request is not None and named_request != request.id:
            raise HistoryError(
                f"response {response.id} answers request {named_request}, not {request.id}",
                message_id=response.id,
            )
        _check_answerable(request, response, blame=request.id, by_act=by_act)
        messages = self._messages
        if request.id not in messages:
            self._check_call_id(request)
        # Nothing below can fail.
        if request.id not in messages:
            messages[request.id] = request
            self._appended += 1
            self._by_call_id.setdefault(request.content.call_id, request)
        request.content.action_response_id = response.id
        response.content.action_request_id = request.id
        if response.id not in messages:
            messages[response.id] = response
            self._appended += 1

    def _append_new(self, requests: Sequence[ActionRequest]) -> None:
        """:meth:`add_message` for each of *requests*, which the act layer made just now: new
        ids, no response, call ids it checked against this history and against each other.
        No check can fail, so none runs: this runs for every call act() records."""
        messages, by_call_id = self._messages, self._by_call_id
        for request in requests:
            messages[request.id] = request
            by_call_id.setdefault(request.content.call_id, request)
        self._appended += len(requests)

    def _append_one(self, request: ActionRequest) -> None:
        """:meth:`_append_new` of one request (a one-call act's)."""
        self._messages[request.id] = request
        self._by_call_id.setdefault(request.content.call_id, request)
        self._appended += 1

    def _answer(self, request: ActionRequest, response: ActionResponse) -> None:
        """:meth:`record_action` for the act transaction, which admitted *request* here and
        built *response* for it (:meth:`ActionResponse._recorded`: a new id, the same
        function, linked to the request): no check can fail, so only the response is written
        and linked. Otherwise (the request is not here unanswered) :meth:`record_action`,
        with its checks and errors. About half its cost, paid on every call act() records.
        """
        messages = self._messages
        content = request.content
        if messages.get(request.id) is not request or content.action_response_id is not None:
            self._record(request, response, by_act=True)
            return
        _set(content, "action_response_id", response.id)
        messages[response.id] = response
        self._appended += 1

    # -- notifying ----------------------------------------------------------------------------

    async def a_add_message(self, message: Message) -> list[ReportedFailure]:
        """:meth:`add_message`, then run the callbacks for *message* if it was new.

        Returns the callbacks' failures (see :meth:`notify`). A checkpoint on every path,
        after the write: if the caller is cancelled, the message is still added (writing never
        waits), the callbacks do not run, and ``trio.Cancelled`` propagates.
        """
        added = self._add(message)
        await trio.lowlevel.checkpoint()
        if not added:
            return []
        return await self._run_callbacks((message,))

    async def notify(self, *messages: Message) -> list[ReportedFailure]:
        """Run every ``on_message_added`` callback for each of *messages*, in order.

        Call it after writing (for instance after :meth:`record_action`). A callback that raises
        an :class:`Exception` is reported to :attr:`failures` (``where="message_callback"``,
        the call id of the message's tool call, the callback's ``repr``) and returned in the
        list; the others still run. Callbacks added or removed while this runs take effect on
        the next call. A checkpoint on every path, even with no callbacks.
        """
        await trio.lowlevel.checkpoint()
        return await self._run_callbacks(messages)

    async def _run_callbacks(self, messages: Iterable[Message]) -> list[ReportedFailure]:
        failures: list[ReportedFailure] = []
        callbacks = list(self.on_message_added)
        if not callbacks:
            return failures
        for message in messages:
            for callback in callbacks:
                try:
                    await call_user(callback, message)
                except Exception as exc:
                    failures.append(
                        self.failures.failed(
                            "message_callback",
                            exc,
                            call_id=self._call_id_of(message),
                            culprit=callback,
                        )
                    )
        return failures

    def _call_id_of(self, message: Message) -> str | None:
        """The call id of the tool call *message* belongs to, if it is half of one."""
        if isinstance(message, ActionRequest):
            return message.content.call_id
        if isinstance(message, ActionResponse):
            request_id = message.content.action_request_id
            request = self._messages.get(request_id) if request_id is not None else None
            if isinstance(request, ActionRequest):
                return request.content.call_id
        return None

    # -- internals ----------------------------------------------------------------------------

    def _check_identity(self, message: Message) -> bool:
        """True if *message* is already here; raise if another message has its id."""
        existing = self._messages.get(message.id)
        if existing is None:
            return False
        if existing is not message:
            raise HistoryError(
                f"a different message with id {message.id} is already in this history",
                message_id=message.id,
            )
        return True

    def _check_call_id(self, request: ActionRequest) -> None:
        """Raise if another request here uses *request*'s call id."""
        call_id = request.content.call_id
        existing = self._by_call_id.get(call_id)
        if existing is not None and existing is not request:
            raise HistoryError(
                f"call id {call_id!r} of request {request.id} is already used by request "
                f"{existing.id} in this history; providers refuse a conversation that uses "
                "one call id twice",
                message_id=request.id,
            )

    def _add(self, message: Message) -> bool:
        """Append *message* if new; return whether it was. All checks precede the write."""
        if not isinstance(message, Message):
            raise TypeError(f"a history holds messages, not {type(message).__name__}")
        if self._check_identity(message):
            return False
        if isinstance(message, ActionRequest):
            claimed = message.content.action_response_id
            if claimed is not None:
                raise HistoryError(
                    f"request {message.id} claims response {claimed}, which is not in this "
                    "history; record the pair with record_action()",
                    message_id=message.id,
                )
            self._check_call_id(message)
        elif isinstance(message, ActionResponse):
            request = self._answerable_request(message)
            request.content.action_response_id = message.id
        self._messages[message.id] = message
        self._appended += 1
        if isinstance(message, ActionRequest):
            self._by_call_id.setdefault(message.content.call_id, message)
        return True

    def _answerable_request(self, response: ActionResponse) -> ActionRequest:
        request_id = response.content.action_request_id
        request = self._messages.get(request_id) if request_id is not None else None
        if not isinstance(request, ActionRequest):
            raise HistoryError(
                f"response {response.id} must answer a request in this history (it names "
                f"{request_id}); record the pair with record_action()",
                message_id=response.id,
            )
        _check_answerable(request, response, blame=response.id)
        return request


def _own_copy(message: Message) -> Message:
    """*message*, or for a request or response a copy with a content of its own."""
    if isinstance(message, ActionRequest):
        return attrs.evolve(message, content=copy.copy(message.content))
    if isinstance(message, ActionResponse):
        return attrs.evolve(message, content=copy.copy(message.content))
    return message


def _keeps_a_call(
    message: Message, going: set[uuid.UUID], messages: dict[uuid.UUID, Message]
) -> bool:
    """Whether *message* is an assistant turn that proposed a call of *messages* not
    *going*."""
    return isinstance(message, AssistantResponse) and any(
        request_id not in going and request_id in messages for request_id in message.tool_calls
    )


def _check_answerable(
    request: ActionRequest, response: ActionResponse, *, blame: uuid.UUID, by_act: bool = False
) -> None:
    """Raise unless *response* may answer *request*: not answered by another, same function.

    *blame* is the id the "already answered" error names as the offending message;
    *by_act*: the answer comes from the ``act()`` running *request*, which alone may give it.
    """
    if not by_act and id(request) in running:
        raise HistoryError(
            f"request {request.id} is being run by act(), which records its response when the "
            "call ends; it cannot be answered meanwhile",
            message_id=blame,
        )
    answered_by = request.content.action_response_id
    if answered_by is not None and answered_by != response.id:
        raise HistoryError(
            f"request {request.id} is already answered by response {answered_by}",
            message_id=blame,
        )
    if request.content.function != response.content.function:
        raise HistoryError(
            f"response {response.id} is for function {response.content.function!r}, but "
            f"request {request.id} calls {request.content.function!r}",
            message_id=response.id,
        )


def _checked_history(messages: Iterable[Message]) -> dict[uuid.UUID, Message]:
    """Index *messages* in order, checking the history invariants over the whole sequence."""
    index: dict[uuid.UUID, Message] = {}
    for message in messages:
        if not isinstance(message, Message):
            raise TypeError(f"a history holds messages, not {type(message).__name__}")
        if message.id in index:
            raise HistoryError(f"duplicate message id {message.id}", message_id=message.id)
        if isinstance(message, ActionResponse):
            request_id = message.content.action_request_id
            request = index.get(request_id) if request_id is not None else None
            if not isinstance(request, ActionRequest):
                raise HistoryError(
                    f"response {message.id} does not follow the request it answers ({request_id})",
                    message_id=message.id,
                )
            if request.content.action_response_id != message.id:
                raise HistoryError(
                    f"request {request.id} does not name response {message.id} as its answer",
                    message_id=message.id,
                )
            if request.content.function != message.content.function:
                raise HistoryError(
                    f"response {message.id} is for function {message.content.function!r}, but "
                    f"request {request.id} calls {request.content.function!r}",
                    message_id=message.id,
                )
        index[message.id] = message
    for message in index.values():
        if isinstance(message, ActionRequest):
            response_id = message.content.action_response_id
            if response_id is None:
                continue
            response = index.get(response_id)
            if not isinstance(response, ActionResponse):
                raise HistoryError(
                    f"request {message.id} names response {response_id}, which is not in the "
                    "history",
                    message_id=message.id,
                )
            if response.content.action_request_id != message.id:
                raise HistoryError(
                    f"request {message.id} names response {response_id}, which answers request "
                    f"{response.content.action_request_id}",
                    message_id=message.id,
                )
    return index
