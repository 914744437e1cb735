"""The commands of ``lionexec journal`` that change a journal: ``approve``, ``reject``,
``recover``. Decisions go through the journal's own API (:meth:`Journal.approve`,
:meth:`Journal.reject`, :meth:`Journal.recover`): the command line only finds the approval
and reports."""

from __future__ import annotations

import argparse
import collections
import sys
import time
from typing import Any, TextIO

import trio

from lionexec._jsonable import utf8_text
from lionexec._terminal import fit_table, progress_wanted

from ._approvals import Approval
from ._cli_read import TABLE_LIMIT, line
from ._journal import Journal
from ._report import RecoveryReport
from ._scan import approval_pages, branch_stats
from .errors import ApprovalNotFound, JournalError

__all__ = ["run"]

#: Seconds between two progress reports.
PROGRESS_EVERY = 0.5


async def run(
    command: str, journal: Journal, args: argparse.Namespace, tools: Any, out: TextIO
) -> int:
    if command == "recover":
        return await _recover(journal, args, tools, out)
    approval = await _find(journal, args.id, args.branch)
    if command == "approve":
        decided = await journal.approve(approval.approval_id, by=args.by)
    else:
        decided = await journal.reject(approval.approval_id, reason=args.reason, by=args.by)
    by = f" by {decided.decided_by}" if decided.decided_by else ""
    out.write(
        f"{decided.state} {decided.approval_id}{by}: {utf8_text(decided.function)} call "
        f"{utf8_text(decided.call_id)} of branch {decided.branch_id}\n"
    )
    what = "runs" if command == "approve" else "is answered denied"
    out.write(
        f"the call {what} when its branch resumes: in the server or program holding it, or "
        f"`lionexec journal recover {journal.target} --tools MODULE:ATTRIBUTE`\n"
    )
    return 0


async def _find(journal: Journal, ident: str, branch: str | None) -> Approval:
    """The approval *ident* names: an approval id, or the call id of the call it parked."""
    if ident.startswith("apr_"):
        return await journal.approval(ident)
    matches = [
        Approval.from_row(row)
        async for page in approval_pages(journal, branch=branch, call_id=ident)
        for row in page
    ]
    if not matches:
        raise ApprovalNotFound(
            f"no approval has id or call id {ident!r}"
            + (f" in branch {branch}" if branch else "")
            + ": `lionexec journal approvals PATH_OR_URL` lists them",
            approval_id=ident,
        )
    if len({a.branch_id for a in matches}) > 1:
        branches = ", ".join(sorted({a.branch_id for a in matches}))
        raise JournalError(
            f"call id {ident!r} was parked in several branches ({branches}): give --branch "
            "or the approval id"
        )
    return matches[-1]


async def _recover(journal: Journal, args: argparse.Namespace, tools: Any, out: TextIO) -> int:
    err = sys.stderr
    show_progress = progress_wanted(args.progress, err)
    report: RecoveryReport | None = None
    progress: _Progress | None = None
    async with trio.open_nursery() as nursery:
        if show_progress:
            progress = _Progress(err, await branch_stats(journal))
            nursery.start_soon(_progress, journal, progress)
        report = await journal.recover(tools)
        nursery.cancel_scope.cancel()
    if progress is not None:
        progress.update(await branch_stats(journal), final=True)
        err.write("\n" if err.isatty() else "")
        err.flush()
    assert report is not None
    resolutions = report.resolutions
    if args.json:
        limit = args.limit or None
        for r in resolutions[:limit]:
            line(
                out,
                {
                    "branch_id": str(r.branch_id),
                    "call_id": r.call_id,
                    "function": r.function,
                    "effect": r.effect,
                    "action": r.action,
                    "outcome": None if r.outcome is None else r.outcome.value,
                    "attempts": r.attempts,
                },
            )
    else:
        groups = collections.Counter(
            (r.action, "-" if r.outcome is None else r.outcome.value, utf8_text(r.function))
            for r in resolutions
        )
        out.write(f"recovered {len(resolutions)} calls: {_summary(report)}\n")
        if groups:
            rows = [[a, o, f, n] for (a, o, f), n in sorted(groups.items())]
            for text in fit_table(["action", "outcome", "function", "calls"], rows):
                out.write(f"  {text}\n")
        left = [r for r in resolutions if r.action == "left"]
        limit = TABLE_LIMIT if args.limit is None else (args.limit or None)
        if left:
            out.write("left unanswered:\n")
            rows = [
                [str(r.branch_id), utf8_text(r.call_id), utf8_text(r.function), r.effect]
                for r in left[:limit]
            ]
            for text in fit_table(["branch", "call_id", "function", "effect"], rows):
                out.write(f"  {text}\n")
            if limit is not None and len(left) > limit:
                out.write(f"  … {len(left) - limit} more: --limit 0 for all, or --json\n")
    _hints(report, args, journal.target)
    return 0


