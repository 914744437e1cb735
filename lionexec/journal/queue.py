"""The work queue of submitted calls: its rows, and the transactions workers run on it.

A call submitted with :meth:`Journal.submit <lionexec.journal.Journal.submit>` is a row of
``lionexec_queue`` (schema version 2), keyed by ``(branch_id, call_id)``, holding the
request message as strict JSON. Its life:

``queued`` → (a worker claims it: ``fence`` + 1, a **lease** until ``lease_until``) ``claimed``
→ (the worker writes its response, *checking the fence in the same statement*) ``done``.

* A claimed call whose lease expired (its worker died or stalled) is **reclaimed** by the
  next worker that looks: ``pure``/``idempotent``/``keyed`` calls are queued again,
  ``unsafe`` ones are answered ``interrupted``; either way ``fence`` grows, so the old
  worker's late write matches no row: it is refused and recorded in
  ``lionexec_rejected_writes``.
* A call over a shared **rate limit** goes back to ``queued`` with ``not_before`` set to when
  it may run (*deferred*, never lost); a call over a hard **budget** is answered ``denied``
  with the reason (ADR-0003: a deferral is not a denial).

Every function here is synchronous and runs inside one transaction of a journal's backend
(``Backend.run``), on a :class:`~lionexec.journal.sql.SqlStore`: PostgreSQL claims with
``FOR UPDATE SKIP LOCKED`` (workers never wait on each other's rows); SQLite's
``BEGIN IMMEDIATE`` transactions already run one at a time. Time is the database's on
PostgreSQL (one clock for every machine), the local clock on SQLite (one machine).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from lionexec import _unstructure
from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    ErrorInfo,
    Message,
)
from lionexec.errors import ConfigurationError, DuplicateCallError

from .._checks import check_positive
from .errors import JournalError
from .store import Store

__all__ = [
    "Claimed",
    "Completion",
    "Limit",
    "QueuedCall",
    "WriteResult",
]

QUEUED: Final = "queued"
CLAIMED: Final = "claimed"
DONE: Final = "done"
SAFE_EFFECTS: Final = frozenset({"pure", "idempotent", "keyed"})

INTERRUPTED_MESSAGE: Final = (
    "the worker running this call stopped (its lease expired); it may or may not have taken effect"
)

_COLUMNS = (
    "branch_id, call_id, function, request, state, not_before, fence, owner, lease_until, "
    "effect, attempts, deferrals, outcome, response, worker, submitted_at, finished_at, "
    "claimed_at"
)


@attrs.frozen(kw_only=True)
class Limit:
    """A limit every worker of one database enforces together, for one tool.

    Args:
        rate: calls allowed per *period* (a GCRA schedule, as :class:`~lionexec.RateLimiter`
            keeps in process); ``None`` for no rate limit. A call over it is **deferred**.
        period: the period in seconds (default 1).
        burst: calls that may start back to back after a quiet spell (default 1). In any
            window of ``w`` seconds at most ``burst + w * rate / period`` calls start.
        budget: calls allowed in total (a hard budget); ``None`` for none. A call over it is
            **denied** with the reason.
    """

    rate: float | None = None
    period: float = 1.0
    burst: int = 1
    budget: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.rate is not None:
            check_positive("Limit.rate", self.rate)
        check_positive("Limit.period", self.period)
        check_positive("Limit.burst", self.burst, integer=True)
        if self.budget is not None and (
            isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 0
        ):
            raise ConfigurationError(
                f"Limit.budget must be None or an int >= 0, got {self.budget!r}"
            )


def gcra(tat: float, now: float, interval: float, burst: int) -> tuple[float, float]:
    """One GCRA decision for one unit: ``(wait, new_tat)``.

    *wait* ``<= 0`` grants the unit now (then store *new_tat*); otherwise it is the seconds
    until it would be granted (and *tat* stays). The arithmetic of the in-process
    :class:`~lionexec.RateLimiter`'s cells.
    """
    start = tat if tat > now else now
    wait = start + (1 - burst) * interval - now
    if wait > 1e-9:
        return wait, tat
    return 0.0, start + interval


@attrs.frozen(kw_only=True)
class QueuedCall:
    """A submitted call, as the queue holds it.

    Attributes:
        branch_id: its branch.
        call_id: its tool-call id.
        function: the tool name.
        state: ``queued``, ``claimed`` or ``done``.
        fence: the fencing token: claims (and reclaims) so far.
        owner: the worker holding its lease (``claimed``), else the last one that did.
        attempts: times a worker started it.
        deferrals: times a rate limit put it back.
        outcome: the outcome of its response once ``done``.
        worker: the worker whose response was recorded (``done``).
        effect: the effect class it was judged by when reclaimed, else ``None``.
        submitted_at: when it was submitted (the database's clock, epoch seconds).
        claimed_at: when its last claim was granted (after any rate-limit deferral).
        finished_at: when its response was recorded.
    """

    branch_id: str
    call_id: str
    function: str
    state: str
    fence: int
    owner: str | None
    attempts: int
    deferrals: int
    outcome: str | None
    worker: str | None
    effect: str | None
    submitted_at: float
    claimed_at: float | None
    finished_at: float | None
    response: str | None = attrs.field(default=None, repr=False)
    request: str | None = attrs.field(default=None, repr=False)

    def response_message(self) -> ActionResponse | None:
        """The recorded response, or ``None`` before it is done."""
        if self.response is None:
            return None
        message = _unstructure.converter.structure(json.loads(self.response), Message)
        assert isinstance(message, ActionResponse)
        return message


@attrs.frozen(kw_only=True)
class Claimed:
    """A call a worker just claimed: run it, then write with *fence*."""

    branch_id: str
    call_id: str
    function: str
    request: str
    fence: int
    attempts: int


@attrs.frozen(kw_only=True)
class Completion:
    """A worker's response for a call it claimed with *fence*."""

    branch_id: str
    call_id: str
    fence: int
    outcome: str
    response: str


@attrs.frozen
class WriteResult:
    """Which completions were recorded and which were refused (their fence was stale)."""

    recorded: tuple[Completion, ...]
    rejected: tuple[Completion, ...]


# -- helpers -----------------------------------------------------------------------------


def _is_pg(store: Store) -> bool:
    return bool(getattr(store, "bulk", False))


def _tx(store: Store) -> Any:
    tx = getattr(store, "tx", None)
    if tx is None:
        raise JournalError(
            "submitted calls and workers need a SQL journal (SQLite or PostgreSQL), not one "
            "in memory"
        )
    return tx


def probe(store: Store) -> None:
    """Raise :class:`JournalError` unless *store* can hold a queue."""
    _tx(store).execute("SELECT 1 FROM lionexec_queue WHERE 1 = 0")


def db_now(store: Store) -> float:
    """The database's clock on PostgreSQL, the local clock on SQLite."""
    if _is_pg(store):
        rows = _tx(store).execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")
        return float(rows[0][0])
    return time.time()


def _notify(store: Store, channel: str) -> None:
    if _is_pg(store):
        _tx(store).execute("SELECT pg_notify(?, '')", (channel,))


def request_record(request: ActionRequest) -> str:
    record = _unstructure.converter.unstructure(request)
    record["content"]["action_response_id"] = None
    return json.dumps(record, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def response_record(response: ActionResponse) -> str:
    record = _unstructure.converter.unstructure(response)
    return json.dumps(record, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def load_request(record: str) -> ActionRequest:
    message = _unstructure.converter.structure(json.loads(record), Message)
    if not isinstance(message, ActionRequest):
        raise JournalError(f"a queued request is a {type(message).__name__}, not ActionRequest")
    return message


def answer(
    request: ActionRequest,
    outcome: ActionOutcome,
    error: ErrorInfo,
    attempts: int,
) -> str:
    """A response record for *request* written by the queue itself (never ran, or lost)."""
    response = ActionResponse.create(
        request,
        error=error,
        outcome=outcome,
        attempts=attempts,
        sender=request.function,
        recipient=request.sender,
    )
    return response_record(response)


def _row(raw: Sequence[Any]) -> QueuedCall:
    return QueuedCall(
        branch_id=raw[0],
        call_id=raw[1],
        function=raw[2],
        state=raw[4],
        fence=int(raw[6]),
        owner=raw[7],
        effect=raw[9],
        attempts=int(raw[10]),
        deferrals=int(raw[11]),
        outcome=raw[12],
        response=raw[13],
        worker=raw[14],
        submitted_at=float(raw[15]),
        claimed_at=None if raw[17] is None else float(raw[17]),
        finished_at=None if raw[16] is None else float(raw[16]),
        request=raw[3],
    )


# -- the submitter's side ----------------------------------------------------------------


def submit(store: Store, branch_id: str, requests: Sequence[ActionRequest]) -> None:
    """Queue *requests* of *branch_id*. All or nothing: a call id already queued for the
    branch raises :class:`~lionexec.errors.DuplicateCallError` and nothing is queued."""
    tx = _tx(store)
    now = db_now(store)
    rows = [
        (branch_id, r.call_id, r.function, request_record(r), QUEUED, now, 0, 0, 0, now)
        for r in requests
    ]
    taken = []
    for start in range(0, len(rows), 400):
        chunk = [r.call_id for r in requests[start : start + 400]]
        marks = ", ".join("?" * len(chunk))
        taken += tx.execute(
            f"SELECT call_id FROM lionexec_queue WHERE branch_id = ? AND call_id IN ({marks})",
            (branch_id, *chunk),
        )
    if taken:
        call_id = taken[0][0]
        raise DuplicateCallError(
            f"call {call_id!r} of branch {branch_id} is already submitted; a call id is "
            "submitted once",
            call_id=call_id,
        )
    insert = (
        "INSERT INTO lionexec_queue (branch_id, call_id, function, request, state, "
        "not_before, fence, attempts, deferrals, submitted_at)"
    )
    if _is_pg(store):
        tx.execute(
            f"{insert} SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], "
            "?::text[], ?::float8[], ?::bigint[], ?::integer[], ?::integer[], ?::float8[])",
            [[row[i] for row in rows] for i in range(10)],
        )
    else:
        tx.executemany(f"{insert} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    _notify(store, "lionexec_queue")


def lookup(store: Store, pairs: Sequence[tuple[str, str]]) -> list[QueuedCall | None]:
    """The rows of ``(branch_id, call_id)`` *pairs*, in order (``None`` if unknown)."""
    tx = _tx(store)
    found: dict[tuple[str, str], QueuedCall] = {}
    by_branch: dict[str, list[str]] = {}
    for branch_id, call_id in pairs:
        by_branch.setdefault(branch_id, []).append(call_id)
    for branch_id, call_ids in by_branch.items():
        for start in range(0, len(call_ids), 400):
            chunk = call_ids[start : start + 400]
            marks = ", ".join("?" * len(chunk))
            for raw in tx.execute(
                f"SELECT {_COLUMNS} FROM lionexec_queue WHERE branch_id = ? "
                f"AND call_id IN ({marks})",
                (branch_id, *chunk),
            ):
                row = _row(raw)
                found[(row.branch_id, row.call_id)] = row
    return [found.get(pair) for pair in pairs]


def listing(store: Store, branch_id: str | None) -> list[QueuedCall]:
    """Every queued call (of one branch, or all), oldest first."""
    where, params = "", []
    if branch_id is not None:
        where, params = " WHERE branch_id = ?", [branch_id]
    rows = _tx(store).execute(
        f"SELECT {_COLUMNS} FROM lionexec_queue{where} ORDER BY submitted_at, call_id", params
    )
    return [_row(raw) for raw in rows]


def rejected_writes(store: Store) -> list[tuple[str, str, str, int, str]]:
    """Every late write refused by its fence: ``(branch, call, worker, fence, outcome)``."""
    rows = _tx(store).execute(
        "SELECT branch_id, call_id, worker, fence, outcome FROM lionexec_rejected_writes "
        "ORDER BY at"
    )
    return [(r[0], r[1], r[2], int(r[3]), r[4]) for r in rows]


# -- the worker's side -------------------------------------------------------------------


def reclaim(
    store: Store, worker: str, effect_of: Callable[[str], str], *, limit: int = 100
) -> tuple[int, int]:
    """Resolve claimed calls whose lease expired; return ``(requeued, interrupted)``."""
    tx = _tx(store)
    now = db_now(store)
    lock = " FOR UPDATE SKIP LOCKED" if _is_pg(store) else ""
    expired = tx.execute(
        "SELECT branch_id, call_id, function, request, attempts FROM lionexec_queue "
        f"WHERE state = ? AND lease_until < ? LIMIT ?{lock}",
        (CLAIMED, now, limit),
    )
    requeued = interrupted = 0
    for branch_id, call_id, function, request, attempts in expired:
        effect = effect_of(function)
        if effect in SAFE_EFFECTS:
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, fence = fence + 1, lease_until = NULL, "
                "not_before = ?, effect = ? WHERE branch_id = ? AND call_id = ?",
                (QUEUED, now, effect, branch_id, call_id),
            )
            requeued += 1
        else:
            body = answer(
                load_request(request),
                ActionOutcome.INTERRUPTED,
                ErrorInfo("Interrupted", INTERRUPTED_MESSAGE),
                int(attempts),
            )
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, fence = fence + 1, lease_until = NULL, "
                "effect = ?, outcome = ?, response = ?, worker = ?, finished_at = ? "
                "WHERE branch_id = ? AND call_id = ?",
                (
                    DONE,
                    effect,
                    ActionOutcome.INTERRUPTED.value,
                    body,
                    worker,
                    now,
                    branch_id,
                    call_id,
                ),
            )
            interrupted += 1
    if requeued:
        _notify(store, "lionexec_queue")
    if interrupted:
        _notify(store, "lionexec_done")
    return requeued, interrupted


def claim(
    store: Store,
    worker: str,
    n: int,
    lease: float,
    limits: Mapping[str, Limit],
) -> tuple[list[Claimed], int, int, float | None]:
    """Claim up to *n* ready calls for *worker* with a lease of *lease* seconds.

    Calls over a rate limit of *limits* go back to the queue for later (deferred); calls
    over a budget are answered ``denied``. Returns ``(to run, deferred, denied, next)``:
    *next* is, when fewer than *n* calls run, the seconds until the earliest call still queued
    may run (``None`` if none is queued).
    """
    tx = _tx(store)
    now = db_now(store)
    lock = " FOR UPDATE SKIP LOCKED" if _is_pg(store) else ""
    raw = tx.execute(
        "WITH picked AS (SELECT branch_id, call_id FROM lionexec_queue "
        f"WHERE state = ? AND not_before <= ? ORDER BY not_before LIMIT ?{lock}) "
        "UPDATE lionexec_queue SET state = ?, fence = fence + 1, owner = ?, lease_until = ?, "
        "claimed_at = ?, attempts = attempts + 1 FROM picked "
        "WHERE lionexec_queue.branch_id = picked.branch_id "
        "AND lionexec_queue.call_id = picked.call_id RETURNING lionexec_queue.branch_id, "
        "lionexec_queue.call_id, function, request, fence, attempts",
        (QUEUED, now, n, CLAIMED, worker, now + lease, now),
    )
    claimed = [
        Claimed(
            branch_id=r[0],
            call_id=r[1],
            function=r[2],
            request=r[3],
            fence=int(r[4]),
            attempts=int(r[5]),
        )
        for r in raw
    ]
    if not limits or not claimed:
        return claimed, 0, 0, _next_ready(store, now, len(claimed) < n)
    run: list[Claimed] = []
    deferred = denied = 0
    for job in claimed:
        limit = limits.get(job.function)
        if limit is None:
            run.append(job)
            continue
        verdict = _charge(store, f"tool:{job.function}", limit, now)
        if isinstance(verdict, Granted):
            tx.execute(
                "UPDATE lionexec_queue SET claimed_at = ? WHERE branch_id = ? AND call_id = ?",
                (verdict.at, job.branch_id, job.call_id),
            )
            run.append(job)
        elif isinstance(verdict, float):
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, not_before = ?, lease_until = NULL, "
                "attempts = attempts - 1, deferrals = deferrals + 1 "
                "WHERE branch_id = ? AND call_id = ?",
                (QUEUED, now + verdict, job.branch_id, job.call_id),
            )
            deferred += 1
        else:
            body = answer(
                load_request(job.request),
                ActionOutcome.DENIED,
                ErrorInfo("BudgetExceeded", verdict),
                0,
            )
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, lease_until = NULL, "
                "attempts = attempts - 1, outcome = ?, response = ?, worker = ?, finished_at = ? "
                "WHERE branch_id = ? AND call_id = ?",
                (DONE, ActionOutcome.DENIED.value, body, worker, now, job.branch_id, job.call_id),
            )
            denied += 1
    if denied:
        _notify(store, "lionexec_done")
    return run, deferred, denied, _next_ready(store, now, len(run) < n)


