"""What the history keeps of provider turns: call-id lookup, raw arguments, verbatim blocks,
content parts, and strict JSON whatever the values."""

from __future__ import annotations

import json
import math

import pytest

from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    MessageManager,
)
from lionexec.conversation._parts import (
    FilePart,
    ImagePart,
    TextPart,
    content_parts,
    part_json,
)
from lionexec.serialization import converter

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452")  # a PNG signature and header start


# -- request_for_call_id -----------------------------------------------------------------------


def test_request_for_call_id_follows_add_record_and_load() -> None:
    history = MessageManager()
    added = history.add_message(ActionRequest.create("f", call_id="c1"))
    recorded = ActionRequest.create("g", call_id="c2")
    history.record_action(recorded, ActionResponse.create(recorded, output=1))
    assert history.request_for_call_id("c1") is added
    assert history.request_for_call_id("c2") is recorded
    assert history.request_for_call_id("c3") is None
    loaded = converter.structure(converter.unstructure(history), MessageManager)
    assert loaded.request_for_call_id("c2") == recorded
    assert MessageManager(history.messages).request_for_call_id("c1") is added


def test_request_for_call_id_is_unchanged_by_a_refused_write() -> None:
    history = MessageManager()
    request = history.add_message(ActionRequest.create("f", call_id="c1"))
    clash = ActionRequest(id=request.id, content=ActionRequest.create("f", call_id="c9").content)
    with pytest.raises(Exception, match="already in this history"):
        history.add_message(clash)
    assert history.request_for_call_id("c9") is None


def test_a_loaded_history_with_a_repeated_call_id_answers_the_first_request() -> None:
    first = ActionRequest.create("f", call_id="same")
    second = ActionRequest.create("f", call_id="same")
    assert MessageManager([first, second]).request_for_call_id("same") is first


# -- raw arguments and verbatim blocks ---------------------------------------------------------


def test_raw_arguments_are_kept_and_round_trip() -> None:
    request = ActionRequest.create("f", {}, call_id="c", raw_arguments='{"a": ')
    assert request.raw_arguments == '{"a": '
    loaded = converter.structure(converter.unstructure(request), ActionRequest)
    assert loaded.raw_arguments == '{"a": '
    with pytest.raises(TypeError):
        ActionRequest.create("f", raw_arguments=b"{}")  # type: ignore[arg-type]


def test_blocks_are_a_private_strict_json_copy() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig", "score": math.nan}
    turn = AssistantResponse(content="", api="anthropic", blocks=[thinking])
    thinking["thinking"] = "rewritten"
    assert turn.blocks == (
        {"type": "thinking", "thinking": "hm", "signature": "sig", "score": "NaN"},
    )
    assert isinstance(hash(turn), int)  # still hashable with dict blocks
    loaded = converter.structure(converter.unstructure(turn), AssistantResponse)
    assert loaded == turn
    with pytest.raises(ValueError, match="api must be one of"):
        AssistantResponse(api="gemini")


def test_messages_saved_before_these_fields_still_load() -> None:
    turn = converter.unstructure(AssistantResponse(content="hi"))
    del turn["api"], turn["blocks"]
    assert converter.structure(turn, AssistantResponse).blocks == ()
    request = converter.unstructure(ActionRequest.create("f"))
    del request["content"]["raw_arguments"]
    assert converter.structure(request, ActionRequest).raw_arguments is None


# -- strict JSON -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (math.nan, "NaN"),
        ([math.inf, -math.inf], ["Infinity", "-Infinity"]),
        ({"n": 10**5000}, {"n": "<int with 16610 bits>"}),
    ],
)
def test_serialized_outputs_and_exports_are_strict_json(output: object, expected: object) -> None:
    request = ActionRequest.create("f", call_id="c")
    history = MessageManager()
    history.record_action(request, ActionResponse.create(request, output=output))
    saved = converter.unstructure(history)
    json.dumps(saved, allow_nan=False)
    assert saved["messages"][1]["content"]["output"] == expected
    for exported in (history.to_openai(), history.to_anthropic(), history.to_responses()):
        json.dumps(exported, allow_nan=False)


