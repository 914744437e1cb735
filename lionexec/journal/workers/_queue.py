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
* Shared **limits** (:class:`~lionexec.journal.Limit`: per tool and per branch) are judged in
  the claim transaction, under row locks of ``lionexec_limits`` taken in name order: a call
  over a **rate** goes back to ``queued`` with ``not_before`` set to when it may run
  (*deferred*, never lost); a call over a **concurrency** limit goes back as it was (it is
  not claimed again until a running call of its tool or branch ends: the running calls are
  the ``claimed`` rows); a call over a hard **budget** is answered ``denied`` with the reason
  (a deferral is not a denial: the call runs once the rate allows).

Every function here is synchronous and runs inside one transaction of a journal's backend
(``Backend.run``), on a SQL store: PostgreSQL claims with
``FOR UPDATE SKIP LOCKED`` (workers never wait on each other's rows); SQLite's
``BEGIN IMMEDIATE`` transactions already run one at a time. Time is the database's on
PostgreSQL (one clock for every machine), the local clock on SQLite (one machine).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import attrs

from lionexec import _unstructure
from lionexec.conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    ErrorInfo,
    Message,
)
from lionexec.errors import DuplicateCallError
from lionexec.limits import (
    NEVER,
    Busy,
    Deferred,
    Granted,
    Limit,
    RateBucket,
    Spend,
    StateInMemory,
    judge,
    keys_for,
    limits_by_key,
    refund,
)

from .._history import dumps_record, message_body
from .._keys import stored_json
from ..backends._sql import call_ids_in, lock_branches
from ..backends.base import Store
from ..errors import JournalError

