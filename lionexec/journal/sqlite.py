"""Deprecated: ``lionexec.journal.sqlite`` moved; import SqliteJournal from lionexec.journal
(SqliteBackend from lionexec.journal.backends).

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from ._open import SqliteJournal as SqliteJournal
from .backends import SqliteBackend as SqliteBackend

__all__ = ["SqliteBackend", "SqliteJournal"]

warnings.warn(
    "lionexec.journal.sqlite is deprecated: import SqliteJournal from lionexec.journal "
    "(SqliteBackend from lionexec.journal.backends)",
    DeprecationWarning,
    stacklevel=2,
)
