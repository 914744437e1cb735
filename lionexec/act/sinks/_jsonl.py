"""The JSONL file sink: the branch's event log, appended to a file as it is recorded."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import trio

from .._log import ActionLogRecord
from .base import EvidenceRecord, WriteAhead, WriteAheadReply

__all__ = ["JsonlSink"]


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
        thousands of records, and turning them into JSON on the trio thread would be one long
        scheduler step, holding up every other task of the run.
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
