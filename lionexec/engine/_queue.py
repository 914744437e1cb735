"""The processor's FIFO: a deque with an optional bound, fair waiting producers, and held slots.

Private to the engine. A trio memory channel is not used because a channel of size 0 is a
rendezvous rather than "unbounded", and because the processor needs two operations a channel
does not have: putting a deferred event back without ever blocking, and returning events to the
*head* of the queue when a cycle is cancelled.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Iterator
from operator import itemgetter
from typing import Generic, TypeVar

import trio

__all__ = ["BoundedQueue"]

T = TypeVar("T")

_seq = itemgetter(0)


class BoundedQueue(Generic[T]):
    """A FIFO whose bound counts queued items plus *held* ones.

    :meth:`take` removes the head but keeps its slot held, so an item whose fate is still being
    decided (a permission check, a wait for a concurrency token) cannot have its place filled
    by a producer. The holder then calls :meth:`release` (the item left for good: the slot is
    freed), :meth:`give_back` (the item goes to the tail) or :meth:`restore` (items go back to
    the head). The last two never block and never exceed the bound: the slot was never freed.

    Every item gets a sequence number when it is added at the tail (by a producer or by
    :meth:`give_back`), and the queue is always in that order: :meth:`take` returns the number
    with the item, and :meth:`restore` puts items back where their numbers say. So items taken
    by several holders and restored in any order, or interleaved with restores of other
    holders, end up in the order they were added, ahead of every item added after them.

    Producers blocked in :meth:`put` are served first-come first-served: a freed slot is handed
    straight to the longest-waiting producer, so :meth:`put_nowait` can never barge ahead of it.

    ``maxsize == 0`` means unbounded.
    """

    __slots__ = ("_held", "_items", "_maxsize", "_next", "_put_lot", "_putters", "puts")

    def __init__(self, maxsize: int) -> None:
        self._items: deque[tuple[int, T]] = deque()
        self._next = 0  # the sequence number of the next item added at the tail
        self._maxsize = maxsize
        self._held = 0
        self._putters: OrderedDict[trio.lowlevel.Task, T] = OrderedDict()
        self._put_lot = trio.lowlevel.ParkingLot()
        #: Items added by producers so far (not counting give-backs and restores).
        self.puts = 0

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[T]:
        return (item for _, item in self._items)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def held(self) -> int:
        """Slots held by taken items that were neither released nor returned yet."""
        return self._held

    @property
    def producers_waiting(self) -> int:
        return len(self._putters)

    @property
    def full(self) -> bool:
        return self._maxsize != 0 and len(self._items) + self._held >= self._maxsize

    def _added(self, item: T) -> None:
        self._items.append((self._next, item))
        self._next += 1
        self.puts += 1
        if self._put_lot:
            self._put_lot.unpark_all()

    def put_nowait(self, item: T) -> None:
        """Append *item*, or raise :exc:`trio.WouldBlock` if the queue is full."""
        if self._maxsize != 0 and len(self._items) + self._held >= self._maxsize:
            raise trio.WouldBlock
        self._added(item)

    def put_many_nowait(self, items: list[T], start: int = 0) -> int:
        """Append ``items[start:]`` while there is room; return the index of the first left out.

        Never blocks; returns ``len(items)`` when all were added.
        """
        maxsize = self._maxsize
        stop = len(items)
        if maxsize == 0:
            end = stop
        else:
            end = min(stop, start + max(0, maxsize - len(self._items) - self._held))
        if end > start:
            first = self._next
            self._next = first + end - start
            self._items.extend(zip(range(first, self._next), items[start:end], strict=True))
            self.puts += end - start
            if self._put_lot:
                self._put_lot.unpark_all()
        return end

    async def put(self, item: T) -> None:
        """Append *item*, blocking while the queue is full.

        Always a checkpoint. If cancelled while blocked, *item* was not added.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self.full:
            self._added(item)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        await self.wait_to_put(item)

    async def wait_to_put(self, item: T) -> None:
        """Wait in line until a freed slot is handed to *item*; the queue must be full.

        Returns once *item* was added. If cancelled, *item* was not added.
        """
        task = trio.lowlevel.current_task()
        self._putters[task] = item

        def abort_fn(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            del self._putters[task]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort_fn)

    def take(self) -> tuple[int, T]:
        """Remove the head, holding its slot; return its sequence number and the item.

        The queue must not be empty.
        """
        entry = self._items.popleft()
        self._held += 1
        return entry

    def release(self) -> None:
        """Give up one held slot (its item left the queue for good); wake a waiting producer."""
        self._held -= 1
        if self._putters:
            task, item = self._putters.popitem(last=False)
            self._added(item)
            trio.lowlevel.reschedule(task)

    def give_back(self, item: T) -> None:
        """Return a taken *item* to the tail (a new sequence number), using the slot it held.

        Never blocks.
        """
        self._held -= 1
        self._items.append((self._next, item))
        self._next += 1

    def restore(self, entries: list[tuple[int, T]]) -> None:
        """Return taken items, as ``(sequence number, item)`` pairs from :meth:`take` in any
        order, to the head, using their held slots. Never blocks.

        Each goes back to its place in sequence order: ahead of every item still queued (all
        were added after it), merged with the items other holders restored meanwhile.
        """
        if not entries:
            return
        self._held -= len(entries)
        entries = sorted(entries, key=_seq)
        items = self._items
        last = entries[-1][0]
        if items and items[0][0] < last:  # restored by another holder: merge with those
            ahead = []
            while items and items[0][0] < last:
                ahead.append(items.popleft())
            entries = list(heapq.merge(entries, ahead, key=_seq))
        items.extendleft(reversed(entries))

    async def wait_put(self) -> None:
        """Block until a producer adds an item or :meth:`wake` is called."""
        await self._put_lot.park()

    def wake(self) -> None:
        """Wake every task blocked in :meth:`wait_put`."""
        self._put_lot.unpark_all()
