"""Conversations: each one's branch and lock, eviction, the journal branch it maps to,
and the history endpoints (``GET /v1/conversations/{id}`` and ``.../records``)."""

from __future__ import annotations

import re
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..act import Branch, EvidenceSink
from ..conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    Message,
    MessageManager,
    result_text,
    to_openai,
)
from ..errors import NotDurableError
from ..governance import HookPoint, PermissionPolicy
from ..journal import Journal, JournalError
from ..serialization import converter
from ..tools import ActionManager
from ._asgi import NDJSON_HEADERS, HTTPError, send_chunk, send_json, until_disconnect
from ._config import ServerConfig
from ._events import EventHub
from ._json import _preview, dumps
from ._locks import ReplicaLocks

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable

CONVERSATION_ID: Final = re.compile(r"[A-Za-z0-9._~:-]{1,128}")
CURSOR: Final = re.compile(r"[0-9]{1,15}")
#: Conversation ids map to journal branch ids (UUIDs) as ``uuid5(CONVERSATIONS, id)``.
CONVERSATIONS: Final = uuid.UUID("6d1b2f4e-8a43-5c1e-9f0b-3a2d4c5e6f70")


@attrs.define(eq=False)
class Conversation:
    """A conversation: its branch, the lock that runs its requests one at a time, and what
    eviction needs (when it was last used, how many requests are using it now)."""

    id: str
    branch: Branch
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    last_used: float = 0.0
    active: int = 0
    #: Stops publishing this conversation's events; set while the hub has subscribers.
    unwatch: Callable[[], None] | None = None
    #: Journaled: the branch stand-in between requests.
    idle: Branch | None = None
    #: Journaled: its history as the journal held it when its last request here ended, if
    #: kept (``history_cache``): the next request reads only what was committed since.
    kept: MessageManager | None = None

    @property
    def branch_id(self) -> uuid.UUID:
        """The journal branch that keeps this conversation."""
        return branch_id_of(self.id)

    def call_id(self, response: ActionResponse) -> str:
        request_id = response.content.action_request_id
        request = self.branch.messages[request_id] if request_id is not None else None
        return request.content.call_id if isinstance(request, ActionRequest) else ""

    def tool_message(self, response: ActionResponse) -> dict[str, Any]:
        """The OpenAI tool message for *response*, with its status and outcome."""
        return tool_message(response, self.call_id(response))


def tool_message(response: ActionResponse, call_id: str) -> dict[str, Any]:
    """The OpenAI tool message for *response* (to call *call_id*), with its status and
    outcome; a call waiting for an approval also names it (``approval_id``)."""
    content, _ = result_text(response)
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": call_id,
        "content": content,
        "status": response.content.status.value,
        "outcome": response.content.outcome.value,
    }
    if response.content.outcome is ActionOutcome.AWAITING_APPROVAL:
        output = response.content.output
        message["approval_id"] = output.get("approval_id") if isinstance(output, dict) else None
    return message


def branch_id_of(conversation_id: str) -> uuid.UUID:
    """The journal branch id of a conversation: the same on every replica and restart."""
    return uuid.uuid5(CONVERSATIONS, conversation_id)


def _seconds(duration: object) -> float | None:
    return duration if isinstance(duration, float) else None


