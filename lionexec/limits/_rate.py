"""A rate limiter on trio's clock: requests per period (GCRA) and a token budget per period.

The limiter is plain synchronous bookkeeping plus one blocking helper
(:meth:`RateLimiter.acquire`), so a processor can ask it "may this run now, and if not,
when?" without waiting, and defer the event until then: it goes back to its queue, still
pending, so nothing is lost and nothing spins or blocks while it waits. It knows nothing of
HTTP or models: a cost is a number of units (tokens, for a model call), and the provider's
feedback comes in as headers.
"""

from __future__ import annotations

import datetime
import email.utils
import logging
import math
import re
import time
from collections.abc import Mapping
from typing import Final

import attrs
import trio

from lionexec.errors import ConfigurationError, LionexecError

from .._checks import check_positive
from ._gcra import EPSILON, gcra

__all__ = [
    "BudgetExceededError",
    "RateLimiter",
    "RateLimiterStatistics",
    "parse_duration",
    "retry_after_seconds",
]

_EPSILON: Final = EPSILON
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class BudgetExceededError(LionexecError, ValueError):
    """A call's estimated cost is larger than the limiter could ever grant at once."""


_log = logging.getLogger("lionexec")


@attrs.frozen
class RateLimiterStatistics:
    """A snapshot of a :class:`RateLimiter`, as returned by :meth:`RateLimiter.statistics`."""

    period: float
    """The period the budgets are given per, in seconds."""
    requests_per_period: int | None
    """The request rate, or ``None`` for no request limit."""
    burst: int | None
    """Requests that may go at once after a quiet spell, or ``None`` for no request limit."""
    tokens_per_period: int | None
    """The token rate, or ``None`` for no token budget."""
    token_burst: int | None
    """Tokens that may be spent at once after a quiet spell, or ``None``."""
    requests_available: int | None
    """Requests that would be granted right now, or ``None`` for no request limit."""
    tokens_available: int | None
    """Tokens that would be granted right now, or ``None`` for no token budget."""
    paused_for: float
    """Seconds left of a pause the provider asked for (``429``, ``x-ratelimit-*``); ``0.0``."""
    granted: int
    """Acquisitions granted."""
    refused: int
    """Acquisitions refused for now (each is a deferral or a wait of the caller)."""
    tokens_charged: int
    """Tokens charged so far: estimates, corrected by the usage reported afterwards."""
    provider_pauses: int
    """Times provider feedback paused the limiter."""
    usage_capped: int = 0
    """Times a reported usage was larger than ``max_pause``'s worth of tokens and was cut to
    it (each is logged on the ``lionexec`` logger)."""
    request_rate: float | None = None
    """The request rate granted now, per period: ``requests_per_period``, or less while an
    adaptive limiter has backed off after ``429``\\ s; ``None`` for no request limit."""
    rate_decreases: int = 0
    """Times an adaptive limiter lowered its request rate after a ``429``."""


@attrs.define
class _Cell:
    """One GCRA cell: *interval* seconds per unit, *capacity* units of burst."""

    interval: float
    capacity: float
    tat: float = -math.inf  # theoretical arrival time

    def wait(self, now: float, units: float) -> float:
        return gcra(self.tat, now, self.interval, self.capacity, units)[0]

    def charge(self, now: float, units: float) -> None:
        self.tat = gcra(self.tat, now, self.interval, self.capacity, units)[1]

    def give_back(self, now: float, units: float) -> None:
        """Undo a charge of *units*: later grants may come sooner, never past the burst."""
        if self.tat > now:
            self.tat = max(now, self.tat - units * self.interval)

    def available(self, now: float) -> int:
        backlog = (self.tat - now) if self.tat > now else 0.0
        return max(0, math.floor(self.capacity - backlog / self.interval + _EPSILON))


