"""The per-tool, per-branch limits in one process: :class:`LocalLimiter`, on trio's clock,
over a :class:`StateInMemory` (which a worker's claim transaction also fills from the rows it
locked)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from lionexec.errors import LionexecError

from ._judge import (
    Deferred,
    Denied,
    Granted,
    Limit,
    Verdict,
    give_back,
    judge,
    keys_for,
    limits_by_key,
)
from .base import RateBucket, Spend

__all__ = ["LimitDeniedError", "LocalLimiter", "StateInMemory"]


class LimitDeniedError(LionexecError):
    """A call is over a budget of a :class:`LocalLimiter` (it must not run).

    Attributes:
        reason: why, as a worker would record it in the call's ``denied`` response.
        key: the limit's key.
    """

    def __init__(self, reason: str, key: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.key = key


@attrs.define
class StateInMemory:
    """A :class:`LimitState` held in plain dicts: a :class:`LocalLimiter`'s, and (loaded
    from locked rows) a worker's claim transaction's."""

    rates: dict[str, RateBucket] = attrs.Factory(dict)
    spends: dict[str, Spend] = attrs.Factory(dict)
    counts: dict[str, int] = attrs.Factory(dict)

    def rate(self, key: str) -> RateBucket:
        return self.rates.setdefault(key, RateBucket())

    def spend(self, key: str) -> Spend:
        return self.spends.setdefault(key, Spend())

    def running(self, key: str) -> int:
        return self.counts.get(key, 0)

    def started(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1


class LocalLimiter:
    """The limits of :mod:`lionexec.limits` in one process, without a database.

    The same :class:`Limit` values and keys, and the same decisions, as the workers of a
    database take together; time is trio's clock (:func:`trio.current_time`, so
    ``MockClock`` drives it in tests), or the explicit *now* of the synchronous methods.

    Use :meth:`hold` around a call (``async with limiter.hold("tool", branch_id, args):``),
    or :meth:`try_acquire` and :meth:`release` for a processor that defers by itself.
    """

    def __init__(self, limits: Mapping[str, Limit]) -> None:
        self.limits = limits_by_key(limits)
        self._state = StateInMemory()
        self._lot = trio.lowlevel.ParkingLot()

    def __repr__(self) -> str:
        return f"<LocalLimiter {sorted(self.limits)}>"

    def try_acquire(
        self,
        function: str,
        branch_id: object = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        now: float | None = None,
    ) -> Verdict:
        """Judge a call of *function* in *branch_id* now; never blocks.

        A :class:`Granted` call counts as running (for concurrency limits) until
        :meth:`release` is called with the same *function* and *branch_id*.
        """
        if now is None:
            now = trio.current_time()
        applied = keys_for(self.limits, function, None if branch_id is None else str(branch_id))
        return judge(applied, arguments or {}, now, self._state)

    def release(self, function: str, branch_id: object = None) -> None:
        """A granted call of *function* in *branch_id* ended: free its concurrency slots."""
        applied = keys_for(self.limits, function, None if branch_id is None else str(branch_id))
        counts = self._state.counts
        for key, limit in applied:
            if limit.concurrency is not None and counts.get(key, 0) > 0:
                counts[key] -= 1
        self._lot.unpark_all()

    @asynccontextmanager
    async def hold(
        self,
        function: str,
        branch_id: object = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[None]:
        """Wait until a call of *function* in *branch_id* may start, hold its slots while
        the block runs, release them after.

        Blocks while over a rate (until the wait given) or a concurrency limit (until a
        running call of the same key is released); always a checkpoint. Cancelled while
        waiting, nothing was taken.

        Raises:
            LimitDeniedError: over a budget (before blocking, or when the call's turn came).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            verdict = self.try_acquire(function, branch_id, arguments)
            if isinstance(verdict, Granted):
                await trio.lowlevel.cancel_shielded_checkpoint()
                break
            if isinstance(verdict, Denied):
                raise LimitDeniedError(verdict.reason, verdict.key)
            if isinstance(verdict, Deferred):
                try:
                    await trio.sleep(verdict.wait)
                except BaseException:  # (cancelled: it will not take its place)
                    give_back(verdict)
                    raise
            else:
                await self._lot.park()
        try:
            yield
        finally:
            self.release(function, branch_id)
