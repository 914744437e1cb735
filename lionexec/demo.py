"""lionexec's demo: a scripted model proposes tool calls; lionexec governs, runs and records them.

Run it with ``python -m lionexec demo`` (or ``nox -s demo``). It needs no network and no API
key: the "model" is a script that proposes OpenAI-format ``tool_calls``.

What it shows, in three batches:

1. A concurrent batch under a session gate, a permission policy, a concurrency limit and a
   per-call timeout: a completed call, a call returning ``None``, a failing call, a call denied
   by the gate, one denied by the policy, an unknown tool, bad arguments, and a call that times
   out. Each ends as exactly one linked response in the history.
2. Two blocking sync tools, offloaded to worker threads, running side by side.
3. A batch cancelled from outside: each of its calls is recorded ``cancelled``.

Then it prints the conversation history, the event log as a table, and the path of the JSONL
event log it wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import trio

from .act import AlcallParams, BatchSummary, Branch
from .conversation import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    Message,
    System,
)
from .conversation.export import result_text
from .governance import HookPoint, PermissionPolicy, SessionObserver, ToolInvocation
from .tools import Tool

__all__ = ["main", "run_demo"]

# -- the tools ----------------------------------------------------------------------------------


async def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: the city name.
        unit: "celsius" or "fahrenheit".
    """
    await trio.sleep(0.05)
    return {"city": city, "temperature": 21 if unit == "celsius" else 70, "unit": unit}


async def save_note(text: str) -> None:
    """Save a note; returns nothing.

    Args:
        text: what to remember.
    """
    await trio.sleep(0.01)


