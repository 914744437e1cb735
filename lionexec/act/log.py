"""The branch's event log: one record per invoked call, kept in memory and optionally on disk."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import attrs

from lionexec.conversation import ActionOutcome
from lionexec.engine import EventStatus
from lionexec.tools import FunctionCalling

__all__ = ["ActionLogRecord", "EventLog", "ReportedFailure"]


@attrs.frozen(kw_only=True)
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


@attrs.frozen(kw_only=True)
class ReportedFailure:
    """A failure in an observer, a non-blocking hook, a message callback or the log sink.

    These never change what was recorded and never escape :meth:`Branch.act`; they are
    logged to the ``lionexec.act`` logger and kept on :attr:`Branch.failures`.
    """

    where: str
    call_id: str | None
    error: BaseException


class EventLog:
    """An append-only log of :class:`ActionLogRecord`.

    Records are kept in memory. With *path*, each record is also written to that file as one
    line of JSON (through :data:`lionexec.serialization.converter`) and flushed at once, so a
    crash loses no finished call. :meth:`append` is synchronous and never raises: it is called
    while recording a call's outcome, including during cancellation. A failed file write is
    returned to the caller (who reports it) and the record stays in memory.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._records: list[ActionLogRecord] = []
        self._file: IO[str] | None = None

    def append(self, record: ActionLogRecord) -> Exception | None:
        """Keep *record*; with a path, also write and flush it.

        Never raises: returns the error if the file write failed, else ``None``.
        """
        self._records.append(record)
        if self.path is None:
            return None
        try:
            from lionexec import serialization

            if self._file is None:
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(serialization.dumps(record) + "\n")
            self._file.flush()
        except Exception as exc:
            return exc
        return None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file, if one is open. Records stay available in memory."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ActionLogRecord]:
        return iter(list(self._records))

    def __getitem__(self, index: int) -> ActionLogRecord:
        return self._records[index]
