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
from .._cli import _tools
from .._open import open_journal
from ..errors import JournalError
from ._worker import Worker

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lionexec worker")
    parser.add_argument("--database", required=True, metavar="URL_OR_PATH")
    parser.add_argument("--tools", required=True, metavar="MODULE:ATTRIBUTE")
    parser.add_argument("--limits", default=None, metavar="MODULE:ATTRIBUTE")
    parser.add_argument("--name", default=None)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds (default 0.5)")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds (default 10)")
    return parser


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the worker of *argv* until a signal; return the exit status."""
    stdout = out if out is not None else sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        tools = _tools(args.tools)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        print(f"error: --tools {args.tools}: {exc}", file=sys.stderr)
        return 2
    try:
        limits = load_attribute(args.limits) if args.limits else None
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"error: --limits {args.limits}: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(_run, args, tools, limits, stdout)
    except JournalError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
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
