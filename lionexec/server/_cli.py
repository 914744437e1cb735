"""``python -m lionexec serve``: the command line of the server.

``python -m lionexec serve [--tools MODULE:ATTRIBUTE] [--port N] ...`` serves the tools that
MODULE:ATTRIBUTE names (a list of tools or functions; none without ``--tools``) on
127.0.0.1:8000, keeping conversations in ``./lionexec.db``; ``--help`` lists the flags. A
program with tools of its own runs ``main(argv, tools=[...])`` (as ``examples/server.py``
does). ``SIGINT`` or ``SIGTERM`` stops it gracefully.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, Final

import trio

from .._spec import load_attribute
from .._terminal import CommandParser, run_command
from ..tools import ActionManager
from ._app import _hypercorn, open_app, serve
from ._config import ServerConfig
from ._trace import check_tracing

__all__ = ["DEFAULT_JOURNAL", "DESCRIPTION", "TOKEN_VARIABLE", "config_from_args", "main"]

#: The environment variable ``main()`` reads the bearer token from (``--token`` wins).
TOKEN_VARIABLE: Final = "LIONEXEC_SERVER_TOKEN"
#: Where ``main()`` keeps its journal unless ``--journal`` or ``--database`` says otherwise.
DEFAULT_JOURNAL: Final = "lionexec.db"


#: The description ``--help`` shows.
DESCRIPTION: Final = (
    "lionexec inside a trio server: tool calls over HTTP, on hypercorn's trio worker."
)


def _parser(
    environ: Mapping[str, str], *, prog: str | None, tools_flag: bool
) -> argparse.ArgumentParser:
    parser = CommandParser(prog=prog, description=DESCRIPTION)
    if tools_flag:
        parser.add_argument(
            "--tools",
            default=None,
            metavar="MODULE:ATTRIBUTE",
            help="the tools to serve: a list of tools or functions (default: none)",
        )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="the port (default: 8000; 0 picks a free port)"
    )
    parser.add_argument(
        "--token",
        default=environ.get(TOKEN_VARIABLE) or None,
        help=f"require Authorization: Bearer <token> (default: ${TOKEN_VARIABLE})",
    )
    parser.add_argument(
        "--journal",
        default=DEFAULT_JOURNAL,
        metavar="PATH",
        help=f"the SQLite journal file (default: ./{DEFAULT_JOURNAL}); ':memory:' keeps "
        "conversations in memory only",
    )
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="a postgresql:// URL: keep the journal in PostgreSQL instead (several replicas)",
    )
    parser.add_argument(
        "--workers",
        action="store_true",
        help="run no tool here: queue calls for `python -m lionexec worker` processes",
    )
    parser.add_argument(
        "--no-recover",
        action="store_true",
        help="do not recover the journal on start (all replicas but one, when they run calls)",
    )
    parser.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="TOOL",
        help="calls of TOOL wait for POST /v1/approvals/{id} or the console's Approve "
        "(repeat for several tools)",
    )
    parser.add_argument(
        "--no-console",
        action="store_true",
        help="do not serve the approvals console at /console/ (HTML pages; see docs/console.md)",
    )
    parser.add_argument(
        "--trace-file",
        default=None,
        metavar="PATH",
        help="append an OpenTelemetry span of each tool call to PATH, one JSON line per span "
        "(needs the otel extra; see docs/tracing.md)",
    )
    return parser


def _load_tools(spec: str) -> tuple[Callable[..., Any], ...]:
    """The tools *spec* (``MODULE:ATTRIBUTE``) names: a list of tools or functions."""
    value = load_attribute(spec)
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValueError(f"expected a list of tools, got {type(value).__name__} {value!r:.60}")
    tools = tuple(value)
    ActionManager(tools)  # each one a tool or a callable (TypeError), no name twice
    return tools


def _parse(
    argv: list[str] | None,
    environ: Mapping[str, str] | None,
    tools: Iterable[Callable[..., Any]] | None,
    prog: str | None,
) -> tuple[ServerConfig, tuple[Callable[..., Any], ...]]:
    """The configuration and the tools of these arguments (a usage error exits, status 2)."""
    environ = os.environ if environ is None else environ
    parser = _parser(environ, prog=prog, tools_flag=tools is None)
    args = parser.parse_args(argv)
    if tools is None:
        try:
            served = _load_tools(args.tools) if args.tools else ()
        except (ImportError, AttributeError, ValueError, TypeError) as exc:
            parser.error(f"--tools {args.tools}: {exc}")
    else:
        served = tuple(tools)
    journal: str | None = args.journal
    if args.database is not None:
        if not args.database.startswith(("postgresql://", "postgres://")):
            parser.error("--database takes a postgresql:// URL (use --journal for a file)")
        journal = args.database
    elif journal == ":memory:":
        journal = None
    if args.workers and journal is None:
        parser.error("--workers needs a journal: --journal PATH or --database URL")
    if args.approve and (journal is None or args.workers):
        parser.error("--approve needs a journal, and calls run in the server (not --workers)")
    if args.trace_file is not None and (journal is None or args.workers or not args.trace_file):
        parser.error(
            "--trace-file needs a file path, a journal, and calls run in the server (not "
            "--workers)"
        )
    tool_names = ActionManager(served).names
    unknown = sorted(set(args.approve) - set(tool_names))
    if unknown:  # a misspelt name would approve nothing
        names = ", ".join(tool_names)
        parser.error(f"--approve: no tool {', '.join(unknown)} (the tools are {names})")
    config = ServerConfig(
        host=args.host,
        port=args.port,
        token=args.token,
        journal=journal,
        workers=args.workers,
        recover=not args.no_recover,
        approve=tuple(args.approve),
        console=not args.no_console,
        trace_file=args.trace_file,
    )
    return config, served


def config_from_args(
    argv: list[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    tools: Iterable[Callable[..., Any]] | None = None,
    prog: str | None = None,
) -> ServerConfig:
    """The :class:`ServerConfig` for these command-line arguments (and environment).

    *environ* (by default :data:`os.environ`) supplies the token (:data:`TOKEN_VARIABLE`).
    *tools* are the tools the server will serve: ``--approve`` must name one of them. Without
    *tools*, the arguments may name them (``--tools MODULE:ATTRIBUTE``). A usage error
    prints the usage and raises :class:`SystemExit` (status 2), as :mod:`argparse` does.
    """
    return _parse(argv, environ, tools, prog)[0]


async def _main(config: ServerConfig, tools: tuple[Callable[..., Any], ...], title: str) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def on_signal() -> None:
            async for _ in signals:
                return

        async with open_app(config, tools=tools) as app, trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, app, shutdown_trigger=on_signal))
            # What start-up made (modules, the app, recovered conversations) lives as long as
            # the server: out of the cyclic collector's generations, full collections no
            # longer walk it (docs/concepts/act.md, "Long-lived branches").
            gc.freeze()
            kept = "in memory" if app.journal is None else f"in the journal {app.journal.target}"
            runs = "; calls run on workers" if config.workers else ""
            print(
                f"{title} on {', '.join(binds)}: conversations {kept}{runs} (Ctrl+C to stop)",
                flush=True,
            )
            if app.console is not None:
                print(f"approvals console: {binds[0]}/console/", flush=True)


def main(
    argv: list[str] | None = None,
    *,
    tools: Iterable[Callable[..., Any]] | None = None,
    title: str = "lionexec server",
    prog: str | None = None,
) -> int:
    """Serve until ``SIGINT`` or ``SIGTERM``, configured by *argv* (``sys.argv[1:]`` by
    default; see :func:`config_from_args`); return the exit status.

    *tools* are served (by default those ``--tools MODULE:ATTRIBUTE`` names, or none). Once
    serving, it prints ``<title> on <url>: conversations ... (Ctrl+C to stop)``, the URL
    with the bound port (``--port 0`` picks a free one). Exit status: 0 stopped by a signal,
    1 hypercorn is missing (the ``server`` extra), or ``--trace-file`` was given without the
    OpenTelemetry SDK (the ``otel`` extra; nothing is opened then either), 2 bad usage.
    """
    try:
        config, served = _parse(argv, None, tools, prog)
    except SystemExit as exc:
        return int(exc.code or 0)

    def body() -> int:
        _hypercorn()  # (before anything is opened: a missing extra is named, nothing else done)
        if config.trace_file is not None:
            check_tracing()
        trio.run(_main, config, served, title)
        return 0

    return run_command(body, out=sys.stdout)
