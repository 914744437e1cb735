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

Last, a durable part (:func:`run_durable_demo`): a batch of four calls runs on an SQLite
journal in a subprocess (``python -m lionexec demo --durable-batch DIR``), which is killed
with ``SIGKILL`` while all four are running. Recovery then resolves each call by its tool's
effect class (a ``pure`` and a ``keyed`` one run again, an ``unsafe`` one with a reconcile
hook is ``reconciled``, a plain ``unsafe`` one ``interrupted``), and the journal holds exactly
one response per request. Side effects are counted outside the journal, in a ledger file.

And a durable agent run (:func:`run_agent_demo`, with the ``http`` and ``server`` extras): a
scripted model on 127.0.0.1 drives an agent process through two tool turns; the process is
killed while the model's third turn is in flight, and restarted: the run goes on at that
turn (the first two are read from the journal, the tools do not run again), and a restart
after the end returns the recorded answer without asking the model.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import trio

from ._terminal import CommandParser
from .act import AlcallParams, BatchSummary, Branch
from .conversation import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    Message,
    System,
    result_text,
)
from .governance import CallContext, HookPoint, PermissionPolicy, SessionObserver, ToolInvocation
from .journal import Applied, NotApplied, RecoveryReport, SqliteJournal
from .tools import Tool

__all__ = ["main", "run_agent_demo", "run_demo", "run_durable_demo"]

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


# -- the durable part ---------------------------------------------------------------------------

#: The branch of the durable batch (fixed, so the subprocess and recovery agree on it).
DURABLE_BRANCH = uuid.UUID("3f2c8a5e-1d7b-4e0a-9c6f-2b8d4e1a7c30")

DURABLE_CALLS: list[dict[str, Any]] = [
    tool_call("call_quote", "get_quote", symbol="ACME"),
    tool_call("call_seat", "book_seat", flight="LX318", seat="12A"),
    tool_call("call_charge", "charge_card", order="A-17", amount=42),
    tool_call("call_email", "send_email", to="ops@example.com", subject="order A-17"),
]


def durable_tools(directory: Path, *, hang: bool) -> list[Tool]:
    """The durable part's tools. Each appends a line to ``directory/ledger.txt`` (its side
    effect, counted outside the journal); with *hang*, it then reports on stdout that it is
    running and waits forever (for the SIGKILL)."""
    ledger = directory / "ledger.txt"

    async def effect(line: str) -> None:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)
        if hang:
            print(f"started {line.split()[0]}", flush=True)
            await trio.sleep_forever()

    async def get_quote(symbol: str) -> float:
        """A price quote (no side effect: safe to run again)."""
        await effect(f"get_quote {symbol}")
        return 101.5

    async def book_seat(flight: str, seat: str, ctx: CallContext) -> str:
        """Book a seat; the airline de-duplicates by the idempotency key we pass it."""
        await effect(f"book_seat {flight} {seat} key={ctx.idempotency_key}")
        return f"{flight} seat {seat} booked"

    async def charge_card(order: str, amount: int) -> str:
        """Charge a card (not safe to repeat; the ledger can tell whether it happened)."""
        await effect(f"charge_card {order} {amount}")
        return f"charged {amount} for {order}"

    async def send_email(to: str, subject: str) -> str:
        """Send an email (not safe to repeat, and nothing can tell whether it went out)."""
        await effect(f"send_email {to}")
        return f"sent {subject!r} to {to}"

    def find_charge(ctx: CallContext) -> Applied | NotApplied:
        order, amount = ctx.arguments["order"], ctx.arguments["amount"]
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        if f"charge_card {order} {amount}" in lines:
            return Applied(f"charged {amount} for {order}")
        return NotApplied()

    return [
        Tool.from_function(get_quote, effect="pure"),
        Tool.from_function(book_seat, effect="keyed", context_param="ctx"),
        Tool.from_function(charge_card, reconcile=find_charge),
        Tool.from_function(send_email),
    ]


