"""``lionexec`` (the console command; ``python -m lionexec`` is the same):

* ``lionexec demo``: run lionexec's demo;
* ``lionexec serve [--tools MODULE:ATTRIBUTE] ...``: serve tool calls over HTTP (see
  :func:`lionexec.server.main`; needs the ``server`` extra);
* ``lionexec worker --database URL --tools MODULE:ATTRIBUTE``: run a worker that claims
  submitted calls (see :mod:`lionexec.journal.workers._cli`);
* ``lionexec journal show|calls|approvals|approve|reject|export|recover PATH_OR_URL``: read a
  journal, decide its approvals, recover it (see :mod:`lionexec.journal._cli`).

:func:`parsers` returns every command's parser: ``docs/cli.md`` is generated from them
(``python docs/make_cli_reference.py``).
"""

from __future__ import annotations

import argparse
import sys

from ._terminal import CommandParser

__all__ = ["build_parser", "main", "parsers"]

PROG = "lionexec"
COMMANDS = {
    "demo": "run the scripted demo (no network, no API key)",
    "serve": "serve tool calls over HTTP (needs the server extra)",
    "worker": "claim and run the calls submitted to a journal",
    "journal": "read a journal, decide its approvals, recover it",
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: the commands and what each does (each parses its own options)."""
    parser = CommandParser(
        prog=PROG,
        description="lionexec: governed, journaled tool calls. "
        "`lionexec COMMAND --help` lists a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in COMMANDS.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("lionexec")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return "(not installed)"


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its command line (``"lionexec journal calls"``), in order."""
    from .demo import build_parser as demo_parser
    from .journal._cli import build_parser as journal_parser
    from .journal.workers._cli import build_parser as worker_parser
    from .server._cli import _parser as server_parser

    found: dict[str, argparse.ArgumentParser] = {PROG: build_parser()}
    found[f"{PROG} demo"] = demo_parser(f"{PROG} demo")
    # An empty environment: the reference must not show this machine's token as a default.
    found[f"{PROG} serve"] = server_parser({}, prog=f"{PROG} serve", tools_flag=True)
    found[f"{PROG} worker"] = worker_parser(f"{PROG} worker")
    journal = journal_parser(f"{PROG} journal")
    found[f"{PROG} journal"] = journal
    for action in journal._subparsers._group_actions if journal._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{PROG} journal {name}"] = sub
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the ``lionexec`` command line *argv* (``sys.argv[1:]`` by default); return the
    exit status."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "journal":
        from .journal._cli import main as journal_main

        return journal_main(args[1:])
    if args and args[0] == "worker":
        from .journal.workers._cli import main as worker_main

        return worker_main(args[1:])
    if args and args[0] == "serve":
        from .server import main as serve_main

        return serve_main(args[1:], prog=f"{PROG} serve")
    if args and args[0] == "demo":
        from .demo import main as demo_main

        try:
            return demo_main(args[1:])
        except SystemExit as exc:  # a usage error (its one line is printed)
            return int(exc.code or 0)
    if not args:
        build_parser().print_usage(sys.stderr)
        print(
            f"error: {PROG}: a command is needed: {', '.join(COMMANDS)} "
            f"({PROG} --help says what each does)",
            file=sys.stderr,
        )
        return 2
    try:
        build_parser().parse_args(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 2  # pragma: no cover - every command is dispatched above


if __name__ == "__main__":
    raise SystemExit(main())
