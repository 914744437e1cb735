"""``python -m lionexec worker --database URL --tools MODULE:ATTRIBUTE``: run a worker.

Claims and runs the calls submitted to the journal at URL (a ``postgresql://`` URL, or an
SQLite path for several workers on one machine) with the tools of MODULE:ATTRIBUTE (an
``ActionManager`` or a list of tools). ``--limits MODULE:ATTRIBUTE`` names a mapping of limit
key (a tool name, ``"branch:*"``, ``"branch:<id>"``) to
:class:`~lionexec.journal.Limit`. ``SIGTERM`` or ``SIGINT`` stops it gracefully
(``--grace`` seconds for running calls). It prints one JSON line when ready
(``{"event": "ready", ...}``) and one with its counters when it stops.

Exit status: 0 stopped by a signal, 1 the journal refused (a named error on stderr), 2 bad
usage.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any, TextIO

import attrs
import trio

from ..._spec import load_attribute
from ..._terminal import CommandParser, UsageError, run_command
from .._cli import _tools
from .._open import open_journal
from ._worker import Worker

__all__ = ["build_parser", "main"]


def build_parser(prog: str = "lionexec worker") -> argparse.ArgumentParser:
    """The parser of ``lionexec worker`` (the CLI reference is generated from it)."""
    parser = CommandParser(
        prog=prog,
        description="Claim and run the calls submitted to a journal, until SIGTERM or SIGINT.",
    )
    parser.add_argument(
        "--database",
        required=True,
        metavar="URL_OR_PATH",
        help="the journal: a postgresql:// URL, or an SQLite path (workers on one machine)",
    )
    parser.add_argument(
        "--tools",
        required=True,
        metavar="MODULE:ATTRIBUTE",
        help="the tools to run calls with: an ActionManager or a list of tools",
    )
    parser.add_argument(
        "--limits",
        default=None,
        metavar="MODULE:ATTRIBUTE",
        help="a mapping of limit key (a tool name, 'branch:*', 'branch:<id>') to Limit, "
        "shared by every worker of the journal (default: none)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="this worker's name, recorded with each call it answers (default: host:pid:random)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=8,
        metavar="N",
        help="calls run at once (default 8)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a claim holds before another worker may take the call over; renewed "
        "while the call runs (default 30)",
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often to look for new calls when none is ready (default 0.5)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM or SIGINT, how long running calls may finish before being "
        "cancelled (default 10)",
    )
    return parser


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the worker of *argv* until a signal; return the exit status."""
    stdout = out if out is not None else sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return run_command(lambda: _main(args, stdout), out=stdout)


def _main(args: argparse.Namespace, out: TextIO) -> int:
    try:
        tools = _tools(args.tools)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        raise UsageError(f"--tools {args.tools}: {exc}") from exc
    try:
        limits = load_attribute(args.limits) if args.limits else None
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"--limits {args.limits}: {exc}") from exc
    trio.run(_run, args, tools, limits, out)
    return 0


async def _run(args: argparse.Namespace, tools: Any, limits: Any, out: TextIO) -> None:
    async with open_journal(args.database) as journal:
        worker = Worker(
            journal,
            tools,
            name=args.name,
            concurrency=args.concurrency,
            lease=args.lease,
            poll=args.poll,
            grace=args.grace,
            limits=limits,
        )
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                _say(out, {"event": "ready", "worker": worker.name})
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break
        _say(out, {"event": "stopped", **attrs.asdict(worker.statistics())})


def _say(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record, allow_nan=False) + "\n")
    out.flush()
