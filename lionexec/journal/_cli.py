"""``lionexec journal COMMAND PATH_OR_URL``: read a journal, decide its approvals, recover it.

* ``show``: the branches (messages, calls, unanswered), the calls by outcome, the worker
  queue by state, and the approvals by state, with the unfinished calls and pending approvals.
* ``calls``, ``approvals``: tables that fit the terminal (``--limit`` rows, 50 by default),
  filtered by ``--branch``, ``--status`` and ``--since``; ``--json`` prints JSON Lines instead
  (one strict-JSON object per line, every row unless ``--limit`` says otherwise).
* ``approve ID``, ``reject ID --reason TEXT``: decide a parked approval (by approval id or by
  call id) through :meth:`Journal.approve <lionexec.journal.Journal.approve>` /
  :meth:`~lionexec.journal.Journal.reject`; the call runs (or is answered ``denied``) when
  its branch resumes.
* ``export``: everything as one strict JSON document, streamed (memory holds a page of rows,
  not the journal); ``export --jsonl``: the call log, one line per answered call (see
  :func:`lionexec.journal.call_records`).
* ``recover [--tools MODULE:ATTRIBUTE]``: give every unanswered call exactly one response
  (see :meth:`Journal.recover <lionexec.journal.Journal.recover>`), with progress on stderr
  (in all and per branch) when it is a terminal (or ``--progress``); without ``--tools``
  only calls that need no tool are resolved, and the others are named with how to pass
  their tools.

Exit status: 0 done, 1 the journal refused or failed (one ``error:`` line on stderr), 2 bad
usage, 141 stdout closed early (``| head``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

import trio

from lionexec._spec import load_attribute
from lionexec._terminal import CommandParser, UsageError, parse_since, run_command
from lionexec.tools import ActionManager

from . import _cli_act, _cli_read
from ._cli_read import TABLE_LIMIT
from ._open import open_journal

__all__ = ["build_parser", "main"]

CALL_STATUSES = (
    "completed",
    "failed",
    "denied",
    "invalid",
    "cancelled",
    "timed_out",
    "interrupted",
    "unfinished",
)
APPROVAL_STATES = ("pending", "approved", "used", "rejected", "expired")
TARGET_HELP = "the journal: an SQLite file path or a postgresql:// URL"


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (0 means no limit)")
    return value


def _since(text: str) -> float:
    return parse_since(text)


def _filters(command: argparse.ArgumentParser, statuses: tuple[str, ...], what: str) -> None:
    command.add_argument("--branch", metavar="BRANCH_ID", help=f"only the {what} of this branch")
    command.add_argument(
        "--status", choices=statuses, help=f"only the {what} in this state (default: all)"
    )
    command.add_argument(
        "--since",
        type=_since,
        metavar="TIME",
        help=f"only the {what} since TIME: an ISO time (UTC unless it names an offset) or a "
        "duration back from now (90s, 10m, 2h, 7d)",
    )
    _output(command, what)


def _output(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument(
        "--limit",
        type=_limit,
        default=None,
        metavar="N",
        help=f"print at most N {what} (default: {TABLE_LIMIT} in a table, all with --json; "
        "0: all)",
    )
    command.add_argument(
        "--json",
        action="store_true",
        help="JSON Lines for scripts: one strict-JSON object per line",
    )


def _target(command: argparse.ArgumentParser) -> None:
    command.add_argument("target", metavar="PATH_OR_URL", help=TARGET_HELP)


def build_parser(prog: str = "lionexec journal") -> argparse.ArgumentParser:
    """The parser of ``lionexec journal`` (the CLI reference is generated from it)."""
    parser = CommandParser(
        prog=prog,
        description="Read a journal, decide its parked approvals, recover its unanswered calls.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    show = commands.add_parser(
        "show",
        help="summarize branches, calls, the worker queue and approvals",
        description="Summarize the journal: branches, calls by outcome, the worker queue by "
        "state, approvals by state; then the unfinished calls and the pending approvals.",
    )
    _target(show)
    _output(show, "branches and unfinished calls")

    calls = commands.add_parser(
        "calls",
        help="list calls (the branches' and the worker queue's)",
        description="List the journaled calls, oldest first: those branches ran (via "
        "'branch') and those submitted to workers (via 'worker').",
    )
    _target(calls)
    _filters(calls, CALL_STATUSES, "calls")
    calls.add_argument(
        "--via",
        choices=("all", "branch", "worker"),
        default="all",
        help="which calls: run by branches, submitted to workers, or both (default: all)",
    )

    approvals = commands.add_parser(
        "approvals",
        help="list approvals (pending, decided, used)",
        description="List the approvals of calls a policy parked, oldest first.",
    )
    _target(approvals)
    _filters(approvals, APPROVAL_STATES, "approvals")

    for name, verb in (("approve", "Approve"), ("reject", "Reject")):
        decide = commands.add_parser(
            name,
            help=f"{name} a pending approval",
            description=f"{verb} a pending approval, by approval id (apr_...) or by the "
            "call id it parked. Only decides: the call runs (or is answered denied) when its "
            "branch resumes: in the server holding it, or `lionexec journal recover --tools`.",
        )
        _target(decide)
        decide.add_argument("id", metavar="ID", help="the approval id (apr_...) or the call id")
        decide.add_argument("--by", metavar="NAME", help="who decides (recorded with it)")
        decide.add_argument(
            "--branch",
            metavar="BRANCH_ID",
            help="the branch of the call, when a call id is used in several branches",
        )
        if name == "reject":
            decide.add_argument(
                "--reason",
                required=True,
                metavar="TEXT",
                help="why (the call is answered denied with it)",
            )

    export = commands.add_parser(
        "export",
        help="print everything as strict JSON (streamed)",
        description="Print the journal as one strict JSON document (target, branches with "
        "their histories, calls, approvals), streamed page by page.",
    )
    _target(export)
    export.add_argument(
        "--jsonl", action="store_true", help="the call log instead: one line per answered call"
    )

    recover = commands.add_parser(
        "recover",
        help="give every unanswered call exactly one response",
        description="Resolve every unanswered call by its tool's effect class: safe calls "
        "run again (they need their tools: --tools), unsafe ones are answered interrupted.",
    )
    _target(recover)
    recover.add_argument(
        "--tools",
        metavar="MODULE:ATTRIBUTE",
        default=None,
        help="the tools to re-run safe calls with: an ActionManager or a list of tools "
        "(without it, safe calls are left unanswered)",
    )
    recover.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="report progress on stderr, in all and per branch (default: when stderr is a "
        "terminal)",
    )
    _output(recover, "resolutions")
    return parser


def main(
    argv: list[str] | None = None, *, out: TextIO | None = None, prog: str = "lionexec journal"
) -> int:
    """Run the command in *argv*; return the exit status."""
    stdout = out if out is not None else sys.stdout
    try:
        args = build_parser(prog).parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return run_command(lambda: _main(args, stdout), out=stdout)


def _main(args: argparse.Namespace, out: TextIO) -> int:
    target: str = args.target
    if "://" not in target and target != ":memory:":
        # Each command reads an existing journal: opening a file would write the schema into it.
        if not os.path.exists(target):
            raise FileNotFoundError(f"no journal at {target} (give the path of an existing file)")
        if os.path.isdir(target):
            raise IsADirectoryError(f"{target} is a directory, not a journal file")
        if os.path.getsize(target) == 0:
            raise FileNotFoundError(f"{target} is empty, not a journal")
    tools = None
    if getattr(args, "tools", None):
        try:
            tools = _tools(args.tools)
        except (ImportError, AttributeError, ValueError, TypeError) as exc:
            raise UsageError(f"--tools {args.tools}: {exc}") from exc
    status: int = trio.run(_run, args, target, tools, out)
    return status


async def _run(args: argparse.Namespace, target: str, tools: Any, out: TextIO) -> int:
    async with open_journal(target) as journal:
        command: str = args.command
        if command in ("approve", "reject", "recover"):
            return await _cli_act.run(command, journal, args, tools, out)
        return await _cli_read.run(command, journal, args, out)


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
