"""Deprecated: ``lionexec.journal.worker`` moved; import Worker and WorkerStatistics from
lionexec.journal.workers.

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from .workers import Worker as Worker
from .workers import WorkerStatistics as WorkerStatistics

__all__ = ["Worker", "WorkerStatistics"]

warnings.warn(
    "lionexec.journal.worker is deprecated: import Worker and WorkerStatistics from "
    "lionexec.journal.workers",
    DeprecationWarning,
    stacklevel=2,
)