async def durable_batch(directory: Path) -> None:
    """The subprocess's work: the four calls, journaled, each hanging once it has run."""
    async with SqliteJournal(directory / "journal.db") as journal:
        branch = await journal.branch(DURABLE_BRANCH)
        branch.register_tools(durable_tools(directory, hang=True))
        branch.messages.add_message(Instruction(content="Book the trip and bill order A-17."))
        requests = [_request(item) for item in DURABLE_CALLS]
        branch.messages.add_message(AssistantResponse(tool_calls=requests))
        async with branch:
            await branch.act(requests)


async def run_durable_demo(out: TextIO, directory: Path) -> RecoveryReport:
    """Kill a journaled batch mid-call, then recover it, printing each call's resolution.

    Runs ``python -m lionexec demo --durable-batch DIRECTORY`` (the installed lionexec),
    waits until its four calls are all running (each says so on stdout, after its
    write-ahead commit and its side effect), kills it with ``SIGKILL``, and recovers the
    journal it left. Deterministic: the kill comes at the same point every time. Uses no
    trio timer (safe under a mock clock).
    """
    await trio.Path(directory).mkdir(parents=True, exist_ok=True)
    print("\nDurability: a journaled batch, its process killed mid-call", file=out)
    print("-----------------------------------------------------------", file=out)
    command = [sys.executable, "-m", "lionexec", "demo", "--durable-batch", str(directory)]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    try:
        started = await _read_started(process, len(DURABLE_CALLS))
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    functions = [call["function"]["name"] for call in DURABLE_CALLS]
    print(f"  journal: {directory / 'journal.db'}", file=out)
    print(
        f"  a subprocess (pid {process.pid}) ran {len(started)} calls concurrently "
        f"({', '.join(sorted(started, key=functions.index))}); it was killed with SIGKILL "
        f"(exit {process.returncode}) while all of them were running",
        file=out,
    )
    async with SqliteJournal(directory / "journal.db") as journal:
        unfinished = await journal.calls(DURABLE_BRANCH, unfinished=True)
        print(
            f"  the journal holds {len(unfinished)} requests with no response; recovery:",
            file=out,
        )
        report = await journal.recover(durable_tools(directory, hang=False))
        for r in report.resolutions:
            outcome = r.outcome.value if r.outcome is not None else "-"
            print(
                f"    {r.call_id:<12} {r.function:<12} [{r.effect:<6}] {r.action:<12} -> "
                f"{outcome:<11} (attempts {r.attempts})",
                file=out,
            )
        history = await journal.history(DURABLE_BRANCH)
    answers = [
        sum(1 for response in history.responses() if response.action_request_id == request.id)
        for request in history.requests()
    ]
    verdict = "exactly one response each" if set(answers) == {1} else f"answers {answers}"
    print(f"  {len(answers)} requests, {sum(answers)} responses: {verdict}", file=out)
    ledger = (await trio.Path(directory / "ledger.txt").read_text()).splitlines()
    counts = {name: sum(line.split()[0] == name for line in ledger) for name in functions}
    ran = ", ".join(f"{name} {n}" for name, n in counts.items())
    keys = {line.split("key=")[1] for line in ledger if line.startswith("book_seat ")}
    same = "one idempotency key" if len(keys) == 1 else f"keys {sorted(keys)}"
    print(f"  side effects (a ledger outside the journal): {ran}", file=out)
    print(f"  (book_seat ran twice with {same}: the airline de-duplicates by it)", file=out)
    return report


async def _read_started(process: trio.Process, expected: int) -> list[str]:
    """The tool names the subprocess reports running, once *expected* of them did."""
    assert process.stdout is not None
    buffer = b""
    started: list[str] = []
    while len(started) < expected:
        chunk = await process.stdout.receive_some()
        if not chunk:
            raise RuntimeError(
                f"the durable batch exited before its calls started (exit {await process.wait()})"
            )
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        started += [line.decode().split()[1] for line in lines if line.startswith(b"started ")]
    return started


