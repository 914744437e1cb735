"""The history through lionexec's cattrs converter: shape, round trip, refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cattrs.errors import BaseValidationError

from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    Instruction,
    Message,
    MessageManager,
    System,
)
from lionexec.errors import HistoryError
from lionexec.serialization import converter, dumps


def sample() -> MessageManager:
    history = MessageManager([System(content="s"), Instruction(content="u", sender="user")])
    request = ActionRequest.create("f", {"a": [1, {"b": None}]}, call_id="toolu_1")
    history.add_message(AssistantResponse(content="calling", tool_calls=[request]))
    history.record_action(
        request,
        ActionResponse.create(
            request, outcome=ActionOutcome.TIMED_OUT, error=ErrorInfo("TooSlow", "3s")
        ),
    )
    return history


def test_history_round_trips_through_json() -> None:
    history = sample()
    loaded = converter.structure(json.loads(dumps(history)), MessageManager)
    assert loaded == history
    request, response = loaded.requests()[0], loaded.responses()[0]
    assert loaded.response_for(request) is response
    assert response.status == "cancelled" and response.outcome == "timed_out"


def test_a_message_serializes_with_its_kind_and_role() -> None:
    data = converter.unstructure(sample())["messages"]
    assert [(m["kind"], m["role"]) for m in data] == [
        ("system", "system"),
        ("instruction", "user"),
        ("assistant_response", "assistant"),
        ("action_request", "action"),
        ("action_response", "action"),
    ]
    assert data[4]["content"]["error"] == {"type": "TooSlow", "message": "3s"}
    assert data[4]["content"]["status"] == "cancelled"


def test_a_single_message_round_trips_as_message() -> None:
    message = Instruction(content="hi", recipient="assistant")
    assert converter.structure(json.loads(dumps(message)), Message) == message


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown message kind 'memo'"):
        converter.structure({"kind": "memo", "content": "x"}, Message)


def test_a_kind_that_is_not_the_asked_class_is_refused() -> None:
    data = converter.unstructure(System(content="s"))
    with pytest.raises(TypeError, match="cannot be loaded as Instruction"):
        converter.structure(data, Instruction)


def test_unknown_fields_are_refused() -> None:
    data = converter.unstructure(System(content="s")) | {"colour": "red"}
    with pytest.raises(BaseValidationError):
        converter.structure(data, Message)


def test_loading_data_with_broken_links_is_refused() -> None:
    data = converter.unstructure(sample())
    data["messages"].pop(3)  # the request; its response now follows nothing
    with pytest.raises(HistoryError, match="does not follow the request"):
        converter.structure(data, MessageManager)


def test_an_inconsistent_response_record_is_refused() -> None:
    data = converter.unstructure(sample())
    data["messages"][4]["content"]["outcome"] = "completed"  # but it carries an error
    with pytest.raises(BaseValidationError):
        converter.structure(data, MessageManager)


def test_a_history_record_must_be_an_object_with_messages() -> None:
    with pytest.raises(TypeError, match="messages"):
        converter.structure([], MessageManager)


def test_outputs_and_arguments_that_are_not_json_are_saved_through_jsonable() -> None:
    request = ActionRequest.create("f", {"when": {1, 2}})
    history = MessageManager()
    history.record_action(request, ActionResponse.create(request, output=object()))
    data = json.loads(dumps(history))
    assert data["messages"][0]["content"]["arguments"] == {"when": [1, 2]}
    assert data["messages"][1]["content"]["output"] == "<unserializable>"


@pytest.mark.parametrize(
    "output",
    [
        ["listing of /tmp/\udcff.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 8],  # text beside an image
        {"type": "file", "data": "aGk=", "mime_type": "text/csv", "uri": "file:///\udcffa.csv"},
    ],
    ids=["text-part", "mcp-file"],
)
def test_content_parts_are_saved_as_strict_utf8_json(output: object) -> None:
    # a lone surrogate (a file name from os.listdir) in a part's text or name: U+FFFD, as in
    # a plain string output
    request = ActionRequest.create("tool", {})
    history = MessageManager()
    history.record_action(request, ActionResponse.create(request, output=output))
    data = converter.unstructure(history)
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    assert "\ufffd" in text
    assert converter.structure(json.loads(text), MessageManager) == converter.structure(
        data, MessageManager
    )


@pytest.mark.parametrize(
    ("index", "path", "value", "message"),
    [
        (3, ("content", "extra"), 7, "extra"),  # a request's content
        (4, ("content", "extra"), 7, "extra"),  # a response's content
        (2, ("role",), "system", "role 'assistant', not 'system'"),
    ],
    ids=["request-content", "response-content", "role"],
)
def test_a_record_with_a_name_or_role_its_kind_lacks_is_refused(
    index: int, path: tuple[str, ...], value: object, message: str
) -> None:
    with pytest.raises((BaseValidationError, ValueError)) as caught:
        converter.structure(_sample_with(index, path, value), MessageManager)
    assert _nested_text(caught.value, message)


def _sample_with(index: int, path: tuple[str, ...], value: object) -> dict[str, Any]:
    """The saved :func:`sample` with *value* at *path* of its message *index*."""
    data: dict[str, Any] = converter.unstructure(sample())
    target = data["messages"][index]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def _nested_text(exc: BaseException, text: str) -> bool:
    """Whether *text* is in the message of *exc* or of any exception grouped under it."""
    if text in str(exc):
        return True
    return any(_nested_text(e, text) for e in getattr(exc, "exceptions", ()))


@pytest.mark.parametrize(
    ("index", "path", "value", "expected"),
    [
        (1, ("content",), 5, "expected a string, got int"),
        (1, ("sender",), {"a": 1}, "expected a string, got dict"),
        (1, ("created_at",), "1.5", "expected a number, got str"),
        (1, ("created_at",), True, "expected a number, got bool"),
        (1, ("id",), 5, "expected a UUID string, got int"),
        (3, ("content", "call_id"), 7, "expected a string, got int"),
        (4, ("content", "attempts"), 2.7, "expected an integer, got float"),
        (4, ("content", "attempts"), "2", "expected an integer, got str"),
    ],
)
def test_a_record_is_read_as_written_never_coerced(
    index: int, path: tuple[str, ...], value: object, expected: str
) -> None:
    # cattrs' default hooks called str()/int()/float() on whatever was there: 5 became "5",
    # 2.7 became 2, a dict its repr
    with pytest.raises(BaseValidationError) as caught:
        converter.structure(_sample_with(index, path, value), MessageManager)
    assert _nested_text(caught.value, expected)
