"""MessageManager: order, links, all-or-nothing writes, isolated callbacks."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import attrs
import pytest
import trio

from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    CallbackFailure,
    ErrorInfo,
    Instruction,
    Message,
    MessageManager,
    System,
)
from lionexec.errors import HistoryError, LionexecError, MessageNotFoundError
from lionexec.testing import assert_linked

BOOM = ErrorInfo("RuntimeError", "boom")


def snapshot(history: MessageManager) -> list[tuple[uuid.UUID, object]]:
    """Every message id with its link field, in order: what a refused write must not change."""
    out: list[tuple[uuid.UUID, object]] = []
    for m in history:
        if isinstance(m, ActionRequest):
            out.append((m.id, m.content.action_response_id))
        elif isinstance(m, ActionResponse):
            out.append((m.id, m.content.action_request_id))
        else:
            out.append((m.id, None))
    return out


def pair(function: str = "f", **response: object) -> tuple[ActionRequest, ActionResponse]:
    request = ActionRequest.create(function, {"x": 1})
    return request, ActionResponse.create(request, **response)  # type: ignore[arg-type]


# -- reading ----------------------------------------------------------------------------------


def test_history_is_ordered_and_indexed_by_id() -> None:
    messages = [System(content="s"), Instruction(content="u"), AssistantResponse(content="a")]
    history = MessageManager()
    for m in messages:
        assert history.add_message(m) is m
    assert list(history) == messages
    assert history.messages == tuple(messages)
    assert len(history) == 3
    assert all(history[m.id] is m for m in messages)


def test_unknown_id_raises_message_not_found_which_is_a_key_error() -> None:
    history = MessageManager()
    missing = uuid.uuid4()
    with pytest.raises(MessageNotFoundError) as info:
        history[missing]
    assert isinstance(info.value, KeyError) and isinstance(info.value, LionexecError)
    assert info.value.message_id == missing
    assert str(missing) in str(info.value)


def test_contains_accepts_a_message_or_an_id() -> None:
    message = Instruction(content="u")
    history = MessageManager([message])
    assert message in history and message.id in history
    assert attrs.evolve(message) in history  # an equal copy
    assert Instruction(content="u") not in history
    assert uuid.uuid4() not in history


def test_request_and_response_queries() -> None:
    history = MessageManager()
    answered, response = pair()
    open_request = ActionRequest.create("g")
    history.record_action(answered, response)
    history.add_message(open_request)
    assert history.requests() == [answered, open_request]
    assert history.responses() == [response]
    assert history.response_for(answered) is response
    assert history.response_for(answered.id) is response
    assert history.response_for(open_request) is None
    assert history.unanswered() == [open_request]
    with pytest.raises(MessageNotFoundError):
        history.response_for(uuid.uuid4())
    with pytest.raises(TypeError, match="not a request"):
        history.response_for(response.id)


def test_equal_histories_hold_equal_messages_in_the_same_order() -> None:
    a, b = Instruction(content="a"), Instruction(content="b")
    assert MessageManager([a, b]) == MessageManager([a, b])
    assert MessageManager([a, b]) != MessageManager([b, a])
    assert MessageManager() != []


# -- writing ----------------------------------------------------------------------------------


def test_readding_a_message_keeps_its_position() -> None:
    first, second = Instruction(content="1"), Instruction(content="2")
    history = MessageManager([first, second])
    assert history.add_message(first) is first
    assert list(history) == [first, second]


def test_a_different_message_with_an_existing_id_is_refused() -> None:
    original = Instruction(content="1")
    history = MessageManager([original])
    with pytest.raises(HistoryError, match="different message") as info:
        history.add_message(attrs.evolve(original, content="forged"))
    assert info.value.message_id == original.id
    assert list(history) == [original]


def test_record_action_inserts_the_request_and_links_both_ways() -> None:
    history = MessageManager()
    request, response = pair(output=0)
    response.content.action_request_id = None  # the link is written by the history
    history.record_action(request, response)
    assert list(history) == [request, response]
    assert request.content.action_response_id == response.id
    assert response.content.action_request_id == request.id


def test_record_action_with_the_request_already_present_keeps_its_position() -> None:
    history = MessageManager()
    request, response = pair()
    history.add_message(request)
    later = history.add_message(Instruction(content="meanwhile"))
    history.record_action(request, response)
    assert list(history) == [request, later, response]


def test_recording_the_same_pair_again_changes_nothing() -> None:
    history = MessageManager()
    request, response = pair()
    history.record_action(request, response)
    history.record_action(request, response)
    assert list(history) == [request, response]


async def test_record_action_is_synchronous_so_it_completes_inside_a_cancelled_scope() -> None:
    # The act layer records a cancelled call's pair during cancellation bookkeeping.
    history = MessageManager()
    request, response = pair(outcome=ActionOutcome.CANCELLED, error=BOOM)
    with trio.CancelScope() as scope:
        scope.cancel()
        history.record_action(request, response)
        await trio.lowlevel.checkpoint()  # the first checkpoint is where Cancelled arrives
    assert scope.cancelled_caught
    assert history.response_for(request) is response


@pytest.mark.parametrize(
    ("arrange", "match"),
    [
        ("response_names_other_request", "answers request"),
        ("request_already_answered", "already answered"),
        ("function_mismatch", "is for function"),
        ("forged_request_id", "different message"),
        ("forged_response_id", "different message"),
    ],
)
def test_record_action_refuses_a_conflict_without_writing_anything(
    arrange: str, match: str
) -> None:
    history = MessageManager()
    earlier_request, earlier_response = pair()
    history.record_action(earlier_request, earlier_response)
    request, response = pair()
    if arrange == "response_names_other_request":
        response.content.action_request_id = uuid.uuid4()
    elif arrange == "request_already_answered":
        request = earlier_request
        response.content.action_request_id = None
    elif arrange == "function_mismatch":
        response = ActionResponse.create(ActionRequest.create("other"))
        response.content.action_request_id = request.id
    elif arrange == "forged_request_id":
        request = attrs.evolve(request, id=earlier_request.id)
        response.content.action_request_id = request.id
    elif arrange == "forged_response_id":
        response = attrs.evolve(response, id=earlier_response.id)
    before = snapshot(history)
    request_link = request.content.action_response_id
    response_link = response.content.action_request_id
    with pytest.raises(HistoryError, match=match):
        history.record_action(request, response)
    assert snapshot(history) == before
    assert request.content.action_response_id == request_link
    assert response.content.action_request_id == response_link
    assert_linked(history)


def test_the_act_layers_answer_links_an_admitted_request_like_record_action() -> None:
    fast, slow = MessageManager(), MessageManager()
    for history in (fast, slow):
        request = history.add_message(ActionRequest.create("f", {"a": 1}, call_id="c1"))
        history.add_message(Instruction(content="meanwhile"))
        response = ActionResponse._recorded(
            request,
            output=1,
            error=None,
            outcome=ActionOutcome.COMPLETED,
            attempts=1,
            sender="f",
            recipient="b",
        )
        if history is fast:
            history._answer(request, response)
        else:
            history.record_action(request, response)
        assert [type(m) for m in history] == [ActionRequest, Instruction, ActionResponse]
        assert history.response_for(request) is response
        assert request.content.action_response_id == response.id
        assert_linked(history)
    assert fast.appended == slow.appended == 3


@pytest.mark.parametrize("arrange", ["not_admitted", "already_answered", "another_function"])
def test_the_act_layers_answer_checks_what_it_was_not_promised(arrange: str) -> None:
    history = MessageManager()
    request, response = pair()
    if arrange == "not_admitted":  # record_action's case: the request is written first
        history._answer(request, response)
        assert list(history) == [request, response]
        assert_linked(history)
        return
    history.add_message(request)
    if arrange == "already_answered":
        history._answer(request, response)
        response = ActionResponse.create(request)
        match = "already answered"
    else:
        response = ActionResponse.create(ActionRequest.create("other"))
        response.content.action_request_id = request.id
        request.content.action_response_id = response.id  # a forged link: not "unanswered"
        match = "is for function"
    before = snapshot(history)
    with pytest.raises(HistoryError, match=match):
        history._answer(request, response)
    assert snapshot(history) == before


def test_record_action_checks_argument_types() -> None:
    request, response = pair()
    with pytest.raises(TypeError, match="ActionRequest"):
        MessageManager().record_action(response, response)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ActionResponse"):
        MessageManager().record_action(request, request)  # type: ignore[arg-type]


def test_adding_a_response_links_it_to_its_request() -> None:
    history = MessageManager()
    request, response = pair(output=None)
    history.add_message(request)
    history.add_message(response)
    assert request.content.action_response_id == response.id
    assert history.response_for(request) is response


def test_a_response_whose_request_is_not_recorded_is_refused() -> None:
    history = MessageManager()
    _, response = pair()
    with pytest.raises(HistoryError, match="must answer a request in this history"):
        history.add_message(response)
    assert len(history) == 0


def test_a_second_response_to_one_request_is_refused() -> None:
    history = MessageManager()
    request, response = pair()
    history.record_action(request, response)
    second = ActionResponse.create(request, output=2)
    with pytest.raises(HistoryError, match="already answered"):
        history.add_message(second)
    assert list(history) == [request, response]


def test_a_response_for_another_function_is_refused() -> None:
    history = MessageManager()
    request = history.add_message(ActionRequest.create("f"))
    response = ActionResponse.create(ActionRequest.create("g"))
    response.content.action_request_id = request.id
    with pytest.raises(HistoryError, match="is for function 'g'"):
        history.add_message(response)
    assert request.content.action_response_id is None


def test_a_request_claiming_an_absent_response_is_refused() -> None:
    request, _ = pair()
    request.content.action_response_id = uuid.uuid4()
    with pytest.raises(HistoryError, match="claims response"):
        MessageManager().add_message(request)


def test_only_messages_can_be_added() -> None:
    with pytest.raises(TypeError, match="holds messages"):
        MessageManager().add_message("hello")  # type: ignore[type-var]


@pytest.mark.parametrize(
    "arrange",
    ["duplicate_id", "response_before_request", "unreciprocated", "dangling_request_link"],
)
def test_the_constructor_checks_the_links_of_the_whole_sequence(arrange: str) -> None:
    request, response = pair()
    request.content.action_response_id = response.id
    messages: list[Message] = [request, response]
    if arrange == "duplicate_id":
        messages.append(request)
    elif arrange == "response_before_request":
        messages.reverse()
    elif arrange == "unreciprocated":
        request.content.action_response_id = None
    elif arrange == "dangling_request_link":
        messages = [request]
    with pytest.raises(HistoryError):
        MessageManager(messages)


def test_none_output_and_a_failure_leave_distinguishable_history() -> None:
    # Both get a linked response; only the failure carries an error, so they never read alike.
    history = MessageManager()
    ok_request, ok_response = pair(output=None)
    bad_request, bad_response = pair(
        outcome=ActionOutcome.FAILED, error=ErrorInfo("ValueError", "bad")
    )
    history.record_action(ok_request, ok_response)
    history.record_action(bad_request, bad_response)
    assert history.unanswered() == []
    ok, bad = history.response_for(ok_request), history.response_for(bad_request)
    assert ok is not None and bad is not None
    assert (ok.output, ok.error, ok.success) == (None, None, True)
    assert (bad.output, bad.error, bad.success) == (None, ErrorInfo("ValueError", "bad"), False)


@pytest.mark.parametrize("output", [None, 0, "", [], {}])
def test_every_falsy_output_creates_and_links_a_response(output: object) -> None:
    # Message linking: a falsy output is a real output, never filtered out as None would be.
    history = MessageManager()
    request, response = pair(output=output)
    history.add_message(request)
    history.add_message(response)
    linked = history.response_for(request)
    assert linked is response and linked.output == output


# -- callbacks --------------------------------------------------------------------------------


async def test_callbacks_run_after_the_message_is_written_sync_and_async() -> None:
    history = MessageManager()
    seen: list[tuple[str, bool]] = []

    def sync_callback(message: Message) -> None:
        seen.append(("sync", message in history))

    async def async_callback(message: Message) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(("async", message in history))

    history.on_message_added.extend([sync_callback, async_callback])
    failures = await history.a_add_message(Instruction(content="u"))
    assert failures == []
    assert seen == [("sync", True), ("async", True)]


async def test_callback_failures_are_isolated_logged_and_returned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    def broken(message: Message) -> None:
        raise RuntimeError("sync callback broke")

    async def broken_async(message: Message) -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("async callback broke")

    def healthy(message: Message) -> None:
        ran.append("healthy")

    history = MessageManager(on_message_added=[broken, broken_async, healthy])
    message = Instruction(content="u")
    with caplog.at_level(logging.ERROR, logger="lionexec"):
        failures = await history.a_add_message(message)
    assert ran == ["healthy"]
    assert [type(f.error) for f in failures] == [RuntimeError, ValueError]
    assert failures[0] == CallbackFailure(
        where="message_callback", call_id=None, error=failures[0].error, culprit=repr(broken)
    )
    assert [f.culprit for f in failures] == [repr(broken), repr(broken_async)]
    assert list(history.failures) == failures  # kept once, in the history's failure log
    assert list(history) == [message]
    logged = [r for r in caplog.records if r.name.startswith("lionexec")]
    assert len(logged) == 2 and all(r.exc_info for r in logged)  # logged once each


async def test_notify_after_record_action_reports_failures_and_leaves_the_pair_intact() -> None:
    def broken(message: Message) -> None:
        raise RuntimeError("no")

    history = MessageManager(on_message_added=[broken])
    request, response = pair(output=0)
    history.record_action(request, response)
    failures = await history.notify(request, response)
    # one failure per message, in order, each naming the call the message belongs to
    assert [f.call_id for f in failures] == [request.call_id, request.call_id]
    assert [f.where for f in failures] == ["message_callback"] * 2
    assert history.response_for(request) is response
    assert_linked(history)


async def test_readding_an_existing_message_runs_no_callbacks() -> None:
    calls: list[Message] = []
    message = Instruction(content="u")
    history = MessageManager([message], on_message_added=[calls.append])
    assert await history.a_add_message(message) == []
    assert calls == []


async def test_a_refused_message_runs_no_callbacks() -> None:
    calls: list[Message] = []
    history = MessageManager(on_message_added=[calls.append])
    _, orphan = pair()
    with pytest.raises(HistoryError):
        await history.a_add_message(orphan)
    assert calls == [] and len(history) == 0


async def test_cancellation_in_a_callback_propagates_and_the_history_stays_written() -> None:
    later: list[Message] = []

    async def waits_forever(message: Message) -> None:
        await trio.sleep_forever()

    history = MessageManager(on_message_added=[waits_forever, later.append])
    message = Instruction(content="u")
    with trio.CancelScope() as scope:
        scope.cancel()
        await history.a_add_message(message)
    assert scope.cancelled_caught
    assert later == []
    assert list(history) == [message]


async def test_callbacks_added_during_notify_take_effect_next_time() -> None:
    calls: list[str] = []
    history = MessageManager()

    def adds_another(message: Message) -> None:
        calls.append("first")
        history.on_message_added.append(lambda m: calls.append("second"))

    history.on_message_added.append(adds_another)
    await history.a_add_message(Instruction(content="1"))
    assert calls == ["first"]


def _raiser(kind: str) -> Callable[[Message], object]:
    def callback(message: Message) -> object:
        if kind == "sync":
            raise RuntimeError("sync")

        async def later() -> None:
            await trio.lowlevel.checkpoint()
            raise RuntimeError("async")

        return later()

    return callback


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_failing_callback_never_splits_a_request_from_its_response(kind: str) -> None:
    history = MessageManager(on_message_added=[_raiser(kind)])
    request, response = pair(outcome=ActionOutcome.DENIED, error=BOOM, attempts=0)
    await history.a_add_message(request)
    failures = await history.a_add_message(response)
    assert len(failures) == 1
    assert history.response_for(request) is response
    assert_linked(history)
