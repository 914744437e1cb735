"""Checks of configuration values shared by layers that may not import each other."""

from __future__ import annotations

import math

from .errors import ConfigurationError

__all__ = ["check_positive"]


def check_positive(name: str, value: object, *, integer: bool = False) -> None:
    """Raise :class:`ConfigurationError` naming *name* unless *value* is a finite number > 0
    (an ``int`` when *integer*; ``bool`` never counts)."""
    kinds = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)
        or value <= 0
    ):
        kind = "an integer" if integer else "a finite number"
        raise ConfigurationError(f"{name} must be {kind} > 0, got {value!r}")
