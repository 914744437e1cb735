"""The contracts of the per-tool, per-branch limits: the state a judge reads and writes
(:class:`LimitState`, with its records :class:`RateBucket` and :class:`Spend`), and a limiter
of calls in one process (:class:`Limiter`).

One synchronous function, :func:`~lionexec.limits.judge`, decides every call against the
:class:`~lionexec.limits.Limit` values that apply to it. What it decides from, and writes back
to, is a :class:`LimitState`: plain dicts for a :class:`~lionexec.limits.LocalLimiter`, or the
rows of ``lionexec_limits`` that a worker's claim transaction locked
(:mod:`lionexec.journal.workers`). The decisions are the same in both places because the state
is the only thing that differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    from ._judge import Verdict

__all__ = ["NEVER", "LimitState", "Limiter", "RateBucket", "Spend"]

#: A schedule or budget nobody has used yet starts here (a time long past).
NEVER: Final = -1e300


@attrs.define
class RateBucket:
    """One GCRA schedule: its theoretical arrival time, the next slot given to a deferred
    call (so deferred calls come back one by one, not all at once), calls granted."""

    tat: float = NEVER
    next_slot: float = NEVER
    used: int = 0


@attrs.define
class Spend:
    """One budget: spent in the window that started at *window* (all time: never renewed),
    calls charged."""

    spent: float = 0.0
    window: float = NEVER
    calls: int = 0


@runtime_checkable
class LimitState(Protocol):
    """What :func:`~lionexec.limits.judge` reads and writes: a schedule and a budget per key,
    and the calls running per key. The buckets it returns are live: :func:`judge` changes them
    in place.

    lionexec has two: :class:`~lionexec.limits.StateInMemory` (the dicts of a
    :class:`~lionexec.limits.LocalLimiter`, on the trio thread), and the state of one claim of
    a database's work queue (:mod:`lionexec.journal.workers`: the rows of ``lionexec_limits`` its
    transaction inserted and locked in name order, loaded into memory and written back before
    the transaction commits).

    The contract:

    * Every method is synchronous and must not block: the judge calls them while it decides,
      on the trio thread for an in-process limiter, or inside the database transaction that
      claims calls (under the row locks of the keys, so no other worker judges the same keys
      meanwhile). Nothing here is a checkpoint, so nothing here is cancelled half-way.
    * :meth:`rate` and :meth:`spend` return the live record of *key*, a fresh one (starting at
      :data:`NEVER`) for a key never seen. The judge changes it in place: only a granted call
      moves the schedule's ``tat`` and charges the budget; a deferred one reserves its
      ``next_slot``; a budget whose period has passed is renewed whatever the decision.
      Keeping the changes (in memory, or written back in the same transaction) is the
      state's business.
    * :meth:`running` is the number of calls of *key* granted and not yet ended: counted by
      :meth:`started` and a limiter's release in memory, or read from the claimed rows of the
      queue under the locks.
    * :meth:`started` is called once for each key with a concurrency limit, for each granted
      call (never for a deferred, busy or denied one).
    * The judge never raises for a call's arguments; an exception a state raises (a database
      error) comes out of :func:`~lionexec.limits.judge` unchanged, and the caller's
      transaction rolls back.
    """

    def rate(self, key: str) -> RateBucket:
        """The schedule of *key* (live: the judge changes it in place)."""

    def spend(self, key: str) -> Spend:
        """The budget of *key* (live: the judge changes it in place)."""

    def running(self, key: str) -> int:
        """The calls of *key* granted and not yet ended."""

    def started(self, key: str) -> None:
        """A call of *key* was granted: it counts as running (until released)."""


@runtime_checkable
class Limiter(Protocol):
    """The per-tool, per-branch limits of calls in one process, as
    :class:`~lionexec.limits.LocalLimiter` keeps them (the workers of a database take the same
    decisions in their claim transaction instead: :mod:`lionexec.journal.workers`).

    The contract:

    * :meth:`try_acquire` is synchronous, called on the trio thread, and never blocks: it
      judges one call now and returns the decision. A :class:`~lionexec.limits.Granted` call
      may start, and counts as running until :meth:`release`. A
      :class:`~lionexec.limits.Deferred` call is over a rate: it may start after the wait
      given, and keeps its place meanwhile (a caller that gives up returns the place:
      :func:`~lionexec.limits.give_back`); it is never lost. A :class:`~lionexec.limits.Busy`
      call is over a concurrency limit: it may start when a running call of the same key is
      released. A :class:`~lionexec.limits.Denied` call is over a budget: it must not run,
      and the reason says why (a worker records it in the call's ``denied`` response).
    * :meth:`release` is synchronous and never blocks: a granted call ended (however it
      ended), so its concurrency slots are free and callers waiting for them may try again.
      Call it once per grant.
    * :meth:`hold` waits until the call is granted, holds it while the block runs and releases
      it after, whatever ends the block. It is always a checkpoint; cancelled while waiting,
      nothing was taken. Over a budget it raises :class:`~lionexec.limits.LimitDeniedError`.
    """

    def try_acquire(
        self,
        function: str,
        branch_id: object = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        now: float | None = None,
    ) -> Verdict:
        """Judge a call of *function* in *branch_id* now (or at *now*); never blocks."""

    def release(self, function: str, branch_id: object = None) -> None:
        """A granted call of *function* in *branch_id* ended: free its concurrency slots."""

    def hold(
        self,
        function: str,
        branch_id: object = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> AbstractAsyncContextManager[None]:
        """Wait until a call may start, hold it while the block runs, release it after."""