@attrs.frozen
class Granted:
    """A limit granted a call at *at* (the database's clock, read under the limit's lock)."""

    at: float


def _next_ready(store: Store, now: float, look: bool) -> float | None:
    """Seconds until the earliest queued call may run (``None``: none queued), if *look*."""
    if not look:
        return None
    rows = _tx(store).execute(
        "SELECT MIN(not_before) FROM lionexec_queue WHERE state = ?", (QUEUED,)
    )
    if not rows or rows[0][0] is None:
        return None
    return max(0.0, float(rows[0][0]) - now)


def _charge(store: Store, name: str, limit: Limit, now: float) -> Granted | float | str:
    """Charge one call to the limit row *name*: :class:`Granted` (when), a float: seconds
    until the call may come back (deferred), a string: why it is denied (over budget).

    A deferred call is given the next free slot of the schedule (``next_slot``, one
    interval after the last one given), so the calls deferred by every worker come back one
    by one instead of all at the same instant.
    """
    tx = _tx(store)
    tx.execute(
        "INSERT INTO lionexec_limits (name, tat, used, next_slot) VALUES (?, ?, 0, ?) "
        "ON CONFLICT DO NOTHING",
        (name, -1e300, -1e300),
    )
    lock = " FOR UPDATE" if _is_pg(store) else ""
    rows = tx.execute(
        f"SELECT tat, used, next_slot FROM lionexec_limits WHERE name = ?{lock}", (name,)
    )
    tat, used, next_slot = float(rows[0][0]), int(rows[0][1]), float(rows[0][2])
    # the clock read under the row's lock: grants are decided in the order they are made
    now = db_now(store)
    if limit.budget is not None and used >= limit.budget:
        return (
            f"the budget of {limit.budget} calls of {name.split(':', 1)[1]!r} shared by every "
            "worker is spent"
        )
    if limit.rate is not None:
        interval = limit.period / limit.rate
        wait, tat = gcra(tat, now, interval, limit.burst)
        if wait > 0:
            slot = max(next_slot, now + wait)
            tx.execute(
                "UPDATE lionexec_limits SET next_slot = ? WHERE name = ?", (slot + interval, name)
            )
            return slot - now
    tx.execute("UPDATE lionexec_limits SET tat = ?, used = used + 1 WHERE name = ?", (tat, name))
    return Granted(now)


