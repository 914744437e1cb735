"""A PostgreSQL connection driven from the trio thread: a transaction's statements go in
one pipeline through libpq's non-blocking calls, and the task waits on the socket with
trio (``wait_readable``, ``wait_writable``), with no worker thread.

The PostgreSQL backend sends its group commits this way. A hand-off to a worker thread and
back (``trio.to_thread``) cost as much as a small commit's round trip to the server, and the
worker thread held the GIL against the trio thread meanwhile.

Only the statements of a transaction that reads no result can go this way (see
:class:`Statements`): every read, and every failure that is not a plain SQL error, is the
thread-driven path's (:mod:`._postgres`).

Needs the ``postgres`` extra; imported by :mod:`._postgres` only.
"""

from __future__ import annotations

import contextlib
import functools
import select
from collections.abc import Iterable, Sequence
from typing import Any, Final

import trio
from psycopg import Connection, errors, pq
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer

__all__ = ["Reads", "Statements", "TrioConnection"]

_COMMAND_OK: Final = pq.ExecStatus.COMMAND_OK
_TUPLES_OK: Final = pq.ExecStatus.TUPLES_OK
_SYNC: Final = pq.ExecStatus.PIPELINE_SYNC
_IDLE: Final = pq.TransactionStatus.IDLE
_OK: Final = pq.ConnStatus.OK

#: Statements a connection prepares at most (beyond, statements go unnamed: the journal's
#: statements are few, but a batch over many branches locks a list of its own length).
PREPARED_MAX: Final = 128


class Reads(Exception):
    """A transaction function read a result: it cannot be sent whole (run it the long way)."""


class Statements:
    """A transaction that records what it sends and refuses every read (:class:`Reads`):
    the ``Tx`` and ``Unread`` of :class:`~._sql.SqlStore` for a commit sent whole."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: list[tuple[str, Sequence[Any]]] = []

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.sent.append((sql, params))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise Reads(sql)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        raise Reads(sql)

    def execute_count(self, sql: str, params: Sequence[Any] = ()) -> int:
        raise Reads(sql)


@functools.lru_cache(maxsize=256)
def _query(sql: str) -> tuple[bytes, tuple[PyFormat, ...]]:
    """*sql*'s ``?`` placeholders as ``$1``, ``$2``...; and the format each parameter is
    dumped in: binary for a typed one (``?::type``), as psycopg chooses for the others (the
    thread-driven path's choice: see ``_placeholders`` there)."""
    parts = sql.split("?")
    query = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], 1))
    formats = [PyFormat.BINARY if part.startswith("::") else PyFormat.AUTO for part in parts[1:]]
    return query.encode(), tuple(formats)


#: A statement ready to send: its query, its parameters dumped, their types and formats.
_Encoded = tuple[bytes, Sequence[Buffer | None], tuple[int, ...], Sequence[pq.Format]]


