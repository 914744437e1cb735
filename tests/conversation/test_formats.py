"""Provider formats, conversation side: one name per API, deprecated aliases, the registry.

``"chat"``, ``"responses"`` and ``"anthropic"`` are the names; ``"openai"`` (the tools layer's
name for the Chat Completions shape) still resolves to ``"chat"``, with a warning naming it.
Any other name is an error that lists the valid ones. The old module path
``lionexec.conversation.export`` warns once and gives the same objects.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

import pytest

import lionexec.abc
import lionexec.conversation
from lionexec.conversation import TURN_APIS, AssistantResponse, Instruction, MessageManager
from lionexec.conversation.formats import (
    FORMAT_ALIASES,
    FORMAT_NAMES,
    FORMATS,
    ProviderFormat,
    ProviderTurn,
    provider_format,
    resolve_format,
)
from lionexec.errors import ConfigurationError
from lionexec.tools import SCHEMA_FORMATS


def test_one_canonical_name_per_api() -> None:
    assert FORMAT_NAMES == ("chat", "responses", "anthropic")
    assert tuple(FORMATS) == FORMAT_NAMES
    assert frozenset(FORMAT_NAMES) == TURN_APIS  # what a recorded turn may name
    for name in FORMAT_NAMES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a canonical name never warns
            assert resolve_format(name) == name
            assert provider_format(name) is FORMATS[name]


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_registered_format_keeps_the_contract(name: str) -> None:
    fmt = FORMATS[name]
    assert isinstance(fmt, ProviderFormat)
    assert fmt.name == name
    assert fmt.tool_schema in SCHEMA_FORMATS
    history = MessageManager([Instruction(content="hi")])
    exported = fmt.export(history)
    fields = fmt.request_fields(history)
    assert exported in fields.values() or fields == exported  # Anthropic: the fields themselves


def test_the_chat_format_names_the_tools_layers_chat_shape() -> None:
    assert [FORMATS[n].tool_schema for n in FORMAT_NAMES] == ["openai", "responses", "anthropic"]


@pytest.mark.parametrize(("alias", "canonical"), sorted(FORMAT_ALIASES.items()))
def test_an_alias_warns_naming_the_canonical_name_and_resolves_to_it(
    alias: str, canonical: str
) -> None:
    with pytest.warns(
        DeprecationWarning, match=f"'{alias}' is deprecated; use '{canonical}'"
    ) as w:
        assert resolve_format(alias) == canonical
    assert w[0].filename == __file__  # the warning points at the caller
    with pytest.warns(DeprecationWarning, match=f"use '{canonical}'") as w:
        assert provider_format(alias) is FORMATS[canonical]  # type: ignore[index]
    assert w[0].filename == __file__


def test_openai_is_the_deprecated_alias_of_chat() -> None:
    assert dict(FORMAT_ALIASES) == {"openai": "chat"}


@pytest.mark.parametrize("name", ["gemini", "Chat", "", " chat", None, 5, ["chat"]])
def test_an_unknown_name_is_an_error_listing_the_valid_names(name: Any) -> None:
    for resolve in (resolve_format, provider_format):
        with pytest.raises(ConfigurationError) as caught:
            resolve(name)
        message = str(caught.value)
        assert f"unknown provider format {name!r}" in message
        assert "'chat', 'responses', 'anthropic'" in message
        assert "'openai'" in message  # the aliases are named too
        assert isinstance(caught.value, ValueError)


def test_a_recorded_turn_names_a_canonical_format_only() -> None:
    with pytest.raises(ValueError, match="api must be one of"):
        AssistantResponse(api="openai")


# -- reading turns ------------------------------------------------------------------------------


def test_a_chat_turn_is_read_from_its_message() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turn = FORMATS["chat"].read_turn({"role": "assistant", "content": None, "tool_calls": [call]})
    assert turn == ProviderTurn("chat", "", (call,), ())
    parts = [{"type": "text", "text": "a"}, {"type": "refusal"}, {"type": "text", "text": "b"}]
    assert FORMATS["chat"].read_turn({"content": parts}).text == "ab"


def test_an_anthropic_turn_keeps_every_block() -> None:
    blocks = [
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
        {"type": "text", "text": "one"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        {"type": "text", "text": "two"},
    ]
    turn = FORMATS["anthropic"].read_turn({"role": "assistant", "content": blocks})
    assert (turn.text, turn.calls, turn.blocks) == ("one\ntwo", (blocks[2],), tuple(blocks))
    message = turn.message()
    assert (message.api, message.content, list(message.blocks)) == (
        "anthropic",
        "one\ntwo",
        blocks,
    )


def test_a_responses_turn_is_read_from_the_response_or_its_output() -> None:
    items = [
        {"type": "reasoning", "id": "rs", "summary": []},
        {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    fmt = FORMATS["responses"]
    assert fmt.read_turn({"object": "response", "output": items}) == fmt.read_turn(items)
    assert fmt.read_turn(items) == ProviderTurn("responses", "hi", (items[2],), tuple(items))


@pytest.mark.parametrize(
    ("name", "message", "problem"),
    [
        ("chat", "text", "assistant message"),
        ("chat", {"content": 5}, "content must be text"),
        ("chat", {"content": "", "tool_calls": "x"}, "tool_calls must be a list"),
        ("anthropic", {"content": "x"}, "list of content blocks"),
        ("anthropic", {"content": [5]}, "content block must be an object"),
        ("responses", {"output": 5}, "output list"),
        ("responses", [{"id": "no type"}], "output item must be an object"),
        ("responses", [{"type": "message", "content": "x"}], "content must be a list"),
    ],
)
def test_a_message_of_the_wrong_shape_is_a_value_error(
    name: str, message: object, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        FORMATS[name].read_turn(message)


# -- the old module path ---------------------------------------------------------------------


def test_the_old_export_module_warns_once_and_gives_the_same_objects() -> None:
    sys.modules.pop("lionexec.conversation.export", None)
    with pytest.warns(DeprecationWarning, match="lionexec.conversation.export is deprecated"):
        module = importlib.import_module("lionexec.conversation.export")
    for name in ("NO_RESPONSE", "to_openai", "to_responses", "to_anthropic", "result_text"):
        assert getattr(module, name) is getattr(lionexec.conversation, name), name
    formats = lionexec.conversation.formats
    for name in ("anthropic_tool_id", "anthropic_part", "responses_part", "dumps", "part_text"):
        assert getattr(module, name) is getattr(formats, name), name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module("lionexec.conversation.export") is module


def test_the_formats_names_have_their_homes() -> None:
    formats = lionexec.conversation.formats
    assert formats.ProviderFormat is lionexec.abc.ProviderFormat  # the protocol's home
    assert formats.ProviderFormat.__module__ == "lionexec.abc"
    for name in ("ProviderTurn", "provider_format", "resolve_format"):
        assert getattr(formats, name).__module__ == "lionexec.conversation.formats", name
    for name in ("to_openai", "to_responses", "to_anthropic", "result_text", "AnthropicExport"):
        assert getattr(formats, name) is getattr(lionexec.conversation, name)
        assert getattr(formats, name).__module__ == "lionexec.conversation", name