def heartbeat(
    store: Store, held: Sequence[tuple[str, str, int]], lease: float
) -> set[tuple[str, str]]:
    """Extend the leases of *held* ``(branch, call, fence)``; return the pairs still held."""
    tx = _tx(store)
    now = db_now(store)
    kept: set[tuple[str, str]] = set()
    if not held:
        return kept
    if _is_pg(store):
        rows = tx.execute(
            "UPDATE lionexec_queue AS q SET lease_until = ? FROM unnest(?::text[], ?::text[], "
            "?::bigint[]) AS v (branch_id, call_id, fence) WHERE q.branch_id = v.branch_id "
            "AND q.call_id = v.call_id AND q.fence = v.fence AND q.state = ? "
            "RETURNING q.branch_id, q.call_id",
            (
                now + lease,
                [h[0] for h in held],
                [h[1] for h in held],
                [h[2] for h in held],
                CLAIMED,
            ),
        )
        return {(r[0], r[1]) for r in rows}
    for branch_id, call_id, fence in held:
        if tx.execute(
            "UPDATE lionexec_queue SET lease_until = ? WHERE branch_id = ? AND call_id = ? "
            "AND fence = ? AND state = ? RETURNING call_id",
            (now + lease, branch_id, call_id, fence, CLAIMED),
        ):
            kept.add((branch_id, call_id))
    return kept


