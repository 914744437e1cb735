"""Deprecated: ``lionexec.journal.jsonl`` moved; import call_records and write_jsonl from
lionexec.journal.

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from ._jsonl import call_records as call_records
from ._jsonl import write_jsonl as write_jsonl

__all__ = ["call_records", "write_jsonl"]

warnings.warn(
    "lionexec.journal.jsonl is deprecated: import call_records and write_jsonl from "
    "lionexec.journal",
    DeprecationWarning,
    stacklevel=2,
)