def _watch(conversation: Conversation, hub: EventHub) -> Callable[[], None]:
    """Publish the branch's hook and message events on *hub*; return what undoes that."""
    cid = conversation.id

    def on_post(
        *, tool_name: str, call_id: str, result: str, duration: object, **_: object
    ) -> None:
        hub.publish(
            "tool.post", cid, call_id=call_id, tool=tool_name, result=result,
            duration=_seconds(duration),
        )  # fmt: skip

    def on_error(
        *,
        tool_name: str,
        call_id: str,
        error: object,
        status: Any,
        duration: object,
        **_: object,
    ) -> None:
        hub.publish(
            "tool.error", cid, call_id=call_id, tool=tool_name, status=status.value,
            error=None if error is None else f"{type(error).__name__}: {error}",
            duration=_seconds(duration),
        )  # fmt: skip

    def on_message(message: Message) -> None:
        data: dict[str, Any] = {"message_id": str(message.id), "kind": message.kind}
        if isinstance(message, ActionRequest):
            data.update(call_id=message.content.call_id, function=message.content.function)
        elif isinstance(message, ActionResponse):
            data.update(
                call_id=conversation.call_id(message),
                function=message.content.function,
                status=message.content.status.value,
                outcome=message.content.outcome.value,
            )
        hub.publish("message.add", cid, **data)

    hooks, callbacks = conversation.branch.hooks, conversation.branch.messages.on_message_added
    hooks.on(HookPoint.TOOL_POST, on_post)
    hooks.on(HookPoint.TOOL_ERROR, on_error)
    callbacks.append(on_message)

    def unwatch() -> None:
        hooks.off(HookPoint.TOOL_POST, on_post)
        hooks.off(HookPoint.TOOL_ERROR, on_error)
        callbacks.remove(on_message)

    return unwatch


