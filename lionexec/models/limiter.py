"""Deprecated: the model-call rate limiter lives in :mod:`lionexec.limits` now.

This module re-exports it for one release; import it from :mod:`lionexec.limits`.
"""

from __future__ import annotations

import warnings

from lionexec.limits import BudgetExceededError as BudgetExceededError
from lionexec.limits import RateLimiter as RateLimiter
from lionexec.limits import RateLimiterStatistics as RateLimiterStatistics
from lionexec.limits import parse_duration as parse_duration
from lionexec.limits import retry_after_seconds as retry_after_seconds

__all__ = ["RateLimiter", "RateLimiterStatistics", "parse_duration", "retry_after_seconds"]

warnings.warn(
    "lionexec.models.limiter is deprecated; import from lionexec.limits instead",
    DeprecationWarning,
    stacklevel=2,
)
