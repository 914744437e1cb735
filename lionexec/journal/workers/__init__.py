"""Workers: processes (or tasks) that claim submitted calls from a journal and run them.

A submitted call is a row of the journal's work queue (``lionexec_queue``): ``queued`` →
(a worker claims it: its **fencing token** grows, the worker gets a **lease**) ``claimed`` →
(the worker writes its response, checking the fence in the same statement) ``done``.
:meth:`Journal.queued <lionexec.journal.Journal.queued>` lists them
(:class:`QueuedCall`).

A :class:`Worker` runs calls that some process queued with
:meth:`Journal.submit <lionexec.journal.Journal.submit>`, on any machine that reaches the
database, through the whole act transaction of a :class:`~lionexec.act.Branch` of its own
(validation, gate, policy, hooks run *here*, with this worker's registry and governance).

* **Claims**: ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (``BEGIN IMMEDIATE`` on
  SQLite); each claim increments the call's **fencing token** and gives this worker a
  **lease** of *lease* seconds, renewed by a heartbeat task every ``lease / 3`` seconds.
* **Results** are written by one ``UPDATE`` that checks the fencing token: a worker that
  stalled past its lease (a long GC pause, a ``SIGSTOP``, a partition) and wakes after another
  worker took its call over cannot overwrite that worker's result; its late write is refused,
  counted (:attr:`WorkerStatistics.rejected`), logged on ``lionexec.worker`` and kept in the
  journal (``lionexec_rejected_writes``). A heartbeat that finds a lease lost cancels the call.
* **Reclaim**: a call whose lease expired is, by the effect class of the tool in this
  worker's registry, queued again (``pure``, ``idempotent``, ``keyed``) or answered
  ``interrupted`` (``unsafe``: it may or may not have taken effect).
* **Wake-ups**: PostgreSQL ``LISTEN``/``NOTIFY``, with polling every *poll* seconds as the
  fallback (and the only way on SQLite).
* **Shared limits**: :class:`~lionexec.journal.Limit` per tool and per branch, kept
  in the database and judged in the claim transaction: over a rate → deferred (queued again
  for later), over a concurrency limit → left queued until a running call of its tool or
  branch ends, over a budget → denied with the reason.
* **Shutdown**: cancelling :meth:`Worker.run` (or ``SIGTERM`` to ``python -m lionexec
  worker``) stops claiming, gives the running calls *grace* seconds to finish and write their
  results, then cancels the rest: ``pure``/``idempotent``/``keyed`` ones are released to the
  queue (another worker runs them), ``unsafe`` ones are answered with the ``cancelled``
  response their transaction recorded.
"""

from __future__ import annotations

from ..._public import publish as _publish
from ._queue import Claimed as Claimed
from ._queue import ClaimRound as ClaimRound
from ._queue import Completion as Completion
from ._queue import QueuedCall as QueuedCall
from ._queue import WriteResult as WriteResult
from ._queue import load_request as load_request
from ._queue import load_response as load_response
from ._worker import Worker as Worker
from ._worker import WorkerStatistics as WorkerStatistics

__all__ = [
    "ClaimRound",
    "Claimed",
    "Completion",
    "QueuedCall",
    "Worker",
    "WorkerStatistics",
    "WriteResult",
    "load_request",
    "load_response",
]

_publish(__name__, globals())