__all__ = [
    "ClaimRound",
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
        claimed_at: when it was last claimed: when the claim was granted (after any
            rate-limit deferral), or, for a claim a limit put back (busy, deferred), when
            that claim was made.
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
        return load_response(self.response)


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
    return message_body(request)  # (its action_response_id left out, as the journal's)


def response_record(response: ActionResponse, *, attempts: int | None = None) -> str:
    """*response* as the queue stores it; *attempts*, if given, replaces its count (a worker
    counts the runs of the call by the workers before it)."""
    if attempts is None:
        return message_body(response)
    record = _unstructure.converter.unstructure(response)
    record["content"]["attempts"] = attempts
    return dumps_record(record)


def load_response(record: str) -> ActionResponse:
    """The response a queue row holds (its ``response`` record)."""
    message = _unstructure.converter.structure(stored_json(record, "queued response"), Message)
    if not isinstance(message, ActionResponse):
        raise JournalError(f"a queued response is a {type(message).__name__}, not ActionResponse")
    return message


def load_request(record: str) -> ActionRequest:
    """The request a queue row holds (its ``request`` record, as :class:`QueuedCall` gives
    it)."""
    message = _unstructure.converter.structure(stored_json(record, "queued request"), Message)
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
    branch, or one the branch's own ``act()`` has run or answered, raises
    :class:`~lionexec.errors.DuplicateCallError` and nothing is queued.

    The other way round, an ``act()`` of a call id queued here claims nothing and waits for
    the workers' answer (:class:`~lionexec.journal.backends.Queued`). Each side checks the
    other's table in its own transaction, after the branch's lock on PostgreSQL
    (:func:`~lionexec.journal.backends._sql.lock_branches`; SQLite runs one transaction at a
    time)."""
    tx = _tx(store)
    if _is_pg(store):
        lock_branches(tx, [branch_id])
    now = db_now(store)
    rows = [
        (branch_id, r.call_id, r.function, request_record(r), QUEUED, now, 0, 0, 0, now)
        for r in requests
    ]
    call_ids = [r.call_id for r in requests]
    queued = call_ids_in(tx, "lionexec_queue", branch_id, call_ids)
    for call_id in call_ids:
        if call_id in queued:
            raise DuplicateCallError(
                f"call {call_id!r} of branch {branch_id} is already submitted; a call id is "
                "submitted once",
                call_id=call_id,
            )
    # A call the branch's act() runs (its key taken: lionexec_calls) or answered (its
    # response journaled): a worker, which runs calls in a branch of its own, would run
    # the tool again, and wait() keeps the branch's answer. A request the history holds
    # unanswered and never run (a turn recorded for workers) may be submitted.
    ran = call_ids_in(tx, "lionexec_calls", branch_id, call_ids)
    ran |= store.known_call_ids(branch_id, call_ids, answered=True)
    for call_id in call_ids:
        if call_id in ran:
            raise DuplicateCallError(
                f"call {call_id!r} of branch {branch_id} is already run or answered by the "
                "branch's act(); propose the call again, with a new id",
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


class ClaimRound(NamedTuple):
    """What one :func:`claim` did."""

    #: the calls to run now (granted by every limit that applies)
    run: list[Claimed]
    #: calls put back for later by a rate limit
    deferred: int
    #: calls answered ``denied`` by a budget
    denied: int
    #: when fewer calls run than were asked for: seconds until the earliest call still
    #: queued may run (``None``: none is, or none may until a running call ends)
    next: float | None
    #: calls put back untouched by a concurrency limit (a slot frees when a call ends)
    busy: int = 0


def claim(
    store: Store,
    worker: str,
    n: int,
    lease: float,
    limits: Mapping[str, Limit],
) -> ClaimRound:
    """Claim up to *n* ready calls for *worker* with a lease of *lease* seconds.

    *limits* (:func:`~lionexec.limits.limits_by_key`'s keys: tool names,
    ``branch:*``, ``branch:<id>``) are judged for each call in this transaction: calls over
    a rate go back to the queue for later (deferred), calls over a concurrency limit go back
    as they were (busy: not claimed while their tool or branch is at its maximum), calls
    over a budget are answered ``denied``.
    """
    tx = _tx(store)
    now = db_now(store)
    pg = _is_pg(store)
    limits = limits_by_key(limits)
    tools, branches = _saturated(store, limits, {}) if limits else (set(), set())
    where, params = _ready_where(tools, branches)
    lock = " FOR UPDATE SKIP LOCKED" if pg else ""
    raw = tx.execute(
        "WITH picked AS (SELECT branch_id, call_id FROM lionexec_queue "
        f"WHERE {where} AND not_before <= ? ORDER BY not_before LIMIT ?{lock}) "
        "UPDATE lionexec_queue SET state = ?, fence = fence + 1, owner = ?, lease_until = ?, "
        "claimed_at = ?, attempts = attempts + 1 FROM picked "
        "WHERE lionexec_queue.branch_id = picked.branch_id "
        "AND lionexec_queue.call_id = picked.call_id RETURNING lionexec_queue.branch_id, "
        "lionexec_queue.call_id, function, request, fence, attempts",
        (*params, now, n, CLAIMED, worker, now + lease, now),
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
    applied = [keys_for(limits, job.function, job.branch_id) for job in claimed]
    if not any(applied):
        return ClaimRound(
            claimed, 0, 0, _next_ready(store, now, len(claimed) < n, tools, branches)
        )
    state = _DbState.lock(store, applied)
    now = db_now(store)  # read under the limits' locks: grants are decided in lock order
    run: list[Claimed] = []
    deferred = denied = busy = 0
    for job, keys in zip(claimed, applied, strict=True):
        if not keys:
            run.append(job)
            continue
        verdict = judge(keys, _arguments(job) if state.priced(keys) else {}, now, state)
        if isinstance(verdict, Granted):
            tx.execute(
                "UPDATE lionexec_queue SET claimed_at = ? WHERE branch_id = ? AND call_id = ?",
                (verdict.at, job.branch_id, job.call_id),
            )
            run.append(job)
        elif isinstance(verdict, Deferred):
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, not_before = ?, lease_until = NULL, "
                "attempts = attempts - 1, deferrals = deferrals + 1 "
                "WHERE branch_id = ? AND call_id = ?",
                (QUEUED, now + verdict.wait, job.branch_id, job.call_id),
            )
            deferred += 1
        elif isinstance(verdict, Busy):
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, lease_until = NULL, attempts = attempts - 1 "
                "WHERE branch_id = ? AND call_id = ?",
                (QUEUED, job.branch_id, job.call_id),
            )
            busy += 1
        else:
            body = answer(
                load_request(job.request),
                ActionOutcome.DENIED,
                ErrorInfo("BudgetExceeded", verdict.reason),
                0,
            )
            tx.execute(
                "UPDATE lionexec_queue SET state = ?, lease_until = NULL, "
                "attempts = attempts - 1, outcome = ?, response = ?, worker = ?, finished_at = ? "
                "WHERE branch_id = ? AND call_id = ?",
                (DONE, ActionOutcome.DENIED.value, body, worker, now, job.branch_id, job.call_id),
            )
            denied += 1
    state.save()
    if denied:
        _notify(store, "lionexec_done")
    if len(run) < n:
        tools, branches = _saturated(store, limits, state.counts)
    ready = _next_ready(store, now, len(run) < n, tools, branches)
    return ClaimRound(run, deferred, denied, ready, busy)


def _arguments(job: Claimed) -> Mapping[str, Any]:
    arguments = load_request(job.request).content.arguments
    return arguments if isinstance(arguments, Mapping) else {}


def _ready_where(tools: set[str], branches: set[str]) -> tuple[str, list[str]]:
    """``state = queued`` and none of the saturated *tools* and *branches*."""
    where, params = "state = ?", [QUEUED]
    if tools:
        where += f" AND function NOT IN ({', '.join('?' * len(tools))})"
        params += sorted(tools)
    if branches:
        where += f" AND branch_id NOT IN ({', '.join('?' * len(branches))})"
        params += sorted(branches)
    return where, params


def _saturated(
    store: Store, limits: Mapping[str, Limit], known: Mapping[str, int]
) -> tuple[set[str], set[str]]:
    """The tools and branches at their concurrency limit (calls claimed now): their queued
    calls are not claimed. *known*: counts already read under the limits' locks."""
    tx = _tx(store)
    tools: set[str] = set()
    branches: set[str] = set()
    capped = {k: v.concurrency for k, v in limits.items() if v.concurrency is not None}
    if not capped:
        return tools, branches
    counts = dict(known)
    names = [k[5:] for k in capped if k.startswith("tool:") and k not in counts]
    if names:
        for function, count in tx.execute(
            "SELECT function, COUNT(*) FROM lionexec_queue WHERE state = ? AND function IN "
            f"({', '.join('?' * len(names))}) GROUP BY function",
            (CLAIMED, *names),
        ):
            counts[f"tool:{function}"] = int(count)
    if "branch:*" in capped:
        rows = tx.execute(
            "SELECT branch_id, COUNT(*) FROM lionexec_queue WHERE state = ? GROUP BY branch_id",
            (CLAIMED,),
        )
    else:
        ids = [k[7:] for k in capped if k.startswith("branch:")]
        rows = (
            tx.execute(
                "SELECT branch_id, COUNT(*) FROM lionexec_queue WHERE state = ? AND branch_id IN "
                f"({', '.join('?' * len(ids))}) GROUP BY branch_id",
                (CLAIMED, *ids),
            )
            if ids
            else []
        )
    for branch_id, count in rows:
        counts.setdefault(f"branch:{branch_id}", int(count))
    for key, count in counts.items():
        if key in capped:
            limit: int | None = capped[key]
        elif key.startswith("branch:") and key not in limits:  # its own limit replaces "*"
            limit = capped.get("branch:*")
        else:
            limit = None
        if limit is not None and count >= limit:
            (tools if key.startswith("tool:") else branches).add(key.split(":", 1)[1])
    return tools, branches


@attrs.define
class _DbState(StateInMemory):
    """The :class:`~lionexec.abc.LimitState` of one claim: the rows of
    ``lionexec_limits`` it needs, locked, and the running counts read under those locks."""

    store: Store = attrs.field(kw_only=True)

    @classmethod
    def lock(cls, store: Store, applied: Sequence[list[tuple[str, Limit]]]) -> _DbState:
        """Insert (if new) and lock the rows of every key in *applied* (the limits of each
        call just claimed), and count the calls running under each concurrency limit."""
        tx = _tx(store)
        keys = {key: limit for keys in applied for key, limit in keys}
        names = sorted(
            [*keys, *(f"budget:{key}" for key, limit in keys.items() if limit.budget is not None)]
        )
        # one row per schedule ("<key>") and budget ("budget:<key>"), inserted and locked in
        # name order, so that two workers needing the same rows never deadlock; a schedule
        # starts at NEVER, a budget (its tat is what it spent) at nothing
        starts = [0.0 if name.startswith("budget:") else NEVER for name in names]
        if _is_pg(store):
            tx.execute(
                "INSERT INTO lionexec_limits (name, tat, used, next_slot) "
                "SELECT name, tat, 0, ? FROM unnest(?::text[], ?::float8[]) AS v (name, tat) "
                "ORDER BY name ON CONFLICT DO NOTHING",
                (NEVER, names, starts),
            )
            rows = tx.execute(
                "SELECT name, tat, used, next_slot FROM lionexec_limits WHERE name = ANY(?) "
                "ORDER BY name FOR UPDATE",
                (names,),
            )
        else:
            tx.executemany(
                "INSERT INTO lionexec_limits (name, tat, used, next_slot) VALUES (?, ?, 0, ?) "
                "ON CONFLICT DO NOTHING",
                [(name, start, NEVER) for name, start in zip(names, starts, strict=True)],
            )
            rows = tx.execute(
                "SELECT name, tat, used, next_slot FROM lionexec_limits WHERE name IN "
                f"({', '.join('?' * len(names))})",
                names,
            )
        rates: dict[str, RateBucket] = {}
        spends: dict[str, Spend] = {}
        for name, tat, used, next_slot in rows:
            if name.startswith("budget:"):
                spends[name[7:]] = Spend(float(tat), float(next_slot), int(used))
            else:
                rates[name] = RateBucket(float(tat), float(next_slot), int(used))
        counts: dict[str, int] = {}
        for key, limit in keys.items():
            if limit.concurrency is None:
                continue
            kind, _, value = key.partition(":")
            column = "function" if kind == "tool" else "branch_id"
            rows = tx.execute(
                f"SELECT COUNT(*) FROM lionexec_queue WHERE state = ? AND {column} = ?",
                (CLAIMED, value),
            )
            # this claim's own calls are claimed rows too: they count once granted
            mine = sum(1 for ks in applied if any(k == key for k, _ in ks))
            counts[key] = int(rows[0][0]) - mine
        return cls(rates, spends, counts, store=store)

    def priced(self, keys: list[tuple[str, Limit]]) -> bool:
        """Whether a budget of *keys* prices calls by their arguments."""
        return any(limit.budget is not None and callable(limit.cost) for _, limit in keys)

    def save(self) -> None:
        rows = [(b.tat, b.used, b.next_slot, name) for name, b in self.rates.items()]
        rows += [(s.spent, s.calls, s.window, f"budget:{k}") for k, s in self.spends.items()]
        _tx(self.store).executemany(
            "UPDATE lionexec_limits SET tat = ?, used = ?, next_slot = ? WHERE name = ?", rows
        )


def _next_ready(
    store: Store, now: float, look: bool, tools: set[str], branches: set[str]
) -> float | None:
    """Seconds until the earliest queued call may run (``None``: none queued, or only calls
    of saturated *tools* and *branches*), if *look*."""
    if not look:
        return None
    where, params = _ready_where(tools, branches)
    rows = _tx(store).execute(f"SELECT MIN(not_before) FROM lionexec_queue WHERE {where}", params)
    if not rows or rows[0][0] is None:
        return None
    return max(0.0, float(rows[0][0]) - now)


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


def complete(
    store: Store, worker: str, completions: Sequence[Completion], *, wake: bool = False
) -> WriteResult:
    """Record *completions*, each only if its fence still holds the row (one statement
    checks and writes); the others are refused and recorded as rejected writes. With
    *wake* (concurrency limits are in use), idle workers are woken too: a slot is free."""
    tx = _tx(store)
    now = db_now(store)
    ok: set[tuple[str, str, int]] = set()  # (branch, call, fence): one group may hold a stale
    if _is_pg(store) and completions:
        rows = tx.execute(
            "UPDATE lionexec_queue AS q SET state = ?, outcome = v.outcome, "
            "response = v.response, worker = ?, finished_at = ?, lease_until = NULL "
            "FROM unnest(?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[]) "
            "AS v (branch_id, call_id, fence, outcome, response) "
            "WHERE q.branch_id = v.branch_id AND q.call_id = v.call_id AND q.fence = v.fence "
            "AND q.state = ? RETURNING q.branch_id, q.call_id, q.fence",
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
        ok = {(r[0], r[1], int(r[2])) for r in rows}
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
                ok.add((c.branch_id, c.call_id, c.fence))
    recorded = tuple(c for c in completions if (c.branch_id, c.call_id, c.fence) in ok)
    rejected = tuple(c for c in completions if (c.branch_id, c.call_id, c.fence) not in ok)
    if rejected:
        tx.executemany(
            "INSERT INTO lionexec_rejected_writes (branch_id, call_id, worker, fence, outcome, "
            "at) VALUES (?, ?, ?, ?, ?, ?)",
            [(c.branch_id, c.call_id, worker, c.fence, c.outcome, now) for c in rejected],
        )
    if recorded:
        _notify(store, "lionexec_done")
        if wake:
            _notify(store, "lionexec_queue")
    return WriteResult(recorded, rejected)


def release(
    store: Store,
    held: Sequence[tuple[str, str, int, bool]],
    limits: Mapping[str, Limit] | None = None,
) -> int:
    """Give claimed calls ``(branch, call, fence, started)`` back (a worker shutting down):
    queued again, fence + 1. An attempt not started is not counted, nor charged: what its
    claim took of *limits* (the worker's, as :func:`claim` judged it) is given back. Returns
    how many were still held."""
    tx = _tx(store)
    now = db_now(store)
    released = 0
    unstarted: list[tuple[Claimed, float]] = []
    for branch_id, call_id, fence, started in held:
        rows = tx.execute(
            "UPDATE lionexec_queue SET state = ?, fence = fence + 1, lease_until = NULL, "
            "not_before = ?, attempts = attempts - ? WHERE branch_id = ? AND call_id = ? "
            "AND fence = ? AND state = ? RETURNING function, request, claimed_at",
            (QUEUED, now, 0 if started else 1, branch_id, call_id, fence, CLAIMED),
        )
        if rows:
            released += 1
            function, request, claimed_at = rows[0]
            if not started and claimed_at is not None:
                call = Claimed(
                    branch_id=branch_id,
                    call_id=call_id,
                    function=function,
                    request=request,
                    fence=fence,
                    attempts=0,
                )
                unstarted.append((call, float(claimed_at)))
    if limits and unstarted:
        limits = limits_by_key(limits)
        applied = [keys_for(limits, call.function, call.branch_id) for call, _ in unstarted]
        if any(applied):
            state = _DbState.lock(store, applied)
            for (call, granted_at), keys in zip(unstarted, applied, strict=True):
                if keys:
                    arguments = _arguments(call) if state.priced(keys) else {}
                    refund(keys, arguments, granted_at, state)
            state.save()
    if released:
        _notify(store, "lionexec_queue")
    return released