def _summary(report: RecoveryReport) -> str:
    counts = report.counts()
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing to do"


def _hints(report: RecoveryReport, args: argparse.Namespace, target: str) -> None:
    """What to do about calls recovery could not answer (on stderr: stdout stays data)."""
    left = [r for r in report.resolutions if r.action == "left"]
    if left:
        names = ", ".join(sorted({utf8_text(r.function) for r in left}))
        if args.tools is None:
            print(
                f"hint: {len(left)} calls were left unanswered: they are safe to run again "
                f"but need their tools ({names}). Pass them: `lionexec journal recover "
                f"{target} --tools MODULE:ATTRIBUTE`, where the attribute is an "
                "ActionManager or a list of tools (e.g. --tools myapp.tools:TOOLS)",
                file=sys.stderr,
            )
        else:
            print(
                f"hint: {len(left)} calls were left unanswered: --tools {args.tools} has no "
                f"tool named {names}; add them there and run recover again",
                file=sys.stderr,
            )
    waiting = sum(1 for r in report.resolutions if r.action == "awaiting_approval")
    if waiting:
        print(
            f"hint: {waiting} calls await approval: `lionexec journal approvals {target} "
            "--status pending` lists them; `lionexec journal approve` decides one",
            file=sys.stderr,
        )


class _Progress:
    """Recovery's progress on stderr: the calls answered of those unanswered at the start,
    in all and per branch (``recover: branch ID: 120/400 calls``).

    Not a terminal: a line per branch whose count moved, then the total. A terminal: one line
    rewritten in place, the total and the branch that moved last; at the end each branch's
    final count on a line of its own (the first :data:`TABLE_LIMIT` branches), then the total.
    """

    def __init__(self, err: TextIO, stats: list[tuple[str, int, int, int]]) -> None:
        self.err = err
        self.started = time.monotonic()
        self.todo = {b: req - resp for b, _, req, resp in stats if req > resp}
        self.before = {b: resp for b, _, _, resp in stats if b in self.todo}
        self.shown: dict[str, int] = {}
        self.tty = _isatty(err)

    def update(self, stats: list[tuple[str, int, int, int]], *, final: bool = False) -> None:
        done = {
            b: min(max(resp - self.before[b], 0), self.todo[b])
            for b, _, _, resp in stats
            if b in self.todo
        }
        moved = [b for b, n in done.items() if n != self.shown.get(b, 0)]
        total = f"{sum(done.values())}/{sum(self.todo.values())} calls answered"
        text = f"recover: {total}, {time.monotonic() - self.started:.0f}s"
        if final and self.tty:
            self.err.write("\r\x1b[K")
            branches = sorted(self.todo)
            for b in branches[:TABLE_LIMIT]:
                self.err.write(f"recover: branch {b}: {done.get(b, 0)}/{self.todo[b]} calls\n")
            if len(branches) > TABLE_LIMIT:
                self.err.write(f"recover: … {len(branches) - TABLE_LIMIT} more branches\n")
            self.err.write(text)
        elif self.tty:
            last = (
                f"; branch {moved[-1]}: {done[moved[-1]]}/{self.todo[moved[-1]]}" if moved else ""
            )
            self.err.write(f"\r\x1b[K{text}{last}")
        else:
            for b in moved:
                self.err.write(f"recover: branch {b}: {done[b]}/{self.todo[b]} calls\n")
            self.err.write(text + "\n")
        self.err.flush()
        self.shown.update(done)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


async def _progress(journal: Journal, progress: _Progress) -> None:
    """Report the responses recovery has committed: now, then every :data:`PROGRESS_EVERY`
    seconds until cancelled (the caller reports the last count)."""
    while True:
        try:
            stats = await branch_stats(journal)
        except JournalError:
            stats = None  # a busy database: the next report will do
        if stats is not None:
            progress.update(stats)
        await trio.sleep(PROGRESS_EVERY)