async def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: the dividend.
        b: the divisor.
    """
    return a / b


async def run_shell(command: str) -> str:
    """Run a shell command (the demo only pretends).

    Args:
        command: the command line.
    """
    return f"pretended to run {command!r}"


async def transfer_money(amount: float, to: str) -> str:
    """Move money (the session gate never lets this through).

    Args:
        amount: how much.
        to: the recipient.
    """
    return f"sent {amount} to {to}"


async def search_archive(query: str, seconds: float = 30.0) -> list[str]:
    """A slow search that outlives its timeout.

    Args:
        query: what to look for.
        seconds: how long the search takes.
    """
    await trio.sleep(seconds)
    return [f"result for {query}"]


BLOCKING_SECONDS = 0.3


def fetch_report(report_id: str) -> str:
    """A blocking sync tool (think: a legacy client library); lionexec runs it in a thread.

    Args:
        report_id: which report.
    """
    time.sleep(BLOCKING_SECONDS)
    return f"report {report_id}: 42 pages"


TOOLS: list[Tool | Callable[..., Any]] = [
    get_weather,
    save_note,
    divide,
    Tool.from_function(run_shell, subject="command"),
    transfer_money,
    search_archive,
    fetch_report,
]

# -- the scripted model -------------------------------------------------------------------------


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One OpenAI ``tool_calls`` item."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


SCRIPT: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "Check the weather, save a note, do some maths and tidy up the server.",
        [
            tool_call("call_weather", "get_weather", city="Lisbon"),
            tool_call("call_note", "save_note", text="buy coffee"),
            tool_call("call_divide", "divide", a=1, b=0),
            tool_call("call_money", "transfer_money", amount=1000, to="mallory"),
            tool_call("call_rm", "run_shell", command="rm -rf /var/www"),
            tool_call("call_ls", "run_shell", command="ls -la /var/www"),
            tool_call("call_fly", "fly_to_the_moon", speed="fast"),
            tool_call("call_bad_args", "get_weather", town="Porto"),
            tool_call("call_search", "search_archive", query="2019 invoices"),
        ],
    ),
    (
        "Fetch the two quarterly reports.",
        [
            tool_call("call_report_q1", "fetch_report", report_id="Q1"),
            tool_call("call_report_q2", "fetch_report", report_id="Q2"),
        ],
    ),
    (
        "Search the archive for everything (the user will give up waiting).",
        [
            tool_call("call_slow_1", "search_archive", query="everything", seconds=60),
            tool_call("call_slow_2", "search_archive", query="anything", seconds=60),
        ],
    ),
]

# -- governance ---------------------------------------------------------------------------------


def gate(invocation: ToolInvocation) -> bool:
    """The session gate: this session may never move money."""
    return invocation.function != "transfer_money"


POLICY = PermissionPolicy(
    mode="rules",
    allow={"run_shell": ["ls *", "cat *"], "*": ["*"]},
    deny={"run_shell": ["rm *"]},
)

# -- running ------------------------------------------------------------------------------------


async def run_demo(out: TextIO, log_path: Path) -> Branch:
    """Run the scripted conversation, printing progress and results to *out*."""
    branch = Branch.with_log_file(log_path, policy=POLICY, observer=SessionObserver())
    assert branch.observer is not None
    branch.observer.gate(gate)
    branch.register_tools(TOOLS)
    branch.hooks.on(
        HookPoint.TOOL_PRE,
        lambda tool_name, call_id, arguments, **_: print(
            f"  … {call_id:<16} {tool_name}({arguments})", file=out
        ),
    )
    branch.messages.on_message_added.append(lambda message: _progress(branch, message, out))
    branch.messages.add_message(System(content="You are a careful assistant with tools."))
    params = [
        AlcallParams(max_concurrent=4, timeout=1.0),
        AlcallParams(max_concurrent=2),
        AlcallParams(),
    ]
    async with branch:  # runs the JSONL sink; leaving drains it and closes the file
        for (instruction, calls), call_params in zip(SCRIPT, params, strict=True):
            print(f"\n> {instruction}", file=out)
            branch.messages.add_message(Instruction(content=instruction))
            requests = [_request(item) for item in calls]
            branch.messages.add_message(AssistantResponse(tool_calls=requests))
            start = trio.current_time()
            if calls is SCRIPT[-1][1]:
                with trio.move_on_after(0.5):  # the user gives up: cancelled from outside
                    await branch.act(requests, call_params=call_params)
                responses = [branch.messages.response_for(r) for r in requests]
                print("  (the user gave up after 0.5 s; the batch was cancelled)", file=out)
            else:
                responses = [
                    r
                    for r in await branch.act(requests, call_params=call_params)
                    if isinstance(r, ActionResponse)
                ]
            elapsed = trio.current_time() - start
            summary = BatchSummary.of(r for r in responses if r is not None)
            counts = ", ".join(f"{s.value} {n}" for s, n in summary.by_status.items() if n)
            print(f"  batch done in {elapsed:.2f}s: {counts}", file=out)
    _print_history(branch, out)
    _print_events(branch, out)
    print(f"\nEvent log (JSONL, one record per invoked call): {log_path}", file=out)
    return branch


def _request(item: dict[str, Any]) -> ActionRequest:
    function = item["function"]
    return ActionRequest.create(
        function["name"], json.loads(function["arguments"]), call_id=item["id"]
    )


def _progress(branch: Branch, message: Message, out: TextIO) -> None:
    if isinstance(message, ActionResponse):
        outcome = message.content.outcome.value
        call_id = _call_id_of(branch, message)
        print(f"  {_MARK[outcome]} {call_id:<16} {outcome:<9} {_detail(message)}", file=out)


_MARK = {
    "completed": "✓",
    "failed": "✗",
    "denied": "⛔",
    "invalid": "?",
    "timed_out": "⏱",
    "cancelled": "⊘",
}


def _detail(response: ActionResponse) -> str:
    text, _ = result_text(response)
    text = text if len(text) <= 70 else text[:69] + "…"
    return f"{response.content.function}: {text}"


def _print_history(branch: Branch, out: TextIO) -> None:
    print("\nConversation history", file=out)
    print("--------------------", file=out)
    for message in branch.messages:
        if isinstance(message, ActionRequest):
            args = json.dumps(message.arguments)
            print(f"  request   {message.call_id:<16} {message.function}({args})", file=out)
        elif isinstance(message, ActionResponse):
            content = message.content
            print(
                f"  response  {_call_id_of(branch, message):<16} "
                f"{content.status.value:<9} {content.outcome.value:<9} {_detail(message)}",
                file=out,
            )
        elif isinstance(message, AssistantResponse):
            print(f"  assistant proposes {len(message.tool_calls)} tool calls", file=out)
        else:
            assert isinstance(message, System | Instruction)
            print(f"  {message.role.value:<9} {message.content}", file=out)


def _call_id_of(branch: Branch, response: ActionResponse) -> str:
    request_id = response.content.action_request_id
    assert request_id is not None
    request = branch.messages[request_id]
    assert isinstance(request, ActionRequest)
    return request.call_id


def _print_events(branch: Branch, out: TextIO) -> None:
    print("\nEvent log", file=out)
    print("---------", file=out)
    header = f"{'call id':<16} {'function':<16} {'status':<10} {'attempts':>8} {'duration':>9}"
    print(f"  {header}", file=out)
    for record in branch.log:
        duration = record.event.execution.duration
        shown = f"{duration:.3f}s" if isinstance(duration, float) else "-"
        print(
            f"  {record.call_id:<16} {record.function:<16} {record.status.value:<10} "
            f"{record.attempts:>8} {shown:>9}",
            file=out,
        )


def main(argv: Sequence[str] = ()) -> int:
    """Entry point of ``python -m lionexec demo [--log PATH]``."""
    parser = argparse.ArgumentParser(prog="python -m lionexec demo")
    parser.add_argument("--log", type=Path, help="where to write the JSONL event log")
    args = parser.parse_args(list(argv))
    log_path = args.log or Path(tempfile.mkdtemp(prefix="lionexec-demo-")) / "events.jsonl"
    trio.run(run_demo, sys.stdout, log_path)
    return 0
