"""One GCRA (generic cell rate algorithm) step, shared by both limiters of
:mod:`lionexec.limits`: the model-call :class:`~lionexec.limits.RateLimiter` and the per-tool,
per-branch :class:`~lionexec.limits.Limit` schedules (judged in process, or by the workers of a
database), so a rate means the same thing in every place."""

from __future__ import annotations

from typing import Final

__all__ = ["EPSILON", "gcra"]

#: Waits shorter than this count as "now" (float rounding of the schedule, not a real wait).
EPSILON: Final = 1e-9


def gcra(
    tat: float, now: float, interval: float, capacity: float, units: float = 1.0
) -> tuple[float, float]:
    """One GCRA decision for *units*: ``(wait, tat_if_granted)``.

    *tat* is the cell's theoretical arrival time, *interval* the seconds per unit and
    *capacity* the units of burst. *wait* is ``0.0`` when the units may be granted now (then
    store *tat_if_granted* as the new *tat*), else the seconds until they would be (the cell
    is unchanged). Pure arithmetic: never blocks, never raises.
    """
    start = tat if tat > now else now
    wait = start + (units - capacity) * interval - now
    return (wait if wait > EPSILON else 0.0), start + units * interval
