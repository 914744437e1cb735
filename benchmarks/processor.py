"""Processor and Executor (issue 3): capacity-limited cycles, queue_capacity 100, concurrency 64.

* processor: enqueue every event, then ``join()`` (cycles of up to 100 until the queue drains);
  the same with one ``enqueue_many`` (lionexec's batch enqueue, one checkpoint for the batch;
  raw trio: a deque ``extend``; lionagi has none).
* executor, bulk: ``append`` every event, one ``forward()``, then the processor's ``join()``.
  (lionagi's own numbers: about 1,000 events/s for 20k.)
* executor, chunks of 100: ``append`` 100, ``forward()``, repeat; a final ``join()``
  (lionagi: about 4,300 events/s).

Raw trio does the same work with a deque, one nursery per cycle of 100 and a
``trio.CapacityLimiter(64)``; its "executor" adds a dict store and an ordered pending set.
"""

from __future__ import annotations

import collections
import inspect
import time
import uuid
from typing import Any

import trio

from ._harness import Case, MemoryProbe, k, main, unavailable
from ._subjects import RawEvent, event_types

CONFIG: dict[str, Any] = {
    "queue_capacity": 100,
    "capacity_refresh_time": 0.001,
    "concurrency_limit": 64,
}
CHUNK = 100


async def maybe_await(value: Any) -> Any:
    """lionagi's ``append``/``start`` are coroutines; lionexec's may be plain calls."""
    return await value if inspect.isawaitable(value) else value


# -- the raw trio floor ------------------------------------------------------------------------


class RawProcessor:
    """Cycles of up to ``queue_capacity`` events, each cycle a nursery, a limiter per run."""

    def __init__(self, queue_capacity: int, concurrency_limit: int, **_: Any) -> None:
        self.queue: collections.deque[RawEvent] = collections.deque()
        self.queue_capacity = queue_capacity
        self.limiter = trio.CapacityLimiter(concurrency_limit)

    async def enqueue(self, event: RawEvent) -> None:
        self.queue.append(event)

    async def enqueue_many(self, events: list[RawEvent]) -> None:
        self.queue.extend(events)

    async def _run(self, event: RawEvent) -> None:
        async with self.limiter:
            await event.invoke()

    async def process(self) -> None:
        queue = self.queue
        async with trio.open_nursery() as nursery:
            for _ in range(min(self.queue_capacity, len(queue))):
                nursery.start_soon(self._run, queue.popleft())

    async def join(self) -> None:
        while self.queue:
            await self.process()


class RawExecutor:
    """A store of events by id plus an ordered, set-like pending progression."""

    def __init__(self, processor_config: dict[str, Any]) -> None:
        self.events: dict[uuid.UUID, RawEvent] = {}
        self.pending: dict[uuid.UUID, None] = {}
        self.processor = RawProcessor(**processor_config)

    async def start(self) -> None:
        pass

    async def append(self, event: RawEvent) -> None:
        self.events[event.id] = event
        self.pending[event.id] = None

    async def forward(self) -> None:
        for event_id in self.pending:
            await self.processor.enqueue(self.events[event_id])
        self.pending.clear()
        await self.processor.process()


# -- each implementation's Processor / Executor pair -------------------------------------------


def classes(impl: str, event_type: type[Any]) -> tuple[type[Any], type[Any]]:
    """(Processor, Executor) subclasses bound to *event_type*."""
    if impl == "raw":
        return RawProcessor, RawExecutor
    if impl == "lionagi":
        from lionagi.protocols.generic.processor import (  # type: ignore[import-not-found,unused-ignore]
            Executor,
            Processor,
        )
    else:
        from lionexec.engine import Executor, Processor  # type: ignore[assignment,unused-ignore]

    processor = type("BenchProcessor", (Processor,), {"event_type": event_type})
    executor = type("BenchExecutor", (Executor,), {"processor_type": processor})
    return processor, executor


def processor_body(impl: str, kind: str = "ok", many: bool = False) -> Any:
    """Enqueue *n* fresh events into a processor and ``join()``; returns the seconds taken.

    *many*: one ``enqueue_many`` of the batch instead of an ``enqueue`` per event.
    """
    event = getattr(event_types(impl), kind)
    processor_type, _ = classes(impl, event)

    async def body(n: int) -> float:
        processor = processor_type(**CONFIG)
        events = [event() for _ in range(n)]
        start = time.perf_counter()
        if many:
            await processor.enqueue_many(events)
        else:
            for item in events:
                await processor.enqueue(item)
        await processor.join()
        elapsed = time.perf_counter() - start
        _check(events)
        return elapsed

    return body


def _check(events: list[Any]) -> None:
    done = sum(1 for e in events if e.status == "completed")
    if done != len(events):
        raise AssertionError(f"{len(events) - done} of {len(events)} events did not complete")


def cases(impl: str, quick: bool) -> list[Case]:
    small, large = (2_000, 10_000) if quick else (20_000, 100_000)
    try:
        ok = event_types(impl).ok
        _, executor_type = classes(impl, ok)
    except ImportError as exc:
        return unavailable(cases("raw", quick), f"not implemented yet ({exc})")

    async def executor_run(n: int, chunk: int) -> float:
        executor = executor_type(processor_config=dict(CONFIG))
        await maybe_await(executor.start())
        events = [ok() for _ in range(n)]
        start = time.perf_counter()
        for first in range(0, n, chunk):
            for item in events[first : first + chunk]:
                await maybe_await(executor.append(item))
            await maybe_await(executor.forward())
        await executor.processor.join()
        elapsed = time.perf_counter() - start
        _check(events)
        return elapsed

    async def bulk(n: int) -> float:
        return await executor_run(n, n)

    async def chunks(n: int) -> float:
        return await executor_run(n, CHUNK)

    processor_type, _ = classes(impl, ok)

    async def retained(n: int) -> tuple[int, int]:
        processor = processor_type(**CONFIG)
        probe = MemoryProbe()
        for _ in range(n):
            await processor.enqueue(ok())
        await processor.join()
        return probe.stop()

    trivial = processor_body(impl)
    bulk_note = ""
    if impl == "lionagi":
        # lionagi's pending Progression checks deque membership on every popleft: O(n) each,
        # so bulk forwarding is quadratic (about 20 s for 20k events). One run is enough.
        bulk_note = "one run: quadratic in the batch size"
    many_name = f"processor: {k(small)} trivial events, one enqueue_many"
    if impl == "lionagi":
        many = Case(many_name, small, None, unavailable="lionagi has no batch enqueue")
    else:
        many = Case(many_name, small, processor_body(impl, many=True), throughput=True)
    return [
        Case(f"processor: {k(small)} trivial events", small, trivial, throughput=True),
        many,
        Case(f"processor: {k(large)} trivial events", large, trivial, throughput=True, repeats=3),
        Case(
            f"processor: {k(small)} events sleeping 1 ms",
            small,
            processor_body(impl, "nap"),
            throughput=True,
        ),
        Case(
            f"executor: {k(small)} bulk (append all, forward, join)",
            small,
            bulk,
            throughput=True,
            note=bulk_note,
            repeats=1 if bulk_note else None,
        ),
        Case(f"executor: {k(small)} in chunks of 100", small, chunks, throughput=True),
        Case(
            f"processor: retained per processed event, {k(small)}",
            small,
            retained,
            kind="memory",
            peak=True,
        ),
    ]


if __name__ == "__main__":
    main(cases)
