"""Message records: action request/response contents, outcomes and statuses."""

from __future__ import annotations

import uuid
from types import MappingProxyType
from typing import Any

import attrs
import pytest

from lionexec.conversation import (
    OUTCOME_STATUS,
    ActionOutcome,
    ActionRequest,
    ActionRequestContent,
    ActionResponse,
    ActionResponseContent,
    AssistantResponse,
    ErrorInfo,
    Instruction,
    Message,
    MessageRole,
    System,
)
from lionexec.engine import EventStatus

BOOM = ErrorInfo("RuntimeError", "boom")


def test_request_without_provider_call_id_gets_a_generated_one() -> None:
    first = ActionRequest.create("search", {"q": "x"})
    second = ActionRequest.create("search", {"q": "x"})
    assert first.call_id.startswith("call_")
    assert first.call_id != second.call_id


def test_request_keeps_the_provider_call_id() -> None:
    request = ActionRequest.create("search", {}, call_id="toolu_01A")
    assert request.call_id == "toolu_01A"
    assert request.content.call_id == "toolu_01A"


@pytest.mark.parametrize("bad", ["", 7])
def test_request_call_id_must_be_a_nonempty_string(bad: object) -> None:
    with pytest.raises(TypeError, match="call_id"):
        ActionRequestContent(function="f", call_id=bad)  # type: ignore[arg-type]


def test_request_arguments_are_copied_into_a_plain_dict() -> None:
    given = {"path": "a.txt"}
    request = ActionRequest.create("read", MappingProxyType(given))
    given["path"] = "b.txt"
    assert request.arguments == {"path": "a.txt"}
    assert type(request.arguments) is dict


@pytest.mark.parametrize("bad", [["path"], {1: "x"}])
def test_request_arguments_must_be_a_mapping_with_string_keys(bad: object) -> None:
    with pytest.raises(TypeError, match="argument"):
        ActionRequestContent(function="f", arguments=bad)  # type: ignore[arg-type]


def test_outcome_to_status_mapping_is_exactly_the_documented_one() -> None:
    assert dict(OUTCOME_STATUS) == {
        ActionOutcome.COMPLETED: EventStatus.COMPLETED,
        ActionOutcome.FAILED: EventStatus.FAILED,
        ActionOutcome.DENIED: EventStatus.SKIPPED,
        ActionOutcome.INVALID: EventStatus.ABORTED,
        ActionOutcome.TIMED_OUT: EventStatus.CANCELLED,
        ActionOutcome.CANCELLED: EventStatus.CANCELLED,
        ActionOutcome.INTERRUPTED: EventStatus.FAILED,
        ActionOutcome.AWAITING_APPROVAL: EventStatus.PENDING,
    }


@pytest.mark.parametrize("outcome", list(ActionOutcome))
def test_response_status_is_filled_in_from_the_outcome(outcome: ActionOutcome) -> None:
    error = None if outcome is ActionOutcome.COMPLETED else BOOM
    content = ActionResponseContent(function="f", outcome=outcome, error=error)
    assert content.status is OUTCOME_STATUS[outcome]


@pytest.mark.parametrize("outcome", list(ActionOutcome))
def test_success_is_true_only_for_completed(outcome: ActionOutcome) -> None:
    request = ActionRequest.create("f")
    error = None if outcome is ActionOutcome.COMPLETED else BOOM
    response = ActionResponse.create(request, outcome=outcome, error=error)
    assert response.success is (outcome is ActionOutcome.COMPLETED)
    assert response.content.success is response.success


def test_status_contradicting_the_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="outcome 'denied' has status 'skipped', not 'failed'"):
        ActionResponseContent(
            function="f", outcome=ActionOutcome.DENIED, status=EventStatus.FAILED, error=BOOM
        )


def test_failed_response_must_carry_an_error() -> None:
    # A failure's response is error-bearing, so it can never read as success.
    with pytest.raises(ValueError, match="must carry an error"):
        ActionResponseContent(function="f", outcome=ActionOutcome.FAILED)


def test_completed_response_cannot_carry_an_error() -> None:
    with pytest.raises(ValueError, match="cannot carry an error"):
        ActionResponseContent(function="f", error=BOOM)


@pytest.mark.parametrize("attempts", [-1, True, 1.0])
def test_attempts_must_be_a_nonnegative_int(attempts: object) -> None:
    with pytest.raises(ValueError, match="attempts"):
        ActionResponseContent(function="f", attempts=attempts)  # type: ignore[arg-type]


@pytest.mark.parametrize("output", [None, 0, "", [], {}, False])
def test_falsy_outputs_are_real_successful_outputs(output: object) -> None:
    request = ActionRequest.create("f")
    response = ActionResponse.create(request, output=output)
    assert response.output == output
    assert type(response.output) is type(output)
    assert response.success
    assert response.error is None


def test_response_create_copies_the_request_and_names_it() -> None:
    request = ActionRequest.create("add", {"a": 1})
    response = ActionResponse.create(request, output=1, attempts=2)
    assert (response.function, response.arguments) == ("add", {"a": 1})
    assert response.action_request_id == request.id
    assert response.content.attempts == 2
    # The request's side is written only when the pair is recorded in a history.
    assert request.action_response_id is None


def test_error_info_from_exception_names_type_and_message() -> None:
    assert ErrorInfo.from_exception(KeyError("k")) == ErrorInfo("KeyError", "'k'")


def test_error_infos_of_one_exception_type_share_its_name() -> None:
    # a built-in type makes its __name__ anew on every read; kept failures share one
    first, second = (
        ErrorInfo.from_exception(ValueError("a")),
        ErrorInfo.from_exception(ValueError("b")),
    )
    assert first.type == "ValueError"
    assert first.type is second.type