# -- the durable agent run ----------------------------------------------------------------------

#: The branch and the run of the durable agent part (fixed: every life of the agent process
#: continues the same run).
AGENT_BRANCH = uuid.UUID("6b1d2f0e-8c4a-4e5b-9a7d-1f3e5c7b9d20")
AGENT_RUN = "bill-order-A-17"
AGENT_INSTRUCTION = "Quote ACME, then bill order A-17 at that price."
AGENT_ANSWER = "Order A-17 is billed: 42.0, the ACME quote."


def agent_tools(directory: Path) -> list[Tool]:
    """The agent part's tools; ``charge_card`` appends to ``directory/ledger.txt``."""
    ledger = directory / "ledger.txt"

    async def get_quote(symbol: str) -> float:
        """A price quote (no side effect: safe to run again)."""
        await trio.lowlevel.checkpoint()
        return 42.0

    async def charge_card(order: str, amount: float) -> str:
        """Charge a card (not safe to repeat)."""
        async with await trio.Path(ledger).open("a", encoding="utf-8") as out:
            await out.write(f"charge_card {order} {amount}\n")
        return f"charged {amount} for {order}"

    return [Tool.from_function(get_quote, effect="pure"), Tool.from_function(charge_card)]


async def agent_run(directory: Path, base_url: str) -> None:
    """One life of the agent process: recover its journal, continue its run (``run_id``) to
    the end, print the result as a JSON line."""
    from .models import Endpoint, Model, run

    tools = agent_tools(directory)
    async with SqliteJournal(directory / "agent.db") as journal:
        await journal.recover(tools)
        branch = await journal.branch(AGENT_BRANCH)
        branch.register_tools(tools)
        async with branch, Model(endpoint=Endpoint(base_url), name="scripted-model") as model:
            result = await run(branch, model, AGENT_INSTRUCTION, run_id=AGENT_RUN)
    line = {"text": result.text, "turns": result.turns, "asked": len(result.responses)}
    print(json.dumps(line), flush=True)


async def run_agent_demo(out: TextIO, directory: Path) -> list[dict[str, Any]] | None:
    """Kill an agent process mid-run, restart it twice, and show that the run went on.

    A scripted model (``LocalProvider`` on 127.0.0.1) asks for a quote, then a charge, then
    hangs on its third turn; the agent process (``python -m lionexec demo --agent-run DIR
    URL``) is killed with ``SIGKILL`` then. Restarted, it continues the run from the journal
    (the third turn only); restarted after the end, it returns the recorded answer without
    asking the model. Returns each restart's result, or ``None`` (printing why) when the
    ``http`` and ``server`` extras are not installed.
    """
    print("\nDurable agent run: the agent process killed mid-run, then restarted", file=out)
    print("-------------------------------------------------------------------", file=out)
    try:  # the agent process needs the http extra (the loop), this one the server extra too
        from .models import run as _  # noqa: F401
        from .models.testing import LocalProvider, Reply, Stall
    except ModuleNotFoundError as exc:
        print(f"  (skipped: {exc})", file=out)
        return None
    await trio.Path(directory).mkdir(parents=True, exist_ok=True)
    provider = LocalProvider(
        [
            Reply(tool_calls=[("get_quote", {"symbol": "ACME"})]),
            Reply(tool_calls=[("charge_card", {"order": "A-17", "amount": 42.0})]),
            Stall(Reply("never sent")),  # the third turn hangs: the process is killed then
            Reply(AGENT_ANSWER),
        ]
    )
    results: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        command = [sys.executable, "-m", "lionexec", "demo", "--agent-run", str(directory)]
        command.append(base_url)
        first = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL)
        try:
            await _until_asked(provider, first, 3)
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        print(f"  journal: {directory / 'agent.db'}, run id {AGENT_RUN!r}", file=out)
        print(
            f"  the agent (pid {first.pid}) asked the model 3 times, ran get_quote and "
            f"charge_card, and was killed with SIGKILL (exit {first.returncode}) while "
            "waiting for the third turn",
            file=out,
        )
        for life in ("restarted", "restarted after the end"):
            done = await trio.run_process(command, capture_stdout=True)
            result = json.loads(done.stdout.decode().splitlines()[-1])
            results.append(result)
            asked = {0: "no model call", 1: "1 model call"}.get(result["asked"])
            print(
                f"  {life}: {asked or str(result['asked']) + ' model calls'}, "
                f"{result['turns']} turns in the run: {result['text']!r}",
                file=out,
            )
        nursery.cancel_scope.cancel()
    async with SqliteJournal(directory / "agent.db") as journal:
        history = await journal.history(AGENT_BRANCH)
    kinds = [message.kind for message in history]
    print(
        f"  the model was asked {len(provider.log.requests)} times in all; the history holds "
        f"{kinds.count('instruction')} instruction, {kinds.count('assistant_response')} model "
        f"turns, {len(history.requests())} calls and {len(history.responses())} responses",
        file=out,
    )
    ledger = (await trio.Path(directory / "ledger.txt").read_text()).splitlines()
    print(f"  charge_card ran {len(ledger)} time(s) (a ledger outside the journal)", file=out)
    return results


