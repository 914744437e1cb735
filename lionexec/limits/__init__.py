"""Rate limits, concurrency limits and budgets, in one place (layer 1: it needs only
lionexec's errors and helpers, so the model calls and the journal's workers both build on it).

Two kinds of limit share one GCRA arithmetic, so a rate means the same thing everywhere:

* :class:`RateLimiter`, for model calls: requests and tokens per period on trio's clock, with
  the provider's feedback (``429``, ``x-ratelimit-*``) pausing it. A
  :class:`~lionexec.models.RateLimitedProcessor` and a :class:`~lionexec.models.ModelCall`
  use it.
* :class:`Limit`, on tool calls, per tool and per branch: how many calls may start per period
  (a GCRA schedule), how many may run at once, and how much they may cost (per period, or in
  total). The limits of a deployment are a mapping (:func:`limits_by_key`) whose keys name
  what each limit applies to:

  * ``"name"`` or ``"tool:name"``: every call of the tool *name*, whatever its branch;
  * ``"branch:*"``: each branch on its own (every branch gets its own schedule, slots and
    budget);
  * ``"branch:<id>"``: the branch *id* (instead of ``"branch:*"`` for it).

  A call is judged against every limit that applies to it (:func:`judge`): over a **budget**
  it is :class:`Denied` (it never runs), over a **concurrency** limit :class:`Busy` (not
  started until a running call of the same key ends), over a **rate** :class:`Deferred` (it
  may start after the wait given, never lost), otherwise :class:`Granted`.

The decision is one synchronous function over a :class:`LimitState` (the schedules, budgets
and running counts it reads and writes), so the same limits work in two places:

* across every worker of a database (:mod:`lionexec.journal.workers`): the state is rows of
  ``lionexec_limits`` (``"<key>"`` for a schedule, ``"budget:<key>"`` for a budget) locked
  in the transaction that claims the calls, and the running counts are the claimed rows of
  the queue; time is the database's;
* in one process, without a database: :class:`LocalLimiter`, on trio's clock.
"""

from .._public import publish as _publish
from ._judge import Busy as Busy
from ._judge import Deferred as Deferred
from ._judge import Denied as Denied
from ._judge import Granted as Granted
from ._judge import Limit as Limit
from ._judge import Verdict as Verdict
from ._judge import give_back as give_back
from ._judge import judge as judge
from ._judge import keys_for as keys_for
from ._judge import limits_by_key as limits_by_key
from ._judge import refund as refund
from ._local import LimitDeniedError as LimitDeniedError
from ._local import LocalLimiter as LocalLimiter
from ._local import StateInMemory as StateInMemory
from ._rate import BudgetExceededError as BudgetExceededError
from ._rate import RateLimiter as RateLimiter
from ._rate import RateLimiterStatistics as RateLimiterStatistics
from ._rate import parse_duration as parse_duration
from ._rate import retry_after_seconds as retry_after_seconds
from .base import NEVER as NEVER
from .base import Limiter as Limiter
from .base import LimitState as LimitState
from .base import RateBucket as RateBucket
from .base import Spend as Spend

__all__ = [
    "NEVER",
    "BudgetExceededError",
    "Busy",
    "Deferred",
    "Denied",
    "Granted",
    "Limit",
    "LimitDeniedError",
    "LocalLimiter",
    "RateBucket",
    "RateLimiter",
    "RateLimiterStatistics",
    "Spend",
    "StateInMemory",
    "Verdict",
    "give_back",
    "judge",
    "keys_for",
    "limits_by_key",
    "parse_duration",
    "refund",
    "retry_after_seconds",
]

_publish(__name__, globals())
