"""What every ``lionexec`` command shares: tables that fit the terminal, ``--since`` values,
progress lines, and one way to end: an ``error: ...`` line and a status, never a traceback.

Exit statuses: 0 done, 1 the command failed (a named error on stderr), 2 bad usage,
141 (128 + ``SIGPIPE``) when stdout was closed early (``lionexec journal calls | head``):
then nothing more is printed, as a program killed by ``SIGPIPE`` would.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import Final, NoReturn, TextIO

__all__ = [
    "EXIT_PIPE",
    "CommandParser",
    "UsageError",
    "fit_table",
    "parse_since",
    "run_command",
]

#: The status after a closed stdout: what a shell reports for a program ended by SIGPIPE.
EXIT_PIPE: Final = 141
#: A cell wider than its share of the terminal ends with this.
ELLIPSIS: Final = "…"
#: No column is made narrower than this (when the terminal is too narrow, lines overflow).
MIN_COLUMN: Final = 6
#: Set to print the traceback of an unexpected error (after its ``error:`` line).
DEBUG_VARIABLE: Final = "LIONEXEC_DEBUG"


class UsageError(Exception):
    """A command-line argument is wrong (status 2); the message names it and says what to do."""


class CommandParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose usage errors are one line on stderr,
    ``error: PROG: MESSAGE (PROG --help lists the options)``, and status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} ({self.prog} --help lists the options)\n")


# -- tables ----------------------------------------------------------------------------------


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    # One line per row: control characters (a newline in a tool name) would break the table.
    return "".join(ch if ch.isprintable() else " " for ch in text)


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    width: int | None = None,
    *,
    keep: Collection[int] = (),
) -> list[str]:
    """*rows* under *headers* as aligned lines no wider than *width* (by default the
    terminal's, from :func:`shutil.get_terminal_size`).

    The widest columns are narrowed first; a cell cut short ends with ``…``. A column is never
    narrower than its header (nor than :data:`MIN_COLUMN`): on a terminal too narrow for the
    headers, lines are longer than *width*. The columns of index *keep* (ids of a fixed size
    that people copy) are never narrowed.
    """
    if width is None:
        width = shutil.get_terminal_size((100, 24)).columns
    cells = [[_cell(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    floors = [
        w if i in keep else min(w, max(len(h), MIN_COLUMN))
        for i, (w, h) in enumerate(zip(widths, cells[0], strict=True))
    ]
    gaps = 2 * (len(headers) - 1)
    while sum(widths) + gaps > width:
        narrowable = [i for i in range(len(widths)) if widths[i] > floors[i]]
        if not narrowable:
            break
        widths[max(narrowable, key=lambda i: widths[i])] -= 1
    lines = []
    for row in cells:
        parts = [_cut(text, w).ljust(w) for text, w in zip(row, widths, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return lines


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS


# -- arguments -------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: an ISO 8601 time (``2026-05-01T12:00``, UTC unless it names an offset) or
    a duration back from now (``90s``, ``10m``, ``2h``, ``7d``, ``1w``), as epoch seconds.

    Raises :class:`argparse.ArgumentTypeError` naming the value and the accepted forms.
    """
    now = time.time() if now is None else now
    match = _DURATION.match(text)
    if match:
        return now - float(match.group(1)) * _SECONDS[match.group(2)]
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO time (2026-05-01T12:00:00) nor a duration "
            "(90s, 10m, 2h, 7d, 1w)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def iso(seconds: float | None) -> str | None:
    """Epoch *seconds* as a UTC ISO time to the second (``None`` stays ``None``)."""
    if seconds is None:
        return None
    try:
        moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(seconds)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


# -- progress --------------------------------------------------------------------------------


def progress_wanted(flag: bool | None, stream: TextIO | None = None) -> bool:
    """``--progress`` / ``--no-progress`` if given, else whether *stream* (stderr) is a TTY."""
    if flag is not None:
        return flag
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# -- ending ----------------------------------------------------------------------------------


def _leaf(exc: BaseException) -> BaseException:
    """The one exception a group of one (however nested) holds; a larger group as it is."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _pipe_closed(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_pipe_closed(e) for e in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def describe(exc: BaseException) -> str:
    """The text of an ``error:`` line for *exc*: the message, led by the error's type where
    the type says something the message may not (``NotAJournalError: ...``)."""
    exc = _leaf(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    text = " ".join(str(exc).split()) or "(no message)"
    if isinstance(exc, ImportError | UsageError):
        return text  # already names the package (and the extra to install)
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
        return text
    return f"{type(exc).__name__}: {text}"


def _silence_stdout(out: TextIO) -> None:
    # Python flushes stdout at exit; with the reader gone that would raise again (and print
    # "Exception ignored ... BrokenPipeError"): point the descriptor at /dev/null instead.
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def run_command(body: Callable[[], int], *, out: TextIO, err: TextIO | None = None) -> int:
    """Run *body* (a command; it returns its status) and end it as every command ends.

    :class:`UsageError` prints ``error: ...`` and returns 2; a closed stdout
    (:class:`BrokenPipeError`) prints nothing and returns :data:`EXIT_PIPE`;
    ``KeyboardInterrupt`` prints ``error: interrupted`` and returns 130; any other
    :class:`Exception` prints one ``error: ...`` line naming it and returns 1 (the traceback
    follows only with ``LIONEXEC_DEBUG=1`` in the environment).
    """
    err = sys.stderr if err is None else err
    try:
        status = body()
        out.flush()
        return status
    except KeyboardInterrupt:
        print("error: interrupted", file=err)
        return 130
    except BaseException as exc:
        if not isinstance(exc, Exception | BaseExceptionGroup):
            raise  # SystemExit and the like keep their meaning
        if _pipe_closed(exc):
            _silence_stdout(out)
            return EXIT_PIPE
        leaf = _leaf(exc)
        print(f"error: {describe(leaf)}", file=err)
        if os.environ.get(DEBUG_VARIABLE):
            import traceback

            traceback.print_exception(exc, file=err)
        return 2 if isinstance(leaf, UsageError) else 1
