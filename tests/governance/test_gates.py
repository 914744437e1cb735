"""SessionObserver: the pre-invoke gate and the event store; BoundSeams, how act calls them."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from lionexec import FailureLog, ReportedFailure
from lionexec.governance import (
    BoundSeams,
    CallContext,
    GateDenied,
    HookBus,
    PermissionPolicy,
    SessionObserver,
    SessionObserverStatistics,
    SubscriberFailure,
    ToolInvocation,
)
from lionexec.serialization import converter

CALL = ToolInvocation("search", {"q": "trio"}, call_id="call_1", branch_id="b1")


async def test_no_gate_allows_and_records_nothing() -> None:
    observer = SessionObserver()
    assert not observer.has_gate
    assert await observer.authorize(CALL) is True
    assert observer.records == ()


@pytest.mark.parametrize("verdict", [True, 1, "yes", [0]])
async def test_a_truthy_gate_allows(verdict: object) -> None:
    observer = SessionObserver()
    observer.gate(lambda invocation: verdict)
    assert await observer.authorize(CALL) is True
    assert observer.denials == []


async def test_an_async_gate_is_awaited() -> None:
    observer = SessionObserver()
    seen: list[ToolInvocation] = []

    @observer.gate
    async def check(invocation: ToolInvocation) -> bool:
        await trio.lowlevel.checkpoint()
        seen.append(invocation)
        return invocation.function != "rm"

    assert await observer.authorize(CALL) is True
    assert await observer.authorize(ToolInvocation("rm")) is False
    assert [i.function for i in seen] == ["search", "rm"]


@pytest.mark.parametrize("verdict", [False, None, 0, "", []])
async def test_a_falsy_gate_denies_and_records_gate_denied(verdict: object) -> None:
    observer = SessionObserver()
    observer.gate(lambda invocation: verdict)
    assert await observer.authorize(CALL) is False
    assert observer.denials == [GateDenied(CALL, f"the session gate returned {verdict!r}")]
    assert observer.records == (observer.denials[0],)


async def test_a_raising_gate_denies_with_the_error() -> None:
    observer = SessionObserver()
    error = LookupError("no such policy")

    def check(invocation: ToolInvocation) -> bool:
        raise error

    observer.gate(check)
    assert await observer.authorize(CALL) is False
    (denial,) = observer.denials
    assert denial.invocation is CALL and denial.error is error
    assert denial.reason == "the session gate raised LookupError: no such policy"


async def test_a_gate_result_whose_truth_value_raises_denies() -> None:
    class Ambiguous:
        def __bool__(self) -> bool:
            raise ValueError("ambiguous")

    observer = SessionObserver()
    observer.gate(lambda invocation: Ambiguous())
    assert await observer.authorize(CALL) is False
    assert isinstance(observer.denials[0].error, ValueError)


async def test_the_gate_only_ever_sees_tool_invocations() -> None:
    # The gate decides about invocations only, never about other emitted payloads.
    observer = SessionObserver()
    seen: list[Any] = []

    def check(payload: Any) -> bool:
        seen.append(payload)
        return True

    observer.gate(check)
    await observer.emit({"event": "tool finished"})
    await observer.emit("anything")
    await observer.authorize(CALL)
    assert seen == [CALL]
    with pytest.raises(TypeError, match="ToolInvocation"):
        await observer.authorize({"function": "search"})  # type: ignore[arg-type]


async def test_the_gate_does_not_filter_what_is_emitted() -> None:
    observer = SessionObserver()
    observer.gate(lambda invocation: False)
    got: list[Any] = []
    observer.subscribe(str, got.append)
    await observer.emit("event")
    assert got == ["event"]


async def test_clear_gate_allows_again_and_gate_needs_a_callable() -> None:
    observer = SessionObserver()
    observer.gate(lambda invocation: False)
    observer.clear_gate()
    assert await observer.authorize(CALL) is True
    with pytest.raises(TypeError, match="clear_gate"):
        observer.gate(None)  # type: ignore[type-var]


async def test_a_cancelled_gate_propagates_and_records_nothing() -> None:
    observer = SessionObserver()

    async def slow(invocation: ToolInvocation) -> bool:
        await trio.sleep_forever()
        return True  # pragma: no cover

    observer.gate(slow)
    with trio.move_on_after(0) as scope:
        await observer.authorize(CALL)
    assert scope.cancelled_caught
    assert observer.records == ()


async def test_emit_stores_before_routing_and_dispatching() -> None:
    observer = SessionObserver()
    stored_when_dispatched: list[bool] = []
    observer.subscribe(object, lambda p: stored_when_dispatched.append(p in observer.records))
    await observer.emit("e")
    assert stored_when_dispatched == [True]


async def test_subscriptions_by_class_or_predicate_in_order() -> None:
    observer = SessionObserver()
    got: list[tuple[str, Any]] = []

    async def by_predicate(payload: Any) -> None:
        await trio.lowlevel.checkpoint()
        got.append(("big", payload))

    observer.subscribe(int, lambda p: got.append(("int", p)))
    observer.subscribe(lambda p: isinstance(p, int) and p > 10, by_predicate)
    for payload in (5, 50, "x"):
        await observer.emit(payload)
    assert got == [("int", 5), ("int", 50), ("big", 50)]
    assert observer.by_type(int) == [5, 50]


async def test_unsubscribe_removes_every_subscription_of_a_handler() -> None:
    observer = SessionObserver()
    got: list[Any] = []
    observer.subscribe(int, got.append)
    observer.subscribe(str, got.append)
    assert observer.unsubscribe(got.append) == 2
    await observer.emit(1)
    assert got == []


async def test_routes_file_payloads_into_named_streams() -> None:
    observer = SessionObserver()
    observer.route(GateDenied, into="denials")
    observer.route(lambda p: p == "x", into="xs")
    observer.gate(lambda invocation: False)
    await observer.authorize(CALL)
    await observer.emit("x")
    assert observer.stream("denials") == tuple(observer.denials)
    assert observer.stream("xs") == ("x",)
    assert observer.stream("never") == ()


async def test_gate_denials_are_dispatched_to_subscribers() -> None:
    observer = SessionObserver()
    got: list[GateDenied] = []
    observer.subscribe(GateDenied, got.append)
    observer.gate(lambda invocation: False)
    await observer.authorize(CALL)
    assert got == observer.denials


async def test_subscriber_and_condition_failures_are_isolated_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An observer's failure after the invocation never reaches the emitter.
    observer = SessionObserver()
    got: list[Any] = []

    def broken_subscriber(payload: Any) -> None:
        raise RuntimeError("subscriber")

    def broken_condition(payload: Any) -> bool:
        raise ValueError("condition")

    def broken_route(payload: Any) -> bool:
        raise KeyError("route")

    observer.route(broken_route, into="r")
    observer.subscribe(object, broken_subscriber)
    observer.subscribe(broken_condition, got.append)
    observer.subscribe(object, got.append)
    with caplog.at_level(logging.ERROR, logger="lionexec"):
        failures = await observer.emit("payload", call_id="call_1")
    assert got == ["payload"]
    assert observer.records == ("payload",)
    assert [(f.culprit, type(f.error)) for f in failures] == [
        (repr(broken_route), KeyError),
        (repr(broken_subscriber), RuntimeError),
        (repr(broken_condition), ValueError),
    ]
    assert {(f.where, f.call_id) for f in failures} == {("observer", "call_1")}
    assert all(type(f) is SubscriberFailure is ReportedFailure for f in failures)
    assert list(observer.failures) == failures
    assert len([r for r in caplog.records if r.name == "lionexec"]) == 3  # each logged once


async def test_a_failing_denial_subscriber_does_not_change_the_verdict() -> None:
    observer = SessionObserver()

    def broken(payload: Any) -> None:
        raise RuntimeError("no")

    observer.subscribe(GateDenied, broken)
    observer.gate(lambda invocation: False)
    assert await observer.authorize(CALL) is False
    assert len(observer.failures) == 1 and len(observer.denials) == 1
    assert observer.failures[0].call_id == CALL.call_id


async def test_cancellation_in_a_subscriber_propagates_after_the_payload_is_stored() -> None:
    observer = SessionObserver()

    async def waits(payload: Any) -> None:
        await trio.sleep_forever()

    observer.subscribe(object, waits)
    with trio.move_on_after(0) as scope:
        await observer.emit("kept")
    assert scope.cancelled_caught
    assert observer.records == ("kept",)


def test_subscribe_and_route_check_their_arguments() -> None:
    observer = SessionObserver()
    with pytest.raises(TypeError, match="subscriber"):
        observer.subscribe(int, 3)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="condition"):
        observer.route(3, into="x")  # type: ignore[arg-type]


def test_gate_denied_serializes_for_logs() -> None:
    denial = GateDenied(CALL, "the session gate raised X: y", error=RuntimeError("y"))
    assert converter.unstructure(denial) == {
        "invocation": {
            "function": "search",
            "arguments": {"q": "trio"},
            "call_id": "call_1",
            "branch_id": "b1",
        },
        "reason": "the session gate raised X: y",
        "error": {"error": "RuntimeError", "message": "y"},
    }


async def test_statistics_count_what_the_observer_holds() -> None:
    observer = SessionObserver(failures=FailureLog(max_kept=1))
    assert observer.statistics() == SessionObserverStatistics(
        has_gate=False,
        records=0,
        denials=0,
        subscriptions=0,
        routes=0,
        failures_total=0,
        failures_dropped=0,
    )

    def broken(payload: Any) -> None:
        raise RuntimeError("no")

    observer.gate(lambda invocation: False)
    observer.subscribe(GateDenied, broken)
    observer.route(GateDenied, into="denied")
    await observer.authorize(CALL)
    await observer.authorize(CALL)
    assert observer.statistics() == SessionObserverStatistics(
        has_gate=True,
        records=2,
        denials=2,
        subscriptions=1,
        routes=1,
        failures_total=2,
        failures_dropped=1,
    )


def test_the_observer_takes_its_options_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        SessionObserver(FailureLog())  # type: ignore[misc]


def test_a_denial_takes_its_error_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        GateDenied(CALL, "no", ValueError("x"))  # type: ignore[misc]


# -- BoundSeams: the observer's and the policy's seams, bound once ----------------------------


class Copyable:
    def __init__(self, value: int) -> None:
        self.value = value


def detach(record: Copyable) -> Copyable:
    return Copyable(record.value)


async def test_bound_seams_run_the_gate_and_the_policy_without_a_checkpoint_of_their_own() -> None:
    observer = SessionObserver()
    observer.gate(lambda invocation: invocation.function == "search")
    seams = BoundSeams(HookBus(), observer, PermissionPolicy())
    assert seams.authorize is not None and seams.decide is not None
    context = CallContext(function="search", arguments={}, call_id="call_1")
    with trio.CancelScope() as scope:
        scope.cancel()  # no checkpoint inside: the verdicts come all the same
        assert await seams.authorize(CALL) is True
        assert (await seams.decide(context)).behavior == "allow"
        with pytest.raises(trio.Cancelled):
            await observer.authorize(CALL)  # the public method's own checkpoint


async def test_without_an_observer_or_a_policy_their_seams_are_none() -> None:
    seams = BoundSeams(HookBus())
    assert (seams.authorize, seams.decide, seams.emit_event, seams.keep_event) == (None,) * 4
    assert not seams.must_authorize() and not seams.asks_always
    await trio.lowlevel.checkpoint()


async def test_an_observer_must_authorize_once_it_has_a_gate_set_at_any_time() -> None:
    observer = SessionObserver()
    seams = BoundSeams(HookBus(), observer)
    assert not seams.must_authorize()  # it would allow, and record nothing
    observer.gate(lambda invocation: False)
    assert seams.must_authorize() and not seams.asks_always  # (asked for its gate)
    assert seams.authorize is not None and not await seams.authorize(CALL)
    assert len(observer.denials) == 1


async def test_a_subclass_override_is_bound_checkpoint_and_all() -> None:
    class Audited(SessionObserver):
        async def authorize(self, invocation: ToolInvocation) -> bool:
            return await super().authorize(invocation)

        async def emit(self, payload: Any, *, call_id: str | None = None) -> list[Any]:
            return await super().emit(payload, call_id=call_id)

    observer = Audited()
    seams = BoundSeams(HookBus(), observer)
    assert seams.must_authorize()  # asked even without a gate: its override may rely on it
    assert seams.asks_always
    assert seams.keep_event is not None and not seams.keep_event(Copyable(1), detach)
    assert observer.records == ()  # emitted through its own emit instead
    assert seams.emit_event is not None
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            assert seams.authorize is not None
            await seams.authorize(CALL)


async def test_keep_event_stores_a_record_copied_on_each_read_when_nothing_sees_it_now() -> None:
    observer = SessionObserver()
    seams = BoundSeams(HookBus(), observer)
    assert seams.keep_event is not None
    record = Copyable(1)
    assert seams.keep_event(record, detach)
    [first] = observer.records
    [second] = observer.records
    assert first is not record and second is not first and first.value == 1
    observer.subscribe(Copyable, lambda payload: None)  # a subscriber would see it at once
    assert not seams.keep_event(Copyable(2), detach)
    assert len(observer.records) == 1
    await trio.lowlevel.checkpoint()
