"""``python -m lionexec journal show|export|recover PATH_OR_URL``: read or recover a journal.

* ``show``: branches (messages, unanswered requests), calls (by outcome; the unfinished) and
  approvals (by state; the pending).
* ``export``: everything, as one strict JSON document on stdout; ``export --jsonl``: the
  call log instead, one strict-JSON line per answered call, fed from the journal (see
  :func:`lionexec.journal.call_records`).
* ``recover [--tools module:attribute]``: resolve every unanswered call (see
  :meth:`Journal.recover <lionexec.journal.Journal.recover>`); the attribute is an
  ``ActionManager`` or a list of tools. Without ``--tools`` only calls that need no tool are
  resolved (``unsafe`` ones); the others are listed as ``left``.

Exit status: 0 done, 1 the journal refused (a named error on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

import trio

from lionexec._jsonable import utf8_text
from lionexec._spec import load_attribute
from lionexec.tools import ActionManager

from ._journal import Journal
from ._jsonl import write_jsonl
from ._open import open_journal
from .errors import JournalError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lionexec journal")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("show", "summarize the branches and calls"),
        ("export", "print everything as strict JSON"),
        ("recover", "give every unanswered call exactly one response"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("target", metavar="PATH_OR_URL")
        if name == "recover":
            command.add_argument("--tools", metavar="MODULE:ATTRIBUTE", default=None)
        if name == "export":
            command.add_argument(
                "--jsonl", action="store_true", help="one line per answered call (the call log)"
            )
    return parser


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command in *argv*; return the exit status."""
    stdout = out if out is not None else sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    target: str = args.target
    if "://" not in target and target != ":memory:":
        # Each command reads an existing journal: opening a file would write the schema into it.
        if not os.path.exists(target):
            print(f"error: no journal at {target}", file=sys.stderr)
            return 1
        if os.path.isfile(target) and os.path.getsize(target) == 0:
            print(f"error: {target} is empty, not a journal", file=sys.stderr)
            return 1
    try:
        tools = _tools(args.tools) if getattr(args, "tools", None) else None
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        print(f"error: --tools {args.tools}: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_run, args.command, target, tools, stdout, getattr(args, "jsonl", False))
    except JournalError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _run(command: str, target: str, tools: Any, out: TextIO, jsonl: bool = False) -> None:
    async with open_journal(target) as journal:
        if command == "show":
            await _show(journal, out)
        elif command == "export" and jsonl:
            await write_jsonl(journal, out)
        elif command == "export":
            data = await journal.export()
            out.write(json.dumps(data, allow_nan=False, indent=2, ensure_ascii=False) + "\n")
        else:
            report = await journal.recover(tools)
            for r in report.resolutions:
                outcome = r.outcome.value if r.outcome is not None else "-"
                out.write(
                    f"{r.branch_id} {utf8_text(r.call_id)} {utf8_text(r.function)} [{r.effect}] "
                    f"{r.action} -> "
                    f"{outcome} (attempts {r.attempts})\n"
                )
            counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts().items()))
            out.write(f"recovered {len(report.resolutions)} calls: {counts or 'nothing to do'}\n")


async def _show(journal: Journal, out: TextIO) -> None:
    out.write(f"journal {journal.target}\n")
    branch_ids = await journal.branch_ids()
    out.write(f"branches: {len(branch_ids)}\n")
    for branch_id in branch_ids:
        history = await journal.history(branch_id)
        out.write(
            f"  {branch_id}: {len(history)} messages, {len(history.requests())} calls, "
            f"{len(history.unanswered())} unanswered\n"
        )
    calls = await journal.calls()
    outcomes = collections.Counter(c.outcome or "unfinished" for c in calls)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    out.write(f"calls: {len(calls)} ({summary or 'none'})\n")
    for call in calls:
        if not call.done:
            out.write(
                f"  unfinished: {call.branch_id} {utf8_text(call.call_id)} "
                f"{utf8_text(call.function)} "
                f"[{call.effect}] attempts {call.attempts}\n"
            )
    approvals = await journal.approvals(state=None)
    states = collections.Counter(a.state for a in approvals)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
    out.write(f"approvals: {len(approvals)} ({summary or 'none'})\n")
    for approval in approvals:
        if approval.state == "pending":
            out.write(
                f"  pending: {approval.approval_id} {approval.branch_id} "
                f"{utf8_text(approval.call_id)} {utf8_text(approval.function)} "
                f"expires_at {approval.expires_at}\n"
            )


def _tools(spec: str) -> ActionManager:
    """The registry *spec* names: an ``ActionManager``, or a list of tools registered in one.

    Raises:
        ValueError: the attribute is neither (naming what it is instead).
        TypeError: an item is not a tool or a callable (see ``ActionManager``).
    """
    value = load_attribute(spec)
    if isinstance(value, ActionManager):
        return value
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValueError(
            f"expected an ActionManager or a list of tools, got {type(value).__name__} "
            f"{value!r:.60}"
        )
    return ActionManager(value)