def test_error_info_from_an_unprintable_exception_does_not_raise() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert ErrorInfo.from_exception(Unprintable()) == ErrorInfo(
        "Unprintable", "<unprintable Unprintable>"
    )


def test_only_link_fields_change_after_construction() -> None:
    request = ActionRequest.create("f", {"a": 1})
    response = ActionResponse.create(request, output=1)
    link = uuid.uuid4()
    request.content.action_response_id = link
    response.content.action_request_id = link
    for obj, name, value in [
        (request.content, "function", "g"),
        (request.content, "arguments", {}),
        (request.content, "call_id", "x"),
        (response.content, "output", 2),
        (response.content, "error", BOOM),
        (response.content, "outcome", ActionOutcome.FAILED),
        (response.content, "status", EventStatus.FAILED),
        (response.content, "attempts", 3),
        (request, "sender", "me"),
    ]:
        with pytest.raises(attrs.exceptions.FrozenError):
            setattr(obj, name, value)


def test_messages_compare_by_value_and_hash_by_id() -> None:
    request = ActionRequest.create("f")
    twin = attrs.evolve(request, content=attrs.evolve(request.content))
    assert twin == request and twin is not request
    assert hash(twin) == hash(request)
    twin.content.action_response_id = uuid.uuid4()
    assert twin != request
    assert hash(twin) == hash(request)


def test_roles() -> None:
    request = ActionRequest.create("f")
    response = ActionResponse.create(request)
    assert System(content="s").role is MessageRole.SYSTEM
    assert Instruction(content="u").role is MessageRole.USER
    assert AssistantResponse().role is MessageRole.ASSISTANT
    assert request.role is response.role is MessageRole.ACTION


def test_sender_and_recipient_are_stored_as_strings() -> None:
    tool_id = uuid.uuid4()
    request = ActionRequest.create("f", sender="assistant", recipient=tool_id)
    assert (request.sender, request.recipient) == ("assistant", str(tool_id))


def test_assistant_tool_calls_accept_requests_or_ids() -> None:
    first, second = ActionRequest.create("f"), ActionRequest.create("g")
    turn = AssistantResponse(content="", tool_calls=[first, second.id, str(first.id)])
    assert turn.tool_calls == (first.id, second.id, first.id)
    with pytest.raises(TypeError, match="tool_calls"):
        AssistantResponse(tool_calls=[3])  # type: ignore[list-item]


def test_message_base_class_cannot_be_instantiated() -> None:
    with pytest.raises(TypeError, match="base class"):
        Message()


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (ActionOutcome.COMPLETED, None),
        (ActionOutcome.FAILED, ErrorInfo("RuntimeError", "x")),
        (ActionOutcome.DENIED, ErrorInfo("PermissionDenied", "no")),
        (ActionOutcome.CANCELLED, ErrorInfo("Cancelled", "c")),
    ],
)
def test_the_act_layers_trusted_constructor_builds_what_create_builds(
    outcome: ActionOutcome, error: ErrorInfo | None
) -> None:

    request = ActionRequest.create("f", {"a": 1}, call_id="c1")
    options: dict[str, Any] = dict(output={"o": 1}, error=error, outcome=outcome, attempts=2)
    fast = ActionResponse._recorded(request, sender="f", recipient="b", **options)
    slow = ActionResponse.create(request, sender="f", recipient="b", **options)
    assert attrs.asdict(fast.content) == attrs.asdict(slow.content)
    assert (fast.sender, fast.recipient) == (slow.sender, slow.recipient)
    for field in attrs.fields(type(fast)):
        assert hasattr(fast, field.name)
    for field in attrs.fields(type(fast.content)):
        assert hasattr(fast.content, field.name)


@pytest.mark.parametrize("raw_arguments", [None, '{"a": 1}'])
def test_the_act_layers_trusted_request_constructor_builds_what_create_builds(
    raw_arguments: str | None,
) -> None:
    options: dict[str, Any] = dict(call_id="c1", raw_arguments=raw_arguments)
    fast = ActionRequest._proposed("f", {"a": 1}, sender="b", recipient="f", **options)
    slow = ActionRequest.create("f", {"a": 1}, sender="b", recipient="f", **options)
    assert attrs.asdict(fast.content) == attrs.asdict(slow.content)
    assert (fast.sender, fast.recipient) == (slow.sender, slow.recipient)
    for field in attrs.fields(type(fast)):
        assert hasattr(fast, field.name)
    for field in attrs.fields(type(fast.content)):
        assert hasattr(fast.content, field.name)
    fast.content.action_response_id = slow.id  # the one field the history assigns
    with pytest.raises(attrs.exceptions.FrozenAttributeError):
        fast.content.function = "g"  # type: ignore[misc]


def test_the_trusted_constructors_of_a_subclass_run_its_own_initializer() -> None:
    @attrs.frozen(kw_only=True)
    class Checked(ActionRequest):
        def __attrs_post_init__(self) -> None:
            if self.content.function.startswith("_"):
                raise ValueError("no private tools")

    request = Checked._proposed(
        "f", {}, call_id="c1", raw_arguments=None, sender=None, recipient=None
    )
    assert type(request) is Checked
    with pytest.raises(ValueError, match="no private tools"):
        Checked._proposed("_f", {}, call_id="c2", raw_arguments=None, sender=None, recipient=None)


def test_an_error_info_from_an_exception_is_an_ordinary_frozen_error_info() -> None:
    info = ErrorInfo.from_exception(KeyError("k"))
    assert type(info) is ErrorInfo
    assert info == ErrorInfo("KeyError", "'k'")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        info.message = "x"  # type: ignore[misc]
