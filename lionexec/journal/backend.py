"""Deprecated: ``lionexec.journal.backend`` moved; import Backend and MemoryBackend from
lionexec.journal.backends.

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from .backends import Backend as Backend
from .backends import MemoryBackend as MemoryBackend

__all__ = ["Backend", "MemoryBackend"]

warnings.warn(
    "lionexec.journal.backend is deprecated: import Backend and MemoryBackend from "
    "lionexec.journal.backends",
    DeprecationWarning,
    stacklevel=2,
)
