"""The equivalent-work floor for journaled ``act`` on SQLite: the act floor, made durable in
plain trio and stdlib :mod:`sqlite3`, kept lean (the "equivalent floor" column of the journal
rows).

It is :class:`benchmarks._floor.FloorBranch` (the whole ``act`` contract in plain trio) plus
what the journal promises, written as a trio user would write it by hand:

* one SQLite file in WAL mode with ``synchronous=NORMAL``, in **the journal's own schema**
  (created by lionexec's migrations), written the way the journal writes it: a commit of at
  most 64 rows appends them to ``lionexec_log`` (a message per row; a call's claim of its key
  as a row of its own), and the log is folded into the history and calls tables by the same
  four statements once it holds 2,048 rows (what lionexec does on its writer thread); a larger
  commit folds the log and writes the tables directly;
* **write-ahead**: a call's request message and its claim are committed before the tool runs;
  its response message with its outcome before ``act`` returns;
* a **concurrent** batch commits every request in one transaction before the calls start and
  every outcome in one after they end (the group commit, at its most favourable); a
  **sequential** batch commits each call's claim in its own transaction, the previous call's
  outcome riding along (as lionexec's lingering outcomes do), and the last outcome at the end;
* messages are stored as compact JSON records (ids, call id, function, arguments; outcome,
  output, error), the calls' arguments as key-sorted JSON;
* a commit of at most 16 rows runs on the trio thread (a WAL write without ``fsync`` costs
  less than a thread hand-off), a larger one and a fold in ``trio.to_thread.run_sync``
  (cancellation waits for it: a commit is never cut short), on one connection.

It checks, as the journal does before appending, that no later position of the branch is
taken, no call row holds a key it claims and no call of its is queued for workers (one
statement). What it leaves out against lionexec: recovery, idempotency-key repeats and waits,
approvals, the commit watchdog, a lock held by another process (lionexec then commits on its
writer thread), checkpoints on their own thread, branches and sinks of several branches
sharing commits, strict-JSON conversion of hostile values.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import trio

from ._floor import FloorBranch, FloorRequest, FloorResponse

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_sorted = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
).encode

_APPEND = (
    "INSERT INTO lionexec_log (branch_id, seq, event, message_id, kind, body, call_id, "
    "idempotency_key, function, arguments, effect, outcome, at) VALUES "
)
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
#: The fold: the journal's own four statements (lionexec.journal.backends._log.fold).
_FOLD = (
    "INSERT INTO lionexec_messages (branch_id, seq, message_id, kind, body, call_id) "
    "SELECT branch_id, seq, message_id, kind, body, call_id FROM lionexec_log "
    "WHERE event = 0 ORDER BY branch_id, seq ON CONFLICT (branch_id, seq) DO NOTHING",
    "INSERT INTO lionexec_calls (idempotency_key, branch_id, call_id, request_id, function, "
    "arguments, effect, attempts, state, outcome, response, requested_at, finished_at) "
    "SELECT idempotency_key, branch_id, call_id, message_id, function, arguments, effect, 1, "
    "'requested', NULL, NULL, at, NULL FROM lionexec_log WHERE event = 1 "
    "ORDER BY branch_id, seq ON CONFLICT DO NOTHING",
    "UPDATE lionexec_calls SET state = 'done', outcome = l.outcome, response = l.body, "
    "finished_at = l.at FROM lionexec_log AS l WHERE l.event = 0 AND l.outcome IS NOT NULL "
    "AND lionexec_calls.branch_id = l.branch_id AND lionexec_calls.call_id = l.call_id "
    "AND +lionexec_calls.state = 'requested'",
    "DELETE FROM lionexec_log",
)
FOLD_ROWS = 2048
INLINE_ROWS = 16
APPEND_ROWS = 64
_MESSAGE = (
    "INSERT INTO lionexec_messages (branch_id, seq, message_id, kind, body, call_id) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_CLAIM = (
    "INSERT INTO lionexec_calls (idempotency_key, function, arguments, effect, branch_id, "
    "call_id, request_id, requested_at, attempts, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, "
    "'requested')"
)
_OUTCOME = (
    "UPDATE lionexec_calls SET state = 'done', outcome = ?, response = ?, finished_at = ? "
    "WHERE branch_id = ? AND call_id = ? AND state = 'requested'"
)


class DurableFloorBranch(FloorBranch):
    """A :class:`FloorBranch` journaled to the SQLite file at *path* (already migrated)."""

    __slots__ = ("_bid", "_conn", "_logged", "_seq")

    def __init__(self, path: str) -> None:
        super().__init__()
        self._bid = str(self.id)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(
            "INSERT INTO lionexec_branches (branch_id, created_at) VALUES (?, 0)", (self._bid,)
        )
        self._conn = conn
        self._seq = 0
        self._logged = 0  # log rows not folded yet

    def close(self) -> None:
        self._conn.close()

    # -- rows (on the trio thread) -------------------------------------------------------------

    def _message(
        self, message_id: Any, kind: str, record: dict[str, Any], call_id: str
    ) -> tuple[Any, ...]:
        seq = self._seq
        self._seq = seq + 1
        return (self._bid, seq, 0, str(message_id), kind, _dumps(record), call_id)

    def _ahead(self, request: FloorRequest) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        record = {
            "id": str(request.id),
            "call_id": request.call_id,
            "function": request.function,
            "arguments": request.arguments,
        }
        message = self._message(request.id, "action_request", record, request.call_id)
        claim = (
            self._bid,
            message[1],
            1,
            message[3],
            None,
            None,
            request.call_id,
            f"{self._bid}/{request.call_id}",
            request.function,
            _sorted(request.arguments),
            "pure",
            None,
            0.0,
        )
        return (*message, None, None, None, None, None, None), claim

    def _outcome(self, response: FloorResponse) -> tuple[Any, ...]:
        record = {
            "id": str(response.id),
            "request_id": str(response.request_id),
            "outcome": response.outcome,
            "output": response.output,
            "error": response.error,
        }
        message = self._message(response.id, "action_response", record, response.call_id)
        return (*message, None, None, None, None, response.outcome, 0.0)

    # -- transactions ------------------------------------------------------------------------

    def _transact(self, rows: list[tuple[Any, ...]]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            # what stands in the way: a later position taken, a key held, a call queued
            first = min((r[1] for r in rows if r[2] == 0), default=1 << 62)
            keys = [r[7] for r in rows if r[2] == 1]
            call_ids = [r[6] for r in rows if r[2] == 1]
            marks = ", ".join("?" * len(keys))
            taken = conn.execute(
                "SELECT 1 FROM lionexec_log WHERE branch_id = ? AND seq >= ? UNION ALL "
                "SELECT 1 FROM lionexec_messages WHERE branch_id = ? AND seq >= ? UNION ALL "
                f"SELECT 1 FROM lionexec_calls WHERE idempotency_key IN ({marks}) UNION ALL "
                f"SELECT 1 FROM lionexec_queue WHERE branch_id = ? AND call_id IN ({marks}) "
                "LIMIT 1",
                [self._bid, first, self._bid, first, *keys, self._bid, *call_ids],
            ).fetchall()
            if taken:
                raise RuntimeError("the floor journals fresh calls only")
            if len(rows) <= APPEND_ROWS:
                values = [v for r in rows for v in r]
                conn.execute(_APPEND + ", ".join([_ROW] * len(rows)), values)
            else:  # a large group commit: to the tables (the log folded first)
                for statement in _FOLD:
                    conn.execute(statement)
                self._logged = 0
                self._write_tables(rows)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _write_tables(self, rows: list[tuple[Any, ...]]) -> None:
        conn = self._conn
        conn.executemany(_MESSAGE, [r[:2] + r[3:7] for r in rows if r[2] == 0])
        claims = [(*r[7:11], r[0], r[6], r[3], r[12]) for r in rows if r[2] == 1]
        conn.executemany(_CLAIM, claims)
        outcomes = [(r[11], r[5], r[12], r[0], r[6]) for r in rows if r[11] is not None]
        conn.executemany(_OUTCOME, outcomes)

    def _fold(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _FOLD:
                conn.execute(statement)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def _commit(self, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) <= INLINE_ROWS:
            self._transact(rows)
        else:
            await trio.to_thread.run_sync(self._transact, rows)
        if len(rows) <= APPEND_ROWS:
            self._logged += len(rows)
        if self._logged >= FOLD_ROWS:
            self._logged = 0
            await trio.to_thread.run_sync(self._fold)

    async def act(self, calls: list[Any], strategy: str = "concurrent") -> list[FloorResponse]:
        """Run *calls* (see the module docs); every request ends with one durable response."""
        requests = self._admit(calls)
        out: list[Any] = [None] * len(requests)
        try:
            if strategy == "sequential" or len(requests) == 1:
                ahead = [self._ahead(request) for request in requests]
                await self._commit([message for message, _ in ahead] + [ahead[0][1]])
                after: list[tuple[Any, ...]] = []  # the previous outcome rides along
                for index, request in enumerate(requests):
                    if index:
                        await self._commit([*after, ahead[index][1]])
                    response = out[index] = await self._call(request)
                    after = [self._outcome(response)]
                await self._commit(after)
            else:
                ahead = [self._ahead(request) for request in requests]
                await self._commit([m for m, _ in ahead] + [c for _, c in ahead])
                await self._concurrently(requests, out)
                await self._commit([self._outcome(response) for response in out])
        except BaseException as exc:
            self._cancel_unanswered(requests, exc)
            raise
        return out

    def fold(self) -> None:
        """Fold what is left in the log (at the end, as lionexec does when it closes)."""
        self._fold()


__all__ = ["DurableFloorBranch"]