class RateLimiter:
    """Requests per period and tokens per period, each a GCRA (generic cell rate) budget.

    Args:
        requests: requests allowed per *period*; ``None`` for no request limit.
        period: the period in seconds (default 60).
        burst: requests that may go back to back after a quiet spell (default: *requests*).
            In any window of ``w`` seconds at most ``burst + w * requests / period`` requests
            are granted.
        tokens: tokens allowed per *period*; ``None`` for no token budget.
        token_burst: tokens that may be spent at once (default: *tokens*). A single cost
            larger than this can never be granted (:class:`BudgetExceededError`).
        max_pause: the longest pause provider feedback may impose, in seconds (default 600);
            longer (or non-finite) values are cut to it.
        adaptive: adapt the request rate to the provider's real limit (additive increase,
            multiplicative decrease): each ``429`` seen by :meth:`observe` multiplies the rate
            by *decrease* (at most once per request interval and pause, so that a burst of
            ``429``\\ s for the same overload counts once), never below *min_fraction* of
            *requests*; each success adds one request per period for every period's worth of
            successes (a tenth of that above the rate at which the last ``429`` came), never
            above *requests*. Every caller sharing the limiter (workers, processors, models)
            shares the adapted rate.
        decrease: the factor a ``429`` multiplies the rate by (``0 < decrease < 1``).
        min_fraction: the lowest rate, as a fraction of *requests* (``0 < min_fraction <= 1``).

    Time is trio's clock (:func:`trio.current_time`), so ``MockClock`` drives it in tests;
    the synchronous methods take an explicit *now* for use outside a trio run (without one,
    outside a run, the last time the limiter saw is used).
    """

    __slots__ = (
        "_adaptive",
        "_capped",
        "_decreases",
        "_factor",
        "_fail_factor",
        "_granted",
        "_last_decrease",
        "_last_now",
        "_pause_until",
        "_pauses",
        "_refused",
        "_requests",
        "_tokens",
        "_tokens_charged",
        "burst",
        "max_pause",
        "period",
        "requests_per_period",
        "token_burst",
        "tokens_per_period",
    )

    def __init__(
        self,
        *,
        requests: int | None = None,
        period: float = 60.0,
        burst: int | None = None,
        tokens: int | None = None,
        token_burst: int | None = None,
        max_pause: float = 600.0,
        adaptive: bool = False,
        decrease: float = 0.5,
        min_fraction: float = 0.05,
    ) -> None:
        check_positive("period", period, integer=False)
        check_positive("max_pause", max_pause, integer=False)
        self.period = float(period)
        self.max_pause = float(max_pause)
        self.requests_per_period = requests
        self.burst: int | None = None
        self._requests: _Cell | None = None
        if requests is not None:
            check_positive("requests", requests, integer=True)
            burst = requests if burst is None else burst
            check_positive("burst", burst, integer=True)
            self.burst = burst
            self._requests = _Cell(self.period / requests, float(burst))
        elif burst is not None:
            raise ConfigurationError("burst needs a request limit (requests=...)")
        self.tokens_per_period = tokens
        self.token_burst: int | None = None
        self._tokens: _Cell | None = None
        if tokens is not None:
            check_positive("tokens", tokens, integer=True)
            token_burst = tokens if token_burst is None else token_burst
            check_positive("token_burst", token_burst, integer=True)
            self.token_burst = token_burst
            self._tokens = _Cell(self.period / tokens, float(token_burst))
        elif token_burst is not None:
            raise ConfigurationError("token_burst needs a token budget (tokens=...)")
        self._pause_until = -math.inf
        self._granted = self._refused = self._tokens_charged = self._pauses = self._capped = 0
        self._last_now = -math.inf
        if not (0.0 < decrease < 1.0):
            raise ConfigurationError(f"decrease must be between 0 and 1, got {decrease!r}")
        if not (0.0 < min_fraction <= 1.0):
            raise ConfigurationError(f"min_fraction must be in (0, 1], got {min_fraction!r}")
        if adaptive and requests is None:
            raise ConfigurationError("adaptive needs a request limit (requests=...)")
        self._adaptive = (float(decrease), float(min_fraction)) if adaptive else None
        self._factor = self._fail_factor = 1.0
        self._last_decrease = -math.inf
        self._decreases = 0

    def _now(self, now: float | None) -> float:
        """*now*, else trio's clock, else (outside trio) the last time this limiter saw."""
        if now is None:
            try:
                now = trio.current_time()
            except RuntimeError:
                return self._last_now
        if now > self._last_now:
            self._last_now = now
        return now

    def __repr__(self) -> str:
        return (
            f"<RateLimiter requests={self.requests_per_period} burst={self.burst} "
            f"tokens={self.tokens_per_period} period={self.period}>"
        )

    # -- acquiring ------------------------------------------------------------------------------

    def check(self, cost: int = 0) -> None:
        """Raise :class:`BudgetExceededError` if *cost* can never be granted."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise BudgetExceededError(f"cost must be a non-negative integer, got {cost!r}")
        if self.token_burst is not None and cost > self.token_burst:
            raise BudgetExceededError(
                f"a cost of {cost} tokens exceeds the token burst of {self.token_burst}; "
                "it can never be granted"
            )

    def try_acquire(self, cost: int = 0, *, now: float | None = None) -> float:
        """Take one request and *cost* tokens if both are available now.

        Returns ``0.0`` when granted (the budgets are charged), else the seconds until they
        will be (nothing is charged). Never blocks.

        Raises:
            BudgetExceededError: *cost* is negative, not an integer, or larger than the token
                burst (it could never be granted).
        """
        self.check(cost)
        now = self._now(now)
        wait = self._pause_until - now
        if self._requests is not None:
            wait = max(wait, self._requests.wait(now, 1))
        if self._tokens is not None and cost:
            wait = max(wait, self._tokens.wait(now, cost))
        if wait > _EPSILON:
            self._refused += 1
            return wait
        if self._requests is not None:
            self._requests.charge(now, 1)
        if self._tokens is not None and cost:
            self._tokens.charge(now, cost)
        self._granted += 1
        self._tokens_charged += cost
        return 0.0

    async def acquire(self, cost: int = 0) -> None:
        """Block until one request and *cost* tokens are granted, then take them.

        Sleeps until the time the budgets say, never polls. Always a checkpoint. If cancelled,
        nothing was taken.

        Raises:
            BudgetExceededError: as for :meth:`try_acquire` (before blocking).
        """
        try:
            self.check(cost)
        except BaseException:
            await trio.lowlevel.checkpoint()  # a checkpoint on every path, a refusal's too
            raise
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            wait = self.try_acquire(cost)
            if not wait:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return
            await trio.sleep(wait)

    def refund(self, cost: int = 0, *, now: float | None = None) -> None:
        """Give back a grant that was not used: one request and *cost* tokens (the event
        granted them went back to its queue, or was cancelled, before it was sent). Later
        grants may come sooner; nothing below the full burst. A non-integer or negative
        *cost* gives back the request only."""
        now = self._now(now)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            cost = 0
        for cell, units in ((self._requests, 1), (self._tokens, cost)):
            if cell is not None and units:
                cell.give_back(now, units)
        self._granted = max(0, self._granted - 1)
        self._tokens_charged = max(0, self._tokens_charged - cost)

    def correct(self, estimated: int, actual: int, *, now: float | None = None) -> None:
        """Replace a charged estimate of *estimated* tokens by the *actual* usage.

        A smaller actual gives the difference back, a larger one charges it (which may push
        the next grants later, by at most ``max_pause``: a larger report is cut to that, logged
        and counted in :attr:`RateLimiterStatistics.usage_capped`). Non-integer or negative
        values are ignored.
        """
        if self._tokens is None:
            return
        for value in (estimated, actual):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return
        now = self._now(now)
        delta = actual - estimated
        cell = self._tokens
        if delta > 0:
            # A reported usage is provider feedback like a pause: it may hold later grants back
            # by at most max_pause, whatever a provider (or a bug in one) reports.
            backlog = max(0.0, cell.tat - now)
            room = math.floor(
                (self.max_pause + cell.capacity * cell.interval - backlog) / cell.interval
            )
            if delta > room:
                _log.warning(
                    "provider reported usage of %d tokens against an estimate of %d; charged "
                    "%d, max_pause's worth (%g s)",
                    actual,
                    estimated,
                    estimated + max(0, room),
                    self.max_pause,
                )
                self._capped += 1
                delta = max(0, room)
            cell.charge(now, delta)
        elif delta < 0:
            cell.give_back(now, -delta)
        self._tokens_charged += delta

    # -- provider feedback ----------------------------------------------------------------------

    def pause(self, seconds: float, *, now: float | None = None) -> None:
        """Grant nothing for *seconds* (cut to ``max_pause``; non-positive or NaN is ignored)."""
        if not (seconds > 0):  # NaN too
            return
        now = self._now(now)
        until = now + min(seconds, self.max_pause)
        if until > self._pause_until:
            self._pause_until = until
            self._pauses += 1

    def observe(
        self, status_code: int, headers: Mapping[str, str], *, now: float | None = None
    ) -> float | None:
        """Learn from a provider response: pause on ``429`` and on exhausted budgets.

        A budget the provider reports as smaller than this limiter's
        (``x-ratelimit-remaining-requests`` / ``-tokens``,
        ``anthropic-ratelimit-requests-remaining`` / ``-tokens-remaining``) lowers what it
        grants now to that (never raises it).

        Honoured: ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date) on a ``429``
        or ``503``; ``x-ratelimit-remaining-requests: 0`` with ``x-ratelimit-reset-requests``
        and ``x-ratelimit-remaining-tokens: 0`` with ``x-ratelimit-reset-tokens`` (durations
        such as ``1s``, ``6m0s``, ``20ms``). A ``429`` without any of these pauses one
        request interval (or one second without a request limit).

        Returns the pause applied in seconds, or ``None``. Hostile values are ignored.
        """
        lowered = {str(k).lower(): str(v) for k, v in headers.items()}
        self._adapt(status_code, now)
        pause: float | None = None
        if status_code in (429, 503):
            pause = retry_after_seconds(lowered)
            if pause is None and status_code == 429:
                pause = self.period / self.requests_per_period if self.requests_per_period else 1.0
        now = self._now(now)
        for kind in ("requests", "tokens"):
            remaining = lowered.get(f"x-ratelimit-remaining-{kind}", "").strip()
            self._at_most(self._requests if kind == "requests" else self._tokens, remaining, now)
            if remaining in ("0", "0.0"):
                reset = parse_duration(lowered.get(f"x-ratelimit-reset-{kind}", ""))
                if reset is not None:
                    pause = reset if pause is None else max(pause, reset)
        for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
            remaining = lowered.get(f"anthropic-ratelimit-{kind}-remaining", "").strip()
            if kind in ("requests", "tokens"):
                cell = self._requests if kind == "requests" else self._tokens
                self._at_most(cell, remaining, now)
            if remaining in ("0", "0.0"):
                reset = _until(lowered.get(f"anthropic-ratelimit-{kind}-reset", ""))
                if reset is not None:
                    pause = reset if pause is None else max(pause, reset)
        if pause is not None:
            self.pause(pause, now=now)
        return pause

    @staticmethod
    def _at_most(cell: _Cell | None, remaining: str, now: float) -> None:
        """Lower what *cell* would grant now to the *remaining* the provider reports (its own
        count is the truth: other clients share it); never raise it."""
        if cell is None or not remaining or len(remaining) > 20 or not remaining.isdigit():
            return
        left = int(remaining)
        if left < cell.available(now):
            cell.tat = max(cell.tat, now + (cell.capacity - left) * cell.interval)

    def _adapt(self, status_code: int, now: float | None) -> None:
        """Additive increase on a success, multiplicative decrease on a ``429``."""
        cell, adaptive = self._requests, self._adaptive
        if adaptive is None or cell is None or self.requests_per_period is None:
            return
        decrease, floor = adaptive
        rate = self.requests_per_period
        if status_code == 429:
            now = self._now(now)
            # The 429s of one overload arrive together: only the first lowers the rate.
            if now < self._last_decrease + max(cell.interval, 0.0) or now < self._pause_until:
                return
            if self._factor <= floor:
                return
            self._fail_factor = self._factor
            self._factor = max(floor, self._factor * decrease)
            self._last_decrease = now
            self._decreases += 1
        elif 200 <= status_code < 400 and self._factor < 1.0:
            step = 1.0 / (rate * rate * self._factor)  # +1 request/period per period
            if self._factor >= self._fail_factor:
                step /= 10.0  # above the rate the last 429 came at: probe slowly
            self._factor = min(1.0, self._factor + step)
        else:
            return
        cell.interval = self.period / (rate * self._factor)

    # -- inspection -----------------------------------------------------------------------------

    def statistics(self, *, now: float | None = None) -> RateLimiterStatistics:
        """Return a :class:`RateLimiterStatistics` snapshot."""
        now = self._now(now)
        requests, tokens = self._requests, self._tokens
        return RateLimiterStatistics(
            period=self.period,
            requests_per_period=self.requests_per_period,
            burst=self.burst,
            tokens_per_period=self.tokens_per_period,
            token_burst=self.token_burst,
            requests_available=None if requests is None else self._available(requests, now),
            tokens_available=None if tokens is None else self._available(tokens, now),
            paused_for=max(0.0, self._pause_until - now),
            granted=self._granted,
            refused=self._refused,
            tokens_charged=self._tokens_charged,
            provider_pauses=self._pauses,
            usage_capped=self._capped,
            request_rate=(
                None
                if self.requests_per_period is None
                else self.requests_per_period * self._factor
            ),
            rate_decreases=self._decreases,
        )

    def _available(self, cell: _Cell, now: float) -> int:
        return 0 if self._pause_until > now else cell.available(now)


def parse_duration(value: str) -> float | None:
    """Seconds in an OpenAI-style duration (``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1.5"``).

    Returns ``None`` for anything else, or for a non-finite or negative value.
    """
    text = value.strip()[:64]
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pos, seconds = 0, 0.0
        scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        for match in _DURATION.finditer(text):
            if match.start() != pos:
                return None
            seconds += float(match.group(1)) * scale[match.group(2)]
            pos = match.end()
        if pos != len(text) or pos == 0:
            return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _until(value: str) -> float | None:
    """Seconds from now until the RFC 3339 time *value* (Anthropic's reset headers), ``0.0``
    for a time past, ``None`` for anything unreadable."""
    text = value.strip()[:64]
    if not text:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, else ``Retry-After`` (seconds or date).

    *headers* must have lower-case keys. Returns ``None`` when neither is usable.
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        value = parse_duration(ms)
        if value is not None:
            return value / 1000.0
    raw = headers.get("retry-after")
    if raw is None:
        return None
    value = parse_duration(raw)
    if value is not None:
        return value
    try:
        when = email.utils.parsedate_to_datetime(raw[:64])
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None
