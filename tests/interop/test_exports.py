"""Multi-turn loops with every outcome, exported to all three APIs and checked by their SDKs."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionexec import AlcallParams, Branch, Instruction, System
from lionexec.conversation import (
    OUTCOME_STATUS,
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    MessageManager,
)
from lionexec.serialization import converter

APIS = ["chat", "anthropic", "responses"]


def reply(kit: SimpleNamespace, api: str, text: str, calls: list[tuple[str, str, str]]) -> Any:
    """What a model of *api* returns: *text*, some reasoning, and *calls* (id, name, args)."""
    if api == "chat":
        return kit.chat_completion(text or None, *calls).choices[0].message
    if api == "anthropic":
        blocks: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": f"about {text!r}", "signature": "c2lnbmF0dXJl"}
        ]
        if text:
            blocks.append({"type": "text", "text": text})
        for call_id, name, arguments in calls:
            try:  # NaN parses here (Python's json is lax): the model's object holds a NaN
                value = json.loads(arguments or "{}")
            except ValueError:
                value = {"a": "not a number"}  # Anthropic sends objects, never broken strings
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": value})
        return kit.anthropic_message(*blocks)
    items: list[dict[str, Any]] = [kit.reasoning(f"rs_{len(text)}", "thinking", "ZW5jcnlwdGVk")]
    if text:
        items.append(kit.output_message(text, f"msg_{len(text)}"))
    items.extend(kit.function_call(c, n, a) for c, n, a in calls)
    return kit.response(*items)


@pytest.mark.parametrize("api", APIS)
async def test_a_loop_with_every_outcome_exports_valid_conversations(
    api: str, branch: Branch, kit: SimpleNamespace, autojump_clock: trio.abc.Clock
) -> None:
    branch.messages.add_message(System(content="Use the tools."))
    branch.messages.add_message(Instruction(content="Do the things."))

    first = await branch.act(
        reply(
            kit,
            api,
            "Working on it.",
            [
                ("c1", "add", '{"a": 1, "b": 2}'),
                ("c2", "fail", "{}"),
                ("c3", "delete_all", "{}"),
                ("c4", "no_such_tool", "{}"),
                ("c5", "add", '{"a": 1, "b": '),
                ("c6", "add", '{"a": NaN, "b": 1}'),
                ("c7", "screenshot", "{}"),
                ("c8", "measure", ""),
            ],
        )
    )
    assert kit.outcomes(first) == [
        "completed",
        "failed",
        "denied",
        "invalid",
        "invalid",
        "invalid",
        "completed",
        "failed",  # measure returns NaN: JSON cannot hold it
    ]
    kit.check_all(branch)

    (late,) = await branch.act(
        reply(kit, api, "", [("c9", "slow", '{"seconds": 10}')]),
        call_params=AlcallParams(timeout=1),
    )
    assert late.outcome.value == "timed_out"
    branch.messages.add_message(Instruction(content="Try once more."))

    with trio.move_on_after(1):
        await branch.act(
            reply(kit, api, "Again.", [("c10", "slow", '{"seconds": 10}'), ("c11", "add", "{}")])
        )
    cancelled = branch.messages.response_for(branch.messages.request_for_call_id("c10").id)
    assert cancelled is not None and cancelled.outcome.value == "cancelled"

    for call_id in ("c12", "c13"):  # two bare batches: two turns
        await branch.act([{"function": "add", "arguments": {"a": 1, "b": 1}, "call_id": call_id}])
    assert await branch.act(reply(kit, api, "All done.", [])) == []

    kit.check_all(branch)
    chat = branch.messages.to_openai()
    assert [m["role"] for m in chat].count("assistant") == 6
    assert chat[-1] == {"role": "assistant", "content": "All done."}
    # A saved history exports the same conversation once loaded.
    loaded = converter.structure(converter.unstructure(branch.messages), type(branch.messages))
    assert loaded.to_openai() == chat
    assert loaded.to_anthropic() == branch.messages.to_anthropic()
    assert loaded.to_responses() == branch.messages.to_responses()


@pytest.mark.parametrize("api", APIS)
async def test_reasoning_is_replayed_only_to_its_own_api(
    api: str, branch: Branch, kit: SimpleNamespace
) -> None:
    await branch.act(reply(kit, api, "Adding.", [("c1", "add", '{"a": 1, "b": 2}')]))
    anthropic_kinds = [b["type"] for b in branch.messages.to_anthropic()["messages"][0]["content"]]
    responses_kinds = [i.get("type", "easy") for i in branch.messages.to_responses()]
    if api == "anthropic":
        assert anthropic_kinds == ["thinking", "text", "tool_use"]
    else:
        assert anthropic_kinds == ["text", "tool_use"]
    if api == "responses":
        assert responses_kinds == ["reasoning", "message", "function_call", "function_call_output"]
    else:
        assert responses_kinds == ["easy", "function_call", "function_call_output"]


async def test_image_results_are_native_blocks(branch: Branch, kit: SimpleNamespace) -> None:
    await branch.act(
        [
            {"function": "screenshot", "arguments": {}, "call_id": "shot"},
            {"function": "add", "arguments": {"a": 1, "b": 2}, "call_id": "sum"},
        ]
    )
    kit.check_all(branch)

    (_, results) = branch.messages.to_anthropic()["messages"]
    image = results["content"][0]["content"]
    assert image == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": _b64(kit.PNG)},
        }
    ]

    outputs = [
        i for i in branch.messages.to_responses() if i.get("type") == "function_call_output"
    ]
    assert outputs[0]["output"] == [
        {
            "type": "input_image",
            "image_url": f"data:image/png;base64,{_b64(kit.PNG)}",
            "detail": "auto",
        }
    ]
    assert outputs[1]["output"] == "3"

    # Chat Completions tool messages hold text only: the image follows in one user message.
    chat = branch.messages.to_openai()
    assert [m["role"] for m in chat] == ["assistant", "tool", "tool", "user"]
    assert chat[1]["content"] == "[image/png image: attached below]"
    assert chat[3]["content"] == [
        {"type": "text", "text": "Attachments returned by tool call shot:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(kit.PNG)}"}},
    ]


async def test_mixed_parts_and_files(kit: SimpleNamespace) -> None:
    from lionexec.conversation._parts import FilePart, ImagePart

    pdf = b"%PDF-1.4 tiny"

    async def report() -> list[object]:
        """Text, an image and a PDF."""
        return [
            "Here it is:",
            ImagePart(kit.PNG, "image/png"),
            FilePart(pdf, "application/pdf", "r.pdf"),
        ]

    branch = Branch()
    branch.register_tools(report)
    await branch.act({"function": "report", "arguments": {}, "call_id": "r1"})
    kit.check_all(branch)
    content = branch.messages.to_anthropic()["messages"][1]["content"][0]["content"]
    assert [block["type"] for block in content] == ["text", "image", "document"]
    output = branch.messages.to_responses()[-1]["output"]
    assert [part["type"] for part in output] == ["input_text", "input_image", "input_file"]
    assert output[2]["filename"] == "r.pdf"
    chat = branch.messages.to_openai()
    assert chat[1]["content"] == (
        "Here it is:\n[image/png image: attached below]\n"
        "[application/pdf file r.pdf: attached below]"
    )
    assert [p["type"] for p in chat[2]["content"]] == ["text", "image_url", "file"]


async def test_non_finite_and_huge_outputs_are_strict_json(
    branch: Branch, kit: SimpleNamespace
) -> None:
    # A result JSON cannot hold fails the call, naming the tool and the value: the export
    # says so, in strict JSON, rather than carrying a stand-in string.
    await branch.act({"function": "measure", "arguments": {}, "call_id": "m"})
    kit.check_all(branch)
    text = branch.messages.to_openai()[1]["content"]
    sent = json.loads(text)
    assert sent["outcome"] == "failed" and "tool 'measure' returned" in sent["message"]


async def test_deep_and_cyclic_outputs_fail_named_in_strict_json(kit: SimpleNamespace) -> None:
    async def tangle() -> object:
        """A cyclic, very deep value."""
        deep: list[object] = []
        for _ in range(10_000):
            deep = [deep]
        cyclic: dict[str, object] = {"deep": deep}
        cyclic["self"] = cyclic
        return cyclic

    branch = Branch()
    branch.register_tools(tangle)
    (done,) = await branch.act({"function": "tangle", "arguments": {}})
    assert done.outcome.value == "failed"  # JSON cannot hold it: named, not cut with markers
    kit.check_all(branch)
    text = branch.messages.to_openai()[1]["content"]
    assert "tool 'tangle' returned" in json.loads(text)["message"]


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


PNG_BYTES = bytes.fromhex("89504e470d0a1a0a0000000d49484452")


class Huge(int):
    """An int too long to print, with a repr hypothesis can show."""

    def __repr__(self) -> str:
        return f"<int of {self.bit_length()} bits>"


OUTPUTS = st.recursive(
    st.none()
    | st.booleans()
    | st.floats()
    | st.integers()
    | st.just(Huge(10**5000))
    | st.text()
    | st.binary(max_size=8)
    | st.just(PNG_BYTES),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)
OUTCOMES = st.sampled_from([o for o in ActionOutcome if o in OUTCOME_STATUS])


@given(
    batches=st.lists(
        st.lists(st.tuples(OUTCOMES, OUTPUTS, st.booleans()), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_any_history_exports_valid_strict_conversations(
    kit: SimpleNamespace, batches: list[list[tuple[ActionOutcome, object, bool]]]
) -> None:
    history = MessageManager([System(content="s"), Instruction(content="u")])
    for n, batch in enumerate(batches):
        requests = [ActionRequest.create("f", {"v": n}) for _ in batch]
        claimed = n % 2 == 0  # every other batch is claimed by an assistant turn
        if claimed:
            history.add_message(AssistantResponse(content=f"turn {n}", tool_calls=requests))
        for request in requests:
            history.add_message(request)
        for request, (outcome, output, answered) in zip(requests, batch, strict=True):
            if not answered:
                continue  # exported with a "no response recorded" error result
            if outcome is ActionOutcome.COMPLETED:
                response = ActionResponse.create(request, output=output)
            else:
                error = ErrorInfo("E", str(output)[:20])
                response = ActionResponse.create(request, outcome=outcome, error=error)
            history.add_message(response)
    kit.check_chat(history.to_openai())
    kit.check_anthropic(history.to_anthropic())
    kit.check_responses(history.to_responses())
    kit.strict(converter.unstructure(history))
