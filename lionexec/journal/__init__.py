"""The durable journal (layer 5): conversations and calls that survive a restart.

Journals: :class:`MemoryJournal` (one process), :class:`SqliteJournal` (one file; the
embedded default) and :class:`PostgresJournal` (several processes or machines; needs the
``postgres`` extra, imported when a ``PostgresJournal`` is made, so ``import
lionexec.journal`` alone does not import psycopg), or :func:`open_journal` for a path or
URL. See ``docs/journal.md`` for the guarantees.

Subpackages: :mod:`lionexec.journal.backends` (the backend interface and the backends, for
writing another) and :mod:`lionexec.journal.workers` (workers that run submitted calls).
"""

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
from .limits import Limit as Limit
from .limits import LimitDeniedError as LimitDeniedError
from .limits import LocalLimiter as LocalLimiter

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
    "Limit",
    "LimitDeniedError",
    "LocalLimiter",
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

_publish(__name__, globals())