def _journal_refusal(exc: BaseException) -> JournalError | None:
    """The :class:`JournalError` that *exc* is (or is only made of), else ``None``. A
    :class:`NotDurableError` (the calls ran, their outcomes were not committed) counts as
    the journal error that caused it."""
    if isinstance(exc, NotDurableError) and isinstance(exc.__cause__, JournalError):
        return exc.__cause__
    if isinstance(exc, JournalError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        match, rest = exc.split((JournalError, NotDurableError))
        if match is not None and rest is None:
            leaf: BaseException = match
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return _journal_refusal(leaf)
    return None


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def _cursor(query: dict[str, list[str]], name: str, default: int) -> int:
    values = query.get(name)
    if not values:
        return default
    if not CURSOR.fullmatch(values[-1]):
        raise HTTPError(400, f"{name} must be a non-negative integer, got {values[-1][:40]!r}")
    return int(values[-1])


class Conversations:
    """What every handler of :class:`~lionexec.server.App` shares: the live conversations
    (found, created, evicted), their locks, and the journaled branch each request loads;
    and the history endpoints. :class:`~lionexec.server.App` sets the attributes below."""

    config: ServerConfig
    tools: tuple[Callable[..., Any], ...]
    journal: Journal | None
    registry: ActionManager
    replica_locks: ReplicaLocks | None
    policy: PermissionPolicy | None
    sinks: tuple[EvidenceSink, ...]
    hub: EventHub
    conversations: OrderedDict[str, Conversation]
    limiter: trio.CapacityLimiter
    _locks: dict[uuid.UUID, trio.Lock]
    _memory_registry: ActionManager | None
    #: The conversations whose history is kept, least recently kept first, and its size.
    _kept: OrderedDict[str, tuple[Conversation, int]]
    _kept_messages: int

    # -- conversations, eviction ------------------------------------------------------------

    def find(self, conversation_id: str) -> Conversation | None:
        """The live conversation with this id (marked used), or ``None``."""
        now = trio.current_time()
        self._evict_idle(now)
        conversation = self.conversations.get(conversation_id)
        if conversation is not None:
            conversation.last_used = now  # (as _touch, with the time read once)
            self.conversations.move_to_end(conversation_id)
        return conversation

    def conversation(self, conversation_id: str) -> Conversation:
        """The conversation with this id, created (with the tools registered) if new.

        Creating one when ``max_conversations`` exist evicts the least recently used idle
        one; if none is idle, :class:`HTTPError` 503.
        """
        conversation = self.find(conversation_id)
        if conversation is not None:
            return conversation
        if len(self.conversations) >= self.config.max_conversations:
            idle = next((c for c in self.conversations.values() if not c.active), None)
            if idle is None:
                raise HTTPError(
                    503,
                    f"max_conversations ({self.config.max_conversations}) are in use and "
                    "none is idle; try again later",
                )
            self._forget(self.conversations.pop(idle.id))
        if self.journal is None:
            registry = self._memory_registry
            if registry is None:
                registry = self._memory_registry = ActionManager()
                registry.register_tools(list(self.tools))
            branch = Branch(registry=registry)
        else:  # a placeholder: each request loads the branch from the journal
            branch = Branch(id=branch_id_of(conversation_id), registry=self.registry)
        conversation = Conversation(conversation_id, branch)
        if self.journal is not None:
            conversation.lock = self._lock_for(conversation.branch_id)
            conversation.idle = branch
        if self.hub.watched:
            conversation.unwatch = _watch(conversation, self.hub)
        self.conversations[conversation_id] = conversation
        self._touch(conversation)
        return conversation

    def evict_idle(self) -> int:
        """Evict the conversations idle for longer than ``idle_ttl``; return how many.

        Cheap: conversations are kept in order of last use, so the scan stops at the first
        one still fresh.
        """
        return self._evict_idle(trio.current_time())

    def _evict_idle(self, now: float) -> int:
        ttl = self.config.idle_ttl
        if ttl is None or not self.conversations:
            return 0
        horizon = now - ttl
        expired = []
        for conversation in self.conversations.values():
            if conversation.last_used > horizon:
                break
            if not conversation.active:
                expired.append(conversation.id)
        for conversation_id in expired:
            self._forget(self.conversations.pop(conversation_id))
        return len(expired)

    def _lock_for(self, branch_id: uuid.UUID) -> trio.Lock:
        lock = self._locks.get(branch_id)
        if lock is None:
            lock = self._locks[branch_id] = trio.Lock()
        return lock

    def _forget(self, conversation: Conversation) -> None:
        """Drop an evicted conversation's kept history, and its lock unless someone holds
        or waits for it."""
        self._take_kept(conversation)
        lock = self._locks.get(conversation.branch_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[conversation.branch_id]

    async def sweep(self) -> None:
        """Evict expired conversations every ``sweep_interval`` seconds, forever."""
        while True:
            await trio.sleep(self.config.sweep_interval)
            self.evict_idle()

    def _watch_all(self, on: bool) -> None:
        """Publish every conversation's events while the hub has subscribers (only then)."""
        for conversation in self.conversations.values():
            if on and conversation.unwatch is None:
                conversation.unwatch = _watch(conversation, self.hub)
            elif not on and conversation.unwatch is not None:
                conversation.unwatch()
                conversation.unwatch = None

    def _touch(self, conversation: Conversation) -> None:
        conversation.last_used = trio.current_time()
        self.conversations.move_to_end(conversation.id)

    @contextmanager
    def _using(self, conversation: Conversation) -> Iterator[None]:
        """Mark *conversation* busy (never evicted) for the block; used again at the end."""
        conversation.active += 1
        try:
            yield
        finally:
            self._used(conversation)

    def _used(self, conversation: Conversation) -> None:
        """The end of a use of *conversation* that :meth:`_using` (or its caller) began."""
        conversation.active -= 1
        if self.conversations.get(conversation.id) is conversation:
            self._touch(conversation)

    # -- the journaled branch of a request ---------------------------------------------------

    def _take_kept(self, conversation: Conversation) -> MessageManager | None:
        """The conversation's kept history, no longer kept (a request takes it over)."""
        kept, conversation.kept = conversation.kept, None
        if kept is not None:
            _, size = self._kept.pop(conversation.id)
            self._kept_messages -= size
        return kept

    def _keep(self, conversation: Conversation, history: MessageManager | None) -> None:
        """Keep *history* (the conversation's, all committed) for its next request, within
        ``history_cache`` messages: the least recently kept ones go first."""
        budget = self.config.history_cache
        if history is None or not len(history) or len(history) > budget:
            return
        if self.conversations.get(conversation.id) is not conversation:
            return  # (evicted meanwhile: nothing would drop it)
        self._take_kept(conversation)
        conversation.kept = history
        self._kept[conversation.id] = (conversation, len(history))
        self._kept_messages += len(history)
        while self._kept_messages > budget:
            _, (oldest, size) = self._kept.popitem(last=False)
            oldest.kept = None
            self._kept_messages -= size

    @asynccontextmanager
    async def _replica_lock_of(self, branch_id: uuid.UUID) -> AsyncIterator[None]:
        """Hold the conversation across replicas for the block (PostgreSQL: an advisory
        lock, see :class:`ReplicaLocks`); a no-op for an SQLite journal (one server)."""
        if self.replica_locks is None:
            yield
            return
        async with self.replica_locks.hold(branch_id):
            yield

    def _swap(self, conversation: Conversation, branch: Branch) -> None:
        """Make *branch* the conversation's, its events published if anyone listens."""
        if conversation.unwatch is not None:
            conversation.unwatch()
            conversation.unwatch = None
        conversation.branch = branch
        if self.hub.watched:
            conversation.unwatch = _watch(conversation, self.hub)

    # -- GET /v1/conversations/{id} ------------------------------------------------------------

    def _existing(self, conversation_id: str) -> Conversation:
        conversation = self.find(conversation_id)
        if conversation is None:
            raise HTTPError(404, f"no conversation {_preview(conversation_id)}")
        return conversation

    async def history(
        self, conversation_id: str, query: dict[str, list[str]], send: ASGISendCallable
    ) -> None:
        """One page of the history (bounded by ``max_page_size``; see the module docs)."""
        messages = await self._history_of(conversation_id)
        after = _cursor(query, "after", 0)
        limit = _cursor(query, "limit", self.config.page_size)
        if not 1 <= limit <= self.config.max_page_size:
            raise HTTPError(
                400, f"limit must be from 1 to max_page_size ({self.config.max_page_size})"
            )
        snapshot = messages.messages
        page = snapshot[after : after + limit]
        on_page = {message.id for message in page}
        answers: list[Message] = []
        for message in page:  # results recorded past this page belong with their calls here
            if isinstance(message, ActionRequest):
                response = messages.response_for(message)
                if response is not None and response.id not in on_page:
                    answers.append(response)
        end = after + len(page)
        payload = {
            "conversation_id": conversation_id,
            "total": len(snapshot),
            "after": after,
            "next": end if end < len(snapshot) else None,
            "records": [converter.unstructure(message) for message in page],
            "messages": to_openai([*page, *answers]),
        }
        await send_json(send, 200, payload)

    async def stream_history(
        self,
        conversation_id: str,
        query: dict[str, list[str]],
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
    ) -> None:
        """Every message from ``after`` on as JSON lines, ``stream_chunk`` at a time."""
        conversation = self._existing(conversation_id) if self.journal is None else None
        messages = await self._history_of(conversation_id)
        after = _cursor(query, "after", 0)
        snapshot = messages.messages[after:]
        chunk = self.config.stream_chunk

        async def pump() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": NDJSON_HEADERS})
            for start in range(0, len(snapshot), chunk):
                lines = [dumps(converter.unstructure(m)) for m in snapshot[start : start + chunk]]
                lines.append(b"")
                await send_chunk(send, b"\n".join(lines))
                await trio.lowlevel.checkpoint()  # even if send did not yield
            await send_chunk(send, b"", more=False)

        if conversation is None:  # journaled: the snapshot is this request's own copy
            await until_disconnect(receive, pump)
            return
        with self._using(conversation):
            await until_disconnect(receive, pump)

    async def _history_of(self, conversation_id: str) -> MessageManager:
        """The conversation's history: the live branch's (in memory), or the journal's
        committed copy (so any replica, or a restarted server, serves it); 404 if none.

        Journaled, a kept history is taken (no request can take it meanwhile), brought up
        to date, and kept again unless a request kept a history of its own since. The caller
        reads it at once: a request may take it over at the next checkpoint."""
        if self.journal is None:
            return self._existing(conversation_id).branch.messages
        if CONVERSATION_ID.fullmatch(conversation_id):
            conversation = self.conversations.get(conversation_id)
            kept = None if conversation is None else self._take_kept(conversation)
            try:
                history = await self.journal.history(branch_id_of(conversation_id), since=kept)
            except JournalError as exc:
                raise HTTPError(
                    503,
                    f"the journal could not read conversation {conversation_id!r} ({exc}); "
                    "try again",
                ) from None
            if conversation is not None and conversation.kept is None:
                self._keep(conversation, history)
            if len(history):
                return history
        raise HTTPError(404, f"no conversation {_preview(conversation_id)}")
