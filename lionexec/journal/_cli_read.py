"""The reading commands of ``lionexec journal``: ``show``, ``calls``, ``approvals``, ``export``.

Each reads the journal in pages (:mod:`lionexec.journal._scan`) and writes as it reads: a
table holds at most ``--limit`` rows, ``--json`` and ``export`` hold one page.
"""

from __future__ import annotations

import argparse
import collections
import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, TextIO

import trio

from lionexec import _unstructure
from lionexec._jsonable import jsonable, utf8_text
from lionexec._terminal import fit_table, iso

from ._approvals import Approval
from ._history import JournaledCall
from ._journal import Journal
from ._scan import (
    approval_counts,
    approval_pages,
    branch_stats,
    call_pages,
    calls_of,
    message_pages,
    queue_counts,
    queue_pages,
    record,
    responses_of,
)
from .backends.base import DONE, CallRow

__all__ = ["TABLE_LIMIT", "line", "run"]

#: Rows a table shows unless ``--limit`` says otherwise (``--json`` prints every row).
TABLE_LIMIT = 50


def line(out: TextIO, value: Any) -> None:
    """*value* as one strict-JSON line (text that encodes as UTF-8)."""
    out.write(json.dumps(jsonable(value), allow_nan=False, ensure_ascii=False) + "\n")


async def run(command: str, journal: Journal, args: argparse.Namespace, out: TextIO) -> int:
    if command == "show":
        await _show(journal, args, out)
    elif command == "calls":
        await _calls(journal, args, out)
    elif command == "approvals":
        await _approvals(journal, args, out)
    elif args.jsonl:
        await write_jsonl_streamed(journal, out)
    else:
        await export_streamed(journal, out)
    return 0


def _table_limit(args: argparse.Namespace) -> int | None:
    limit: int | None = args.limit
    if limit is None:
        return None if args.json else TABLE_LIMIT
    return limit or None


def _more(out: TextIO, shown: int, total: int, what: str) -> None:
    if total > shown:
        out.write(f"… {total - shown} more {what} not shown: --limit N (0 for all) or --json\n")


