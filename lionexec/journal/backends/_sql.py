"""The schema both SQL backends share, its migrations, and the :class:`Store` over SQL.

One schema design, written once in the SQL both SQLite and PostgreSQL accept (``TEXT``,
``INTEGER``/``BIGINT``, ``DOUBLE PRECISION``, ``ON CONFLICT DO NOTHING``). The statements use
``?`` placeholders; the PostgreSQL connection adapter turns them into ``%s``.

Versions: ``lionexec_schema_version`` holds one row, the version the database is at.
Opening a journal applies every migration newer than that, in order, each in its own
transaction; a database at a version newer than :data:`SCHEMA_VERSION` is refused
(:class:`~lionexec.journal.JournalSchemaError`) and left untouched.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, Protocol

import attrs

from lionexec._jsonable import utf8_text

from ..errors import JournalError, JournalSchemaError
from ._bulk import (
    BRANCHES,
    CALL_COLUMNS,
    CALL_TYPES,
    MESSAGE_TYPES,
    MESSAGES,
    OPTIMISM_FAILED,
    UNQUEUED,
    Combined,
    done,
    insert,
    message_values,
    unqueued,
)
from ._log import LOG_TABLE, append, fold
from .base import (
    DONE,
    EXPIRED,
    PENDING,
    REQUESTED,
    ApprovalRow,
    Batch,
    CallRow,
    Claim,
    MessageRow,
    OutcomeOp,
    Queued,
    RequestOp,
    claim_for,
    fresh_claim,
    new_row,
)

__all__ = [
    "BRANCH_LOCK",
    "MIGRATIONS",
    "OPTIMISM_FAILED",
    "SCHEMA_VERSION",
    "SqlStore",
    "Tx",
    "Unread",
    "call_ids_in",
    "lock_branches",
    "migrate",
]


def _index_call_ids(tx: Tx) -> None:
    """Migration 4: fill ``call_id`` in the requests and responses journaled before it (one
    read of each, one update of each: once, when a journal of version 3 or older is opened)."""
    rows = tx.execute(
        "SELECT branch_id, seq, message_id, kind, body FROM lionexec_messages "
        "WHERE kind IN ('action_request', 'action_response') ORDER BY branch_id, seq"
    )
    call_ids: dict[str, str] = {}  # request message id -> its call id
    updates = []
    for branch_id, seq, message_id, kind, body in rows:
        content = json.loads(body).get("content") or {}
        if kind == "action_request":
            call_id = content.get("call_id")
            if isinstance(call_id, str):  # as the sink writes it: a lone surrogate as U+FFFD
                call_id = call_ids[message_id] = utf8_text(call_id)
        else:  # a response follows its request
            call_id = call_ids.get(str(content.get("action_request_id")))
        if isinstance(call_id, str):
            updates.append((call_id, branch_id, seq))
    if updates:
        tx.executemany(
            "UPDATE lionexec_messages SET call_id = ? WHERE branch_id = ? AND seq = ?", updates
        )


#: Each version's statements (or steps run with the transaction), oldest first. Never edit a
#: released one: add a version.
MIGRATIONS: Final[tuple[tuple[int, tuple[str | Callable[[Tx], None], ...]], ...]] = (
    (
        1,
        (
            """CREATE TABLE lionexec_branches (
                branch_id TEXT PRIMARY KEY,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE lionexec_messages (
                branch_id TEXT NOT NULL,
                seq BIGINT NOT NULL,
                message_id TEXT NOT NULL UNIQUE,
                kind TEXT NOT NULL,
                body TEXT NOT NULL,
                PRIMARY KEY (branch_id, seq)
            )""",
            """CREATE TABLE lionexec_calls (
                idempotency_key TEXT PRIMARY KEY,
                branch_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                request_id TEXT NOT NULL,
                function TEXT NOT NULL,
                arguments TEXT NOT NULL,
                effect TEXT NOT NULL,
                attempts INTEGER NOT NULL,
                state TEXT NOT NULL,
                outcome TEXT,
                response TEXT,
                requested_at DOUBLE PRECISION NOT NULL,
                finished_at DOUBLE PRECISION,
                UNIQUE (branch_id, call_id)
            )""",
            "CREATE INDEX lionexec_calls_state ON lionexec_calls (state, branch_id)",
        ),
    ),
    (
        2,  # the work queue of submitted calls, shared rate limits (journal.workers)
        (
            """CREATE TABLE lionexec_queue (
                branch_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                function TEXT NOT NULL,
                request TEXT NOT NULL,
                state TEXT NOT NULL,
                not_before DOUBLE PRECISION NOT NULL,
                fence BIGINT NOT NULL,
                owner TEXT,
                lease_until DOUBLE PRECISION,
                claimed_at DOUBLE PRECISION,
                effect TEXT,
                attempts INTEGER NOT NULL,
                deferrals INTEGER NOT NULL,
                outcome TEXT,
                response TEXT,
                worker TEXT,
                submitted_at DOUBLE PRECISION NOT NULL,
                finished_at DOUBLE PRECISION,
                PRIMARY KEY (branch_id, call_id)
            )""",
            "CREATE INDEX lionexec_queue_ready ON lionexec_queue (state, not_before)",
            """CREATE TABLE lionexec_limits (
                name TEXT PRIMARY KEY,
                tat DOUBLE PRECISION NOT NULL,
                used BIGINT NOT NULL,
                next_slot DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE lionexec_rejected_writes (
                branch_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                worker TEXT NOT NULL,
                fence BIGINT NOT NULL,
                outcome TEXT NOT NULL,
                at DOUBLE PRECISION NOT NULL
            )""",
        ),
    ),
    (
        3,  # durable approvals (Journal.approvals)
        (
            """CREATE TABLE lionexec_approvals (
                approval_id TEXT PRIMARY KEY,
                idempotency_key TEXT NOT NULL,
                branch_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                request_id TEXT NOT NULL,
                function TEXT NOT NULL,
                arguments TEXT NOT NULL,
                digest TEXT NOT NULL,
                policy TEXT NOT NULL,
                rule TEXT,
                escalation TEXT NOT NULL,
                state TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION,
                decided_at DOUBLE PRECISION,
                decided_by TEXT,
                reason TEXT,
                UNIQUE (branch_id, call_id)
            )""",
            "CREATE INDEX lionexec_approvals_state ON lionexec_approvals (state, expires_at)",
        ),
    ),
    (
        4,  # every request's and response's call id, indexed: a call id is used once per
        # branch, even after Branch(retain=...) trimmed its call from memory, and one the
        # branch answered is not submitted to workers (SqlStore.known_call_ids)
        (
            "ALTER TABLE lionexec_messages ADD COLUMN call_id TEXT",
            "CREATE INDEX lionexec_messages_call ON lionexec_messages (branch_id, call_id)",
            _index_call_ids,
        ),
    ),
    (5, (LOG_TABLE,)),  # the append-only log of plain commits (SQLite: see ._log)
)

#: The newest schema version this lionexec writes.
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]

_APPROVAL_COLUMNS = (
    "approval_id, idempotency_key, branch_id, call_id, request_id, function, arguments, "
    "digest, policy, rule, escalation, state, created_at, expires_at, decided_at, decided_by, "
    "reason"
)
_CHUNK = 400  # keys per IN (...) list: well under every placeholder limit

#: The first key of the transaction-scoped advisory locks a PostgreSQL transaction takes per
#: branch (``pg_advisory_xact_lock(BRANCH_LOCK, <CRC-32 of the branch id>)``, the two-key
#: form: it never meets a one-key lock, such as the example server's per-conversation lock).
BRANCH_LOCK: Final = 0x6C786271  # "lxbq"


def branch_locks(branch_ids: Iterable[str]) -> str:
    """The statement that takes the transaction-scoped advisory lock of each of *branch_ids*
    on PostgreSQL, in one order (of their keys, left to right: two transactions never wait
    for each other in a cycle), with no parameters (the keys are numbers computed here).

    ``Journal.submit`` and a commit that claims calls take the locks of
    their branches before they read the other's table (``lionexec_calls``,
    ``lionexec_queue``): at READ COMMITTED, each could otherwise check before the other
    commits, and a call would be both queued for workers and claimed by a branch's
    ``act()``. A statement of its own: the statements after it see what the transaction
    they waited for committed. (SQLite needs none: its ``BEGIN IMMEDIATE`` transactions run
    one at a time.)
    """
    return "SELECT " + ", ".join(
        f"pg_advisory_xact_lock({BRANCH_LOCK}, {key})" for key in branch_keys(branch_ids)
    )


def branch_keys(branch_ids: Iterable[str]) -> list[int]:
    """The second keys of the advisory locks of *branch_ids* (see :func:`branch_locks`), in
    the order they are taken."""
    return sorted({zlib.crc32(b.encode("utf-8", "surrogatepass")) - 2**31 for b in branch_ids})


def lock_branches(tx: Tx, branch_ids: Iterable[str]) -> None:
    """Take the advisory locks of *branch_ids* (PostgreSQL only; see :func:`branch_locks`)."""
    tx.execute(branch_locks(branch_ids))


class Unread(Protocol):
    """What a transaction of PostgreSQL's pipeline offers: statements whose results are not
    read, sent with the next statement whose result is read (see :class:`SqlStore`)."""

    def send(self, sql: str, params: Sequence[Any]) -> None:
        """Send *sql*; it fails, if it does, at the next statement whose result is read."""
        ...


class Tx(Protocol):
    """One open transaction of a SQL connection (``?`` placeholders)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run *sql* for each of *rows*; return the number of rows they changed."""
        ...

    def execute_count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run *sql* once; return the number of rows it changed."""
        ...


def current_version(tx: Tx, has_table: bool) -> int:
    if not has_table:
        return 0
    rows = tx.execute("SELECT version FROM lionexec_schema_version")
    return int(rows[0][0]) if rows else 0


def migrate(tx: Tx, version: int, *, target: str) -> list[int]:
    """Apply every migration after *version* in *tx*; return the versions applied.

    Raises :class:`JournalSchemaError` for a database newer than this lionexec.
    """
    if version > SCHEMA_VERSION:
        raise JournalSchemaError(
            f"the journal at {target} has schema version {version}; this lionexec knows "
            f"versions up to {SCHEMA_VERSION}: upgrade lionexec to open it",
            found=version,
            supported=SCHEMA_VERSION,
        )
    applied = []
    if version == 0:
        tx.execute("CREATE TABLE lionexec_schema_version (version INTEGER NOT NULL)")
        tx.execute("INSERT INTO lionexec_schema_version (version) VALUES (0)")
    for number, statements in MIGRATIONS:
        if number <= version:
            continue
        try:
            for statement in statements:
                if callable(statement):
                    statement(tx)
                else:
                    tx.execute(statement)
        except JournalError:
            raise
        except Exception as exc:  # (the transaction is rolled back: the journal is untouched)
            raise JournalError(
                f"the journal at {target} could not be migrated to schema version {number}: "
                f"{exc!r}"
            ) from exc
        tx.execute("UPDATE lionexec_schema_version SET version = ?", (number,))
        applied.append(number)
    return applied


def call_ids_in(
    tx: Tx, table: str, branch_id: str, call_ids: Sequence[str], *, where: str = ""
) -> set[str]:
    """Which of *call_ids* have a row of branch *branch_id* in *table* (that also meets
    *where*, an ``AND ...`` clause without parameters); :data:`_CHUNK` ids per statement."""
    found: set[str] = set()
    for start in range(0, len(call_ids), _CHUNK):
        chunk = call_ids[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        rows = tx.execute(
            f"SELECT call_id FROM {table} WHERE branch_id = ?{where} AND call_id IN ({marks})",
            (branch_id, *chunk),
        )
        found.update(row[0] for row in rows)
    return found


def _call(row: Sequence[Any]) -> CallRow:
    return CallRow(
        key=row[0],
        branch_id=row[1],
        call_id=row[2],
        request_id=row[3],
        function=row[4],
        arguments=row[5],
        effect=row[6],
        attempts=int(row[7]),
        state=row[8],
        outcome=row[9],
        response=row[10],
        requested_at=float(row[11]),
        finished_at=None if row[12] is None else float(row[12]),
    )


def _where(branch_id: str | None, state: str | None) -> tuple[str, list[str]]:
    """A ``WHERE`` clause (and its parameters) for one branch and one state, each if given."""
    conditions = [
        (column, value)
        for column, value in (("branch_id", branch_id), ("state", state))
        if value is not None
    ]
    if not conditions:
        return "", []
    clause = " WHERE " + " AND ".join(f"{column} = ?" for column, _ in conditions)
    return clause, [value for _, value in conditions]


_BRANCH_TYPES = ("text", "double precision")


class SqlStore:
    """A :class:`~lionexec.journal.backends.Store` over one SQL transaction.

    A batch's rows go in multi-row statements. With *bulk* (PostgreSQL: every statement is
    a round trip to the server) one statement each (a ``VALUES`` list of a few rows, one
    array per column beyond: see :mod:`._bulk`); otherwise (SQLite) as
    ``VALUES (...), (...)`` lists of at most *max_params* parameters, never one statement per
    row: ``sqlite3`` releases the GIL around every statement, and taking it back waits for
    the trio thread's switch interval (5 ms) whenever that thread is busy, so ``executemany``
    over 1,000 rows could take seconds on a loaded server (0.04 ms a row this way).

    With *unread* (PostgreSQL's pipeline: a statement sent with it waits for the next one
    whose result is read, so that they share one round trip) a commit is sent whole, none of
    its results read: each statement that would need a look at its result (every message
    inserted, every key claimed) checks it on the server instead, and fails the transaction
    (:data:`OPTIMISM_FAILED`) if it does not hold. The backend then runs the transaction
    again without *unread*, the long way (so a transaction function may run twice).
    """

    def __init__(
        self,
        tx: Tx,
        *,
        bulk: bool = False,
        max_params: int = 999,
        update_from: bool = True,
        log: bool = False,
        unread: Unread | None = None,
    ) -> None:
        self._tx = tx
        self._unread = unread
        self.bulk = bulk
        self.max_params = max_params
        #: ``UPDATE ... FROM`` is understood (SQLite 3.33 and later); else one row at a time.
        self.update_from = update_from
        #: Plain commits are appended to the log (SQLite; see :mod:`._log`), and everything
        #: else folds the log first.
        self.log = log
        self._unfolded = log
        #: Log rows this transaction appended, and folded.
        self.appended = 0
        self.folded = 0

    @property
    def tx(self) -> Tx:
        """The transaction, for SQL of the caller's own (the log folded first: every table
        holds everything committed)."""
        self._fold()
        return self._tx

    @property
    def tx_unfolded(self) -> Tx:
        """The transaction, the log left as it is (for :mod:`._log`)."""
        return self._tx

    def _fold(self) -> None:
        if self._unfolded:
            self._unfolded = False
            self.folded += fold(self)

    @property
    def log_empty(self) -> bool:
        """Whether this transaction folded the log (it holds nothing now)."""
        return self.log and not self._unfolded

    def fold(self) -> int:
        """Fold the log into the tables now (see :mod:`._log`); return the rows folded."""
        self._fold()
        return self.folded

    # (for the log: see lionexec.journal.backends._log)
    def insert_rows(self, head: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
        """``head VALUES ...`` over *rows*, in as few statements as the limits allow."""
        for sql, params in self._value_lists(head, width, rows):
            self._tx.execute(sql, params)

    def insert_message_rows(self, messages: Sequence[MessageRow]) -> None:
        self._insert_messages(messages)

    def mark_done(self, outcomes: Sequence[OutcomeOp]) -> None:
        self._mark_done(outcomes)

    def _value_lists(
        self, head: str, width: int, rows: Sequence[Sequence[Any]], tail: str = ""
    ) -> Iterator[tuple[str, list[Any]]]:
        """``head VALUES (?, ...), ... tail`` statements with their parameters, covering
        *rows* in as few statements as :attr:`max_params` allows."""
        per = max(1, self.max_params // width)
        one = "(" + ", ".join("?" * width) + ")"
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            values = ", ".join([one] * len(chunk))
            yield f"{head} VALUES {values} {tail}", list(itertools.chain.from_iterable(chunk))

    def _insert(
        self, head: str, types: Sequence[str], rows: Sequence[Sequence[Any]], tail: str = ""
    ) -> int:
        """``head VALUES (?, ...), ... tail`` over *rows* (:meth:`_value_lists`); in bulk, one
        statement (:func:`._bulk.insert`). Returns how many rows were inserted."""
        if not rows:
            return 0
        if not self.bulk:
            return sum(
                self._tx.execute_count(sql, params)
                for sql, params in self._value_lists(head, len(types), rows, tail)
            )
        sql, params = insert(head, types, rows, tail)
        return len(self._tx.execute(f"{sql} RETURNING 1", params))

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        """A statement whose result is not read (sent with the next one that is, if it can)."""
        if self._unread is not None:
            self._unread.send(sql, params)
        else:
            self._tx.execute(sql, params)

    def commit(self, batch: Batch) -> list[Claim | Queued]:
        if (
            self._unread is not None
            and not self.log
            and not batch.approvals
            and len({op.key for op in batch.requests}) == len(batch.requests)
        ):  # (else: the long way, each result read)
            return self._commit_unread(batch)
        tx = self._tx
        self._insert(
            BRANCHES,
            _BRANCH_TYPES,
            batch.branches,
            "ON CONFLICT DO NOTHING",
        )
        if self._unfolded:
            appended = append(self, batch)
            if appended is not None:
                return list(appended)
        self._fold()
        self._insert_messages(batch.messages)
        if batch.approvals:
            tx.executemany(
                f"INSERT INTO lionexec_approvals ({_APPROVAL_COLUMNS}) VALUES "
                f"({', '.join('?' * 17)}) ON CONFLICT DO NOTHING",
                [attrs.astuple(row) for row in batch.approvals],
            )
        claims: list[Claim | Queued] = []
        if batch.requests:
            claims = self._claim(batch)
        if batch.outcomes:
            self._mark_done(batch.outcomes)
        return claims

    def _commit_unread(self, batch: Batch) -> list[Claim | Queued]:
        """:meth:`commit` with no result read (see the class docs), in two statements (each
        costs the client more than the server: they are combined): the branches, messages
        (and the outcomes, if no call is claimed) and the branches' locks (see
        :func:`branch_locks`), then, seeing what the transactions waited for committed, the
        claims and the outcomes (a statement of their own if an outcome is of a call claimed
        here: a statement does not see its own inserts)."""
        unread = self._unread
        assert unread is not None
        ops = batch.requests
        first, second, third = Combined(), Combined(), Combined()
        if batch.branches:
            first.add(*insert(BRANCHES, _BRANCH_TYPES, batch.branches, "ON CONFLICT DO NOTHING"))
        if batch.messages:
            rows = [message_values(m) for m in batch.messages]
            first.add(
                *insert(MESSAGES, MESSAGE_TYPES, rows, "ON CONFLICT (branch_id, seq) DO NOTHING"),
                expect=len(rows),
            )
        fresh = [fresh_claim(op) for op in ops]
        if fresh:
            # (the keys as parameters: one prepared statement serves every branch)
            keys = branch_keys(op.branch_id for op in ops)
            lock = f"pg_advisory_xact_lock({BRANCH_LOCK}, ?::integer)"
            first.also(", ".join([lock] * len(keys)), keys)
            second.add(
                *unqueued([_values(claim.row) for claim in fresh]),
                expect=len(fresh),
            )
        if batch.outcomes:
            claimed = {(op.branch_id, op.call_id) for op in ops}
            late = any((o.branch_id, o.call_id) in claimed for o in batch.outcomes)
            (third if late else second if fresh else first).add(*done(batch.outcomes))
        for statement in (first, second, third):
            if statement:
                unread.send(*statement.sql())
        return list[Claim | Queued](fresh)

    def _mark_done(self, outcomes: Sequence[OutcomeOp]) -> None:
        """Mark the calls of *outcomes* done with their outcome, in multi-row statements."""
        tx = self._tx
        rows = [(o.branch_id, o.call_id, o.outcome, o.response, o.at) for o in outcomes]
        if self.bulk:
            self._write(*done(outcomes))
        elif self.update_from:
            for sql, params in self._value_lists(
                f"UPDATE lionexec_calls SET state = '{DONE}', outcome = v.column3, "
                "response = v.column4, finished_at = v.column5 FROM (",
                5,
                rows,
                f") AS v WHERE lionexec_calls.branch_id = v.column1 "
                f"AND lionexec_calls.call_id = v.column2 AND lionexec_calls.state = '{REQUESTED}'",
            ):
                tx.execute(sql, params)
        else:  # (SQLite before 3.33: one row at a time)
            tx.executemany(
                "UPDATE lionexec_calls SET state = ?, outcome = ?, response = ?, finished_at = ? "
                "WHERE branch_id = ? AND call_id = ? AND state = ?",
                [
                    (DONE, outcome, response, at, branch, call, REQUESTED)
                    for branch, call, outcome, response, at in rows
                ],
            )

    def _insert_messages(self, messages: Sequence[MessageRow]) -> None:
        """Insert *messages*; a position already holding the same message is left as is.

        Idempotent, so that a commit that landed but was reported failed (past
        ``commit_timeout``) can be written again by the next one. A position holding another
        message raises :class:`~lionexec.journal.JournalError` (another writer journals the
        branch).
        """
        if not messages:
            return
        rows = [message_values(m) for m in messages]
        inserted = self._insert(
            MESSAGES, MESSAGE_TYPES, rows, "ON CONFLICT (branch_id, seq) DO NOTHING"
        )
        if inserted == len(rows):
            return
        ours: dict[str, dict[int, str]] = {}
        for m in messages:
            ours.setdefault(m.branch_id, {})[m.seq] = m.message_id
        for branch_id, wanted in ours.items():
            stored = {
                int(seq): message_id
                for seq, message_id in self._tx.execute(
                    "SELECT seq, message_id FROM lionexec_messages "
                    "WHERE branch_id = ? AND seq >= ? AND seq <= ?",
                    (branch_id, min(wanted), max(wanted)),
                )
            }
            for seq, message_id in wanted.items():
                if stored.get(seq) != message_id:
                    raise JournalError(
                        f"another writer holds this branch's next message position (one branch "
                        f"is journaled by one process at a time): position {seq} of branch "
                        f"{branch_id} holds message {stored.get(seq)!r}, not {message_id!r}"
                    )

    def _claim(self, batch: Batch) -> list[Claim | Queued]:
        """Claim the key of each request op, but of a call submitted to workers (a row of
        ``lionexec_queue``, seen in this transaction: see :func:`lock_branches`), for which
        nothing is claimed (:class:`Queued`)."""
        tx = self._tx
        ops = batch.requests
        # PostgreSQL: the branches' locks (branch_locks) before the queue is read (pipelined:
        # in the round trip of the savepoint)
        locks = branch_locks(op.branch_id for op in ops) if self.bulk else ""
        if len({op.key for op in ops}) == len(ops):
            # The usual case, every key new and no call queued: insert the rows as claimed
            # (one attempt each) and read nothing back. If any key or call is taken, or
            # queued, undo and go the long way. (Reading back and updating the rows it had just
            # inserted took a third of the writer's time with many concurrent calls.)
            fresh = [fresh_claim(op) for op in ops]
            if locks:
                self._write(locks)
                locks = ""
            tx.execute("SAVEPOINT lionexec_claim")
            inserted = self._insert_unqueued([_values(claim.row) for claim in fresh])
            if inserted == len(fresh):  # (the savepoint ends with the transaction: on
                # PostgreSQL a RELEASE of its own would be one more round trip)
                return list[Claim | Queued](fresh)
            tx.execute("ROLLBACK TO SAVEPOINT lionexec_claim")  # (the locks are kept)
            tx.execute("RELEASE SAVEPOINT lionexec_claim")
        elif locks:
            self._write(locks)
        queued = self._queued(ops)
        if queued:
            ops = [op for op in ops if (op.branch_id, op.call_id) not in queued]
        claimed = iter(self._claim_slowly(ops) if ops else [])
        return [
            Queued(*queued[(op.branch_id, op.call_id)])
            if (op.branch_id, op.call_id) in queued
            else next(claimed)
            for op in batch.requests
        ]

    def _insert_unqueued(self, rows: Sequence[Sequence[Any]]) -> int:
        """Insert the call rows *rows* (as :meth:`_insert` would) but those of calls queued
        for workers, and those whose key or call is taken; return how many were inserted."""
        if self.bulk:
            sql, params = unqueued(rows)
            return len(self._tx.execute(f"{sql} RETURNING 1", params))
        head = f"INSERT INTO lionexec_calls ({CALL_COLUMNS}) SELECT * FROM"
        return sum(
            self._tx.execute_count(sql, params)
            for sql, params in self._value_lists(
                f"{head} (", len(CALL_TYPES), rows, f") AS v{UNQUEUED}"
            )
        )

    def _queued(self, ops: Sequence[RequestOp]) -> dict[tuple[str, str], tuple[str, str | None]]:
        """The calls of *ops* submitted to workers: their queue row's request and response
        (or ``None``, not answered yet), by ``(branch_id, call_id)``."""
        by_branch: dict[str, list[str]] = {}
        for op in ops:
            by_branch.setdefault(op.branch_id, []).append(op.call_id)
        found: dict[tuple[str, str], tuple[str, str | None]] = {}
        for branch_id, call_ids in by_branch.items():
            for start in range(0, len(call_ids), _CHUNK):
                chunk = call_ids[start : start + _CHUNK]
                marks = ", ".join("?" * len(chunk))
                for call_id, request, response in self._tx.execute(
                    "SELECT call_id, request, response FROM lionexec_queue WHERE branch_id = ? "
                    f"AND call_id IN ({marks})",
                    (branch_id, *chunk),
                ):
                    found[(branch_id, call_id)] = (request, response)
        return found

    def _claim_slowly(self, ops: Sequence[RequestOp]) -> list[Claim | Queued]:
        """Claim the keys of *ops* (none queued), reading back the rows that hold them."""
        tx = self._tx
        insert = f"INSERT INTO lionexec_calls ({CALL_COLUMNS})"
        self._insert(
            insert, CALL_TYPES, [_values(new_row(op)) for op in ops], "ON CONFLICT DO NOTHING"
        )
        keys = list(dict.fromkeys(op.key for op in ops))
        rows: dict[str, CallRow] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            for raw in tx.execute(
                f"SELECT {CALL_COLUMNS} FROM lionexec_calls WHERE idempotency_key IN ({marks})",
                chunk,
            ):
                row = _call(raw)
                rows[row.key] = row
        claims: list[Claim | Queued] = []
        counted: dict[str, int] = {}
        for op in ops:
            held = rows.get(op.key)
            if held is None:  # this call holds another key (its key derivation changed)
                found = tx.execute(
                    f"SELECT {CALL_COLUMNS} FROM lionexec_calls "
                    "WHERE branch_id = ? AND call_id = ?",
                    (op.branch_id, op.call_id),
                )
                held = _call(found[0])
            row = held
            claim, after = claim_for(op, row)
            rows[row.key] = after
            if claim.mine:
                counted[row.key] = after.attempts
            claims.append(claim)
        if counted and not self.bulk:
            tx.executemany(
                "UPDATE lionexec_calls SET attempts = ? WHERE idempotency_key = ?",
                [(attempts, key) for key, attempts in counted.items()],
            )
        elif counted:  # each key is counted once per batch: one more attempt each
            tx.execute(
                "UPDATE lionexec_calls SET attempts = attempts + 1 "
                "WHERE idempotency_key = ANY(?::text[])",
                [list(counted)],
            )
        return claims

    def branches(self) -> list[str]:
        self._fold()
        rows = self._tx.execute(
            "SELECT branch_id FROM lionexec_branches ORDER BY created_at, branch_id"
        )
        return [row[0] for row in rows]

    def messages(self, branch_id: str) -> list[MessageRow]:
        self._fold()
        return self.messages_from(branch_id, 0)

    def messages_from(self, branch_id: str, start: int) -> list[MessageRow]:
        if self._unfolded:
            # The log and the table together, without folding (a read that writes nothing:
            # the few rows of a kept history's tail). A committed position is in one of the
            # two, never both: a fold moves its rows in one transaction.
            rows = self._tx.execute(
                "SELECT branch_id, seq, message_id, kind, body, call_id FROM lionexec_messages "
                "WHERE branch_id = ? AND seq >= ? UNION ALL "
                "SELECT branch_id, seq, message_id, kind, body, call_id FROM lionexec_log "
                "WHERE event = 0 AND branch_id = ? AND seq >= ? ORDER BY 2",
                (branch_id, start, branch_id, start),
            )
        else:
            rows = self._tx.execute(
                "SELECT branch_id, seq, message_id, kind, body, call_id FROM lionexec_messages "
                "WHERE branch_id = ? AND seq >= ? ORDER BY seq",
                (branch_id, start),
            )
        return [MessageRow(r[0], int(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    def known_call_ids(
        self, branch_id: str, call_ids: Sequence[str], *, answered: bool = False
    ) -> set[str]:
        self._fold()
        kind = " AND kind = 'action_response'" if answered else ""
        return call_ids_in(self._tx, "lionexec_messages", branch_id, call_ids, where=kind)

    def calls(self, branch_id: str | None, unfinished: bool) -> list[CallRow]:
        self._fold()
        clause, params = _where(branch_id, REQUESTED if unfinished else None)
        rows = self._tx.execute(
            f"SELECT {CALL_COLUMNS} FROM lionexec_calls{clause} "
            "ORDER BY requested_at, idempotency_key",
            params,
        )
        return [_call(row) for row in rows]

    def call(self, key: str) -> CallRow | None:
        self._fold()
        rows = self._tx.execute(
            f"SELECT {CALL_COLUMNS} FROM lionexec_calls WHERE idempotency_key = ?", (key,)
        )
        return _call(rows[0]) if rows else None

    # -- approvals ------------------------------------------------------------------------

    def approval(self, approval_id: str) -> ApprovalRow | None:
        self._fold()
        rows = self._tx.execute(
            f"SELECT {_APPROVAL_COLUMNS} FROM lionexec_approvals WHERE approval_id = ?",
            (approval_id,),
        )
        return _approval(rows[0]) if rows else None

    def approval_of(self, branch_id: str, call_id: str) -> ApprovalRow | None:
        self._fold()
        rows = self._tx.execute(
            f"SELECT {_APPROVAL_COLUMNS} FROM lionexec_approvals "
            "WHERE branch_id = ? AND call_id = ?",
            (branch_id, call_id),
        )
        return _approval(rows[0]) if rows else None

    def approvals(self, branch_id: str | None, state: str | None) -> list[ApprovalRow]:
        self._fold()
        clause, params = _where(branch_id, state)
        rows = self._tx.execute(
            f"SELECT {_APPROVAL_COLUMNS} FROM lionexec_approvals{clause} "
            "ORDER BY created_at, approval_id",
            params,
        )
        return [_approval(row) for row in rows]

    def set_approval(
        self,
        approval_id: str,
        expected: str,
        state: str,
        at: float,
        by: str | None,
        reason: str | None,
    ) -> ApprovalRow | None:
        self._fold()
        rows = self._tx.execute(
            "UPDATE lionexec_approvals SET state = ?, decided_at = ?, decided_by = ?, reason = ? "
            f"WHERE approval_id = ? AND state = ? RETURNING {_APPROVAL_COLUMNS}",
            (state, at, by, reason, approval_id, expected),
        )
        return _approval(rows[0]) if rows else None

    def expire_approvals(self, now: float) -> int:
        self._fold()
        rows = self._tx.execute(
            "UPDATE lionexec_approvals SET state = ?, decided_at = ?, decided_by = NULL, "
            "reason = NULL WHERE state = ? AND expires_at <= ? RETURNING approval_id",
            (EXPIRED, now, PENDING, now),
        )
        return len(rows)


def _approval(row: Sequence[Any]) -> ApprovalRow:
    return ApprovalRow(
        approval_id=row[0],
        idempotency_key=row[1],
        branch_id=row[2],
        call_id=row[3],
        request_id=row[4],
        function=row[5],
        arguments=row[6],
        digest=row[7],
        policy=row[8],
        rule=row[9],
        escalation=row[10],
        state=row[11],
        created_at=float(row[12]),
        expires_at=None if row[13] is None else float(row[13]),
        decided_at=None if row[14] is None else float(row[14]),
        decided_by=row[15],
        reason=row[16],
    )


def _values(row: CallRow) -> tuple[Any, ...]:
    return (
        row.key,
        row.branch_id,
        row.call_id,
        row.request_id,
        row.function,
        row.arguments,
        row.effect,
        row.attempts,
        row.state,
        row.outcome,
        row.response,
        row.requested_at,
        row.finished_at,
    )
