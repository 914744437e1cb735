"""The PostgreSQL statements of the journal over many rows at once, and the combined
statements of a group commit that reads no result (see
:class:`~lionexec.journal.backends._sql.SqlStore`). Plain strings: no database is imported.

A statement takes its rows as a ``VALUES`` list of typed parameters up to
:data:`LISTED_ROWS` rows, and as one array per column (``unnest``) beyond: arrays keep one
statement text for any number of rows, but cost more than they save on the small commits of
sequential calls (the client dumps each array in Python, the server unpacks it: about 40 %
of such a commit's time on the machine measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .base import DONE, REQUESTED, MessageRow, OutcomeOp

__all__ = [
    "BRANCHES",
    "CALL_COLUMNS",
    "CALL_TYPES",
    "LISTED_ROWS",
    "MESSAGES",
    "MESSAGE_TYPES",
    "OPTIMISM_FAILED",
    "UNQUEUED",
    "Combined",
    "columns",
    "done",
    "insert",
    "message_values",
    "rows_from",
    "unqueued",
]

CALL_COLUMNS = (
    "idempotency_key, branch_id, call_id, request_id, function, arguments, effect, attempts, "
    "state, outcome, response, requested_at, finished_at"
)
CALL_TYPES = (*("text",) * 7, "integer", "text", "text", "text", *("double precision",) * 2)
#: The rows a claim inserts (:func:`rows_from`, its columns ``column1``...) but those of
#: calls submitted to workers: such a call is not claimed (``Queued``).
UNQUEUED = (
    " WHERE NOT EXISTS (SELECT 1 FROM lionexec_queue AS q WHERE q.branch_id = v.column2 "
    "AND q.call_id = v.column3) ON CONFLICT DO NOTHING"
)

BRANCHES = "INSERT INTO lionexec_branches (branch_id, created_at)"
MESSAGES = "INSERT INTO lionexec_messages (branch_id, seq, message_id, kind, body, call_id)"
MESSAGE_TYPES = ("text", "bigint", "text", "text", "text", "text")

#: What a statement of an unread commit raises when what it checks does not hold (its
#: SQLSTATE: division by zero, which no statement of the journal can raise otherwise).
OPTIMISM_FAILED: Final = "22012"


#: Up to how many rows a statement lists its rows (``VALUES``) rather than taking arrays.
LISTED_ROWS: Final = 8


def rows_from(
    types: Sequence[str], rows: Sequence[Sequence[Any]], names: Sequence[str] = ()
) -> tuple[str, list[Any]]:
    """A ``FROM`` item over *rows*, named ``v`` with columns *names* (``column1``... by
    default), and its parameters: a ``VALUES`` list of typed parameters for 1 to
    :data:`LISTED_ROWS` rows, else ``unnest`` over one array per column (no rows too: an
    empty ``VALUES`` list is no SQL)."""
    named = ", ".join(names or [f"column{i}" for i in range(1, len(types) + 1)])
    if 0 < len(rows) <= LISTED_ROWS:
        one = "(" + ", ".join([f"?::{kind}" for kind in types]) + ")"
        params = [value for row in rows for value in row]
        return f"(VALUES {', '.join([one] * len(rows))}) AS v ({named})", params
    arrays = ", ".join([f"?::{kind}[]" for kind in types])
    return f"unnest({arrays}) AS v ({named})", columns(rows, len(types))


def insert(
    head: str, types: Sequence[str], rows: Sequence[Sequence[Any]], tail: str = ""
) -> tuple[str, list[Any]]:
    """``head SELECT * FROM ... tail`` over *rows* (see :func:`rows_from`)."""
    source, params = rows_from(types, rows)
    return f"{head} SELECT * FROM {source} {tail}", params


def unqueued(rows: Sequence[Sequence[Any]]) -> tuple[str, list[Any]]:
    """The claim's insert of *rows*: but the rows of calls queued for workers, and those
    whose key or call is taken."""
    source, params = rows_from(CALL_TYPES, rows)
    return f"INSERT INTO lionexec_calls ({CALL_COLUMNS}) SELECT * FROM {source}{UNQUEUED}", params


class Combined:
    """Data-modifying statements combined into one PostgreSQL statement (each a ``WITH``
    query, all run to completion over one snapshot), with what its ``SELECT`` evaluates."""

    def __init__(self) -> None:
        self._queries: list[str] = []
        self._params: list[Any] = []
        self._select: list[str] = []
        self._select_params: list[Any] = []

    def __bool__(self) -> bool:
        return bool(self._queries or self._select)

    def add(self, sql: str, params: Sequence[Any], *, expect: int | None = None) -> None:
        """Add *sql*; with *expect*, the statement fails with :data:`OPTIMISM_FAILED` unless
        *sql* changes exactly *expect* rows (so a commit that reads no count still never
        commits without it)."""
        name = f"w{len(self._queries)}"
        returning = " RETURNING 1" if expect is not None else ""
        self._queries.append(f"{name} AS ({sql}{returning})")
        self._params.extend(params)
        if expect is not None:
            self.also(f"1 / ((SELECT count(*) FROM {name}) = ?::bigint)::integer", [expect])

    def also(self, expressions: str, params: Sequence[Any] = ()) -> None:
        """Evaluate *expressions* too (in its ``SELECT``, in order)."""
        self._select.append(expressions)
        self._select_params.extend(params)

    def sql(self) -> tuple[str, list[Any]]:
        """The statement and its parameters."""
        head = f"WITH {', '.join(self._queries)} " if self._queries else ""
        select = ", ".join(self._select) or "1"
        return f"{head}SELECT {select}", self._params + self._select_params


def done(outcomes: Sequence[OutcomeOp]) -> tuple[str, list[Any]]:
    """The ``UPDATE`` marking the calls of *outcomes* done (PostgreSQL)."""
    rows = [(o.branch_id, o.call_id, o.outcome, o.response, o.at) for o in outcomes]
    source, params = rows_from(_OUTCOME_TYPES, rows, _OUTCOME_NAMES)
    return (
        "UPDATE lionexec_calls AS c SET state = ?, outcome = v.outcome, "
        f"response = v.response, finished_at = v.at FROM {source} "
        "WHERE c.branch_id = v.branch_id AND c.call_id = v.call_id AND c.state = ?",
        [DONE, *params, REQUESTED],
    )


_OUTCOME_TYPES = ("text", "text", "text", "text", "double precision")
_OUTCOME_NAMES = ("branch_id", "call_id", "outcome", "response", "at")


def message_values(m: MessageRow) -> tuple[Any, ...]:
    """*m* as the values of its columns, in :data:`MESSAGE_TYPES` order."""
    return (m.branch_id, m.seq, m.message_id, m.kind, m.body, m.call_id)


def columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows as one list per column (the arrays ``unnest`` takes)."""
    return [[row[i] for row in rows] for i in range(width)]
