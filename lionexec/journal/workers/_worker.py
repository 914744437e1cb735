"""The :class:`Worker`: claims submitted calls from a journal and runs them (see
:mod:`lionexec.journal.workers` for what it guarantees)."""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from lionexec._failures import FailureLog
from lionexec.act import Branch
from lionexec.errors import ConfigurationError
from lionexec.governance import HookBus, PermissionPolicy, SessionObserver
from lionexec.limits import Limit, limits_by_key
from lionexec.tools import ActionManager, Tool

from ..errors import JournalError
from . import _queue as queue
from ._queue import Claimed, Completion

if TYPE_CHECKING:
    from .._journal import Journal

__all__ = ["Worker", "WorkerStatistics"]

logger = logging.getLogger("lionexec.worker")

#: Calls claimed in one transaction at most.
CLAIM_BATCH = 32


@attrs.frozen(kw_only=True)
class WorkerStatistics:
    """A snapshot of a :class:`Worker`'s counters.

    Attributes:
        name: the worker's name (as recorded in the journal).
        running: calls it holds now.
        claimed: calls claimed (each claim of a call counts).
        recorded: results written.
        rejected: late results refused by the fencing token.
        deferred: claims put back by a rate limit.
        busy: claims put back by a concurrency limit.
        denied: calls denied by a budget.
        requeued: expired leases of other workers it queued again.
        interrupted: expired leases it answered ``interrupted``.
        released: calls it gave back while shutting down.
        leases_lost: calls whose lease its heartbeat found taken.
    """

    name: str
    running: int
    claimed: int
    recorded: int
    rejected: int
    deferred: int
    busy: int
    denied: int
    requeued: int
    interrupted: int
    released: int
    leases_lost: int


@attrs.define(eq=False)
class _Job:
    claimed: Claimed
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    started: bool = False
    lost: bool = False
    #: Set once its run has ended (a run of the same call claimed again waits for it).
    done: trio.Event = attrs.Factory(trio.Event)
    #: This worker's earlier run of the same call, whose lease ran out here (a stall).
    after: _Job | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.claimed.branch_id, self.claimed.call_id)


@attrs.define(eq=False)
class _Write:
    c: Completion
    result: bool | BaseException | None = None


def _seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _registry(tools: ActionManager | Iterable[Tool | Callable[..., Any]]) -> ActionManager:
    if isinstance(tools, ActionManager):
        return tools
    registry = ActionManager()
    registry.register_tools(list(tools))
    return registry


