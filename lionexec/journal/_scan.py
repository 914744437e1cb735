"""Reading a journal in pages, for the command line: memory bounded by a page, not the journal.

:meth:`Journal.calls` and :meth:`Journal.history` return whole lists; a journal of 100,000
calls read that way holds them all at once. These generators read :data:`PAGE` rows per
transaction instead (keyset pagination on the tables' order), so ``lionexec journal export``
and ``calls`` stream. On a journal in memory (no SQL) each is one page: it is in memory anyway.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, Final, TypeVar

from ._journal import Journal
from ._keys import branch_uuid
from .backends._bulk import CALL_COLUMNS as _CALL_COLUMNS
from .backends._sql import _APPROVAL_COLUMNS, _approval, _call
from .backends.base import DONE, REQUESTED, ApprovalRow, CallRow, MessageRow, Store
from .errors import JournalError

__all__ = [
    "PAGE",
    "approval_counts",
    "approval_pages",
    "branch_stats",
    "call_pages",
    "count_responses",
    "message_pages",
    "queue_counts",
    "queue_pages",
    "responses_of",
]

#: Rows read per transaction.
PAGE: Final = 500

R = TypeVar("R")

_MESSAGE_COLUMNS = "branch_id, seq, message_id, kind, body, call_id"
_QUEUE_COLUMNS = (
    "branch_id, call_id, function, state, attempts, outcome, worker, submitted_at, finished_at"
)


def _select_page(
    tx: Any,
    table: str,
    columns: str,
    conditions: list[str],
    params: list[Any],
    order: Sequence[str],
    after: Sequence[Any] | None,
) -> Any:
    """One :data:`PAGE` of *table*'s rows matching *conditions*, in *order*, after the row
    whose *order* values are *after* (keyset paging: each page is one range read, however
    deep in the table it starts)."""
    if after is not None:
        conditions = [*conditions, _after(order)]
        params = [*params, *_after_params(after)]
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return tx.execute(
        f"SELECT {columns} FROM {table}{where} ORDER BY {', '.join(order)} LIMIT {PAGE}",
        params,
    )


def _after(order: Sequence[str]) -> str:
    """``(a > ? OR (a = ? AND (b > ? OR ...)))``: rows after a key, in *order*."""
    first, *rest = order
    return f"({first} > ? OR ({first} = ? AND {_after(rest)}))" if rest else f"{first} > ?"


def _after_params(after: Sequence[Any]) -> list[Any]:
    """The parameters of :func:`_after` for the key *after*."""
    first, *rest = after
    return [first, first, *_after_params(rest)] if rest else [first]


def _sql(store: Store) -> Any:
    return getattr(store, "tx", None)


async def _pages(
    journal: Journal,
    page: Callable[[Store, Any], list[R]],
    key: Callable[[R], Any],
) -> AsyncGenerator[list[R], None]:
    """``page(store, after)`` read again and again, one transaction each, from the row after
    *after* (``None``: the first; then ``key`` of the last row read), until a page comes back
    short of :data:`PAGE` rows; each non-empty page is yielded."""
    after: Any = None
    while True:

        def read(store: Store, after: Any = after) -> list[R]:
            return page(store, after)

        rows = await journal._run(read)
        if rows:
            yield rows
        if len(rows) < PAGE:
            return
        after = key(rows[-1])


def _call_filter(
    row: CallRow, branch: str | None, status: str | None, since: float | None
) -> bool:
    if branch is not None and row.branch_id != branch:
        return False
    if since is not None and row.requested_at < since:
        return False
    if status == "unfinished":
        return row.state == REQUESTED
    return status is None or (row.state == DONE and row.outcome == status)


def call_pages(
    journal: Journal,
    *,
    branch: str | None = None,
    status: str | None = None,
    since: float | None = None,
) -> AsyncGenerator[list[CallRow], None]:
    """The journal's call rows, oldest first, :data:`PAGE` at a time.

    *status*: an outcome (``completed``, ``failed``, ...) or ``unfinished``; *since*: only
    calls requested at or after these epoch seconds.
    """

    def page(store: Store, after: tuple[float, str] | None) -> list[CallRow]:
        tx = _sql(store)
        if tx is None:
            return [
                r
                for r in store.calls(branch, False)
                if _call_filter(r, branch, status, since)
                and (after is None or (r.requested_at, r.key) > after)
            ][:PAGE]
        conditions: list[str] = []
        params: list[Any] = []
        if branch is not None:
            conditions.append("branch_id = ?")
            params.append(branch)
        if status == "unfinished":
            conditions.append("state = ?")
            params.append(REQUESTED)
        elif status is not None:
            conditions.append("state = ? AND outcome = ?")
            params += [DONE, status]
        if since is not None:
            conditions.append("requested_at >= ?")
            params.append(since)
        order = ("requested_at", "idempotency_key")
        rows = _select_page(tx, "lionexec_calls", _CALL_COLUMNS, conditions, params, order, after)
        return [_call(row) for row in rows]

    return _pages(journal, page, lambda row: (row.requested_at, row.key))


def queue_pages(
    journal: Journal,
    *,
    branch: str | None = None,
    status: str | None = None,
    since: float | None = None,
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """The calls submitted to workers, oldest first, :data:`PAGE` at a time, as dicts
    (``branch_id``, ``call_id``, ``function``, ``state``, ``attempts``, ``outcome``,
    ``worker``, ``submitted_at``, ``finished_at``). None on a journal without SQL.

    *status* matches the outcome, or ``unfinished`` (not yet answered).
    """
    names = [name.strip() for name in _QUEUE_COLUMNS.split(",")]

    def page(store: Store, after: tuple[float, str, str] | None) -> list[dict[str, Any]]:
        tx = _sql(store)
        if tx is None:
            return []
        conditions: list[str] = []
        params: list[Any] = []
        if branch is not None:
            conditions.append("branch_id = ?")
            params.append(branch)
        if status == "unfinished":
            conditions.append("state <> ?")
            params.append(DONE)
        elif status is not None:
            conditions.append("outcome = ?")
            params.append(status)
        if since is not None:
            conditions.append("submitted_at >= ?")
            params.append(since)
        order = ("submitted_at", "branch_id", "call_id")
        rows = _select_page(tx, "lionexec_queue", _QUEUE_COLUMNS, conditions, params, order, after)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def key(row: dict[str, Any]) -> tuple[float, str, str]:
        return (float(row["submitted_at"]), row["branch_id"], row["call_id"])

    return _pages(journal, page, key)


def approval_pages(
    journal: Journal,
    *,
    branch: str | None = None,
    status: str | None = None,
    since: float | None = None,
    call_id: str | None = None,
) -> AsyncGenerator[list[ApprovalRow], None]:
    """The journal's approvals, oldest first, :data:`PAGE` at a time, as
    :meth:`Journal.approvals` orders them (pending ones past their ``expires_at`` are marked
    ``expired`` first, as it does).

    *branch*: a branch id (a UUID; ``ValueError`` naming it otherwise); *status*: one
    approval state; *since*: only approvals created at or after these epoch seconds;
    *call_id*: only the approvals of calls of this id.
    """
    name = None if branch is None else str(branch_uuid(branch))
    now = journal.clock()

    def page(store: Store, after: tuple[float, str] | None) -> list[ApprovalRow]:
        if after is None:
            store.expire_approvals(now)
        tx = _sql(store)
        if tx is None:
            return [
                r
                for r in store.approvals(name, status)
                if (since is None or r.created_at >= since)
                and (call_id is None or r.call_id == call_id)
                and (after is None or (r.created_at, r.approval_id) > after)
            ][:PAGE]
        conditions: list[str] = []
        params: list[Any] = []
        if name is not None:
            conditions.append("branch_id = ?")
            params.append(name)
        if status is not None:
            conditions.append("state = ?")
            params.append(status)
        if since is not None:
            conditions.append("created_at >= ?")
            params.append(since)
        if call_id is not None:
            conditions.append("call_id = ?")
            params.append(call_id)
        order = ("created_at", "approval_id")
        rows = _select_page(
            tx, "lionexec_approvals", _APPROVAL_COLUMNS, conditions, params, order, after
        )
        return [_approval(row) for row in rows]

    return _pages(journal, page, lambda row: (row.created_at, row.approval_id))


async def approval_counts(journal: Journal) -> dict[str, int]:
    """How many approvals are in each state (pending ones past their ``expires_at`` marked
    ``expired`` first)."""
    now = journal.clock()

    def count(store: Store) -> dict[str, int]:
        store.expire_approvals(now)
        tx = _sql(store)
        if tx is None:
            counted: dict[str, int] = {}
            for row in store.approvals(None, None):
                counted[row.state] = counted.get(row.state, 0) + 1
            return counted
        rows = tx.execute("SELECT state, COUNT(*) FROM lionexec_approvals GROUP BY state")
        return {str(state): int(n) for state, n in rows}

    return await journal._run(count)


async def queue_counts(journal: Journal) -> dict[str, int]:
    """How many submitted calls are in each queue state (empty without SQL)."""

    def count(store: Store) -> dict[str, int]:
        tx = _sql(store)
        if tx is None:
            return {}
        rows = tx.execute("SELECT state, COUNT(*) FROM lionexec_queue GROUP BY state")
        return {str(state): int(n) for state, n in rows}

    return await journal._run(count)


async def branch_stats(journal: Journal) -> list[tuple[str, int, int, int]]:
    """Each branch, oldest first: (branch id, messages, requests, responses)."""

    def stats(store: Store) -> list[tuple[str, int, int, int]]:
        tx = _sql(store)
        if tx is None:
            result = []
            for name in store.branches():
                rows = store.messages(name)
                requests = sum(1 for r in rows if r.kind == "action_request")
                responses = sum(1 for r in rows if r.kind == "action_response")
                result.append((name, len(rows), requests, responses))
            return result
        counted = {
            row[0]: (int(row[1]), int(row[2] or 0), int(row[3] or 0))
            for row in tx.execute(
                "SELECT branch_id, COUNT(*), "
                "SUM(CASE WHEN kind = 'action_request' THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN kind = 'action_response' THEN 1 ELSE 0 END) "
                "FROM lionexec_messages GROUP BY branch_id"
            )
        }
        return [(name, *counted.get(name, (0, 0, 0))) for name in store.branches()]

    return await journal._run(stats)


async def count_responses(journal: Journal) -> int:
    """How many responses the journal's histories hold (recovery's progress)."""

    def count(store: Store) -> int:
        tx = _sql(store)
        if tx is None:
            return sum(
                1
                for name in store.branches()
                for row in store.messages(name)
                if row.kind == "action_response"
            )
        rows = tx.execute("SELECT COUNT(*) FROM lionexec_messages WHERE kind = 'action_response'")
        return int(rows[0][0])

    return await journal._run(count)


async def message_pages(
    journal: Journal, branch_id: str
) -> AsyncGenerator[list[MessageRow], None]:
    """A branch's stored messages in order, :data:`PAGE` at a time."""
    after = -1
    while True:

        def page(store: Store, after: int = after) -> list[MessageRow]:
            tx = _sql(store)
            if tx is None:
                return [r for r in store.messages(branch_id) if r.seq > after][:PAGE]
            rows = tx.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM lionexec_messages "
                f"WHERE branch_id = ? AND seq > ? ORDER BY seq LIMIT {PAGE}",
                (branch_id, after),
            )
            return [MessageRow(r[0], int(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

        rows = await journal._run(page)
        if rows:
            yield rows
        if len(rows) < PAGE:
            return
        after = rows[-1].seq


async def responses_of(
    journal: Journal, branch_id: str, call_ids: Sequence[str]
) -> list[MessageRow]:
    """The stored responses of these calls of a branch (any order)."""
    wanted = set(call_ids)
    if not wanted:
        return []

    def read(store: Store) -> list[MessageRow]:
        tx = _sql(store)
        if tx is None:
            return [
                r
                for r in store.messages(branch_id)
                if r.kind == "action_response" and r.call_id in wanted
            ]
        found: list[MessageRow] = []
        ids = sorted(wanted)
        for start in range(0, len(ids), PAGE):
            chunk = ids[start : start + PAGE]
            marks = ", ".join("?" * len(chunk))
            found += [
                MessageRow(r[0], int(r[1]), r[2], r[3], r[4], r[5])
                for r in tx.execute(
                    f"SELECT {_MESSAGE_COLUMNS} FROM lionexec_messages WHERE branch_id = ? "
                    f"AND kind = 'action_response' AND call_id IN ({marks})",
                    (branch_id, *chunk),
                )
            ]
        return found

    return await journal._run(read)


def record(row: MessageRow) -> dict[str, Any]:
    """The stored record of *row*; :class:`JournalError` naming it if it is not one."""
    try:
        value = json.loads(row.body)
    except ValueError as exc:
        raise JournalError(
            f"message {row.seq} ({row.message_id}) of branch {row.branch_id} cannot be read: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(value, dict) or not isinstance(value.get("content"), dict):
        raise JournalError(
            f"message {row.seq} ({row.message_id}) of branch {row.branch_id} cannot be read: "
            "not a message record"
        )
    return value


async def calls_of(journal: Journal, branch_id: str, call_ids: Sequence[str]) -> list[CallRow]:
    """The call rows of these calls of a branch (any order)."""
    wanted = sorted(set(call_ids))
    if not wanted:
        return []

    def read(store: Store) -> list[CallRow]:
        tx = _sql(store)
        if tx is None:
            return [r for r in store.calls(branch_id, False) if r.call_id in set(wanted)]
        found: list[CallRow] = []
        for start in range(0, len(wanted), PAGE):
            chunk = wanted[start : start + PAGE]
            marks = ", ".join("?" * len(chunk))
            found += [
                _call(r)
                for r in tx.execute(
                    f"SELECT {_CALL_COLUMNS} FROM lionexec_calls WHERE branch_id = ? "
                    f"AND call_id IN ({marks}) ORDER BY requested_at, idempotency_key",
                    (branch_id, *chunk),
                )
            ]
        return found

    return await journal._run(read)