async def _until_asked(provider: Any, process: trio.Process, requests: int) -> None:
    """Wait until *provider* has been sent *requests* requests; raise if *process* ends
    first."""
    async with trio.open_nursery() as race:

        async def asked() -> None:
            await provider.wait_for(lambda log: len(log.requests) >= requests)
            race.cancel_scope.cancel()

        async def ended() -> None:
            code = await process.wait()
            raise RuntimeError(f"the agent exited before its model call (exit {code})")

        race.start_soon(asked)
        race.start_soon(ended)


def build_parser(prog: str = "lionexec demo") -> argparse.ArgumentParser:
    """The parser of ``lionexec demo`` (the CLI reference is generated from it)."""
    parser = CommandParser(
        prog=prog,
        description="Run the scripted demo: tool calls through a governed branch, "
        "a journal, a crash and its recovery.",
    )
    parser.add_argument(
        "--log",
        type=Path,
        metavar="PATH",
        help="where to write the JSONL event log (default: a new temporary directory)",
    )
    parser.add_argument("--durable-batch", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--agent-run", nargs=2, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] = ()) -> int:
    """Entry point of ``lionexec demo [--log PATH]``."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.durable_batch is not None:  # the subprocess of the durable part
        trio.run(durable_batch, args.durable_batch)
        return 0
    if args.agent_run is not None:  # the agent process of the durable agent run
        directory, base_url = args.agent_run
        trio.run(agent_run, Path(directory), base_url)
        return 0
    if args.log is not None:
        problem = _unwritable(args.log)
        if problem is not None:
            parser.error(f"--log {args.log}: cannot write the event log there: {problem}")
    log_path = args.log or Path(tempfile.mkdtemp(prefix="lionexec-demo-")) / "events.jsonl"
    trio.run(run_demo, sys.stdout, log_path)
    try:  # a directory of its own each run (a journal left by an earlier run is not reused)
        durable = Path(tempfile.mkdtemp(prefix="durable-", dir=log_path.parent))
    except OSError as exc:
        parser.error(
            f"--log {log_path}: cannot make the durable part's directory beside it: {exc}"
        )
    trio.run(run_durable_demo, sys.stdout, durable)
    trio.run(run_agent_demo, sys.stdout, durable / "agent")
    return 0


def _unwritable(path: Path) -> str | None:
    """Why the JSONL event log cannot be appended to *path* (it is created if missing), or
    ``None``: checked before the demo runs, so a bad ``--log`` fails at once."""
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None
