"""The PostgreSQL statements of the journal over arrays (one array per column, ``unnest``),
and the combined statements of a group commit that reads no result (see
:class:`~lionexec.journal.backends._sql.SqlStore`). Plain strings: no database is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .base import DONE, REQUESTED, MessageRow, OutcomeOp

__all__ = [
    "BRANCHES",
    "CALL_COLUMNS",
    "CALL_TYPES",
    "MESSAGES",
    "MESSAGE_TYPES",
    "OPTIMISM_FAILED",
    "UNQUEUED",
    "Combined",
    "columns",
    "done",
    "message_values",
    "unnest",
    "unqueued",
]

CALL_COLUMNS = (
    "idempotency_key, branch_id, call_id, request_id, function, arguments, effect, attempts, "
    "state, outcome, response, requested_at, finished_at"
)
CALL_TYPES = (*("text",) * 7, "integer", "text", "text", "text", *("double precision",) * 2)
#: The rows a claim inserts (a ``VALUES`` list or an ``unnest``, its columns ``column1``...)
#: but those of calls submitted to workers: such a call is not claimed (``Queued``).
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


def unnest(head: str, types: Sequence[str], tail: str = "") -> str:
    """``head SELECT * FROM unnest(...) tail``: rows given as one array per column."""
    arrays = ", ".join(f"?::{kind}[]" for kind in types)
    return f"{head} SELECT * FROM unnest({arrays}) {tail}"


def unqueued() -> str:
    """The claim's insert over arrays: but the rows of calls queued for workers, and those
    whose key or call is taken."""
    arrays = ", ".join(f"?::{kind}[]" for kind in CALL_TYPES)
    names = ", ".join(f"column{i}" for i in range(1, len(CALL_TYPES) + 1))
    return (
        f"INSERT INTO lionexec_calls ({CALL_COLUMNS}) SELECT * FROM unnest({arrays}) "
        f"AS v ({names}){UNQUEUED}"
    )


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
    """The ``UPDATE`` over arrays marking the calls of *outcomes* done (PostgreSQL)."""
    rows = [(o.branch_id, o.call_id, o.outcome, o.response, o.at) for o in outcomes]
    return (
        "UPDATE lionexec_calls AS c SET state = ?, outcome = v.outcome, "
        "response = v.response, finished_at = v.at "
        "FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], "
        "?::double precision[]) AS v (branch_id, call_id, outcome, response, at) "
        "WHERE c.branch_id = v.branch_id AND c.call_id = v.call_id AND c.state = ?",
        [DONE, *columns(rows, 5), REQUESTED],
    )


def message_values(m: MessageRow) -> tuple[Any, ...]:
    """*m* as the values of its columns, in :data:`MESSAGE_TYPES` order."""
    return (m.branch_id, m.seq, m.message_id, m.kind, m.body, m.call_id)


def columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows as one list per column (the arrays ``unnest`` takes)."""
    return [[row[i] for row in rows] for i in range(width)]
