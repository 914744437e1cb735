"""Where a journal is kept: the backend interface, and the backends lionexec ships.

A :class:`Backend` runs :class:`Store` methods, each in one transaction; the
:class:`~lionexec.journal.Journal` above it picks one (:func:`~lionexec.journal.open_journal`,
or the ``*Journal`` class of each backend) and owns it. Backends: :class:`MemoryBackend` (one
process), :class:`SqliteBackend` (one file) and :class:`PostgresBackend` (needs the
``postgres`` extra; it and the other PostgreSQL names, :class:`SharedListener` and
:func:`redact`, are imported on first use, so ``import lionexec.journal`` alone does not
import psycopg).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..._public import publish as _publish
from ._memory import MemoryBackend as MemoryBackend
from ._memory import MemoryStore as MemoryStore
from ._sqlite import SqliteBackend as SqliteBackend
from .base import NOT_NOW as NOT_NOW
from .base import ApprovalRow as ApprovalRow
from .base import Backend as Backend
from .base import Batch as Batch
from .base import CallRow as CallRow
from .base import Claim as Claim
from .base import MessageRow as MessageRow
from .base import NotNow as NotNow
from .base import OutcomeOp as OutcomeOp
from .base import Queued as Queued
from .base import RequestOp as RequestOp
from .base import Store as Store

if TYPE_CHECKING:
    from ._postgres import PostgresBackend, SharedListener, redact

__all__ = [
    "NOT_NOW",
    "ApprovalRow",
    "Batch",
    "CallRow",
    "Claim",
    "MemoryBackend",
    "MemoryStore",
    "MessageRow",
    "NotNow",
    "OutcomeOp",
    "PostgresBackend",
    "Queued",
    "RequestOp",
    "SharedListener",
    "SqliteBackend",
    "redact",
]

#: The names of the ``postgres`` extra, imported on first use (they import psycopg).
_LAZY = frozenset({"PostgresBackend", "SharedListener", "redact"})


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}._postgres"), name)
    globals()[name] = value
    _publish(__name__, {"__all__": [name], name: value})
    return value


_publish(__name__, globals())
