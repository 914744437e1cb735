"""The branch's event log (in memory) and the record it keeps of each invoked call."""

from __future__ import annotations

import uuid
from collections.abc import Container, Iterator
from typing import Final

import attrs

from lionexec._slots import builder
from lionexec.conversation import ActionOutcome
from lionexec.engine import EventStatus
from lionexec.tools import FunctionCalling

__all__ = ["ActionLogRecord", "EventLog", "build_log_record"]


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
#: the act transaction, which produced every value (a third of the cost of building one, on
#: a path that builds one per invoked call).
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
    through sinks (see :class:`~lionexec.act.JsonlSink` and :class:`~lionexec.act.EvidenceSink`).
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