def complete(store: Store, worker: str, completions: Sequence[Completion]) -> WriteResult:
    """Record *completions*, each only if its fence still holds the row (one statement
    checks and writes); the others are refused and recorded as rejected writes."""
    tx = _tx(store)
    now = db_now(store)
    ok: set[tuple[str, str]] = set()
    if _is_pg(store) and completions:
        rows = tx.execute(
            "UPDATE lionexec_queue AS q SET state = ?, outcome = v.outcome, "
            "response = v.response, worker = ?, finished_at = ?, lease_until = NULL "
            "FROM unnest(?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[]) "
            "AS v (branch_id, call_id, fence, outcome, response) "
            "WHERE q.branch_id = v.branch_id AND q.call_id = v.call_id AND q.fence = v.fence "
            "AND q.state = ? RETURNING q.branch_id, q.call_id",
            (
                DONE,
                worker,
                now,
                [c.branch_id for c in completions],
                [c.call_id for c in completions],
                [c.fence for c in completions],
                [c.outcome for c in completions],
                [c.response for c in completions],
                CLAIMED,
            ),
        )
        ok = {(r[0], r[1]) for r in rows}
    else:
        for c in completions:
            if tx.execute(
                "UPDATE lionexec_queue SET state = ?, outcome = ?, response = ?, worker = ?, "
                "finished_at = ?, lease_until = NULL WHERE branch_id = ? AND call_id = ? "
                "AND fence = ? AND state = ? RETURNING call_id",
                (
                    DONE,
                    c.outcome,
                    c.response,
                    worker,
                    now,
                    c.branch_id,
                    c.call_id,
                    c.fence,
                    CLAIMED,
                ),
            ):
                ok.add((c.branch_id, c.call_id))
    recorded = tuple(c for c in completions if (c.branch_id, c.call_id) in ok)
    rejected = tuple(c for c in completions if (c.branch_id, c.call_id) not in ok)
    if rejected:
        tx.executemany(
            "INSERT INTO lionexec_rejected_writes (branch_id, call_id, worker, fence, outcome, "
            "at) VALUES (?, ?, ?, ?, ?, ?)",
            [(c.branch_id, c.call_id, worker, c.fence, c.outcome, now) for c in rejected],
        )
    if recorded:
        _notify(store, "lionexec_done")
    return WriteResult(recorded, rejected)


def release(store: Store, held: Sequence[tuple[str, str, int, bool]]) -> int:
    """Give claimed calls ``(branch, call, fence, started)`` back (a worker shutting down):
    queued again, fence + 1 (an attempt not started is not counted). Returns how many were
    still held."""
    tx = _tx(store)
    now = db_now(store)
    released = 0
    for branch_id, call_id, fence, started in held:
        if tx.execute(
            "UPDATE lionexec_queue SET state = ?, fence = fence + 1, lease_until = NULL, "
            "not_before = ?, attempts = attempts - ? WHERE branch_id = ? AND call_id = ? "
            "AND fence = ? AND state = ? RETURNING call_id",
            (QUEUED, now, 0 if started else 1, branch_id, call_id, fence, CLAIMED),
        ):
            released += 1
    if released:
        _notify(store, "lionexec_queue")
    return released
