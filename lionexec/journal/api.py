"""Deprecated: ``lionexec.journal.api`` moved; import Journal, JournalSink, JournaledCall,
MemoryJournal, open_journal and canonical_json from lionexec.journal.

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from ._commit import COMMIT_TIMEOUT as COMMIT_TIMEOUT
from ._commit import LINGER as LINGER
from ._history import JournaledCall as JournaledCall
from ._history import load_history as load_history
from ._history import recorded_content as recorded_content
from ._journal import Journal as Journal
from ._journal import MemoryJournal as MemoryJournal
from ._keys import MAX_KEY_BYTES as MAX_KEY_BYTES
from ._keys import canonical_json as canonical_json
from ._keys import storable_key as storable_key
from ._open import open_journal as open_journal
from ._sink import JournalSink as JournalSink

__all__ = [
    "COMMIT_TIMEOUT",
    "LINGER",
    "MAX_KEY_BYTES",
    "Journal",
    "JournalSink",
    "JournaledCall",
    "MemoryJournal",
    "canonical_json",
    "load_history",
    "open_journal",
    "recorded_content",
    "storable_key",
]

warnings.warn(
    "lionexec.journal.api is deprecated: import Journal, JournalSink, JournaledCall, "
    "MemoryJournal, open_journal and canonical_json from lionexec.journal",
    DeprecationWarning,
    stacklevel=2,
)
