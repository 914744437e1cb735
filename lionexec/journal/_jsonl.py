"""The JSONL call log, fed from the journal: one strict-JSON line per answered call.

A branch's JSONL event log (``Branch.with_log_file``) is written by the process that ran
the calls, as they end; a crash between a call's outcome and the file's flush loses its
line, and a call answered by recovery or by a worker never has one. With a journal, the
journal is the source of truth and the log is a *projection* of it: :func:`call_records`
reads the committed history of each branch and yields one record per answered request, in
the order the responses were committed (branch by branch, oldest branch first), and
:func:`write_jsonl` writes them as lines. Running it again gives the same lines plus those
of calls answered since: a log regenerated after a crash is complete. The command line:
``python -m lionexec journal export --jsonl PATH_OR_URL``.

Each record (all strict JSON: ``json.dumps(..., allow_nan=False)`` holds)::

    {"branch_id", "seq", "call_id", "function", "arguments", "outcome", "status",
     "attempts", "output", "error", "request_id", "response_id", "idempotency_key",
     "effect", "requested_at", "finished_at"}

``seq`` is the response's position in its branch's history; ``idempotency_key``,
``effect``, ``requested_at`` and ``finished_at`` come from the journal's call row and are
``null`` for a call that never reached its tool (invalid, denied, cancelled while queued).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import IO, Any

import trio

from lionexec._jsonable import jsonable
from lionexec.conversation import ActionRequest, ActionResponse

from ._journal import Journal

__all__ = ["call_records", "write_jsonl"]


async def call_records(
    journal: Journal, branch_id: uuid.UUID | str | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Yield one record per answered call of the journal (or of one branch); see the module.

    Reads one branch's history and call rows at a time (two queries), so memory holds one
    branch, not the journal. Checkpoints between branches and every 256 records.
    """
    branch_ids = [branch_id] if branch_id is not None else await journal.branch_ids()
    count = 0
    for bid in branch_ids:
        history = await journal.history(bid)
        rows = {row.call_id: row for row in await journal.calls(bid)}
        name = str(bid)
        for seq, message in enumerate(history):
            if not isinstance(message, ActionResponse):
                continue
            request_id = message.content.action_request_id
            request = history[request_id] if request_id is not None else None
            if not isinstance(request, ActionRequest):  # pragma: no cover - linked on load
                continue
            content = message.content
            row = rows.get(jsonable(request.call_id))
            error = content.error
            yield {
                "branch_id": name,
                "seq": seq,
                "call_id": jsonable(request.call_id),
                "function": jsonable(content.function),
                "arguments": jsonable(request.arguments),
                "outcome": content.outcome.value,
                "status": content.status.value,
                "attempts": content.attempts,
                "output": jsonable(content.output),
                "error": None
                if error is None
                else jsonable({"type": error.type, "message": error.message}),
                "request_id": str(request.id),
                "response_id": str(message.id),
                "idempotency_key": None if row is None else row.idempotency_key,
                "effect": None if row is None else row.effect,
                "requested_at": None if row is None else row.requested_at,
                "finished_at": None if row is None else row.finished_at,
            }
            count += 1
            if count % 256 == 0:
                await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()


async def write_jsonl(
    journal: Journal, out: IO[str], branch_id: uuid.UUID | str | None = None
) -> int:
    """Write :func:`call_records` to *out*, one strict-JSON line each; return how many.

    *out* is written on the trio thread (a file you opened, ``sys.stdout``): fine for the
    command line; in a server, pass a :class:`io.StringIO` and write it out in a thread.
    """
    count = 0
    async for record in call_records(journal, branch_id):
        out.write(json.dumps(record, allow_nan=False, ensure_ascii=False) + "\n")
        count += 1
    return count
