"""MCP content (``mcp_output``) is exported as each provider's native blocks (docs/mcp.md),
never as the JSON text of its parts with the base64 data inside."""

from __future__ import annotations

import base64
import json
from typing import Any

import mcp.types

from lionexec.conversation import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    FilePart,
    ImagePart,
    MessageManager,
    TextPart,
)
from lionexec.conversation._parts import content_parts
from lionexec.mcp import mcp_output
from lionexec.serialization import converter

from ..interop.conftest import ANTHROPIC_MESSAGES as ANTHROPIC
from ..interop.conftest import CHAT_MESSAGES as CHAT
from ..interop.conftest import PNG
from ..interop.conftest import RESPONSES_INPUT as RESPONSES

PDF = b"%PDF-1.4 tiny"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image() -> mcp.types.ImageContent:
    return mcp.types.ImageContent(type="image", data=b64(PNG), mime_type="image/png")


def history(output: Any) -> MessageManager:
    """One call of ``shot`` that returned *output*."""
    request = ActionRequest.create("shot", {}, call_id="call_1")
    messages = MessageManager()
    messages.add_message(AssistantResponse(content="", tool_calls=[request]))
    messages.add_message(request)
    messages.add_message(ActionResponse.create(request, output=output))
    return messages


def exports(messages: MessageManager) -> tuple[list[Any], list[Any], list[Any]]:
    """The three exports, each checked by its SDK's types and as strict JSON, with no base64
    data dumped into text."""
    chat = messages.to_openai()
    anthropic = messages.to_anthropic()["messages"]
    responses = messages.to_responses()
    for adapter, exported in ((CHAT, chat), (ANTHROPIC, anthropic), (RESPONSES, responses)):
        adapter.validate_python(exported)
        text = json.dumps(exported, allow_nan=False)
        assert '\\"data\\"' not in text and "mime_type" not in text, text[:300]
    return chat, anthropic, responses


def test_an_mcp_image_is_an_image_in_every_export() -> None:
    text = mcp.types.TextContent(type="text", text="here")
    output = mcp_output(mcp.types.CallToolResult(content=[text, image()]))
    assert content_parts(output) == [TextPart("here"), ImagePart(PNG, "image/png")]
    chat, anthropic, responses = exports(history(output))
    assert chat[-1]["role"] == "user"  # the attachment
    assert chat[-1]["content"][1]["image_url"]["url"] == f"data:image/png;base64,{b64(PNG)}"
    [result] = anthropic[-1]["content"]
    assert [block["type"] for block in result["content"]] == ["text", "image"]
    assert result["content"][1]["source"]["data"] == b64(PNG)
    assert [part["type"] for part in responses[-1]["output"]] == ["input_text", "input_image"]
    # a saved history holds the parts' JSON form, which exports the same after loading
    messages = history(output)
    saved = json.loads(json.dumps(converter.unstructure(messages), allow_nan=False))
    loaded = converter.structure(saved, MessageManager)
    assert exports(loaded) == exports(messages)


def test_mcp_audio_and_resources_are_parts() -> None:
    result = mcp.types.CallToolResult(
        content=[
            mcp.types.AudioContent(type="audio", data=b64(WAV), mime_type="audio/wav"),
            mcp.types.EmbeddedResource(
                type="resource",
                resource=mcp.types.TextResourceContents(
                    uri="file:///notes.md", text="# Notes", mime_type="text/markdown"
                ),
            ),
            mcp.types.EmbeddedResource(
                type="resource",
                resource=mcp.types.BlobResourceContents(
                    uri="file:///docs/report.pdf", blob=b64(PDF), mime_type="application/pdf"
                ),
            ),
            mcp.types.ResourceLink(type="resource_link", name="logs", uri="file:///logs.txt"),
        ]
    )
    output = mcp_output(result)
    assert content_parts(output) == [
        FilePart(WAV, "audio/wav"),
        TextPart("[resource file:///notes.md]\n# Notes"),
        FilePart(PDF, "application/pdf", "report.pdf"),
        TextPart("resource logs: file:///logs.txt"),
    ]
    chat, anthropic, responses = exports(history(output))
    assert chat[1]["content"] == (
        "[audio/wav file: not sent]\n[resource file:///notes.md]\n# Notes\n"
        "[application/pdf file report.pdf: attached below]\nresource logs: file:///logs.txt"
    )
    blocks = anthropic[-1]["content"][0]["content"]
    assert [block["type"] for block in blocks] == ["text", "text", "document", "text"]
    assert "audio/wav file: not sent" in blocks[0]["text"]
    kinds = [part["type"] for part in responses[-1]["output"]]
    assert kinds == ["input_text", "input_text", "input_file", "input_text"]


def test_a_saved_mcp_output_loads_as_it_was_recorded() -> None:
    """Parts already in a JSON form are saved as they are: nothing of them (a resource's
    URI and media type, the key names) is lost to a save and load, or a journal."""
    text = mcp.types.TextResourceContents(uri="file:///n.md", text="# N", mime_type="text/md")
    result = mcp.types.CallToolResult(
        content=[image(), mcp.types.EmbeddedResource(type="resource", resource=text)]
    )
    output = mcp_output(result)
    messages = history(output)
    saved = json.loads(json.dumps(converter.unstructure(messages), allow_nan=False))
    loaded = converter.structure(saved, MessageManager)
    assert loaded.responses()[0].output == output
    assert exports(loaded) == exports(messages)
    bytes_out = history([TextPart("here"), ImagePart(PNG, "image/png")])  # objects: JSON form
    saved = converter.unstructure(bytes_out)["messages"][-1]["content"]["output"]
    assert saved == [
        {"type": "text", "text": "here"},
        {"type": "image", "media_type": "image/png", "data": b64(PNG)},
    ]


def test_a_text_part_with_other_keys_is_not_a_part() -> None:
    assert content_parts({"type": "text", "text": "x", "uri": 5}) is None
    assert content_parts({"type": "text", "text": "x", "mime_type": "text/plain"}) is None
    assert content_parts({"type": "text", "text": "x", "score": 1}) is None
    assert content_parts({"type": "text", "text": "see file:///a", "uri": "file:///a"}) == [
        TextPart("see file:///a")
    ]
