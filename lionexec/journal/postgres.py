"""Deprecated: ``lionexec.journal.postgres`` moved; import PostgresJournal from
lionexec.journal (PostgresBackend, SharedListener and redact from
lionexec.journal.backends).

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from ._open import PostgresJournal as PostgresJournal
from .backends._postgres import PostgresBackend as PostgresBackend
from .backends._postgres import SharedListener as SharedListener
from .backends._postgres import redact as redact

__all__ = ["PostgresBackend", "PostgresJournal", "SharedListener", "redact"]

warnings.warn(
    "lionexec.journal.postgres is deprecated: import PostgresJournal from "
    "lionexec.journal (PostgresBackend, SharedListener and redact from "
    "lionexec.journal.backends)",
    DeprecationWarning,
    stacklevel=2,
)
