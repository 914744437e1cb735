"""Provider formats, model-call side: the registry, the names an endpoint and a request take,
and the old module path ``lionexec.models.call``."""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from typing import Any

import pytest

import lionexec.abc
import lionexec.models
from lionexec.conversation.formats import FORMAT_NAMES, FORMATS
from lionexec.errors import ConfigurationError
from lionexec.models import Endpoint, build_payload
from lionexec.models._call import parse_body, text_delta
from lionexec.models.formats import (
    ANTHROPIC_MAX_TOKENS,
    MODEL_FORMATS,
    ModelFormat,
    StreamAssembler,
    model_format,
)
from lionexec.models.testing import LocalProvider, Reply

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_each_registered_format_keeps_the_contract(name: str) -> None:
    fmt = MODEL_FORMATS[name]  # type: ignore[index]
    assert isinstance(fmt, ModelFormat) and isinstance(fmt.assembler(), StreamAssembler)
    assert fmt.name == name and fmt.provider is FORMATS[name]  # type: ignore[index]
    assert model_format(name) is fmt
    assert Endpoint("http://h/v1/", api=name).url == "http://h/v1" + fmt.path  # type: ignore[arg-type]
    assert tuple(MODEL_FORMATS) == FORMAT_NAMES


@pytest.mark.parametrize("name", FORMAT_NAMES)
@pytest.mark.parametrize(
    "reply", [Reply("some text", chunk_size=3), Reply(tool_calls=[("f", {"x": 1}), ("g", "[1]")])]
)
def test_a_whole_body_and_its_stream_read_alike(name: Any, reply: Reply) -> None:
    provider = LocalProvider()
    fmt = model_format(name)
    whole = fmt.parse(provider._whole(name, "id-1", reply))
    assembler = fmt.assembler()
    texts = []
    for chunk in provider._chunks(name, "id-1", reply):
        data = chunk.decode().split("data: ", 1)[1].strip()
        event = data if data == "[DONE]" else json.loads(data)
        assembler.feed(event)
        texts.append(text_delta(event))
    assert assembler.result() == whole
    assert "".join(texts) == reply.text


def test_the_endpoint_alias_warns_at_the_caller_and_resolves() -> None:
    with pytest.warns(DeprecationWarning, match="'openai' is deprecated; use 'chat'") as w:
        endpoint = Endpoint("http://h/v1", api="openai")  # type: ignore[arg-type]
    assert w[0].filename == __file__
    assert endpoint == Endpoint("http://h/v1", api="chat")


def test_a_request_for_an_alias_is_the_request_for_its_format() -> None:
    with pytest.warns(DeprecationWarning, match="use 'chat'") as w:
        payload = build_payload("openai", "m", MESSAGES)
    assert w[0].filename == __file__
    assert payload == build_payload("chat", "m", MESSAGES)
    with pytest.warns(DeprecationWarning, match="use 'chat'"):
        assert model_format("openai") is MODEL_FORMATS["chat"]


@pytest.mark.parametrize("name", ["gemini", "messages", ""])
def test_an_unknown_format_is_an_error_listing_the_names(name: str) -> None:
    expected = "expected one of 'chat', 'responses', 'anthropic'"
    with pytest.raises(ConfigurationError, match=expected):
        build_payload(name, "m", MESSAGES)
    with pytest.raises(ConfigurationError, match=expected):
        parse_body(name, "{}")
    with pytest.raises(ConfigurationError, match=expected):
        model_format(name)
    with pytest.raises(ValueError, match=r"'api' must be in \('chat', 'responses', 'anthropic'\)"):
        Endpoint("http://h/v1", api=name)  # type: ignore[arg-type]


def test_anthropic_requests_default_max_tokens() -> None:
    assert build_payload("anthropic", "c", MESSAGES)["max_tokens"] == ANTHROPIC_MAX_TOKENS
    assert build_payload("anthropic", "c", MESSAGES, max_tokens=5)["max_tokens"] == 5


def test_the_old_call_module_warns_once_and_gives_the_same_objects() -> None:
    sys.modules.pop("lionexec.models.call", None)
    with pytest.warns(DeprecationWarning, match="lionexec.models.call is deprecated") as caught:
        module = importlib.import_module("lionexec.models.call")
    assert len(caught) == 1
    for name in ("Endpoint", "ModelCall", "ModelResponse", "Usage", "FINISH_REASONS"):
        assert getattr(module, name) is getattr(lionexec.models, name), name
    assert module.build_payload is build_payload
    assert module.parse_body is parse_body and module.text_delta is text_delta
    assert module.ANTHROPIC_MAX_TOKENS == 4096 and module.ANTHROPIC_VERSION == "2023-06-01"
    assert module.parse_chat(json.loads(json.dumps(_chat_body()))).text == "hi"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module("lionexec.models.call") is module


def _chat_body() -> dict[str, Any]:
    message = {"role": "assistant", "content": "hi"}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def test_the_formats_names_have_their_homes() -> None:
    formats = lionexec.models.formats
    for name in ("ModelFormat", "StreamAssembler"):  # protocols: homed in lionexec.abc
        assert getattr(lionexec.abc, name) is getattr(formats, name)
        assert getattr(formats, name).__module__ == "lionexec.abc", name
    for name in ("model_format",):
        assert getattr(formats, name).__module__ == "lionexec.models.formats", name
    for name in ("ModelResponse", "Usage", "build_payload", "Endpoint", "ModelCall"):
        assert getattr(lionexec.models, name).__module__ == "lionexec.models", name
