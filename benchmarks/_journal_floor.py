"""The equivalent-work floor for journaled ``act`` on SQLite: the act floor, made durable in
plain trio and stdlib :mod:`sqlite3`, kept lean (issue 14's rows, "equivalent floor" column).

It is :class:`benchmarks._floor.FloorBranch` (the whole ``act`` contract in plain trio) plus
what the journal promises, written as a trio user would write it by hand:

* one SQLite file in WAL mode with ``synchronous=NORMAL``, in **the journal's own schema**
  (created by lionexec's migrations, so every row touches the same tables and indexes);
* **write-ahead**: a call's request message and its call row (the key claimed, one attempt)
  are committed before the tool runs; its response message and the call row's outcome are
  committed before ``act`` returns;
* a **concurrent** batch commits every request in one transaction before the calls start and
  every outcome in one after they end (the group commit, at its most favourable); a
  **sequential** batch commits each call's request in its own transaction, the previous call's
  outcome riding along (as lionexec's lingering outcomes do), and the last outcome at the end;
* messages are stored as compact JSON records (ids, call id, function, arguments; outcome,
  output, error), the calls' arguments as key-sorted JSON;
* each transaction runs in ``trio.to_thread.run_sync`` (cancellation waits for it: a commit is
  never cut short) on one connection.

What it leaves out against lionexec: recovery, idempotency-key repeats and waits, approvals,
the commit watchdog, checkpoints on their own thread, branches and sinks of several branches
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

_MESSAGE = (
    "INSERT INTO lionexec_messages (branch_id, seq, message_id, kind, body) VALUES (?, ?, ?, ?, ?)"
)
_CALL = (
    "INSERT INTO lionexec_calls (idempotency_key, branch_id, call_id, request_id, function, "
    "arguments, effect, attempts, state, outcome, response, requested_at, finished_at) "
    "VALUES (?, ?, ?, ?, ?, ?, 'pure', 1, 'requested', NULL, NULL, 0, NULL)"
)
_OUTCOME = (
    "UPDATE lionexec_calls SET state = 'done', outcome = ?, response = ?, finished_at = 0 "
    "WHERE branch_id = ? AND call_id = ? AND state = 'requested'"
)


class DurableFloorBranch(FloorBranch):
    """A :class:`FloorBranch` journaled to the SQLite file at *path* (already migrated)."""

    __slots__ = ("_bid", "_conn", "_seq")

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

    def close(self) -> None:
        self._conn.close()

    # -- rows (on the trio thread) -------------------------------------------------------------

    def _message(self, message_id: Any, kind: str, record: dict[str, Any]) -> tuple[Any, ...]:
        seq = self._seq
        self._seq = seq + 1
        return (self._bid, seq, str(message_id), kind, _dumps(record))

    def _ahead(self, request: FloorRequest) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        record = {
            "id": str(request.id),
            "call_id": request.call_id,
            "function": request.function,
            "arguments": request.arguments,
        }
        message = self._message(request.id, "action_request", record)
        key = f"{self._bid}/{request.call_id}"
        call = (
            key,
            self._bid,
            request.call_id,
            str(request.id),
            request.function,
            _sorted(request.arguments),
        )
        return message, call

    def _outcome(self, response: FloorResponse) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        record = {
            "id": str(response.id),
            "request_id": str(response.request_id),
            "outcome": response.outcome,
            "output": response.output,
            "error": response.error,
        }
        message = self._message(response.id, "action_response", record)
        return message, (response.outcome, message[4], self._bid, response.call_id)

    # -- transactions (on a worker thread) -----------------------------------------------------

    def _transact(
        self,
        messages: list[tuple[Any, ...]],
        calls: list[tuple[Any, ...]],
        outcomes: list[tuple[Any, ...]],
    ) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_MESSAGE, messages)
            conn.executemany(_CALL, calls)
            conn.executemany(_OUTCOME, outcomes)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def _commit(
        self,
        messages: list[tuple[Any, ...]],
        calls: list[tuple[Any, ...]],
        outcomes: list[tuple[Any, ...]],
    ) -> None:
        await trio.to_thread.run_sync(self._transact, messages, calls, outcomes)

    async def act(self, calls: list[Any], strategy: str = "concurrent") -> list[FloorResponse]:
        """Run *calls* (see the module docs); every request ends with one durable response."""
        requests = self._admit(calls)
        out: list[Any] = [None] * len(requests)
        try:
            if strategy == "sequential" or len(requests) == 1:
                after: tuple[list[Any], list[Any]] = ([], [])  # the previous outcome rides along
                for index, request in enumerate(requests):
                    message, call = self._ahead(request)
                    await self._commit([*after[0], message], [call], after[1])
                    response = out[index] = await self._call(request)
                    message, outcome = self._outcome(response)
                    after = ([message], [outcome])
                await self._commit(after[0], [], after[1])
            else:
                ahead = [self._ahead(request) for request in requests]
                await self._commit([m for m, _ in ahead], [c for _, c in ahead], [])
                await self._concurrently(requests, out)
                done = [self._outcome(response) for response in out]
                await self._commit([m for m, _ in done], [], [o for _, o in done])
        except BaseException as exc:
            self._cancel_unanswered(requests, exc)
            raise
        return out


__all__ = ["DurableFloorBranch"]
