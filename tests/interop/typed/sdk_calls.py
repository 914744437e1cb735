"""Checked by ``mypy --strict`` in test_typed_exports.py: the exports go to the SDKs as is.

Never run: the functions only need to type-check (no ``cast``, no ``Any``).
"""

from __future__ import annotations

import anthropic
import openai

from lionexec import Branch


def chat(client: openai.OpenAI, branch: Branch) -> None:
    client.chat.completions.create(model="gpt-test", messages=branch.messages.to_openai())


def responses(client: openai.OpenAI, branch: Branch) -> None:
    client.responses.create(model="gpt-test", input=branch.messages.to_responses())


def messages(client: anthropic.Anthropic, branch: Branch) -> None:
    client.messages.create(model="claude-test", max_tokens=1024, **branch.messages.to_anthropic())


def messages_by_key(client: anthropic.Anthropic, branch: Branch) -> None:
    exported = branch.messages.to_anthropic()
    client.messages.create(
        model="claude-test",
        max_tokens=1024,
        messages=exported["messages"],
        system=exported.get("system", ""),
    )
