"""Property tests: no event is ever lost, whatever the operations and wherever they are cancelled.

Hypothesis draws a processor configuration and a list of operations; each example replays them
in one ``trio.run`` on a ``MockClock`` (autojump), checking after every operation that

* every accepted event is terminal and out of the queue, or pending at exactly one position;
* nothing else is in the queue, and nothing is left ``processing``;
* no cycle is left holding capacity, queue places, tasks or concurrency tokens: capacity is
  back to ``queue_capacity`` (and never went negative);
* the queue never exceeds ``max_queue_size``, and no producer waits while it has room;
* no event ran twice, even when enqueued again or run directly (``invoke()``) while queued; the
  outcome totals add up, counting events (an event run elsewhere is ``discarded``, not counted);
* a second enqueue is refused exactly when the event is already in the processor or no longer
  pending; a cancelled ``enqueue_many`` enqueued a prefix of its batch;
* no cycle spins: permission checks are bounded by the events and the time that passed.

Finally, with every event allowed, ``join()`` drains the queue: every accepted event ends
terminal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import example, given
from hypothesis import strategies as st

from lionexec.engine import TERMINAL_STATUSES, Event, EventStatus, Processor
from lionexec.errors import EventStateError


class SpinError(AssertionError):
    pass


class Work(Event):
    def __init__(self, number: int, delay: int, fail: bool, streaming: bool) -> None:
        super().__init__(streaming=streaming)
        self.number = number
        self.delay = delay
        self.fail = fail
        self.runs = 0

    @property
    def request(self) -> dict[str, Any]:
        return {"number": self.number}

    async def _invoke(self) -> int:
        self.runs += 1
        await trio.sleep(self.delay)
        if self.fail:
            raise ValueError(self.number)
        return self.number

    async def _stream(self) -> AsyncIterator[int]:
        self.runs += 1
        for i in range(self.delay):
            await trio.sleep(1)
            yield i
        if self.fail:
            raise ValueError(self.number)

    def __repr__(self) -> str:
        return f"Work({self.number}, {self.status})"


class Model(Processor):
    """A processor whose policy the operations toggle; it refuses to be asked too often."""

    def __init__(self, *args: Any, check_delay: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mode = "allow"
        self.check_delay = check_delay
        self.checks = 0
        self.check_limit_base = 0
        self.op_started = 0.0

    async def request_permission(self, **kwargs: Any) -> bool:
        self.checks += 1
        elapsed = trio.current_time() - self.op_started
        if self.checks > self.check_limit_base * (elapsed + 1):
            raise SpinError(f"{self.checks} permission checks in {elapsed} s")
        if self.check_delay:
            await trio.sleep(self.check_delay)
        return self.mode == "allow"

    async def handle_denied(self, event: Event) -> bool:
        if self.mode == "defer":
            return False
        return await super().handle_denied(event)


@attrs.frozen
class Config:
    queue_capacity: int
    concurrency_limit: int | None
    max_queue_size: int
    check_delay: int


configs = st.builds(
    Config,
    queue_capacity=st.integers(1, 4),
    concurrency_limit=st.sampled_from([None, 0, 1, 2, 3]),
    max_queue_size=st.sampled_from([0, 1, 1, 2, 3]),
    check_delay=st.sampled_from([0, 0, 1]),
)
kinds = st.tuples(st.integers(0, 2), st.booleans(), st.booleans())  # delay, fail, streaming
deadlines = st.sampled_from([0.0, 0.25, 0.5, 1.25, 2.5, 4.75])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), kinds),
        st.tuples(st.just("try_enqueue"), kinds),
        st.tuples(st.just("enqueue_in_background"), kinds),
        st.tuples(st.just("enqueue_many"), st.tuples(st.lists(kinds, max_size=4), deadlines)),
        st.tuples(st.just("enqueue_again"), st.integers(0, 40)),
        st.tuples(st.just("invoke_directly"), st.integers(0, 40)),
        st.tuples(st.just("process"), st.none() | deadlines),
        st.tuples(st.just("join"), deadlines),
        st.tuples(st.just("execute"), st.tuples(deadlines, st.none() | deadlines)),
        st.tuples(st.just("policy"), st.sampled_from(["allow", "deny", "defer"])),
        st.tuples(st.just("sleep"), st.integers(0, 3)),
    ),
    max_size=30,
)


class Harness:
    def __init__(self, config: Config) -> None:
        self.processor = Model(
            config.queue_capacity,
            1.0,
            config.concurrency_limit,
            config.max_queue_size,
            check_delay=config.check_delay,
        )
        self.events: list[Work] = []
        self.accepted: set[Work] = set()
        self.background: set[Work] = set()
        self.ran_directly: set[Work] = set()

    def new(self, kind: tuple[int, bool, bool]) -> Work:
        event = Work(len(self.events), *kind)
        self.events.append(event)
        return event

    def waiting_producers(self) -> set[Event]:
        return set(self.processor._queue._putters.values())

    def begin_op(self) -> None:
        processor = self.processor
        processor.checks = 0
        processor.op_started = trio.current_time()
        n = len(self.events) + 1
        processor.check_limit_base = n * n * (processor.queue_capacity + 1)

    def check(self) -> None:
        processor = self.processor
        queue = list(processor._queue)
        waiting = self.waiting_producers()
        accepted = self.accepted | (self.background - waiting)
        positions: dict[Work, int] = {}
        for item in queue:
            assert isinstance(item, Work)
            positions[item] = positions.get(item, 0) + 1
        for event in self.events:
            count = positions.get(event, 0)
            status = event.status
            assert status is not EventStatus.PROCESSING, event
            assert event.runs <= 1, event
            assert (event in processor) is (count == 1 or event in waiting), event
            if event in self.ran_directly:
                assert status in TERMINAL_STATUSES and event.runs == 1, event
                assert count <= 1, event  # queued still, until its turn comes: then discarded
            elif event in accepted:
                if status in TERMINAL_STATUSES:
                    assert count == 0, f"terminal {event} still queued"
                else:
                    assert status is EventStatus.PENDING
                    assert count == 1, f"pending {event} queued {count} times"
            else:
                assert status is EventStatus.PENDING, event
                assert count == 0 and event.runs == 0, event
        stats = processor.statistics()
        assert stats.taken == 0 and stats.running == 0 and stats.cycles_running == 0
        assert stats.limiter_borrowed == 0 and stats.limiter_waiting == 0
        assert stats.available_capacity == processor.queue_capacity
        assert stats.producers_waiting == len(waiting)
        assert not waiting or processor.queue_full, "a producer waits while there is room"
        if processor.max_queue_size:
            assert len(queue) <= processor.max_queue_size
        finished = sum(1 for e in accepted - self.ran_directly if e.status in TERMINAL_STATUSES)
        assert stats.completed + stats.failed + stats.skipped + stats.cancelled == finished
        discarded = sum(1 for e in accepted & self.ran_directly if positions.get(e, 0) == 0)
        assert stats.discarded == discarded

    async def run(self, ops: list[tuple[str, Any]]) -> None:
        processor = self.processor
        async with trio.open_nursery() as producers:
            for name, arg in ops:
                self.begin_op()
                if name == "enqueue":
                    event = self.new(arg)
                    with trio.move_on_after(0.5):
                        await processor.enqueue(event)
                        self.accepted.add(event)
                elif name == "try_enqueue":
                    event = self.new(arg)
                    if processor.try_enqueue(event):
                        self.accepted.add(event)
                elif name == "enqueue_in_background":
                    event = self.new(arg)
                    self.background.add(event)
                    producers.start_soon(processor.enqueue, event)
                    await trio.testing.wait_all_tasks_blocked()
                elif name == "enqueue_many":
                    kinds_, deadline = arg
                    batch = [self.new(kind) for kind in kinds_]
                    with trio.move_on_after(deadline):
                        await processor.enqueue_many(batch)
                    taken = [e in processor or e.status is not EventStatus.PENDING for e in batch]
                    assert taken == sorted(taken, reverse=True), "not a prefix"
                    self.accepted.update(e for e, t in zip(batch, taken, strict=True) if t)
                elif name == "enqueue_again" and self.events:
                    event = self.events[arg % len(self.events)]
                    inside = event in processor
                    pending = event.status is EventStatus.PENDING
                    try:
                        admitted = processor.try_enqueue(event)
                    except EventStateError:
                        assert inside or not pending, event
                    else:
                        assert not inside and pending, event
                        if admitted:
                            self.accepted.add(event)
                            self.background.discard(event)
                elif name == "invoke_directly" and self.events:
                    event = self.events[arg % len(self.events)]
                    if event.status is EventStatus.PENDING:
                        self.ran_directly.add(event)
                    await event.invoke()
                elif name == "process":
                    with trio.move_on_after(arg if arg is not None else float("inf")):
                        await processor.process()
                elif name == "join":
                    with trio.move_on_after(arg):
                        await processor.join()
                elif name == "execute":
                    deadline, stop_after = arg
                    with trio.move_on_after(deadline):
                        async with trio.open_nursery() as nursery:
                            await nursery.start(processor.execute)
                            if stop_after is not None:
                                await trio.sleep(stop_after)
                                processor.stop()
                    assert not processor.is_executing()
                elif name == "policy":
                    processor.mode = arg
                else:
                    await trio.sleep(arg)
                await trio.testing.wait_all_tasks_blocked()
                self.check()
            # Producers still blocked give up: their events were never accepted.
            given_up = self.waiting_producers()
            producers.cancel_scope.cancel()
        self.background -= given_up
        self.check()
        # Liveness: once everything is allowed, join() runs every accepted event to the end.
        processor.mode = "allow"
        self.begin_op()
        with trio.fail_after(1000):
            await processor.join()
        self.check()
        assert list(processor._queue) == []
        assert all(e.status in TERMINAL_STATUSES for e in self.accepted | self.background)


def replay(config: Config, ops: list[tuple[str, Any]]) -> None:
    harness = Harness(config)
    trio.run(harness.run, ops, clock=trio.testing.MockClock(autojump_threshold=0))


QUICK = (0, False, False)
SLOW = (2, False, False)


@given(configs, operations)
@example(  # a freed place goes straight to the waiting producer
    Config(1, None, 1, 0),
    [("try_enqueue", QUICK), ("enqueue_in_background", QUICK), ("process", None)],
)
@example(  # cancelled while one event runs, one waits for a token and one is being checked
    Config(3, 1, 3, 1), [("try_enqueue", SLOW)] * 3 + [("process", 1.25)]
)
@example(  # a queue denied for now is checked once per refresh, not spun on
    Config(1, None, 0, 0), [("policy", "defer")] + [("try_enqueue", QUICK)] * 3 + [("join", 2.5)]
)
@example(  # more terminal denials than capacity (they must not exhaust it), then the service
    Config(1, None, 0, 0),
    [("policy", "deny")] + [("try_enqueue", QUICK)] * 3 + [("execute", (4.75, None))],
)
def test_no_event_is_ever_lost(config: Config, ops: list[tuple[str, Any]]) -> None:
    replay(config, ops)


@given(
    configs,
    st.lists(kinds, min_size=1, max_size=10),
    st.sampled_from(["allow", "deny", "defer"]),
    st.sampled_from(["process", "join", "execute"]),
    st.floats(0, 6, allow_nan=False),
)
def test_cancellation_at_any_point_loses_nothing(
    config: Config,
    events: list[tuple[int, bool, bool]],
    mode: str,
    entry: str,
    deadline: float,
) -> None:
    """Fill the queue, cancel one process()/join()/execute() at an arbitrary instant."""
    ops: list[tuple[str, Any]] = [("policy", mode)]
    ops += [("try_enqueue", kind) for kind in events]
    ops.append(
        {
            "process": ("process", deadline),
            "join": ("join", deadline),
            "execute": ("execute", (deadline, None)),
        }[entry]
    )
    replay(config, ops)
