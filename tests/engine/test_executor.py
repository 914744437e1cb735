"""The Executor owns live events and their pending order, and feeds a Processor."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import trio
import trio.testing

from lionexec.engine import Event, EventStatus, Executor, Processor
from lionexec.errors import ConfigurationError, EventTypeError

CONFIG: dict[str, Any] = {
    "queue_capacity": 10,
    "capacity_refresh_time": 1.0,
    "concurrency_limit": None,
}


class Job(Event):
    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        super().__init__()
        self.delay = delay
        self.fail = fail

    async def _invoke(self) -> str:
        await trio.sleep(self.delay)
        if self.fail:
            raise ValueError("failed on purpose")
        return "done"


class SpecialJob(Job):
    pass


class JobProcessor(Processor):
    event_type = Job


class JobExecutor(Executor):
    processor_type: ClassVar[type[Processor]] = JobProcessor


def executor(**config: Any) -> JobExecutor:
    return JobExecutor({**CONFIG, **config})


def queued(processor: Processor | None) -> list[Event]:
    assert processor is not None
    return list(processor._queue)


# -- ownership ---------------------------------------------------------------------------------


def test_append_owns_the_event_and_marks_its_id_pending() -> None:
    ex = executor()
    a, b = Job(), Job()
    ex.append(a)
    ex.append(b)
    assert list(ex.pending) == [a.id, b.id]
    assert ex[a.id] is a
    assert len(ex) == 2


def test_re_appending_replaces_the_event_without_duplicating_its_pending_id() -> None:
    ex = executor()
    a, b = Job(), Job()
    ex.append(a)
    ex.append(b)
    replacement = Job()
    replacement.id = a.id
    ex.append(replacement)
    ex.append(replacement)
    assert list(ex.pending) == [a.id, b.id]
    assert ex[a.id] is replacement
    assert len(ex) == 2


def test_pending_is_a_live_ordered_set_like_view() -> None:
    ex = executor()
    a = Job()
    view = ex.pending
    ex.append(a)
    assert a.id in view
    assert view & {a.id} == {a.id}


def test_append_accepts_subclasses_unless_strict() -> None:
    ex = executor()
    ex.append(SpecialJob())
    with pytest.raises(EventTypeError, match="expected an event of type Job, got Event"):
        ex.append(Event())


def test_strict_event_type_refuses_subclasses() -> None:
    ex = JobExecutor(CONFIG, strict_event_type=True)
    ex.append(Job())
    special = SpecialJob()
    with pytest.raises(EventTypeError, match="exactly Job, got SpecialJob") as info:
        ex.append(special)
    assert isinstance(info.value, TypeError)
    assert (info.value.expected, info.value.received, info.value.strict) == (
        Job,
        SpecialJob,
        True,
    )
    assert special not in ex
    assert len(ex.pending) == 1


def test_event_type_is_the_processor_types_event_type() -> None:
    assert JobExecutor().event_type is Job
    assert Executor().event_type is Event


def test_contains_accepts_an_event_an_id_or_an_id_string() -> None:
    ex = executor()
    a = Job()
    ex.append(a)
    assert a in ex
    assert a.id in ex
    assert str(a.id) in ex
    assert Job() not in ex
    assert "not-a-uuid" not in ex
    assert 42 not in ex


def test_remove_stops_owning_an_event_and_forgets_its_pending_id() -> None:
    ex = executor()
    a, b = Job(), Job()
    ex.append(a)
    ex.append(b)
    assert ex.remove(str(a.id)) is a
    assert a not in ex
    assert list(ex.pending) == [b.id]
    with pytest.raises(KeyError):
        ex.remove(a)


# -- the processor -----------------------------------------------------------------------------


def test_start_creates_the_processor_lazily_from_the_config() -> None:
    ex = executor(max_queue_size=7)
    assert ex.processor is None
    processor = ex.start()
    assert isinstance(processor, JobProcessor)
    assert ex.processor is processor
    assert (processor.queue_capacity, processor.max_queue_size) == (10, 7)
    assert ex.start() is processor  # created once


def test_a_bad_processor_config_is_reported_when_the_processor_is_created() -> None:
    ex = JobExecutor({**CONFIG, "max_queue_size": -1})
    with pytest.raises(ConfigurationError, match="max_queue_size"):
        ex.start()
    assert ex.processor is None


def test_start_clears_the_processors_stop_signal() -> None:
    ex = executor()
    processor = ex.start()
    ex.stop()
    assert processor.is_stopped()
    ex.start()
    assert not processor.is_stopped()


def test_stop_without_a_processor_is_a_no_op() -> None:
    ex = executor()
    ex.stop()
    assert ex.processor is None


async def test_forward_moves_every_pending_event_into_the_queue_in_order_then_runs_one_cycle() -> (
    None
):
    ex = executor(queue_capacity=2)
    events = [Job() for _ in range(5)]
    for event in events:
        ex.append(event)
    await ex.forward()
    assert list(ex.pending) == []
    assert [e.status for e in events] == [EventStatus.COMPLETED] * 2 + [EventStatus.PENDING] * 3
    assert queued(ex.processor) == events[2:]


async def test_forward_creates_the_processor_if_needed() -> None:
    ex = executor()
    a = Job()
    ex.append(a)
    await ex.forward()
    assert ex.processor is not None
    assert a.status is EventStatus.COMPLETED


async def test_forward_drops_ids_of_events_no_longer_owned() -> None:
    ex = executor()
    a, b = Job(), Job()
    ex.append(a)
    ex.append(b)
    ex.remove(a)
    await ex.forward()
    assert a.status is EventStatus.PENDING
    assert b.status is EventStatus.COMPLETED


async def test_forward_into_a_queue_smaller_than_pending_does_not_stall() -> None:
    ex = executor(queue_capacity=2, max_queue_size=2)
    events = [Job() for _ in range(7)]
    for event in events:
        ex.append(event)
    with trio.fail_after(5):
        await ex.forward()
    assert list(ex.pending) == []
    # Three cycles made room along the way; forward's own cycle ran the last one.
    assert all(e.status is EventStatus.COMPLETED for e in events)
    assert queued(ex.processor) == []


async def test_forward_cancelled_while_waiting_for_room_keeps_the_rest_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ex = executor(queue_capacity=1, max_queue_size=1)
    events = [Job(delay=10) for _ in range(4)]
    for event in events:
        ex.append(event)
    with trio.move_on_after(1):
        await ex.forward()
    # The first went in; making room for the second started the first, which was cancelled.
    assert events[0].status is EventStatus.CANCELLED
    assert queued(ex.processor) == []
    assert list(ex.pending) == [e.id for e in events[1:]]
    assert all(e.status is EventStatus.PENDING for e in events[1:])


async def test_concurrent_forwards_never_queue_an_event_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    queued_ids: list[Any] = []

    class Recording(JobProcessor):
        async def enqueue(self, event: Event) -> None:
            await super().enqueue(event)
            queued_ids.append(event.id)

        def try_enqueue(self, event: Event) -> bool:
            added = super().try_enqueue(event)
            if added:
                queued_ids.append(event.id)
            return added

    class RecordingExecutor(Executor):
        processor_type = Recording

    ex = RecordingExecutor({**CONFIG, "queue_capacity": 1, "max_queue_size": 1})
    processor = ex.start()
    long, filler, event = Job(delay=10), Job(), Job()
    await processor.enqueue(long)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.process)  # long holds the only unit of capacity for 10 s
        await trio.testing.wait_all_tasks_blocked()
        await processor.enqueue(filler)  # and now the queue is full
        ex.append(event)
        nursery.start_soon(ex.forward)
        nursery.start_soon(ex.forward)
        await trio.sleep(11)
        await processor.join()
    await processor.join()
    assert queued_ids.count(event.id) == 1
    assert event.status is EventStatus.COMPLETED
    assert list(ex.pending) == []


async def test_running_runs_the_service_and_stops_it_promptly_on_exit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ex = executor(capacity_refresh_time=100.0)
    a = Job(delay=1)
    async with ex.running() as same:
        assert same is ex
        processor = ex.processor
        assert processor is not None and processor.is_executing()
        await processor.enqueue(a)
        await a.wait_completed()  # the service ran it, at once
        assert trio.current_time() == 1
    assert not processor.is_executing()
    assert processor.is_stopped()
    assert trio.current_time() == 1  # exit did not wait out the refresh


async def test_append_and_forward_inside_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ex = executor()
    events = [Job(delay=1) for _ in range(3)]
    async with ex.running():
        for event in events:
            ex.append(event)
        await ex.forward()
        for event in events:
            await event.wait_completed()
    assert ex.status_counts()["completed"] == 3


async def test_running_cancels_the_service_and_reraises_if_the_block_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ex = executor()
    slow = Job(delay=10)
    with pytest.raises(KeyError, match="body failed"):
        async with ex.running():
            assert ex.processor is not None
            await ex.processor.enqueue(slow)
            await trio.sleep(1)
            raise KeyError("body failed")
    assert slow.status is EventStatus.CANCELLED
    assert ex.processor is not None and not ex.processor.is_executing()


async def test_running_lets_outer_cancellation_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ex = executor()
    slow = Job(delay=10)
    with trio.move_on_after(1) as scope:
        async with ex.running():
            assert ex.processor is not None
            await ex.processor.enqueue(slow)
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert slow.status is EventStatus.CANCELLED


class Flaky(Processor):
    async def request_permission(self, **kwargs: Any) -> bool:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("permission backend down")


class FlakyExecutor(Executor):
    processor_type = Flaky


def flaky_executor() -> FlakyExecutor:
    return FlakyExecutor(
        {"queue_capacity": 1, "capacity_refresh_time": 1, "concurrency_limit": None}
    )


async def test_running_reports_the_blocks_error_with_the_services() -> None:
    ex = flaky_executor()
    with pytest.RaisesGroup(RuntimeError, ValueError) as caught:
        async with ex.running():
            assert ex.processor is not None
            await ex.processor.enqueue(Job(delay=1))  # the service's next cycle fails
            try:
                await trio.sleep_forever()  # cancelled by the failing service
            except trio.Cancelled:
                raise ValueError("cleanup failed while cancelled") from None
    # the service's first, as a plain nursery orders them
    assert [type(e) for e in caught.value.exceptions] == [RuntimeError, ValueError]


async def test_running_drops_the_blocks_cancelled_when_the_service_fails() -> None:
    ex = flaky_executor()
    with pytest.RaisesGroup(RuntimeError):
        async with ex.running():
            assert ex.processor is not None
            await ex.processor.enqueue(Job(delay=1))
            await trio.sleep_forever()


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (
            {
                "queue_capacity": 2,
                "capacity_refresh_time": 1,
                "concurrency_limit": None,
                "max_queue": 5,
            },
            "max_queue",
        ),
        ({"capacity_refresh_time": 1, "concurrency_limit": None}, "queue_capacity"),
    ],
    ids=["misspelled", "missing"],
)
async def test_a_processor_config_with_a_bad_key_is_a_configuration_error(
    config: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"processor_config .*'{named}'") as caught:
        Executor(config).start()
    assert isinstance(caught.value.__cause__, TypeError)
    ex = Executor(config)
    with pytest.raises(ConfigurationError, match=named):
        await ex.forward()
    assert ex.processor is None


# -- views -------------------------------------------------------------------------------------


def _one_of_each() -> tuple[JobExecutor, dict[EventStatus, Job]]:
    ex = executor()
    by_status: dict[EventStatus, Job] = {}
    for status in EventStatus:
        event = Job()
        event.status = status
        by_status[status] = event
        ex.append(event)
    return ex, by_status


@pytest.mark.parametrize(
    ("view", "status"),
    [
        ("completed_events", EventStatus.COMPLETED),
        ("pending_events", EventStatus.PENDING),
        ("failed_events", EventStatus.FAILED),
        ("cancelled_events", EventStatus.CANCELLED),
        ("skipped_events", EventStatus.SKIPPED),
    ],
)
def test_status_views_are_new_filtered_collections(view: str, status: EventStatus) -> None:
    ex, by_status = _one_of_each()
    first = getattr(ex, view)
    assert first == [by_status[status]]
    first.clear()
    assert getattr(ex, view) == [by_status[status]]
    assert getattr(ex, view) is not getattr(ex, view)


def test_status_counts_covers_all_seven_statuses() -> None:
    ex, _ = _one_of_each()
    ex.append(Job())
    counts = ex.status_counts()
    assert counts == {
        "pending": 2,
        "processing": 1,
        "completed": 1,
        "failed": 1,
        "skipped": 1,
        "cancelled": 1,
        "aborted": 1,
    }
    assert executor().status_counts() == dict.fromkeys(counts, 0)


async def test_cleanup_completed_removes_only_completed_and_returns_the_count() -> None:
    ex, by_status = _one_of_each()
    extra = Job()
    ex.append(extra)
    await ex.forward()  # extra and the pending one complete; the rest are left as they were
    assert ex.cleanup_completed() == 3
    assert ex.status_counts()["completed"] == 0
    for status, event in by_status.items():
        assert (event in ex) is (
            status is not EventStatus.COMPLETED and status is not EventStatus.PENDING
        )
    assert extra not in ex
    assert ex.cleanup_completed() == 0


def test_inspect_state_reports_totals_histogram_pending_and_processor_flags() -> None:
    ex, _ = _one_of_each()
    state = ex.inspect_state()
    assert state == {
        "total_events": 7,
        "status_counts": ex.status_counts(),
        "pending_queue": 7,
        "processor_running": False,
        "processor_stopped": True,
    }
    ex.start()
    assert ex.inspect_state()["processor_stopped"] is False


async def test_inspect_state_sees_a_running_service() -> None:
    ex = executor()
    async with ex.running():
        assert ex.inspect_state()["processor_running"] is True
    assert ex.inspect_state()["processor_running"] is False
    assert ex.inspect_state()["processor_stopped"] is True


async def test_failed_events_stay_owned_with_their_error() -> None:
    ex = executor()
    bad = Job(fail=True)
    ex.append(bad)
    await ex.forward()
    assert ex.failed_events == [bad]
    assert isinstance(bad.execution.error, ValueError)
