"""Deprecated: ``lionexec.journal.approvals`` moved; import Approval from lionexec.journal.

This module re-exports the names it had and warns once, on import; it will be removed.
"""

from __future__ import annotations

import warnings

from ._approvals import Approval as Approval
from ._approvals import ApprovalGate as ApprovalGate

__all__ = ["Approval", "ApprovalGate"]

warnings.warn(
    "lionexec.journal.approvals is deprecated: import Approval from lionexec.journal",
    DeprecationWarning,
    stacklevel=2,
)