class TrioConnection:
    """One autocommit psycopg connection, used only from the trio thread through this
    object once made (its ``BEGIN`` and ``COMMIT`` are statements of the pipeline).

    Not for concurrent use: :attr:`busy` says a transaction is under way.
    """

    def __init__(self, conn: Connection[Any], *, cancel_timeout: float = 5.0) -> None:
        self.conn = conn
        #: Seconds the server is given to cancel an abandoned transaction's query.
        self.cancel_timeout = cancel_timeout
        self.busy = False
        self._transformer = Transformer.from_context(conn)
        self._prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._seen: set[tuple[bytes, tuple[int, ...]]] = set()
        self._names = 0
        #: The server said it ends the session (a ``FATAL`` message while idle, which libpq
        #: hands to the notice handler). It closes the socket after that, and a little
        #: later: a transaction sent in between would fail.
        self._ending = False
        conn.add_notice_handler(self._on_notice)

    def _on_notice(self, diagnostic: errors.Diagnostic) -> None:
        if diagnostic.severity_nonlocalized in ("FATAL", "PANIC"):
            self._ending = True

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    def usable(self) -> bool:
        """Whether the connection is open and idle, as far as can be seen without waiting.
        What the server sent since the last transaction (nothing, usually) is read now, so
        that a connection it ended meanwhile (an error message, then the end of the stream)
        is found lost, and closed, before anything is sent over it, rather than failing a
        commit. The error message is enough: the end of the stream may come later."""
        if self.conn.closed:
            return False
        pgconn = self.conn.pgconn
        try:
            fd = pgconn.socket
            for _ in range(8):  # (bounded: a server that keeps talking is not idle)
                if not select.select([fd], [], [], 0)[0]:
                    idle = pgconn.status == _OK and pgconn.transaction_status == _IDLE
                    if idle and not self._ending:
                        return True
                    break
                pgconn.consume_input()  # (raises at the end of the stream)
                pgconn.is_busy()  # (parses what was read: a FATAL message reaches _on_notice)
        except (errors.OperationalError, OSError):
            pass
        self.close()
        return False

    def close(self) -> None:
        """Close the connection now (a transaction under way is rolled back by the server)."""
        if self.conn.closed:
            return
        try:
            fd = self.conn.pgconn.socket
        except errors.OperationalError:
            pass  # (libpq closed its socket already: that number may be another's now)
        else:
            trio.lowlevel.notify_closing(fd)
        self.conn.close()

    async def transact(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run *statements* in one transaction, in one round trip: ``BEGIN``, each, ``COMMIT``.

        Raises the psycopg error of a parameter that cannot be sent (nothing sent), or of the
        first statement that failed (the transaction rolled back: one round trip more), or
        of the connection (then closed). Cancellation: the connection is closed at once (the
        server rolls back what it did not commit) and ``trio.Cancelled`` propagates: the
        commit may or may not have landed.
        """
        if self.busy:
            raise RuntimeError("a TrioConnection runs one transaction at a time")
        encoded = self._encode(statements)
        pgconn = self.conn.pgconn
        self.busy = True
        settled = False
        try:
            fresh = self._send(pgconn, encoded)
            results = await self._results(pgconn)
            failed = next(
                (r for r in results if r.status != _COMMAND_OK and r.status != _TUPLES_OK),
                None,
            )
            if failed is None:
                self._prepared.update(fresh)
                settled = True
                return
            error = errors.error_from_result(failed, encoding=self.conn.info.encoding)
            if pgconn.transaction_status != _IDLE:
                pgconn.enter_pipeline_mode()
                pgconn.send_query_params(b"ROLLBACK", None)
                pgconn.pipeline_sync()
                await self._results(pgconn)
            settled = True
            raise error
        except BaseException as exc:
            if not settled:  # (mid-pipeline, or broken: its state is unknown)
                try:
                    if not isinstance(exc, errors.OperationalError):
                        await self._cancel()
                finally:
                    self.close()
            raise
        finally:
            self.busy = False

    async def _cancel(self) -> None:
        """Stop what the server runs for this connection (bounded cleanup: it may wait for a
        lock, and would not notice the connection closed until it writes)."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + self.cancel_timeout
            await trio.to_thread.run_sync(self._cancel_safe, abandon_on_cancel=True)

    def _cancel_safe(self) -> None:
        with contextlib.suppress(Exception):  # (the query may be over already)
            self.conn.cancel_safe(timeout=self.cancel_timeout)

    def _encode(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[_Encoded]:
        """Each statement ready to send (see :data:`_Encoded`): psycopg's dumpers, as the
        thread-driven path's."""
        transformer = self._transformer
        out: list[_Encoded] = []
        for sql, params in statements:
            query, formats = _query(sql)
            values = transformer.dump_sequence(params, formats)
            out.append((query, values, transformer.types or (), transformer.formats or []))
        return out

    def _send(
        self,
        pgconn: pq.abc.PGconn,
        encoded: Sequence[_Encoded],
    ) -> dict[tuple[bytes, tuple[int, ...]], bytes]:
        """Queue the transaction's messages (libpq buffers them); return the statements it
        prepares (a statement is prepared the second time it is sent)."""
        prepared = self._prepared
        seen = self._seen
        fresh: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        pgconn.enter_pipeline_mode()
        pgconn.send_query_params(b"BEGIN", None)
        for query, values, types, formats in encoded:
            key = (query, types)
            name = prepared.get(key) or fresh.get(key)
            if name is None and key in seen and len(prepared) < PREPARED_MAX:
                # (a name never used before: one prepared in a transaction that failed may
                # or may not exist on the server)
                self._names += 1
                name = fresh[key] = b"lionexec_%d" % self._names
                pgconn.send_prepare(name, query, types)
            if name is None:
                if len(seen) >= 4 * PREPARED_MAX:
                    seen.clear()
                seen.add(key)
                pgconn.send_query_params(query, values, types, formats)
            else:
                pgconn.send_query_prepared(name, values, formats)
        pgconn.send_query_params(b"COMMIT", None)
        pgconn.pipeline_sync()
        return fresh

    @staticmethod
    async def _results(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
        """Flush what is queued, then read every result up to the pipeline's sync; leave
        pipeline mode."""
        fd = pgconn.socket
        while pgconn.flush():
            # (reading too, as libpq asks: the server may wait for us to read)
            with trio.move_on_after(0.01):
                await trio.lowlevel.wait_writable(fd)
            pgconn.consume_input()
        results: list[pq.abc.PGresult] = []
        while True:
            if pgconn.is_busy():
                await trio.lowlevel.wait_readable(fd)
                pgconn.consume_input()
                continue
            result = pgconn.get_result()
            if result is None:  # (between two statements' results)
                if pgconn.status != _OK:  # (no sync will come: no loop without a wait)
                    raise errors.OperationalError("the connection to the server was lost")
                continue
            if result.status == _SYNC:
                break
            results.append(result)
        pgconn.exit_pipeline_mode()
        return results