def _counts(counter: collections.Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


# -- show ------------------------------------------------------------------------------------


async def _show(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    limit = _table_limit(args)
    stats = await branch_stats(journal)
    outcomes: collections.Counter[str] = collections.Counter()
    unfinished: list[JournaledCall] = []
    async for page in call_pages(journal):
        for row in page:
            outcomes[(row.outcome or "-") if row.state == DONE else "unfinished"] += 1
            if row.state != DONE and (limit is None or len(unfinished) < limit):
                unfinished.append(JournaledCall.from_row(row))
    queue = await queue_counts(journal)
    queue_outcomes: collections.Counter[str] = collections.Counter()
    async for queued in queue_pages(journal):
        for item in queued:
            if item["outcome"] is not None:
                queue_outcomes[item["outcome"]] += 1
    states = collections.Counter(await approval_counts(journal))
    pending: list[Approval] = []
    pages = approval_pages(journal, status="pending")
    async with aclosing(pages):
        async for approval_page in pages:
            room = len(approval_page) if limit is None else limit - len(pending)
            pending += [Approval.from_row(row) for row in approval_page[:room]]
            if limit is not None and len(pending) >= limit:
                break
    if args.json:
        line(
            out,
            {
                "target": journal.target,
                "branches": [
                    {
                        "branch_id": b,
                        "messages": m,
                        "calls": req,
                        "unanswered": req - resp,
                    }
                    for b, m, req, resp in stats
                ][: limit or None],
                "calls": dict(outcomes),
                "queue": {"states": queue, "outcomes": dict(queue_outcomes)},
                "approvals": dict(states),
                "unfinished": [_call_record(c) for c in unfinished],
                "pending": [_approval_record(a) for a in pending],
            },
        )
        return
    out.write(f"journal {journal.target}\n")
    out.write(f"branches: {len(stats)}\n")
    shown = stats if limit is None else stats[:limit]
    for b, messages, requests, responses in shown:
        out.write(
            f"  {b}: {messages} messages, {requests} calls, {requests - responses} unanswered\n"
        )
    _more(out, len(shown), len(stats), "branches")
    out.write(f"calls: {sum(outcomes.values())} ({_counts(outcomes)})\n")
    queued_total = sum(queue.values())
    queue_text = _counts(collections.Counter(queue))
    if queue_outcomes:
        queue_text += f"; answered: {_counts(queue_outcomes)}"
    out.write(f"worker queue: {queued_total} ({queue_text})\n")
    out.write(f"approvals: {sum(states.values())} ({_counts(states)})\n")
    if unfinished:
        out.write("unfinished calls:\n")
        for text in fit_table(*_call_table(unfinished)):
            out.write(f"  {text}\n")
        _more(out, len(unfinished), outcomes["unfinished"], "unfinished calls")
    if pending:
        out.write("pending approvals:\n")
        for text in fit_table(*_approval_table(pending), keep=(0,)):
            out.write(f"  {text}\n")
        _more(out, len(pending), states["pending"], "pending approvals")


# -- calls -----------------------------------------------------------------------------------


def _call_record(call: JournaledCall) -> dict[str, Any]:
    record: dict[str, Any] = _unstructure.converter.unstructure(call)
    record["via"] = "branch"
    return record


def _queue_record(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "via": "worker"}


def _call_table(calls: list[JournaledCall]) -> tuple[list[str], list[list[object]]]:
    headers = ["requested", "branch", "call_id", "function", "effect", "outcome", "tries", "via"]
    rows: list[list[object]] = [
        [
            iso(c.requested_at),
            c.branch_id,
            utf8_text(c.call_id),
            utf8_text(c.function),
            c.effect,
            c.outcome if c.done else "unfinished",
            c.attempts,
            "branch",
        ]
        for c in calls
    ]
    return headers, rows


async def _rows(
    journal: Journal, args: argparse.Namespace
) -> AsyncGenerator[dict[str, Any], None]:
    branch: str | None = args.branch
    if args.via in ("all", "branch"):
        pages = call_pages(journal, branch=branch, status=args.status, since=args.since)
        async with aclosing(pages):
            async for page in pages:
                for row in page:
                    yield _call_record(JournaledCall.from_row(row))
    if args.via in ("all", "worker"):
        queue = queue_pages(journal, branch=branch, status=args.status, since=args.since)
        async with aclosing(queue):
            async for queued in queue:
                for item in queued:
                    yield _queue_record(item)


async def _calls(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    limit = _table_limit(args)
    async with aclosing(_rows(journal, args)) as rows:
        await _table_or_lines(rows, args, out, limit)


async def _table_or_lines(
    rows: AsyncGenerator[dict[str, Any], None],
    args: argparse.Namespace,
    out: TextIO,
    limit: int | None,
) -> None:
    shown: list[list[object]] = []
    total = 0
    async for item in rows:
        total += 1
        if limit is not None and total > limit:
            if args.json:
                return
            continue  # counted, for the "more" line
        if args.json:
            line(out, item)
            if total % 256 == 0:
                await trio.lowlevel.checkpoint()
            continue
        worker = item["via"] == "worker"
        outcome = item["outcome"] or ("unfinished" if not worker else item["state"])
        shown.append(
            [
                iso(item["submitted_at"] if worker else item["requested_at"]),
                item["branch_id"],
                utf8_text(item["call_id"]),
                utf8_text(item["function"]),
                "-" if worker else item["effect"],
                outcome,
                item["attempts"],
                item["via"],
            ]
        )
    if args.json:
        return
    if not shown:
        out.write("no calls match\n")
        return
    headers = ["requested", "branch", "call_id", "function", "effect", "outcome", "tries", "via"]
    for text in fit_table(headers, shown):
        out.write(text + "\n")
    _more(out, len(shown), total, "calls")


# -- approvals -------------------------------------------------------------------------------


def _approval_record(approval: Approval) -> dict[str, Any]:
    record: dict[str, Any] = _unstructure.converter.unstructure(approval)
    return record


def _approval_table(approvals: list[Approval]) -> tuple[list[str], list[list[object]]]:
    headers = ["approval_id", "state", "function", "call_id", "branch", "created", "by", "why"]
    rows: list[list[object]] = [
        [
            a.approval_id,
            a.state,
            utf8_text(a.function),
            utf8_text(a.call_id),
            a.branch_id,
            iso(a.created_at),
            a.decided_by,
            a.reason or a.escalation,
        ]
        for a in approvals
    ]
    return headers, rows


async def _approvals(journal: Journal, args: argparse.Namespace, out: TextIO) -> None:
    # Read a page at a time: --json writes each page as it comes; a table keeps its --limit
    # rows and only counts the others (for the "more" line).
    limit = _table_limit(args)
    shown: list[Approval] = []
    total = 0
    pages = approval_pages(journal, branch=args.branch, status=args.status, since=args.since)
    async with aclosing(pages):
        async for page in pages:
            for row in page:
                total += 1
                if limit is not None and total > limit:
                    if args.json:
                        return
                    continue
                if args.json:
                    line(out, _approval_record(Approval.from_row(row)))
                else:
                    shown.append(Approval.from_row(row))
            await trio.lowlevel.checkpoint()
    if args.json:
        return
    if not shown:
        out.write("no approvals match\n")
        return
    for text in fit_table(*_approval_table(shown), keep=(0,)):
        out.write(text + "\n")
    _more(out, len(shown), total, "approvals")


# -- export ----------------------------------------------------------------------------------


async def history_records(
    journal: Journal, branch_id: str
) -> AsyncGenerator[dict[str, Any], None]:
    """A branch's history as :meth:`Journal.export` writes it (each request linked to its
    response), one message record at a time, read a page at a time."""
    async for page in message_pages(journal, branch_id):
        requests = [r for r in page if r.kind == "action_request" and r.call_id is not None]
        links: dict[str, str] = {}
        for response in await responses_of(
            journal, branch_id, [r.call_id or "" for r in requests]
        ):
            content = record(response)["content"]
            request_id = content.get("action_request_id")
            if isinstance(request_id, str):
                links[request_id] = response.message_id
        for row in page:
            value = record(row)
            if row.kind == "action_request":
                value["content"]["action_response_id"] = links.get(row.message_id)
            yield value
        await trio.lowlevel.checkpoint()


async def export_streamed(journal: Journal, out: TextIO) -> None:
    """Write what :meth:`Journal.export` returns as indented strict JSON, page by page."""

    def dump(value: Any, indent: str) -> str:
        text = json.dumps(jsonable(value), allow_nan=False, indent=2, ensure_ascii=False)
        return text.replace("\n", "\n" + indent)

    out.write("{\n")
    out.write(f'  "target": {dump(journal.target, "  ")},\n')
    out.write('  "branches": [')
    branches = [b for b, *_ in await branch_stats(journal)]
    for i, branch_id in enumerate(branches):
        out.write("," if i else "")
        out.write(f'\n    {{\n      "branch_id": {json.dumps(branch_id)},\n')
        out.write('      "history": {\n        "messages": [')
        first = True
        async for message in history_records(journal, branch_id):
            out.write("" if first else ",")
            out.write("\n          " + dump(message, "          "))
            first = False
        out.write("\n        ]" if not first else "]")
        out.write("\n      }\n    }")
    out.write("\n  ]" if branches else "]")
    out.write(',\n  "calls": [')
    first = True
    async for page in call_pages(journal):
        for row in page:
            out.write("" if first else ",")
            out.write(
                "\n    "
                + dump(_unstructure.converter.unstructure(JournaledCall.from_row(row)), "    ")
            )
            first = False
    out.write("\n  ]" if not first else "]")
    out.write(',\n  "approvals": [')
    first = True
    async for approval_page in approval_pages(journal):
        for approval_row in approval_page:
            out.write("" if first else ",")
            approval = Approval.from_row(approval_row)
            out.write("\n    " + dump(_approval_record(approval), "    "))
            first = False
    out.write("\n  ]" if not first else "]")
    out.write("\n}\n")


async def write_jsonl_streamed(journal: Journal, out: TextIO) -> None:
    """The call log :func:`lionexec.journal.write_jsonl` writes, read a page at a time.

    Memory holds a page and the requests still waiting for their response.
    """
    for branch_id in [b for b, *_ in await branch_stats(journal)]:
        waiting: dict[str, dict[str, Any]] = {}
        async for page in message_pages(journal, branch_id):
            answered = [r.call_id for r in page if r.kind == "action_response" and r.call_id]
            rows = {row.call_id: row for row in await calls_of(journal, branch_id, answered)}
            for message in page:
                value = record(message)
                if message.kind == "action_request":
                    waiting[value["id"]] = value
                elif message.kind == "action_response":
                    content = value["content"]
                    request = waiting.pop(content.get("action_request_id"), None)
                    if request is None:
                        continue  # (load_history refuses such a history; export skips it)
                    line(out, _call_line(branch_id, message.seq, request, value, rows))
            await trio.lowlevel.checkpoint()


def _call_line(
    branch_id: str,
    seq: int,
    request: dict[str, Any],
    response: dict[str, Any],
    rows: dict[str, CallRow],
) -> dict[str, Any]:
    content = response["content"]
    call_id = request["content"].get("call_id")
    row = rows.get(call_id) if isinstance(call_id, str) else None
    error = content.get("error")
    return {
        "branch_id": branch_id,
        "seq": seq,
        "call_id": call_id,
        "function": content.get("function"),
        "arguments": request["content"].get("arguments"),
        "outcome": content.get("outcome"),
        "status": content.get("status"),
        "attempts": content.get("attempts"),
        "output": content.get("output"),
        "error": None
        if error is None
        else {"type": error.get("type"), "message": error.get("message")},
        "request_id": request["id"],
        "response_id": response["id"],
        "idempotency_key": None if row is None else row.key,
        "effect": None if row is None else row.effect,
        "requested_at": None if row is None else row.requested_at,
        "finished_at": None if row is None else row.finished_at,
    }
