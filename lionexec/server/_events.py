"""Lifecycle events as server-sent events: :class:`EventHub` fans them out to
:class:`Subscription` buffers without ever waiting for a subscriber."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import attrs
import trio

from ._json import dumps

__all__ = ["OVERFLOW", "EventHub", "ServerEvent", "Subscription"]

#: What a subscriber dropped for a full buffer reads last, before its stream ends.
OVERFLOW: Final = b'event: overflow\ndata: {"reason": "subscriber buffer full"}\n\n'

# -- lifecycle events ----------------------------------------------------------------------------


@attrs.frozen
class ServerEvent:
    """One lifecycle event, as a server-sent event."""

    id: int
    type: str
    conversation_id: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        payload = dumps({"conversation_id": self.conversation_id, **self.data})
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (self.id, self.type.encode(), payload)


@attrs.define(eq=False)
class Subscription:
    """One subscriber's bounded buffer. ``overflowed`` says why the stream ended early."""

    conversation_id: str | None
    send_channel: trio.MemorySendChannel[ServerEvent]
    receive_channel: trio.MemoryReceiveChannel[ServerEvent]
    overflowed: bool = False


class EventHub:
    """Fans lifecycle events out to subscribers without ever waiting for one.

    :meth:`publish` is synchronous: it puts the event into each matching subscriber's memory
    channel with ``send_nowait``. A subscriber whose buffer is full is dropped (its channel is
    closed, ``overflowed`` set): it reads what was buffered, then the end of the channel.

    *on_watch* is called with ``True`` when the first subscriber arrives and ``False`` when
    the last one leaves, so the app listens to its branches only while someone listens to it
    (lionexec copies each message for every message callback; with nobody subscribed there
    is no callback to copy for).
    """

    def __init__(self, buffer: int = 256, on_watch: Callable[[bool], None] | None = None) -> None:
        if buffer < 1:
            raise ValueError(f"a subscriber buffer holds at least 1 event, got {buffer}")
        self.buffer = buffer
        self._subscriptions: set[Subscription] = set()
        self._last_id = 0
        self._on_watch = on_watch

    @property
    def watched(self) -> bool:
        """Whether anyone is subscribed."""
        return bool(self._subscriptions)

    @contextmanager
    def subscribe(self, conversation_id: str | None = None) -> Iterator[Subscription]:
        """Receive the events of one conversation (or all, for ``None``) while in the block."""
        send_channel, receive_channel = trio.open_memory_channel[ServerEvent](self.buffer)
        subscription = Subscription(conversation_id, send_channel, receive_channel)
        self._subscriptions.add(subscription)
        if len(self._subscriptions) == 1 and self._on_watch is not None:
            self._on_watch(True)
        try:
            yield subscription
        finally:
            self._drop(subscription)
            receive_channel.close()

    def publish(self, type: str, conversation_id: str, **data: Any) -> None:
        self._last_id += 1
        if not self._subscriptions:
            return
        event = ServerEvent(self._last_id, type, conversation_id, data)
        for subscription in list(self._subscriptions):
            if subscription.conversation_id not in (None, conversation_id):
                continue
            try:
                subscription.send_channel.send_nowait(event)
            except trio.WouldBlock:
                subscription.overflowed = True
                self._drop(subscription)

    def close(self) -> None:
        """End every subscriber's stream (after what is buffered)."""
        for subscription in list(self._subscriptions):
            self._drop(subscription)

    def _drop(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
            if not self._subscriptions and self._on_watch is not None:
                self._on_watch(False)
        subscription.send_channel.close()
