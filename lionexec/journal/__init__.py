"""The durable journal (layer 5): conversations and calls that survive a restart.

Journals: :class:`MemoryJournal` (one process), :class:`SqliteJournal` (one file; the
embedded default) and :class:`PostgresJournal` (several processes or machines; needs the
``postgres`` extra, imported when a ``PostgresJournal`` is made, so ``import
lionexec.journal`` alone does not import psycopg), or :func:`open_journal` for a path or
URL. See ``docs/journal.md`` for the guarantees.

Subpackages: :mod:`lionexec.journal.backends` (the backend interface and the backends, for
writing another) and :mod:`lionexec.journal.workers` (workers that run submitted calls).
"""

import warnings as _warnings
from typing import Any as _Any

from .. import limits as _limits
from .._public import publish as _publish
from ._approvals import Approval as Approval
from ._history import JournaledCall as JournaledCall
from ._journal import Journal as Journal
from ._journal import MemoryJournal as MemoryJournal
from ._jsonl import call_records as call_records
from ._jsonl import write_jsonl as write_jsonl
from ._keys import canonical_json as canonical_json
from ._open import PostgresJournal as PostgresJournal
from ._open import SqliteJournal as SqliteJournal
from ._open import open_journal as open_journal
from ._recovery import Applied as Applied
from ._recovery import NotApplied as NotApplied
from ._report import RecoveryReport as RecoveryReport
from ._report import Resolution as Resolution
from ._sink import JournalSink as JournalSink
from .backends._sql import SCHEMA_VERSION as SCHEMA_VERSION
from .errors import ApprovalClosed as ApprovalClosed
from .errors import ApprovalError as ApprovalError
from .errors import ApprovalNotFound as ApprovalNotFound
from .errors import IdempotencyKeyConflict as IdempotencyKeyConflict
from .errors import JournalConnectionError as JournalConnectionError
from .errors import JournalError as JournalError
from .errors import JournalSchemaError as JournalSchemaError
from .errors import NotAJournalError as NotAJournalError

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
    "PostgresJournal",
    "RecoveryReport",
    "Resolution",
    "SqliteJournal",
    "call_records",
    "canonical_json",
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
