"""Deprecated: the limits per tool and per branch live in :mod:`lionexec.limits` now.

This module re-exports them for one release; import them from :mod:`lionexec.limits`.
"""

from __future__ import annotations

import warnings

from lionexec.limits import NEVER as NEVER
from lionexec.limits import Busy as Busy
from lionexec.limits import Deferred as Deferred
from lionexec.limits import Denied as Denied
from lionexec.limits import Granted as Granted
from lionexec.limits import Limit as Limit
from lionexec.limits import LimitDeniedError as LimitDeniedError
from lionexec.limits import LimitState as LimitState
from lionexec.limits import LocalLimiter as LocalLimiter
from lionexec.limits import RateBucket as RateBucket
from lionexec.limits import Spend as Spend
from lionexec.limits import StateInMemory as StateInMemory
from lionexec.limits import Verdict as Verdict
from lionexec.limits import give_back as give_back
from lionexec.limits import judge as judge
from lionexec.limits import keys_for as keys_for
from lionexec.limits import limits_by_key as limits_by_key
from lionexec.limits import refund as refund

__all__ = [
    "Busy",
    "Deferred",
    "Denied",
    "Granted",
    "Limit",
    "LimitDeniedError",
    "LimitState",
    "LocalLimiter",
    "RateBucket",
    "Spend",
    "StateInMemory",
    "Verdict",
    "judge",
    "keys_for",
    "limits_by_key",
    "refund",
]

warnings.warn(
    "lionexec.journal.limits is deprecated; import from lionexec.limits instead",
    DeprecationWarning,
    stacklevel=2,
)
