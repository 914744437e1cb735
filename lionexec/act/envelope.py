"""Deprecated: this module moved to :mod:`lionexec.act` (import its names from there).

Kept for one release: importing it warns once (``DeprecationWarning``) and gives the same
objects :mod:`lionexec.act` exports (``read_arguments`` is no longer public).
"""

import warnings

from ._envelope import MAX_ARGUMENT_CHARS as MAX_ARGUMENT_CHARS
from ._envelope import MAX_ARGUMENT_DEPTH as MAX_ARGUMENT_DEPTH
from ._envelope import MAX_CALL_ID_CHARS as MAX_CALL_ID_CHARS
from ._envelope import Proposal as Proposal
from ._envelope import ProposedBatch as ProposedBatch
from ._envelope import read_arguments as read_arguments
from ._envelope import read_batch as read_batch
from ._envelope import read_proposal as read_proposal

__all__ = [
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_CALL_ID_CHARS",
    "Proposal",
    "ProposedBatch",
    "read_arguments",
    "read_batch",
    "read_proposal",
]

warnings.warn(
    "lionexec.act.envelope is deprecated: import MAX_CALL_ID_CHARS, MAX_ARGUMENT_DEPTH, "
    "read_batch and the rest from lionexec.act",
    DeprecationWarning,
    stacklevel=2,
)
