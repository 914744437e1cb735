"""An agent: a model proposing tool calls, run under lionexec's governance, on trio.

By default it talks to lionexec's scripted local provider (an OpenAI-compatible server on
127.0.0.1, started in-process), so it runs anywhere with no key::

    python examples/agent.py

With ``OPENAI_BASE_URL`` and/or ``OPENAI_API_KEY`` set it talks to that endpoint instead
(``OPENAI_MODEL`` picks the model, default ``gpt-4o-mini``; ``OPENAI_API=responses`` uses the
Responses API, ``OPENAI_API=anthropic`` Anthropic's Messages API)::

    OPENAI_API_KEY=sk-... python examples/agent.py "How many words are in 'to be or not'?"

Model calls are rate-limited (requests and tokens per minute, on a ``RateLimiter``); text is
streamed as it arrives; every tool call goes through ``Branch.act`` (validation, policy,
hooks) and the whole conversation is printed at the end as the OpenAI messages it exports.
Needs the ``http`` extra (``httpx``) and, for the local provider, ``hypercorn``.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import aclosing
from typing import TYPE_CHECKING

import trio

from lionexec import Branch
from lionexec.conversation.formats import FormatName as Api
from lionexec.governance import PermissionPolicy
from lionexec.limits import RateLimiter

try:
    from lionexec.models import (
        Endpoint,
        LoopResult,
        Model,
        TextDelta,
        ToolCallsProposed,
        ToolResult,
        run_stream,
    )
except ModuleNotFoundError as exc:  # the http extra: its message says what to install
    if __name__ != "__main__":
        raise
    sys.exit(f"error: {exc}")

if TYPE_CHECKING:
    from lionexec.models.testing import Reply

QUESTION = "What is 19 + 23, and how many words are in 'the quick brown fox'?"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


def delete_file(path: str) -> str:
    """Delete a file (denied by this agent's policy: it never runs)."""
    raise AssertionError("the policy denies this tool")


def script() -> list[Reply]:
    """What the local provider answers: two tool turns (one denied call), then the answer."""
    from lionexec.models.testing import Reply  # needs hypercorn, like the local provider

    return [
        Reply(
            "Let me work that out.",
            tool_calls=[
                ("add", {"a": 19, "b": 23}),
                ("word_count", {"text": "the quick brown fox"}),
            ],
        ),
        Reply(tool_calls=[("delete_file", {"path": "/tmp/notes.txt"})]),
        Reply("19 + 23 = 42, and 'the quick brown fox' has 4 words.", chunk_size=6),
    ]


def new_branch() -> Branch:
    policy = PermissionPolicy(mode="rules", allow={"*": ["*"]}, deny={"delete_file": ["*"]})
    branch = Branch(policy=policy)
    branch.register_tools([add, word_count, delete_file])
    return branch


async def agent(model: Model, question: str, *, out: list[str] | None = None) -> Branch:
    """Run the loop on a fresh branch; print (and collect in *out*) what happens."""

    def say(text: str, end: str = "\n") -> None:
        print(text, end=end, flush=True)
        if out is not None:
            out.append(text + end)

    branch = new_branch()
    limiter = RateLimiter(requests=60, period=60.0, burst=5, tokens=200_000)
    model.limiter = limiter  # every (streamed) call waits for these budgets
    say(f"user: {question}")
    async with aclosing(
        run_stream(branch, model, question, system="Use the tools.", max_turns=6)
    ) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                say(event.text, end="")
            elif isinstance(event, ToolCallsProposed):
                names = ", ".join(c["function"]["name"] for c in event.calls)
                say(f"\n[turn {event.index}: calls {names}]")
            elif isinstance(event, ToolResult):
                content = event.response.content
                shown = content.output if content.success else content.error
                say(f"  {content.function} -> {content.outcome.value}: {shown}")
            elif isinstance(event, LoopResult):
                say(f"\n[done: {event.stop_reason} after {event.turns} turns]")
    stats = limiter.statistics()
    say(f"[rate limit: {stats.granted} granted, {stats.tokens_charged} tokens charged]")
    return branch


async def main(argv: list[str]) -> None:
    question = " ".join(argv) or QUESTION
    base_url = os.environ.get("OPENAI_BASE_URL")
    api_key = os.environ.get("OPENAI_API_KEY")
    apis: dict[str, Api] = {"chat": "chat", "responses": "responses", "anthropic": "anthropic"}
    name = os.environ.get("OPENAI_API", "chat")
    if name not in apis:
        raise SystemExit(f"OPENAI_API must be chat, responses or anthropic, not {name!r}")
    api = apis[name]
    if base_url or api_key:
        endpoint = Endpoint(base_url or "https://api.openai.com/v1", api_key=api_key, api=api)
        name = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        async with Model(endpoint=endpoint, name=name) as model:  # closes its pooled client
            branch = await agent(model, question)
    else:
        from lionexec.models.testing import LocalProvider

        provider = LocalProvider(script())
        async with trio.open_nursery() as nursery:
            base = await nursery.start(provider.serve)
            async with Model(endpoint=Endpoint(base, api=api), name="local-model") as model:
                branch = await agent(model, question)
            nursery.cancel_scope.cancel()
    print(json.dumps(branch.messages.to_openai(), indent=2))


if __name__ == "__main__":
    try:
        trio.run(main, sys.argv[1:])
    except* ModuleNotFoundError as missing:  # an extra (the local provider needs hypercorn)
        sys.exit(f"error: {missing.exceptions[0]}")
