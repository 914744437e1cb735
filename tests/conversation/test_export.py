"""OpenAI and Anthropic exports: one call and one result per request, results after their turn."""

from __future__ import annotations

import json

from lionexec.conversation import (
    NO_RESPONSE,
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    Instruction,
    MessageManager,
    System,
    result_text,
)


def conversation() -> tuple[MessageManager, ActionRequest, ActionRequest]:
    history = MessageManager()
    history.add_message(System(content="be brief"))
    history.add_message(Instruction(content="list files"))
    ls = ActionRequest.create("bash", {"command": "ls"}, call_id="call_ls")
    cat = ActionRequest.create("bash", {"command": "cat x"}, call_id="call_cat")
    history.add_message(AssistantResponse(content="running", tool_calls=[ls, cat]))
    history.record_action(ls, ActionResponse.create(ls, output="a\nb"))
    history.record_action(
        cat,
        ActionResponse.create(
            cat, outcome=ActionOutcome.FAILED, error=ErrorInfo("FileNotFoundError", "x")
        ),
    )
    history.add_message(AssistantResponse(content="done"))
    return history, ls, cat


def test_openai_export_uses_tool_calls_and_tool_messages() -> None:
    history, _, _ = conversation()
    failure = {"error": "FileNotFoundError", "message": "x", "outcome": "failed"}
    assert history.to_openai() == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "running",
            "tool_calls": [
                {
                    "id": "call_ls",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                },
                {
                    "id": "call_cat",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "cat x"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_ls", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "call_cat", "content": json.dumps(failure)},
        {"role": "assistant", "content": "done"},
    ]


def test_anthropic_export_uses_tool_use_and_tool_result_with_is_error() -> None:
    history, _, _ = conversation()
    exported = history.to_anthropic()
    assert exported["system"] == "be brief"
    assert exported["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "running"},
                {"type": "tool_use", "id": "call_ls", "name": "bash", "input": {"command": "ls"}},
                {
                    "type": "tool_use",
                    "id": "call_cat",
                    "name": "bash",
                    "input": {"command": "cat x"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_ls",
                    "content": "a\nb",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_cat",
                    "content": result_text(history.responses()[1])[0],
                    "is_error": True,
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]


def test_a_request_without_a_response_exports_an_error_result_in_both_formats() -> None:
    history = MessageManager()
    request = history.add_message(ActionRequest.create("slow", call_id="call_1"))
    openai = history.to_openai()
    assert [m["role"] for m in openai] == ["assistant", "tool"]
    assert json.loads(openai[1]["content"])["error"] == NO_RESPONSE
    results = history.to_anthropic()["messages"][1]["content"]
    assert results[0]["tool_use_id"] == request.call_id
    assert results[0]["is_error"] is True
    assert NO_RESPONSE in results[0]["content"]


def test_unclaimed_requests_form_one_assistant_turn_where_the_first_stands() -> None:
    history = MessageManager()
    first, second = ActionRequest.create("f"), ActionRequest.create("g")
    history.add_message(first)
    history.add_message(second)
    history.record_action(first, ActionResponse.create(first, output=1))
    history.add_message(Instruction(content="next"))
    history.record_action(second, ActionResponse.create(second, output=2))
    openai = history.to_openai()
    assert [m["role"] for m in openai] == ["assistant", "tool", "tool", "user"]
    assert [c["id"] for c in openai[0]["tool_calls"]] == [first.call_id, second.call_id]
    assert [m["content"] for m in openai[1:3]] == ["1", "2"]


def test_results_follow_the_proposing_turn_even_when_recorded_after_later_messages() -> None:
    history = MessageManager()
    request = ActionRequest.create("f")
    history.add_message(AssistantResponse(tool_calls=[request]))
    history.add_message(Instruction(content="interjection"))
    history.record_action(request, ActionResponse.create(request, output="r"))
    assert [m["role"] for m in history.to_openai()] == ["assistant", "tool", "user"]
    anthropic = history.to_anthropic()["messages"]
    assert [m["role"] for m in anthropic] == ["assistant", "user"]
    # The results come first in the merged user turn, then the user's text.
    assert [b["type"] for b in anthropic[1]["content"]] == ["tool_result", "text"]


def test_a_request_claimed_by_two_turns_is_exported_once_under_the_first() -> None:
    history = MessageManager()
    request = ActionRequest.create("f")
    history.add_message(AssistantResponse(content="1", tool_calls=[request, request]))
    history.add_message(AssistantResponse(content="2", tool_calls=[request]))
    history.add_message(request)
    openai = history.to_openai()
    assert [len(m.get("tool_calls") or ()) for m in openai if m["role"] == "assistant"] == [1, 0]
    assert [m["role"] for m in openai] == ["assistant", "tool", "assistant"]


def test_tool_calls_naming_no_recorded_request_are_not_exported() -> None:
    history = MessageManager()
    history.add_message(AssistantResponse(content="hm", tool_calls=[ActionRequest.create("f")]))
    assert history.to_openai() == [{"role": "assistant", "content": "hm"}]


def test_completed_outputs_are_text_as_is_and_json_otherwise() -> None:
    request = ActionRequest.create("f")
    cases: list[tuple[object, str]] = [
        ("", ""),
        ("x", "x"),
        (None, "null"),
        (0, "0"),
        ([], "[]"),
        ({}, "{}"),
    ]
    for output, text in cases:
        assert result_text(ActionResponse.create(request, output=output)) == (text, False)


def test_a_dict_output_is_its_strict_json_text_and_a_part_is_its_part() -> None:
    request = ActionRequest.create("f")
    cases: list[tuple[object, str]] = [
        ({"city": "Oslo", "high_c": 21}, '{"city": "Oslo", "high_c": 21}'),
        ({"rain": 0.5, "open": True, "note": None}, '{"rain": 0.5, "open": true, "note": null}'),
        ({"k": "\u00e9\U0001f600"}, '{"k": "\u00e9\U0001f600"}'),  # non-ASCII kept as it is
        ({"k": "a\ud800"}, '{"k": "a\ufffd"}'),  # a lone surrogate: U+FFFD
        ({"k\udc00": 1}, '{"k\ufffd": 1}'),
        ({"n": 2**20_000}, '{"n": "<int with 20001 bits>"}'),
        ({"type": "text", "text": "a part"}, "a part"),  # a content part: its text
        ({"type": "note", "n": 1}, '{"type": "note", "n": 1}'),
    ]
    for output, text in cases:
        assert result_text(ActionResponse.create(request, output=output)) == (text, False)


def test_denied_and_cancelled_calls_export_as_errors_with_their_outcome() -> None:
    request = ActionRequest.create("f")
    for outcome in (ActionOutcome.DENIED, ActionOutcome.CANCELLED, ActionOutcome.TIMED_OUT):
        response = ActionResponse.create(
            request, outcome=outcome, error=ErrorInfo("GateDenied", "no"), attempts=0
        )
        text, is_error = result_text(response)
        assert is_error
        assert json.loads(text) == {"error": "GateDenied", "message": "no", "outcome": outcome}


def test_anthropic_export_leaves_out_empty_text_and_has_no_system_key_without_one() -> None:
    history = MessageManager()
    history.add_message(Instruction(content=""))
    history.add_message(AssistantResponse(content=""))
    assert history.to_anthropic() == {"messages": []}


def test_anthropic_export_joins_system_messages() -> None:
    history = MessageManager([System(content="a"), System(content="b")])
    assert history.to_anthropic()["system"] == "a\n\nb"