def test_a_cyclic_output_is_cut_with_a_marker() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    request = ActionRequest.create("f", call_id="c")
    history = MessageManager()
    history.record_action(request, ActionResponse.create(request, output=cyclic))
    text = json.dumps(converter.unstructure(history), allow_nan=False)
    assert "<circular reference>" in text


# -- content parts -----------------------------------------------------------------------------


def test_content_parts_are_recognised_only_for_rich_outputs() -> None:
    assert content_parts("text") is None
    assert content_parts(["a", "b"]) is None
    assert content_parts(b"not an image") is None
    assert content_parts({"type": "text"}) is None
    assert content_parts(PNG) == [ImagePart(PNG, "image/png")]
    assert content_parts(["see", PNG]) == [TextPart("see"), ImagePart(PNG, "image/png")]
    assert content_parts(b"%PDF-1.7") == [FilePart(b"%PDF-1.7", "application/pdf")]
    anthropic_image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    mcp_image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    assert (
        content_parts(anthropic_image)
        == content_parts(mcp_image)
        == [ImagePart(b"\x89PNG\r\n\x1a\n", "image/png")]
    )
    assert content_parts({"type": "image", "data": "***", "mimeType": "image/png"}) is None


def test_a_saved_image_output_exports_the_same_after_loading() -> None:
    request = ActionRequest.create("shot", call_id="c")
    history = MessageManager()
    history.record_action(request, ActionResponse.create(request, output=[PNG, "caption"]))
    saved = converter.unstructure(history)
    assert saved["messages"][1]["content"]["output"] == [
        part_json(ImagePart(PNG, "image/png")),
        {"type": "text", "text": "caption"},
    ]
    loaded = converter.structure(json.loads(json.dumps(saved)), MessageManager)
    assert loaded.to_anthropic() == history.to_anthropic()
    assert loaded.to_openai() == history.to_openai()
    assert loaded.to_responses() == history.to_responses()


# -- turns ------------------------------------------------------------------------------------


def test_unclaimed_requests_form_one_turn_per_batch() -> None:
    history = MessageManager()
    a, b, c = (ActionRequest.create("f", call_id=i) for i in "abc")
    history.add_message(a)
    history.add_message(b)  # a and b: one batch (added together)
    history.add_message(ActionResponse.create(a, output=1))
    history.add_message(ActionResponse.create(b, output=2))
    history.add_message(c)  # after the responses: the next batch
    history.add_message(
        ActionResponse.create(
            c, outcome=ActionOutcome.FAILED, error=ErrorInfo("RuntimeError", "no")
        )
    )
    turns = [m for m in history.to_openai() if m["role"] == "assistant"]
    assert [[call["id"] for call in m["tool_calls"]] for m in turns] == [["a", "b"], ["c"]]
    anthropic = history.to_anthropic()["messages"]
    assert [m["role"] for m in anthropic] == ["assistant", "user", "assistant", "user"]
    responses = [i["type"] for i in history.to_responses()]
    assert responses == ["function_call"] * 2 + ["function_call_output"] * 2 + [
        "function_call",
        "function_call_output",
    ]


def test_a_message_timestamp_must_be_finite() -> None:
    with pytest.raises(ValueError, match="created_at"):
        AssistantResponse(created_at=math.nan)
    record = converter.unstructure(AssistantResponse())
    with pytest.raises(Exception, match="AssistantResponse") as caught:  # cattrs wraps it
        converter.structure({**record, "created_at": float("inf")}, AssistantResponse)
    assert "finite" in str(caught.value.exceptions[0])  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="AssistantResponse") as caught:  # read as written
        converter.structure({**record, "created_at": "1.5"}, AssistantResponse)
    assert "expected a number, got str" in str(caught.value.exceptions[0])  # type: ignore[attr-defined]
