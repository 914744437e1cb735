"""Judging one call against the limits that apply to it: :class:`Limit`, the keys
(:func:`limits_by_key`, :func:`keys_for`), :func:`judge` and its decisions, and the undoing of
a grant or a deferral (:func:`refund`, :func:`give_back`).

A call is judged against every limit that applies to it, in an order that keeps the three
kinds of limit apart (a call refused by a budget must never run; one refused by a rate or a
concurrency limit must never be lost):

* over a **budget** → :class:`Denied`, with the reason: it never runs (checked first: a call
  that would be denied anyway does not wait);
* over a **concurrency** limit → :class:`Busy`: it stays queued and is not started until a
  running call of the same tool (or branch) ends;
* over a **rate** → :class:`Deferred`: it may start after the wait given, never lost;
* otherwise :class:`Granted`: the schedules and budgets are charged, and it counts as running
  until released.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from lionexec.errors import ConfigurationError

from .._checks import check_positive
from ._gcra import gcra
from .base import NEVER, LimitState, RateBucket, Spend

__all__ = [
    "Busy",
    "Deferred",
    "Denied",
    "Granted",
    "Limit",
    "Verdict",
    "give_back",
    "judge",
    "keys_for",
    "limits_by_key",
    "refund",
]

#: The longest exception text a denial quotes from a failing cost function.
_REASON_CHARS: Final = 200


def _check_cost(value: object) -> None:
    if callable(value):
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigurationError(
            f"Limit.cost must be a finite number >= 0 or a function of the call's arguments, "
            f"got {value!r}"
        )


@attrs.frozen(kw_only=True)
class Limit:
    """A limit on the calls of one tool, or of one branch (see :mod:`lionexec.limits` for the
    keys).

    Args:
        rate: calls allowed to start per *period* (a GCRA schedule); ``None`` for no rate
            limit. A call over it is **deferred**.
        period: the rate's period in seconds (default 1).
        burst: calls that may start back to back after a quiet spell (default 1). In any
            window of ``w`` seconds at most ``burst + w * rate / period`` calls start.
        concurrency: calls allowed to run at once (claimed by any worker); ``None`` for no
            limit. A call over it is not started until a running one ends.
        budget: the total cost allowed (per *budget_period*, or in all); ``None`` for none.
            A call whose cost would take the spending over it is **denied** with the reason.
        budget_period: seconds after which the budget is renewed (fixed windows, the first
            starting with the first call charged); ``None``: the budget is for all time.
        cost: what one call costs against *budget*: a number (default 1: the budget counts
            calls), or a function of the call's arguments (a mapping, as the model sent them)
            returning one. A function that raises, or returns anything but a finite number
            ``>= 0``, denies the call (the reason names the error).
    """

    rate: float | None = None
    period: float = 1.0
    burst: int = 1
    concurrency: int | None = None
    budget: float | None = None
    budget_period: float | None = None
    cost: float | Callable[[Mapping[str, Any]], float] = 1

    def __attrs_post_init__(self) -> None:
        if self.rate is not None:
            check_positive("Limit.rate", self.rate)
        check_positive("Limit.period", self.period)
        check_positive("Limit.burst", self.burst, integer=True)
        if self.concurrency is not None:
            check_positive("Limit.concurrency", self.concurrency, integer=True)
        if self.budget is not None and (
            isinstance(self.budget, bool)
            or not isinstance(self.budget, int | float)
            or not math.isfinite(self.budget)
            or self.budget < 0
        ):
            raise ConfigurationError(
                f"Limit.budget must be None or a finite number >= 0, got {self.budget!r}"
            )
        if self.budget_period is not None:
            check_positive("Limit.budget_period", self.budget_period)
            if self.budget is None:
                raise ConfigurationError("Limit.budget_period needs a budget (budget=...)")
        _check_cost(self.cost)

    def cost_of(self, arguments: Mapping[str, Any]) -> float | str:
        """The cost of a call with *arguments*, or why it cannot be priced (a string)."""
        cost = self.cost
        if not callable(cost):
            return float(cost)
        try:
            value = cost(arguments)
        except Exception as exc:  # the arguments are a model's: a cost function may choke
            return f"its cost could not be computed ({type(exc).__name__}: {exc})"[:_REASON_CHARS]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            return f"its cost is not a finite number >= 0 ({value!r})"[:_REASON_CHARS]
        return float(value)


def limits_by_key(limits: Mapping[str, Limit] | None) -> dict[str, Limit]:
    """*limits* with every key in its canonical form (``tool:name``, ``branch:*``,
    ``branch:<id>``). Raises :class:`ConfigurationError` naming a bad key or value."""
    out: dict[str, Limit] = {}
    for key, limit in (limits or {}).items():
        if not isinstance(limit, Limit):
            raise ConfigurationError(f"limits[{key!r}] must be a Limit, got {limit!r}")
        if not isinstance(key, str) or not key or key in ("tool:", "branch:"):
            raise ConfigurationError(
                f"a limit's key is a tool name, 'tool:NAME', 'branch:*' or 'branch:ID', "
                f"got {key!r}"
            )
        canonical = key if key.startswith(("tool:", "branch:")) else f"tool:{key}"
        if canonical in out:
            raise ConfigurationError(f"two limits for {canonical!r}")
        out[canonical] = limit
    return out


def keys_for(
    limits: Mapping[str, Limit], function: str, branch_id: str | None
) -> list[tuple[str, Limit]]:
    """The ``(key, limit)`` pairs that apply to a call of *function* in *branch_id*, with
    *limits* as :func:`limits_by_key` returns them (``branch:*`` becomes the branch's own
    key)."""
    found = []
    tool = limits.get(f"tool:{function}")
    if tool is not None:
        found.append((f"tool:{function}", tool))
    if branch_id is not None:
        key = f"branch:{branch_id}"
        branch = limits.get(key, limits.get("branch:*"))
        if branch is not None:
            found.append((key, branch))
    return found


# -- verdicts ----------------------------------------------------------------------------------


@attrs.frozen
class Granted:
    """The call may start; it was charged at *at* (the judge's clock)."""

    at: float


@attrs.frozen
class Deferred:
    """Over a rate: the call may start after *wait* seconds (it keeps its place).

    *reserved*: the places it keeps, ``(bucket, slot, interval)`` each (a caller that stops
    waiting gives them back: :func:`give_back`).
    """

    wait: float
    key: str
    reserved: tuple[tuple[RateBucket, float, float], ...] = attrs.field(
        default=(), eq=False, repr=False
    )


@attrs.frozen
class Busy:
    """Over a concurrency limit: the call may start when a running call of *key* ends."""

    key: str


@attrs.frozen
class Denied:
    """Over a budget: the call is answered ``denied`` with *reason* and never runs."""

    reason: str
    key: str


#: What :func:`judge` decides for one call: :class:`Granted`, :class:`Deferred`, :class:`Busy`
#: or :class:`Denied`.
Verdict = Granted | Deferred | Busy | Denied


def judge(
    applied: list[tuple[str, Limit]],
    arguments: Mapping[str, Any],
    now: float,
    state: LimitState,
) -> Verdict:
    """Judge one call against the *applied* limits (:func:`keys_for`) at *now*.

    Order: any budget the call would overspend denies it; then any concurrency limit at its
    maximum makes it wait (:class:`Busy`); then any rate schedule defers it (the longest
    wait). Only a granted call changes the budgets, schedules and running counts (a deferral
    only reserves its slot). Synchronous; never raises for a call's arguments.
    """
    costs: list[tuple[str, Limit, Spend, float]] = []
    for key, limit in applied:
        if limit.budget is None:
            continue
        spend = state.spend(key)
        if limit.budget_period is not None and now >= spend.window + limit.budget_period:
            spend.spent = 0.0
            spend.window = (
                now
                if spend.window == NEVER
                else spend.window
                + (now - spend.window) // limit.budget_period * limit.budget_period
            )
        cost = limit.cost_of(arguments)
        if isinstance(cost, str):
            return Denied(f"the budget of {_subject(key)} cannot admit this call: {cost}", key)
        if spend.spent + cost > limit.budget + 1e-9:
            return Denied(_over_budget(key, limit, spend, cost, now), key)
        costs.append((key, limit, spend, cost))
    for key, limit in applied:
        if limit.concurrency is not None and state.running(key) >= limit.concurrency:
            return Busy(key)
    slots: list[tuple[RateBucket, float, float]] = []
    reserved: list[tuple[RateBucket, float, float]] = []
    wait, waited = 0.0, ""
    for key, limit in applied:
        if limit.rate is None:
            continue
        bucket = state.rate(key)
        interval = limit.period / limit.rate
        delay, tat = gcra(bucket.tat, now, interval, limit.burst)
        if delay > 0:
            slot = max(bucket.next_slot, now + delay)
            bucket.next_slot = slot + interval
            reserved.append((bucket, slot, interval))
            if slot - now > wait:
                wait, waited = slot - now, key
        slots.append((bucket, tat, interval))
    if wait > 0:
        return Deferred(wait, waited, tuple(reserved))
    for bucket, tat, _ in slots:
        bucket.tat = tat
        bucket.used += 1
    for _, _, spend, cost in costs:
        if spend.window == NEVER:
            spend.window = now
        spend.spent += cost
        spend.calls += 1
    for key, limit in applied:
        if limit.concurrency is not None:
            state.started(key)
    return Granted(now)


def refund(
    applied: list[tuple[str, Limit]],
    arguments: Mapping[str, Any],
    granted_at: float,
    state: LimitState,
) -> None:
    """Undo what :func:`judge` charged a call granted at *granted_at* that never started
    (given back before its run): its place in each rate schedule, and its spend of each
    budget whose window is still the one it was charged in."""
    for key, limit in applied:
        if limit.rate is not None:
            bucket = state.rate(key)
            bucket.tat -= limit.period / limit.rate
            bucket.used = max(0, bucket.used - 1)
        if limit.budget is not None:
            spend = state.spend(key)
            cost = limit.cost_of(arguments)
            if isinstance(cost, str) or spend.window > granted_at:  # (a window since)
                continue
            spend.spent = max(0.0, spend.spent - cost)
            spend.calls = max(0, spend.calls - 1)


def give_back(deferred: Deferred) -> None:
    """A deferred call will not come back (cancelled while it waited): its places are free
    again, where no later call was given a place after them (a place in the middle stays
    taken: the calls after it keep theirs)."""
    for bucket, slot, interval in deferred.reserved:
        if bucket.next_slot == slot + interval:
            bucket.next_slot = slot


def _subject(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"tool {name!r}" if kind == "tool" else f"branch {name}"


def _over_budget(key: str, limit: Limit, spend: Spend, cost: float, now: float) -> str:
    assert limit.budget is not None
    if limit.cost == 1:
        where = f"the budget of {_number(limit.budget)} calls of {_subject(key)}"
    else:
        where = f"the cost budget of {_number(limit.budget)} of {_subject(key)}"
    if limit.budget_period is None:
        when = "in total"
    else:
        renew = spend.window + limit.budget_period - now
        when = f"per {_number(limit.budget_period)} s (renewed in {renew:.3g} s)"
    if spend.spent >= limit.budget:
        return f"{where} ({when}) is spent"
    return (
        f"{where} ({when}) has {_number(limit.budget - spend.spent)} left; this call costs "
        f"{_number(cost)}"
    )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
