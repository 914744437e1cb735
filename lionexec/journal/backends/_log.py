"""The append-only write of an SQLite journal: one log row per message, folded later.

A plain commit (write-aheads of calls on their first attempt under their own call id,
their outcomes, messages) writes each message as one row of ``lionexec_log``: the message
and, on a request, the key it claims, on a response, the outcome it records. One table whose
only index is its primary key, so a commit writes few pages (what a commit costs is mostly
the pages it writes; the per-branch and per-call tables and their indexes touch about ten).

**Folding** moves the log into those tables (``lionexec_messages``, ``lionexec_calls``) in
one transaction: before any other transaction reads or writes them (every read, and any
commit that is not plain, folds first, in the same transaction), and in the background once
the log holds :data:`FOLD_ROWS` rows. Written in bulk, a row costs a small part of what it
costs a commit of its own. So every reader sees exactly what was committed, through the
tables it always read.

A commit is plain when it is small (at most :data:`APPEND_ROWS` rows: a large group commit
shares its pages among its rows already) and nothing in it needs those tables' indexes to be
decided: no approval; every request claims the key ``"<branch id>/<call id>"`` on its first
attempt, and no call row holds that key, no call of that id is queued for workers; no message
of its branches sits at or after its first position. Otherwise nothing is appended: the
commit folds and takes the long way, as before. (A retry, or a key of the caller's own,
always takes the long way: a key claimed again must meet the row that holds it.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .base import DONE, REQUESTED, Batch, Claim, MessageRow, OutcomeOp, fresh_claim

if TYPE_CHECKING:
    from ._sql import SqlStore, Tx

__all__ = ["FOLD_ROWS", "LOG_TABLE", "append", "fold"]

#: The log's table (schema version 5): a message (``event`` 0; a response's ``outcome`` with
#: it), or a claim of the request at ``seq`` (``event`` 1: its key, tool, arguments, effect).
LOG_TABLE: Final = """CREATE TABLE lionexec_log (
    branch_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    event INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    kind TEXT,
    body TEXT,
    call_id TEXT,
    idempotency_key TEXT,
    function TEXT,
    arguments TEXT,
    effect TEXT,
    outcome TEXT,
    at DOUBLE PRECISION,
    PRIMARY KEY (branch_id, seq, event)
)"""

_COLUMNS: Final = (
    "branch_id, seq, event, message_id, kind, body, call_id, idempotency_key, function, "
    "arguments, effect, outcome, at"
)
_WIDTH: Final = 13
_INSERT: Final = f"INSERT INTO lionexec_log ({_COLUMNS})"
_ROW: Final = "(" + ", ".join("?" * _WIDTH) + ")"
#: The statement that appends n rows, by n.
_INSERTS: dict[int, str] = {}
#: Rows a commit may write and still be appended: a larger group commit already shares its
#: pages among many rows, and appending it would only add the fold's copy.
APPEND_ROWS: Final = 64
#: Log rows past which a journal folds in the background (on its writer thread).
FOLD_ROWS: Final = 2048
_CALL_COLUMNS: Final = (
    "idempotency_key, branch_id, call_id, request_id, function, arguments, effect, attempts, "
    "state, outcome, response, requested_at, finished_at"
)


def append(store: SqlStore, batch: Batch) -> list[Claim] | None:
    """Write *batch* (its messages, requests and outcomes; its branches are the caller's) as
    log rows, if it is plain (see the module docs): the claims then (each key new, one
    attempt). ``None``: it is not, and nothing was written."""
    if batch.approvals or not batch.plain or batch.size() > APPEND_ROWS:
        return None
    outcomes = {(o.branch_id, o.call_id): o for o in batch.outcomes}
    if len(outcomes) != len(batch.outcomes):
        return None
    rows: list[tuple[Any, ...]] = []
    first: dict[str, int] = {}
    positions: dict[str, int] = {}
    answered = 0
    for m in batch.messages:
        done = None
        if m.kind == "action_response" and m.call_id is not None:
            done = outcomes.get((m.branch_id, m.call_id))
        if done is not None and done.response == m.body:
            answered += 1
            rows.append((*_message(m), None, None, None, None, done.outcome, done.at))
        else:
            rows.append((*_message(m), None, None, None, None, None, None))
            if m.kind == "action_request":
                positions[m.message_id] = m.seq
        if m.seq < first.get(m.branch_id, m.seq + 1):
            first[m.branch_id] = m.seq
    if answered != len(outcomes):
        return None  # (a response committed before: the long way)
    keys = set()
    for op in batch.requests:
        seq = positions.get(op.request_id, op.seq)
        if not op.fresh or seq is None or op.key != f"{op.branch_id}/{op.call_id}":
            return None
        keys.add(op.key)
        claim = (op.key, op.function, op.arguments, op.effect, None, op.at)
        rows.append((op.branch_id, seq, 1, op.request_id, None, None, op.call_id, *claim))
    if len(keys) != len(batch.requests) or _taken(store.tx_unfolded, batch, first):
        return None
    if rows and len(rows) * _WIDTH <= store.max_params:  # (one statement, made once)
        sql = _INSERTS.get(len(rows))
        if sql is None:
            sql = _INSERTS[len(rows)] = f"{_INSERT} VALUES {', '.join([_ROW] * len(rows))}"
        store.tx_unfolded.execute(sql, [value for row in rows for value in row])
    elif rows:
        store.insert_rows(_INSERT, _WIDTH, rows)
    store.appended += len(rows)
    return [fresh_claim(op) for op in batch.requests]


def _message(m: MessageRow) -> tuple[Any, ...]:
    return (m.branch_id, m.seq, 0, m.message_id, m.kind, m.body, m.call_id)


def _taken(tx: Tx, batch: Batch, first: dict[str, int]) -> bool:
    """Whether anything stands in the way of appending *batch* (one statement): a message of
    its branches at or after its first position (in the log or the tables), a call row
    holding one of its keys, a call of its queued for workers. (A batch appended is small:
    its lists stay far below any limit on parameters.)"""
    params: list[Any] = []
    for branch_id, seq in first.items():
        params += (branch_id, seq, branch_id, seq)
    by_branch: dict[str, list[str]] = {}
    for op in batch.requests:
        by_branch.setdefault(op.branch_id, []).append(op.call_id)
    for branch_id, call_ids in by_branch.items():
        params += [f"{branch_id}/{call_id}" for call_id in call_ids]
        params += [branch_id, *call_ids]
    if not params:
        return False
    shape = (len(first), *[len(call_ids) for call_ids in by_branch.values()])
    sql = _TAKEN.get(shape)
    if sql is None:
        if len(_TAKEN) >= 256:  # (many branches of many shapes: bounded)
            _TAKEN.clear()
        sql = _TAKEN[shape] = _taken_sql(len(first), shape[1:])
    return bool(tx.execute(sql, params))


def _taken_sql(branches: int, calls: tuple[int, ...]) -> str:
    """The statement of :func:`_taken` for *branches* branches with messages and, per branch
    with requests, *calls* call ids."""
    parts: list[str] = []
    for _ in range(branches):
        parts.append("SELECT 1 FROM lionexec_log WHERE branch_id = ? AND seq >= ?")
        parts.append("SELECT 1 FROM lionexec_messages WHERE branch_id = ? AND seq >= ?")
    for count in calls:
        marks = ", ".join("?" * count)
        parts.append(f"SELECT 1 FROM lionexec_calls WHERE idempotency_key IN ({marks})")
        parts.append(f"SELECT 1 FROM lionexec_queue WHERE branch_id = ? AND call_id IN ({marks})")
    return " UNION ALL ".join(parts) + " LIMIT 1"


#: The statement of :func:`_taken`, by the batch's shape (its branches with messages; the
#: call ids of each branch with requests). A batch appended is small: few shapes occur.
_TAKEN: dict[tuple[int, ...], str] = {}


def fold(store: SqlStore) -> int:
    """Move every log row into the tables (in the caller's transaction); return how many.

    Messages go to ``lionexec_messages`` as they are; a claim becomes its call's row (one
    attempt); an outcome marks its call's row done. In SQL alone (SQLite lets go of the GIL
    while a statement runs: a fold on the writer thread leaves the trio thread running).
    """
    tx = store.tx_unfolded
    counted = tx.execute("SELECT COUNT(*), COALESCE(SUM(event = 0), 0) FROM lionexec_log")
    total, messages = (int(n) for n in counted[0])
    if not total:
        return 0
    inserted = tx.execute_count(
        "INSERT INTO lionexec_messages (branch_id, seq, message_id, kind, body, call_id) "
        "SELECT branch_id, seq, message_id, kind, body, call_id FROM lionexec_log "
        "WHERE event = 0 ORDER BY branch_id, seq ON CONFLICT (branch_id, seq) DO NOTHING"
    )
    if inserted != messages:  # a position held already: the same message, or another's
        rows = tx.execute(
            "SELECT branch_id, seq, message_id, kind, body, call_id FROM lionexec_log "
            "WHERE event = 0 ORDER BY branch_id, seq"
        )
        store.insert_message_rows([MessageRow(r[0], int(r[1]), *r[2:]) for r in rows])
    tx.execute(
        f"INSERT INTO lionexec_calls ({_CALL_COLUMNS}) SELECT idempotency_key, branch_id, "
        f"call_id, message_id, function, arguments, effect, 1, '{REQUESTED}', NULL, NULL, at, "
        "NULL FROM lionexec_log WHERE event = 1 ORDER BY branch_id, seq ON CONFLICT DO NOTHING"
    )
    if not store.update_from:  # (SQLite before 3.33: no UPDATE ... FROM)
        done = tx.execute(
            "SELECT branch_id, call_id, outcome, body, at FROM lionexec_log "
            "WHERE event = 0 AND outcome IS NOT NULL"
        )
        store.mark_done(
            [
                OutcomeOp(branch_id=b, call_id=c, outcome=o, response=r, at=a)
                for b, c, o, r, a in done
            ]
        )
        tx.execute("DELETE FROM lionexec_log")
        return total
    # (the log drives the join: "+" keeps the planner off the state index)
    tx.execute(
        f"UPDATE lionexec_calls SET state = '{DONE}', outcome = l.outcome, response = l.body, "
        "finished_at = l.at FROM lionexec_log AS l WHERE l.event = 0 AND l.outcome IS NOT NULL "
        "AND lionexec_calls.branch_id = l.branch_id AND lionexec_calls.call_id = l.call_id "
        f"AND +lionexec_calls.state = '{REQUESTED}'"
    )
    tx.execute("DELETE FROM lionexec_log")
    return total