class Worker:
    """Claims and runs the calls submitted to *journal* (see the module docs).

    Start it with ``await nursery.start(worker.run)``; cancel to stop it gracefully.

    Args:
        journal: an open SQL journal (SQLite or PostgreSQL).
        tools: the registry (or tools) calls run with.
        name: how the journal names this worker (default: host, pid and a random tag).
        concurrency: calls run at once.
        lease: seconds a claim holds without a heartbeat.
        poll: longest wait between two looks at the queue when idle.
        grace: seconds running calls get to finish on shutdown.
        limits: shared limits by key: a tool name, ``"branch:*"`` (each branch) or
            ``"branch:<id>"`` (:mod:`lionexec.limits`); every worker of a database
            should pass the same.
        policy, hooks, observer: the governance calls run under (as for ``Branch``).
    """

    def __init__(
        self,
        journal: Journal,
        tools: ActionManager | Iterable[Tool | Callable[..., Any]],
        *,
        name: str | None = None,
        concurrency: int = 8,
        lease: float = 30.0,
        poll: float = 0.5,
        grace: float = 10.0,
        limits: Mapping[str, Limit] | None = None,
        policy: PermissionPolicy | None = None,
        hooks: HookBus | None = None,
        observer: SessionObserver | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self.journal = journal
        self.registry = _registry(tools)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.concurrency = concurrency
        self.lease = _seconds("lease", lease)
        self.poll = _seconds("poll", poll)
        self.grace = _seconds("grace", grace) if grace != 0 else 0.0
        self.limits = limits_by_key(limits)
        self._wake = any(limit.concurrency is not None for limit in self.limits.values())
        self.policy = policy
        self.hooks = hooks if hooks is not None else HookBus()
        self.observer = observer
        self.failures = FailureLog()
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._slot = trio.lowlevel.ParkingLot()
        self._writes: list[_Write] = []
        self._writing = False
        self._write_lot = trio.lowlevel.ParkingLot()
        self._stopped = trio.Event()
        self._counts = dict.fromkeys(
            (
                "claimed",
                "recorded",
                "rejected",
                "deferred",
                "busy",
                "denied",
                "requeued",
                "interrupted",
                "released",
                "leases_lost",
            ),
            0,
        )

    def __repr__(self) -> str:
        return f"<Worker {self.name} on {self.journal.target}>"

    def statistics(self) -> WorkerStatistics:
        """A snapshot of the counters."""
        return WorkerStatistics(name=self.name, running=len(self._jobs), **self._counts)

    def _effect_of(self, function: str) -> str:
        if function in self.registry:
            return self.registry.get(function).effect
        return "unsafe"

    # -- the service ------------------------------------------------------------------------

    # KI-protected (with _serve_calls): a KeyboardInterrupt as a frame resumes from its
    # nursery's __aexit__ would leave the nursery never exited (see lionexec.act.Branch._serve)
    @trio.lowlevel.enable_ki_protection
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and run calls until cancelled; then shut down gracefully (module docs).

        For ``await nursery.start(worker.run)``: started once it listens for work. On
        cancellation it stops claiming, waits up to *grace* seconds for running calls,
        cancels and releases (or answers) the rest, then re-raises. Raises
        :class:`~lionexec.journal.JournalError` for a journal that is not SQL.
        """
        await self.journal._run(queue.probe)  # an open SQL journal, at schema 2 or later
        async with trio.open_nursery() as nursery:
            calls: trio.Nursery = await nursery.start(self._serve_calls)
            try:
                await self._claim_loop(calls, task_status)
            finally:
                with trio.CancelScope(shield=True):
                    await self._shutdown()

    @trio.lowlevel.enable_ki_protection
    async def _serve_calls(self, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        # Shielded: a cancellation of run() reaches the calls only through _shutdown().
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as calls:
                calls.start_soon(self._heartbeat)
                task_status.started(calls)
                await self._stopped.wait()
                calls.cancel_scope.cancel()

    async def _claim_loop(self, calls: trio.Nursery, task_status: trio.TaskStatus[None]) -> None:
        journal = self.journal
        # PostgreSQL: the backend's one listener on the queue's channel (NOTIFY on submit)
        shared = getattr(journal.backend, "shared_listener", None)
        listener = shared("lionexec_queue") if shared is not None else None
        if listener is not None:
            await listener.start()  # listening before the first look: no NOTIFY is missed
        task_status.started()
        idle = 0.005
        next_reclaim = -math.inf
        while True:
            free = self.concurrency - len(self._jobs)
            if free <= 0:
                await self._slot.park()
                continue
            reclaim_now = trio.current_time() >= next_reclaim
            if reclaim_now:
                next_reclaim = trio.current_time() + min(self.poll, self.lease / 2)
            want = min(free, CLAIM_BATCH)
            seen = listener.generation if listener is not None else 0  # before looking

            def round_(store: Any, reclaim_now: bool = reclaim_now, want: int = want) -> Any:
                swept = queue.reclaim(store, self.name, self._effect_of) if reclaim_now else (0, 0)
                return swept, queue.claim(store, self.name, want, self.lease, self.limits)

            try:  # not abandoned on cancellation: every call claimed is run or released
                (
                    (requeued, interrupted),
                    (claimed, deferred, denied, ready, busy),
                ) = await journal._run(round_, cancellable=False)
            except JournalError as exc:
                self._log("claim_failed", error=f"{type(exc).__name__}: {exc}")
                await trio.sleep(self.poll)
                continue
            counts = self._counts
            counts["requeued"] += requeued
            counts["interrupted"] += interrupted
            counts["claimed"] += len(claimed) + deferred + denied + busy
            counts["deferred"] += deferred
            counts["busy"] += busy
            counts["denied"] += denied
            for claim in claimed:
                job = _Job(claim)
                stale = self._jobs.get(job.key)
                if stale is not None:  # its own call, taken back after its lease ran out here
                    self._lose(stale)
                    job.after = stale
                self._jobs[job.key] = job
                calls.start_soon(self._execute, job)
            if claimed or denied or requeued or ready == 0.0:
                idle = 0.005
                await trio.lowlevel.checkpoint()
                continue
            # nothing ready: wait for a NOTIFY, the next deferred call, or the poll
            pause = self.poll if ready is None else min(self.poll, ready)
            if listener is not None:
                await listener.start()  # (again if its connection was lost)
                await listener.wait(seen, pause)
            else:
                await trio.sleep(min(idle, pause))
                idle = min(idle * 2, self.poll)

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.lease / 3)
            jobs = list(self._jobs.values())
            if not jobs:
                continue
            held = [(j.claimed.branch_id, j.claimed.call_id, j.claimed.fence) for j in jobs]
            try:
                kept = await self.journal._run(
                    partial(queue.heartbeat, held=held, lease=self.lease)
                )
            except JournalError as exc:
                self._log("heartbeat_failed", error=f"{type(exc).__name__}: {exc}")
                continue
            for job in jobs:
                if job.key not in kept and self._jobs.get(job.key) is job:
                    self._lose(job)

    def _lose(self, job: _Job) -> None:
        """*job*'s lease is lost: its run is cancelled (its write would be refused)."""
        if not job.lost:
            job.lost = True
            self._counts["leases_lost"] += 1
            self._log("lease_lost", branch_id=job.key[0], call_id=job.key[1])
            job.scope.cancel()

    async def _execute(self, job: _Job) -> None:
        claim = job.claimed
        try:
            if job.after is not None:  # one run of a call at a time: the lost one ends first
                await job.after.done.wait()
            request = queue.load_request(claim.request)
            branch = Branch(
                id=uuid.UUID(claim.branch_id),
                registry=self.registry,
                hooks=self.hooks,
                observer=self.observer,
                policy=self.policy,
                failures=self.failures,
            )
            if job.scope.cancel_called:  # shutting down before it started: give it back
                await self._release([job])
                return
            job.started = True
            with job.scope:
                await branch.act(request)
            response = branch.messages.response_for(request)
            if response is None:  # pragma: no cover - act answers every request
                raise JournalError(f"call {claim.call_id!r} was left unanswered")
            if (
                job.scope.cancelled_caught
                and not job.lost
                and self._effect_of(claim.function) in queue.SAFE_EFFECTS
            ):
                await self._release([job])
                return
            # the runs of the workers that held this call before (their leases expired)
            before = claim.attempts - 1
            completion = Completion(
                branch_id=claim.branch_id,
                call_id=claim.call_id,
                fence=claim.fence,
                outcome=response.outcome.value,
                response=queue.response_record(
                    response, attempts=response.content.attempts + before if before else None
                ),
            )
            if await self._write(completion):
                self._counts["recorded"] += 1
            else:
                self._counts["rejected"] += 1
                self._log(
                    "late_write_rejected",
                    branch_id=completion.branch_id,
                    call_id=completion.call_id,
                    fence=completion.fence,
                    outcome=completion.outcome,
                )
        except Exception as exc:  # the call stays claimed; its lease expires, it is reclaimed
            self._log(
                "call_failed",
                branch_id=claim.branch_id,
                call_id=claim.call_id,
                error=f"{type(exc).__name__}: {exc}",
            )
        finally:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]
            job.done.set()
            self._slot.unpark_all()

    async def _write(self, completion: Completion) -> bool:
        """Write *completion* in the next group write; ``True`` if recorded, ``False`` if its
        fence was stale. The first caller to find no write running writes everything
        pending in one transaction; the others wait for it."""
        item = _Write(completion)
        self._writes.append(item)
        while item.result is None:
            if self._writing:
                await self._write_lot.park()
                continue
            self._writing = True
            batch, self._writes = self._writes, []
            try:
                result = await self.journal._run(
                    partial(
                        queue.complete,
                        worker=self.name,
                        completions=[w.c for w in batch],
                        wake=self._wake,
                    ),
                    cancellable=False,
                )
            except BaseException as exc:
                for other in batch:
                    other.result = exc
                if not isinstance(exc, Exception):
                    raise
            else:
                recorded = {id(c) for c in result.recorded}
                for other in batch:
                    other.result = id(other.c) in recorded
            finally:
                self._writing = False
                self._write_lot.unpark_all()
        if isinstance(item.result, BaseException):
            raise JournalError(f"the group write failed: {item.result}") from item.result
        return item.result

    async def _release(self, jobs: list[_Job]) -> None:
        held = [(j.claimed.branch_id, j.claimed.call_id, j.claimed.fence, j.started) for j in jobs]
        released = await self.journal._run(
            lambda store: queue.release(store, held, self.limits), cancellable=False
        )
        self._counts["released"] += released

    async def _shutdown(self) -> None:
        """Shielded by the caller. Grace for the running calls, then cancel the rest."""
        with trio.move_on_after(self.grace):
            while self._jobs:
                await self._slot.park()
        for job in list(self._jobs.values()):
            job.scope.cancel()
        with trio.move_on_after(self.lease):  # each ends by recording, releasing or writing
            while self._jobs:
                await self._slot.park()
        self._stopped.set()

    def _log(self, event: str, **fields: Any) -> None:
        line = json.dumps(
            {"event": event, "worker": self.name, **fields}, allow_nan=False, default=str
        )
        if event in ("late_write_rejected", "lease_lost"):
            logger.warning("%s", line)
        else:
            logger.error("%s", line)
