"""The branch's event log (in memory) and the JSONL file sink that mirrors it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Container, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import attrs
import trio

from lionexec._slots import builder
from lionexec.conversation import ActionOutcome
from lionexec.engine import EventStatus
from lionexec.tools import FunctionCalling

if TYPE_CHECKING:
    from .evidence import EvidenceRecord, WriteAhead, WriteAheadReply

__all__ = ["ActionLogRecord", "EventLog", "JsonlSink"]


@attrs.frozen(kw_only=True, weakref_slot=False)  # one per invoked call is kept: 8 B each
class ActionLogRecord:
    """What the log keeps of one invoked call.

    ``event`` is the call's (terminal) :class:`~lionexec.tools.FunctionCalling` itself, so its
    response and error stay inspectable; the JSONL sink writes its serialized record
    (``event.to_dict()``). The ids tie the record to the call's request/response pair in the
    branch's history.
    """

    branch_id: uuid.UUID
    call_id: str
    function: str
    request_id: uuid.UUID
    response_id: uuid.UUID
    outcome: ActionOutcome
    status: EventStatus
    attempts: int
    event: FunctionCalling


#: ``ActionLogRecord`` from positional values in field order, without attrs' initializer, for
#: the act transaction, which produced every value (a third of the cost; the act rows of the
#: bench).
build_log_record: Final = builder(
    ActionLogRecord,
    "branch_id",
    "call_id",
    "function",
    "request_id",
    "response_id",
    "outcome",
    "status",
    "attempts",
    "event",
)


class EventLog:
    """An append-only, in-memory log of :class:`ActionLogRecord`.

    :meth:`append` is synchronous and never raises: it is called while recording a call's
    outcome, including during cancellation. Files and journals are fed from the same records
    through sinks (see :class:`JsonlSink` and :mod:`lionexec.act.evidence`).
    """

    def __init__(self) -> None:
        self._records: list[ActionLogRecord] = []

    def append(self, record: ActionLogRecord) -> None:
        """Keep *record*."""
        self._records.append(record)

    def discard(self, response_ids: Container[uuid.UUID]) -> int:
        """Forget the records of the calls whose responses are *response_ids*; return how many."""
        kept = [r for r in self._records if r.response_id not in response_ids]
        dropped = len(self._records) - len(kept)
        self._records = kept
        return dropped

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ActionLogRecord]:
        return iter(list(self._records))

    def __getitem__(self, index: int) -> ActionLogRecord:
        return self._records[index]


class JsonlSink:
    """An evidence sink appending each log record to a JSONL file, one line per invoked call.

    Lines are serialized, written and flushed in a worker thread, so the event loop never
    waits on the disk or on serializing a large batch. (Records are terminal and their
    outputs snapshots, so reading them from the thread is safe.)
    The file is opened on the first write, in append mode, and closed by :meth:`aclose`.

    Args:
        path: the file.
        dumps: turns a record into one line of strict JSON.
    """

    def __init__(self, path: str | os.PathLike[str], *, dumps: Callable[[Any], str]) -> None:
        self.path = Path(path)
        self._dumps = dumps
        self._file: IO[str] | None = None

    def __repr__(self) -> str:
        return f"JsonlSink({str(self.path)!r})"

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        """Nothing to do: the file holds outcomes only."""
        return None

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        """Append the log records among *records* (one line each) and flush.

        Serializing and writing both happen in a worker thread: a drained batch can hold
        thousands of records, and turning them into JSON on the trio thread was one long
        scheduler step (the "longest trio step" rows of ``nox -s bench``).
        """
        logs = [r.log for r in records if r.log is not None]
        if logs:
            await trio.to_thread.run_sync(self._write_lines, logs)
        else:
            await trio.lowlevel.checkpoint()

    def _write_lines(self, logs: list[ActionLogRecord]) -> None:
        self._append("".join(self._dumps(log) + "\n" for log in logs))

    def _append(self, text: str) -> None:
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(text)
        self._file.flush()

    async def aclose(self) -> None:
        """Close the file, if it was opened; cancelled, it is closed all the same."""
        if self._file is not None:
            file, self._file = self._file, None
            try:
                await trio.to_thread.run_sync(file.close)
            finally:
                if not file.closed:  # cancelled before the thread ran it (each write flushed)
                    file.close()
        else:
            await trio.lowlevel.checkpoint()
