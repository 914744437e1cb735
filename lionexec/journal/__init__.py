"""The durable journal (layer 5): conversations and calls that survive a restart.

Backends: :class:`MemoryJournal` (one process), :class:`~lionexec.journal.sqlite.SqliteJournal`
(one file; the embedded default) and ``lionexec.journal.postgres.PostgresJournal`` (needs the
``postgres`` extra; import it from that module, or use :func:`open_journal` with a
``postgresql://`` URL). See ``docs/journal.md`` for the guarantees.
"""

import warnings as _warnings
from typing import Any as _Any

from .. import limits as _limits
from .._public import publish as _publish
from .api import Journal as Journal
from .api import JournaledCall as JournaledCall
from .api import JournalSink as JournalSink
from .api import MemoryJournal as MemoryJournal
from .api import open_journal as open_journal
from .approvals import Approval as Approval
from .errors import ApprovalClosed as ApprovalClosed
from .errors import ApprovalError as ApprovalError
from .errors import ApprovalNotFound as ApprovalNotFound
from .errors import IdempotencyKeyConflict as IdempotencyKeyConflict
from .errors import JournalConnectionError as JournalConnectionError
from .errors import JournalError as JournalError
from .errors import JournalSchemaError as JournalSchemaError
from .errors import NotAJournalError as NotAJournalError
from .jsonl import call_records as call_records
from .jsonl import write_jsonl as write_jsonl
from .recovery import Applied as Applied
from .recovery import NotApplied as NotApplied
from .recovery import RecoveryReport as RecoveryReport
from .recovery import Resolution as Resolution
from .sql import SCHEMA_VERSION as SCHEMA_VERSION
from .sqlite import SqliteJournal as SqliteJournal

__all__ = [
    "SCHEMA_VERSION",
    "Applied",
    "Approval",
    "ApprovalClosed",
    "ApprovalError",
    "ApprovalNotFound",
    "IdempotencyKeyConflict",
    "Journal",
    "JournalConnectionError",
    "JournalError",
    "JournalSchemaError",
    "JournalSink",
    "JournaledCall",
    "MemoryJournal",
    "NotAJournalError",
    "NotApplied",
    "RecoveryReport",
    "Resolution",
    "SqliteJournal",
    "call_records",
    "open_journal",
    "write_jsonl",
]

#: Names that moved to :mod:`lionexec.limits`; still served here, with a warning, for one release.
_MOVED = frozenset({"Limit", "LimitDeniedError", "LocalLimiter"})


def __getattr__(name: str) -> _Any:
    if name in _MOVED:
        _warnings.warn(
            f"lionexec.journal.{name} is deprecated; import it from lionexec.limits instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_limits, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_publish(__name__, globals())
