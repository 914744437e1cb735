"""Deprecated: ``lionexec.journal.queue`` moved; import its names from lionexec.journal.workers
(Limit from lionexec.journal).

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from lionexec.limits import Limit as Limit

from .workers import Claimed as Claimed
from .workers import ClaimRound as ClaimRound
from .workers import Completion as Completion
from .workers import QueuedCall as QueuedCall
from .workers import WriteResult as WriteResult
from .workers import load_request as load_request
from .workers import load_response as load_response

__all__ = [
    "ClaimRound",
    "Claimed",
    "Completion",
    "Limit",
    "QueuedCall",
    "WriteResult",
    "load_request",
    "load_response",
]

warnings.warn(
    "lionexec.journal.queue is deprecated: import its names from lionexec.journal.workers"
    " (Limit from lionexec.journal)",
    DeprecationWarning,
    stacklevel=2,
)
