"""Write docs/cli.md, the reference of the ``lionexec`` command, from its argparse parsers.

``python docs/make_cli_reference.py`` rewrites the page; ``--check`` exits 1 if the page is
not what the parsers say (tests/test_cli_reference.py runs it, so the page cannot drift).
The page is built from the parsers' actions (names, metavars, choices, help), not from
``format_help()``, whose layout differs between Python versions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "cli.md"

HEAD = """# CLI reference

The `lionexec` command (installed with the package; `python -m lionexec` is the same). This
page is generated from the command's parsers by `python docs/make_cli_reference.py` (a test
fails when it is out of date); `lionexec COMMAND --help` prints the same.

Every command ends the same way: status 0 when done, 1 when it failed (one `error: ...` line
on stderr, never a traceback; `LIONEXEC_DEBUG=1` adds the traceback), 2 for bad usage (one
`error: ...` line naming the argument), and 141 when its output was closed early
(`lionexec journal calls PATH | head`: nothing more is printed). Tables fit the terminal's
width (long cells end with `…`) and show 50 rows unless `--limit` says otherwise; `--json`
prints [JSON Lines](https://jsonlines.org/): one strict-JSON object per line, every row.
`--since` takes an ISO time (UTC unless it names an offset) or a duration back from now
(`90s`, `10m`, `2h`, `7d`, `1w`).
"""


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs == 0:
            return f"`{names}`"
        metavar = action.metavar
        if metavar is None and action.choices is not None:
            metavar = "{" + ",".join(map(str, action.choices)) + "}"
        return f"`{names} {metavar or action.dest.upper()}`"
    return f"`{action.metavar or action.dest}`"


def _section(prog: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{prog}`", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    rows: list[str] = []
    commands: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                commands.append(f"| `{choice.dest}` | {_cell(choice.help or '')} |")
            continue
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        required = " (required)" if action.required and action.option_strings else ""
        rows.append(f"| {_argument(action)} | {_cell(action.help or '')}{required} |")
    if commands:
        lines += ["| command | what it does |", "|---|---|", *commands, ""]
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    return lines


def render() -> str:
    """The page, from the parsers of :func:`lionexec.__main__.parsers`."""
    from lionexec.__main__ import parsers

    lines = [HEAD]
    for prog, parser in parsers().items():
        lines += _section(prog, parser)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run python docs/make_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
