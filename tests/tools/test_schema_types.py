"""``registry.schemas(api)`` is typed as the shape each SDK's ``tools=`` takes: a program
passing it to the installed openai and anthropic SDKs type-checks under ``mypy --strict``
with no cast (the real SDKs' types are the oracle); and the values are those shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest

from lionexec import Tool
from lionexec.tools import (
    ActionManager,
    AnthropicToolSchema,
    ChatFunctionDefinition,
    ChatToolSchema,
    ResponsesToolSchema,
)

PROGRAM = textwrap.dedent(
    """
    from openai import AsyncOpenAI
    from anthropic import AsyncAnthropic

    from lionexec import Branch


    def add(a: int, b: int = 0) -> int:
        \"\"\"Add.\"\"\"
        return a + b


    async def main() -> None:
        branch = Branch()
        branch.register_tools(add)
        openai = AsyncOpenAI()
        await openai.chat.completions.create(
            model="m", messages=[], tools=branch.registry.schemas()
        )
        await openai.chat.completions.create(
            model="m", messages=[], tools=branch.registry.schemas("openai")
        )
        await openai.responses.create(
            model="m", input="x", tools=branch.registry.schemas("responses")
        )
        await AsyncAnthropic().messages.create(
            model="m", max_tokens=1, messages=[], tools=branch.registry.schemas("anthropic")
        )
    """
)


@pytest.mark.timeout(600)
def test_schemas_pass_to_the_sdks_under_mypy_strict_with_no_cast(tmp_path: Path) -> None:
    program = tmp_path / "uses_sdks.py"
    program.write_text(PROGRAM)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(program),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cast" not in PROGRAM


def keys(kind: type) -> set[str]:
    return set(typing.get_type_hints(kind))


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        (ChatToolSchema, openai.types.chat.ChatCompletionFunctionToolParam),
        (ChatFunctionDefinition, openai.types.shared_params.FunctionDefinition),
        (ResponsesToolSchema, openai.types.responses.FunctionToolParam),
        (AnthropicToolSchema, anthropic.types.ToolParam),
    ],
)
def test_each_typed_shape_declares_the_sdk_keys(mine: type, theirs: type) -> None:
    assert keys(mine) == keys(theirs)


def search(query: str, limit: int = 5) -> str:
    """Search."""
    return query


def test_the_values_have_the_keys_their_types_declare() -> None:
    registry = ActionManager([search, Tool.from_function(search, name="loose", strict=False)])
    for format, kind in (
        ("openai", ChatToolSchema),
        ("responses", ResponsesToolSchema),
        ("anthropic", AnthropicToolSchema),
    ):
        for schema in registry.schemas(format):  # type: ignore[call-overload]
            assert set(schema) <= keys(kind), (format, schema)
            assert kind.__required_keys__ <= set(schema), (format, schema)
