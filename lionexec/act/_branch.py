"""The Branch: a conversation that can act, with every call governed and recorded."""

from __future__ import annotations

import contextvars
import difflib
import logging
import math
import os
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from functools import partial
from types import TracebackType
from typing import Any, Final, Literal, Self, overload

import attrs
import trio

from lionexec import _unstructure
from lionexec._failures import FailureLog, FailureStatistics
from lionexec.conversation import ActionRequest, ActionResponse, AssistantResponse, MessageManager
from lionexec.conversation._history import running
from lionexec.errors import (
    ConfigurationError,
    DuplicateCallError,
    require_trio,
)
from lionexec.governance import HookBus, PermissionPolicy, SessionObserver
from lionexec.tools import ActionManager, Tool

from ._alcall import DEFAULT_PARAMS, AlcallParams
from ._batch import fan_out, spawn_each
from ._envelope import _TURN_ITEMS, Proposal, read_batch, read_plain_call
from ._evidence import DEFAULT_SINK_CAPACITY, Evidence, SinkFeed, SinkStatistics
from ._held import check_held
from ._log import EventLog
from ._scope import CallScope, new_request
from ._transaction import CallTransaction
from ._unanswered import announce_interrupted, record_unanswered
from .sinks import EvidenceRecord, EvidenceSink, JsonlSink

_log = logging.getLogger("lionexec")

__all__ = ["Branch", "BranchStatistics", "Strategy"]

Strategy = Literal["concurrent", "sequential"]
_STRATEGIES = ("concurrent", "sequential")


@attrs.frozen(kw_only=True)
class BranchStatistics:
    """A snapshot of a :class:`Branch`.

    Attributes:
        messages: messages in the history.
        log_records: records in the in-memory event log.
        in_flight: calls running now (requests recorded, responses not yet).
        failures: the failure log's counters.
        sinks: each sink feed's statistics.
    """

    messages: int
    log_records: int
    in_flight: int
    failures: FailureStatistics
    sinks: tuple[SinkStatistics, ...]


def _dumps(record: object) -> str:
    return _unstructure.get().dumps(record)


def _sinks(value: Iterable[EvidenceSink]) -> tuple[EvidenceSink, ...]:
    sinks = tuple(value)
    for sink in sinks:
        if not isinstance(sink, EvidenceSink):
            raise ConfigurationError(
                f"a sink needs write_ahead(), write() and aclose(), got {type(sink).__name__}"
            )
    return sinks


def _retain(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(f"retain must be None or an int >= 1, got {value!r}")


def _cancel_grace(_instance: Any, _attribute: Any, value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0:
        raise ConfigurationError(f"cancel_grace must be a finite number >= 0, got {value!r}")


# A plain store, for the counter act() keeps: attrs' __setattr__ (Branch has hooked fields)
# costs a caught KeyError for any other name, ~0.9 us, twice per act().
_set = object.__setattr__


def _forget_scope(branch: Branch, _attribute: Any, value: Any) -> Any:
    object.__setattr__(branch, "_last_scope", None)  # the next act() builds a new one
    return value


# A collaborator a call scope names (or its evidence writes to) was replaced: validated,
# then the next act() builds a new scope, so each call writes its request and its response
# to the same history and log.
_RESCOPE: Final = attrs.setters.pipe(attrs.setters.validate, _forget_scope)


@attrs.define(eq=False)
class Branch:
    """A conversation branch: history, tools, governance, an event log and evidence sinks.

    A branch with sinks (a JSONL file, a journal) must be running to act: use
    ``async with branch:`` or ``await nursery.start(branch.serve)``, one block at a time;
    leaving (or :meth:`aclose`) drains the sinks and closes their files, for good. A branch
    without sinks needs neither.

    Attributes:
        id: this branch's id (it appears in every call context and log record).
        messages: the conversation history.
        registry: the tools this branch may call.
        hooks: the hook bus (``tool.pre`` may deny; ``tool.post``/``tool.error`` observe).
        observer: the session observer whose gate authorizes each call, or ``None``.
        policy: the permission policy, or ``None`` to allow every call the gate allows.
        log: the in-memory event log (one record per invoked call).
        sinks: evidence sinks fed through bounded buffers (see
            :class:`~lionexec.act.EvidenceSink`);
            set at construction only (assigning raises ``attrs.exceptions.FrozenAttributeError``).
        sink_capacity: records each sink's buffer holds; set at construction only.
        retain: keep at most about this many tool calls (whole request/response pairs with
            their log records, oldest forgotten first; see
            :meth:`MessageManager.trim_calls`), or ``None`` to keep everything. Trimming runs
            at the end of :meth:`act`, once the history holds 10 % more calls than this, so
            its cost is amortized. A durable journal keeps the full history (a journaled
            branch trims only what its journal committed, after an act that returned).
        cancel_grace: seconds the announcements of calls recorded ``cancelled`` may take
            (hooks, observer, callbacks run shielded, within this bound) before the
            cancellation propagates.
        failures: failures of observers, non-blocking hooks, message callbacks and sinks,
            reported here (bounded; logged once on the ``lionexec`` logger) instead of
            being raised. The branch shares it with its hook bus, observer and history.
    """

    id: uuid.UUID = attrs.field(factory=uuid.uuid4, on_setattr=attrs.setters.frozen)
    messages: MessageManager = attrs.field(factory=MessageManager, on_setattr=_RESCOPE)
    registry: ActionManager = attrs.field(factory=ActionManager, on_setattr=_RESCOPE)
    hooks: HookBus = attrs.field(factory=HookBus, on_setattr=_RESCOPE)
    observer: SessionObserver | None = attrs.field(default=None, on_setattr=_RESCOPE)
    policy: PermissionPolicy | None = attrs.field(default=None, on_setattr=_RESCOPE)
    log: EventLog = attrs.field(factory=EventLog, on_setattr=_RESCOPE)
    # Fixed at construction: their feeds are made then (assigning either would be ignored)
    sinks: tuple[EvidenceSink, ...] = attrs.field(
        default=(), converter=_sinks, kw_only=True, on_setattr=attrs.setters.frozen
    )
    sink_capacity: int = attrs.field(
        default=DEFAULT_SINK_CAPACITY, kw_only=True, on_setattr=attrs.setters.frozen
    )
    cancel_grace: float = attrs.field(
        default=1.0, validator=_cancel_grace, kw_only=True, on_setattr=_RESCOPE
    )
    failures: FailureLog = attrs.field(factory=FailureLog, kw_only=True, on_setattr=_RESCOPE)
    retain: int | None = attrs.field(default=None, validator=_retain, kw_only=True)
    #: ``str(id)``, computed once: every message and call context of this branch names it.
    name: str = attrs.field(init=False)
    _feeds: tuple[SinkFeed, ...] = attrs.field(init=False)
    #: The feeds of durable sinks (a journal): act() waits for them, and trims after them.
    _durable: tuple[SinkFeed, ...] = attrs.field(init=False)
    # How many requests an act() of this branch is running (their id()s are in the
    # process-wide set `running`, which only act() changes)
    _in_flight: int = attrs.field(init=False, default=0)
    _stack: AsyncExitStack | None = attrs.field(init=False, default=None)
    #: Entering (``__aenter__`` started, not done), or served (:meth:`serve` running).
    _entering: bool = attrs.field(init=False, default=False)
    _served: bool = attrs.field(init=False, default=False)
    #: The scope of the services of the block entered (shielded once they started).
    _guard: trio.CancelScope | None = attrs.field(init=False, default=None)
    #: The latest act()'s scope, reused until one of the collaborators it names is replaced.
    _last_scope: CallScope | None = attrs.field(init=False, default=None)
    #: How many messages the history had been given when the branch was built (a journaled
    #: branch reopened: its committed history, whose calls this process's log never saw).
    _inherited: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self.name = str(self.id)
        self._inherited = self.messages.appended
        report = _reporter(self)
        self._feeds = tuple(
            SinkFeed(sink, capacity=self.sink_capacity, report=report) for sink in self.sinks
        )
        self._durable = tuple(feed for feed in self._feeds if feed.durable)

    @classmethod
    def with_log_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> Branch:
        """A branch whose event log is also appended to the JSONL file at *path*.

        Enter it (``async with``) before acting; leaving closes the file.
        """
        sink = JsonlSink(path, dumps=_dumps)
        sinks: tuple[EvidenceSink, ...] = (*kwargs.pop("sinks", ()), sink)
        return cls(sinks=sinks, **kwargs)

    # -- lifecycle ----------------------------------------------------------------------------

    async def serve(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the sinks' drain services until cancelled or :meth:`aclose`.

        For ``await nursery.start(branch.serve)``: reports started once every sink is being
        drained. When the branch is closed, the services write what is buffered, close the
        sinks and this returns. Cancelled, they write what is buffered and close the sinks
        within ``cancel_grace`` seconds (each, shielded), then the cancellation propagates;
        records not written by then are counted as dropped (:attr:`SinkStatistics.dropped`)
        and reported on :attr:`failures`.
        """
        problem = self._unservable()
        if problem is not None:
            await trio.lowlevel.checkpoint()
            raise problem
        await self._serve(task_status)

    # KI-protected (the three below): a KeyboardInterrupt landing in a frame that holds a
    # nursery open, as the frame resumes from the nursery's __aexit__, would leave it never
    # exited; trio's state is then corrupt, and a shielded service that outlives the run
    # makes trio.run end in TrioInternalError (reproduced in raw trio). Trio delivers it at
    # the next checkpoint instead, as to _concurrently's nursery.
    @trio.lowlevel.enable_ki_protection
    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        """:meth:`serve`, once the caller checked that the branch may be served."""
        self._served = True  # (before the first await: a second serve() is refused)
        try:
            grace = self.cancel_grace
            async with trio.open_nursery() as nursery:
                for feed in self._feeds:
                    await nursery.start(partial(feed.serve, grace=grace))
                task_status.started()
        finally:
            self._served = False

    @trio.lowlevel.enable_ki_protection
    async def __aenter__(self) -> Self:
        """Serve the sinks (see :meth:`serve`) until the block is left.

        Raises:
            RuntimeError: the branch is entered or served already (one block at a time).
            trio.ClosedResourceError: the branch has sinks, and was left or closed.
        """
        # Cancelled already: the branch is left as it was (services started, then stopped,
        # would have closed the sinks)
        await trio.lowlevel.checkpoint_if_cancelled()
        problem = self._unservable()
        if problem is not None:
            await trio.lowlevel.checkpoint()
            raise problem
        self._entering = True  # (before the next await: a second entry is refused)
        stack = AsyncExitStack()
        try:
            nursery = await stack.enter_async_context(trio.open_nursery())
            guard = self._guard = trio.CancelScope()
            stack.push_async_exit(partial(self._leave, guard))
            await nursery.start(self._serve_guarded, guard)
            # Started: the services outlive a cancellation of the block until it is left
            # (the calls it cancels are recorded, then written); _leave stops them. Not
            # before: a service shielded while it starts would outlive a cancelled start,
            # which then waits for it forever.
            guard.shield = True
        except BaseException as exc:  # (cancelled while starting: leave what was entered)
            self._entering = False
            self._guard = None
            await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise  # (the entry failed: never a branch entered without its services)
        else:
            self._stack = stack
            self._entering = False
        return self

    def _unservable(self) -> Exception | None:
        """Why the branch cannot be served or entered now, or ``None``."""
        if self._entering or self._stack is not None or self._served:
            return RuntimeError(
                f"branch {self.name} is entered or served already (one block at a time)"
            )
        if any(feed.closed for feed in self._feeds):
            return trio.ClosedResourceError(
                f"branch {self.name} was closed: its sinks are closed and cannot be served again"
            )
        return None

    async def _serve_guarded(
        self,
        guard: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with guard:
            await self._serve(task_status)

    async def _leave(
        self,
        guard: trio.CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """The block is left: drain the sinks (see :meth:`_drain`), the services cancelled
        at once if it is left by a cancellation (or a ``KeyboardInterrupt``...)."""
        await self._drain(guard, stop=exc_type is not None and not issubclass(exc_type, Exception))
        return False

    async def _drain(self, guard: trio.CancelScope | None, *, stop: bool = False) -> None:
        """Close the feeds and wait until their services have written what is buffered and
        closed the sinks. With *stop* (or cancelled while waiting) the services, in *guard*,
        are cancelled: they write what is buffered and close the sinks within
        ``cancel_grace`` seconds (see :meth:`serve`)."""
        if stop and guard is not None:
            guard.cancel()  # (before the feeds close: no sink is closed in a cancelled scope)
        try:
            await self._close_feeds()
            for feed in self._feeds:
                await feed.wait_stopped()
        except BaseException:
            if guard is not None:
                guard.cancel()
            raise

    @trio.lowlevel.enable_ki_protection
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        try:
            return await stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The services' nursery is the branch's own business (trio's guidance for a
            # library's internal nursery): an exception of the block that nothing else joined
            # leaves the block as itself, not wrapped in a group the caller never opened.
            if exc is None or len(group.exceptions) != 1 or group.exceptions[0] is not exc:
                raise
        finally:
            self._guard = None
        raise exc  # (outside the handler: its context stays what the block gave it)

    async def aclose(self) -> None:
        """Drain and close the sinks. Idempotent; afterwards the branch no longer acts if it
        has sinks. Waits for buffered records to be written; cancelled, it waits at most
        ``cancel_grace`` seconds for them (see :meth:`serve`). Inside the block (or from
        another task, or while the branch is being entered) it closes the sinks and leaves
        the block to end as it would."""
        await self._drain(self._guard)

    async def _close_feeds(self) -> None:
        """Close every feed; the sink of a feed no service ever ran is closed here
        (:meth:`SinkFeed.close_unserved`), unless the branch is being entered (its services
        start, find the feed closed, and close their sinks)."""
        for feed in self._feeds:
            feed.close()
        if not self._entering:
            for feed in self._feeds:
                if feed.unserved:  # (shielded: a cancellation does not skip the next)
                    await feed.close_unserved(self.cancel_grace)
        await trio.lowlevel.checkpoint()

    async def flush(self) -> None:
        """Wait until every durable sink (a journal) holds the whole history recorded so far,
        messages added by hand included (an instruction, a model's final answer).

        ``act()`` already returns only once its calls are held; this is for what else was
        recorded. Each durable sink's ``flush()`` is awaited in sink order (a journal: one
        commit); a branch without one is only a checkpoint. A sink's exception propagates.
        Cancellation ends the wait; what was recorded is still written with the sink's next
        commit.
        """
        flushed = False
        for feed in self._durable:
            flush = getattr(feed.sink, "flush", None)
            if flush is not None:
                await flush()
                flushed = True
        if not flushed:
            await trio.lowlevel.checkpoint()

    @trio.lowlevel.enable_ki_protection
    def _record_answer(self, request: ActionRequest, response: ActionResponse) -> None:
        """Record *response*, an answer decided outside :meth:`act` (journal recovery, a
        rejected approval, the workers' answer), and offer it to the sinks as a call not
        invoked here, so that a tracing sink sees it as any other answer. Synchronous;
        raises as :meth:`MessageManager.record_action` does, recording nothing then."""
        self.messages.record_action(request, response)
        if self._feeds:
            record = EvidenceRecord(request, response, None, contextvars.copy_context())
            for feed in self._feeds:
                feed.offer(record)

    def _sink_failed(self, sink: EvidenceSink, call_id: str | None, error: BaseException) -> None:
        self.failures.failed("sink", error, call_id=call_id, culprit=sink)

    # -- configuration ------------------------------------------------------------------------

    def register_tools(
        self,
        tools: Tool | Callable[..., Any] | Iterable[Tool | Callable[..., Any] | None] | None,
        *,
        update: bool = False,
    ) -> None:
        """Register one tool or callable, or several (``None`` entries are skipped).

        See :meth:`ActionManager.register_tools`, which takes the same arguments.
        """
        self.registry.register_tools(tools, update=update)

    def statistics(self) -> BranchStatistics:
        """A snapshot of the history, the log, the calls in flight, failures and sinks."""
        return BranchStatistics(
            messages=len(self.messages),
            log_records=len(self.log),
            in_flight=self._in_flight,
            failures=self.failures.statistics(),
            sinks=tuple(feed.statistics() for feed in self._feeds),
        )

    # -- acting -------------------------------------------------------------------------------

    @overload
    async def act(
        self,
        action_request: object,
        *,
        strategy: Strategy = ...,
        verbose_action: bool = ...,
        suppress_errors: bool = ...,
        call_params: AlcallParams[Literal[False]] | None = ...,
        limiter: trio.CapacityLimiter | None = ...,
    ) -> list[ActionResponse]: ...

    @overload
    async def act(
        self,
        action_request: object,
        *,
        strategy: Strategy = ...,
        verbose_action: bool = ...,
        suppress_errors: bool = ...,
        call_params: AlcallParams[bool],
        limiter: trio.CapacityLimiter | None = ...,
    ) -> list[ActionResponse | Exception]: ...

    async def act(
        self,
        action_request: object,
        *,
        strategy: Strategy = "concurrent",
        verbose_action: bool = False,
        suppress_errors: bool = True,
        call_params: AlcallParams[bool] | None = None,
        limiter: trio.CapacityLimiter | None = None,
    ) -> list[ActionResponse] | list[ActionResponse | Exception]:
        """Run proposed tool calls and return their recorded responses, in input order.

        *action_request* is one proposal or a list of them (an
        :class:`~lionexec.conversation.ActionRequest`, a mapping with ``function`` and
        ``arguments``, an OpenAI ``tool_calls`` item, an Anthropic ``tool_use`` block, the
        SDKs' own objects, or an object with ``function`` and ``arguments`` attributes), or a
        whole assistant message, whose turn is recorded before its calls (see
        :func:`~lionexec.act.read_batch`). Every proposal is read and checked before anything
        is recorded: a shape that cannot be read raises :class:`ValueError`; a request already
        running, or a call id already in the history (on a journaled branch that ``retain=``
        has trimmed, the journal's whole history: one read) or twice in the batch, raises
        :class:`DuplicateCallError`; nothing is recorded then.

        The requests are added to :attr:`messages` in proposal order before any call runs; each
        call ends with exactly one linked response, written together with its event-log record the
        moment its outcome is known, whose outcome is completed, failed, denied, invalid,
        timed_out, cancelled or (journal recovery only) interrupted. The one exception is a call a
        journaled branch parks for a durable approval: its answer (outcome ``awaiting_approval``)
        is returned but not recorded, and its request stays unanswered until the approval is
        decided (see ``docs/journal.md``). Denied and invalid calls are values, whatever
        *suppress_errors* says. With ``suppress_errors=False`` a failed call's original exception
        is raised after the history is written; in a concurrent batch that cancels the calls still
        running (each is recorded ``cancelled``) unless ``call_params.return_exceptions`` keeps the
        exception in its slot instead: the result is typed ``list[ActionResponse]`` unless
        *call_params* may say ``return_exceptions=True`` (``list[ActionResponse | Exception]``
        then).

        *limiter*, a ``trio.CapacityLimiter`` shared with other batches (other conversations
        of a server, say), caps how many calls run at once across all of them; each call holds
        one token while it runs.

        Always a checkpoint. Cancellation: every call not yet answered is recorded
        ``cancelled`` synchronously, then ``trio.Cancelled`` propagates.

        On a branch with a durable sink (a journal), returns once the sink holds the batch's
        record (see :class:`~lionexec.act.EvidenceSink`), and raises a failed call's exception
        (``suppress_errors=False``) only once it holds it too.

        Raises:
            NotInTrioError: called outside trio (nothing is recorded).
            NotDurableError: a durable sink does not hold the batch's record (its write
                failed): every call was answered and recorded, the responses are on the error.
        """
        require_trio("Branch.act()")
        if strategy not in _STRATEGIES:
            raise ConfigurationError(
                f"strategy must be 'concurrent' or 'sequential', got {strategy!r}"
            )
        self._check_serving()
        params = call_params or DEFAULT_PARAMS
        proposal = read_plain_call(action_request)
        if proposal is not None:  # one plain call (a server's request): no batch to run
            return await self._act_one(proposal, params, limiter, suppress_errors, verbose_action)
        batch = read_batch(action_request, sender=self.name)
        proposals = batch.proposals
        if self._durable and len(self.messages) < self.messages.appended:
            await self._check_trimmed(proposals)  # (before anything is recorded)
        scope = self._scope()
        requests = [new_request(scope, proposal) for proposal in proposals]
        made_here = self._check_new(proposals, requests)
        if not proposals:
            if batch.turn is not None:
                self.messages.add_message(batch.turn)
            await trio.lowlevel.checkpoint()
            return []
        transactions = [
            CallTransaction(scope, proposal, request, params)
            for proposal, request in zip(proposals, requests, strict=True)
        ]
        durable = self._durable
        lost = [feed.lost for feed in durable] if durable else []
        holding = False
        try:
            self._admit(batch.turn, requests, made_here)
            results: list[Any]
            if (
                limiter is not None
                or params.throttle_period
                or params.return_exceptions
                or (params.max_concurrent is not None and strategy != "sequential")
            ):
                results = await fan_out(
                    lambda _index, transaction: transaction.run(suppress_errors, verbose_action),
                    transactions,
                    max_concurrent=1 if strategy == "sequential" else params.max_concurrent,
                    throttle_period=params.throttle_period,
                    return_exceptions=params.return_exceptions,
                    limiter=limiter,
                )
            elif strategy == "sequential" or len(transactions) == 1:  # (as fan_out runs them)
                results = []
                for transaction in transactions:
                    await trio.lowlevel.checkpoint()
                    results.append(await transaction.run(suppress_errors, verbose_action))
            else:  # each task runs its transaction's own coroutine, which keeps its response
                await spawn_each(
                    CallTransaction.run, transactions, suppress_errors, verbose_action
                )
                results = [transaction.response for transaction in transactions]
            if durable:
                holding = True
                await self._held(requests, results, lost)
            return results
        except BaseException as exc:
            # first thing, one KI-protected step: nothing can come between stop and record
            stopped = record_unanswered(scope, transactions, exc)
            if stopped:
                await announce_interrupted(scope, stopped)
            if durable and not holding:
                await self._held_before_raising(exc, requests, transactions, lost)
            raise
        finally:
            count = len(running)
            running.difference_update(map(id, requests))  # (none, if not admitted)
            _set(self, "_in_flight", self._in_flight - (count - len(running)))
            # A durable sink (a journal) reads what was appended since its last commit: only
            # what it settled may go, so such a branch trims above, on success only.
            if self.retain is not None and not durable:
                self._trim(self.retain, before=None)

    def _check_serving(self) -> None:
        if self._feeds and not all(feed.serving for feed in self._feeds):
            raise ConfigurationError(
                "this branch has evidence sinks that are not running: use `async with branch:` "
                "or `await nursery.start(branch.serve)` before act()"
            )

    def _act_read(
        self, envelope: object, proposal: Proposal, limiter: trio.CapacityLimiter | None
    ) -> Awaitable[list[ActionResponse]]:
        """``act([envelope], limiter=limiter)`` (its defaults otherwise), given *proposal*,
        what :func:`~lionexec.act.read_proposal` returned for *envelope*: act does not read
        the call again. For a caller that reads and checks its calls before acting (the
        server reads a request's before it creates the conversation). Only *proposal* is
        run: an envelope act would read otherwise (as a turn) goes to :meth:`act` whole.

        Returns the coroutine to await (one coroutine fewer than an ``async def``); what
        act refuses before it runs anything (outside trio, sinks not running) is raised
        here, at the call. Blocking and cancellation as :meth:`act`.
        """
        if type(envelope) is not dict or envelope.get("type") in _TURN_ITEMS:
            return self.act([envelope], limiter=limiter)
        require_trio("Branch.act()")
        self._check_serving()
        return self._act_one(proposal, DEFAULT_PARAMS, limiter, True, False)

    async def _act_one(
        self,
        proposal: Proposal,
        params: AlcallParams[bool],
        limiter: trio.CapacityLimiter | None,
        suppress_errors: bool,
        verbose: bool,
    ) -> list[Any]:
        """:meth:`act` for one plain call (:func:`read_plain_call`): the batch's path without
        a batch (no lists to build, no fan-out, one request admitted). A throttle paces the
        starts of a batch's calls; the only call of one starts at once."""
        messages = self.messages
        durable = self._durable
        if durable and len(messages) < messages.appended:
            await self._check_trimmed([proposal])  # (before anything is recorded)
        scope = self._scope()
        existing = messages._by_call_id.get(proposal.call_id)
        if existing is not None:
            raise _reused(proposal.call_id, existing)
        request = proposal._new_request(proposal.arguments or {}, scope.branch_name)
        transaction = CallTransaction(scope, proposal, request, params)
        lost = [feed.lost for feed in durable] if durable else []
        holding = False
        try:
            self._admit_one(request)
            try:
                if limiter is None:
                    await trio.lowlevel.checkpoint()
                    results: list[Any] = [await transaction.run(suppress_errors, verbose)]
                else:
                    async with limiter:  # (a checkpoint)
                        results = [await transaction.run(suppress_errors, verbose)]
            except Exception as exc:
                if not params.return_exceptions:
                    raise
                results = [exc]
            if durable:
                holding = True
                await self._held([request], results, lost)
            return results
        except BaseException as exc:
            # first thing, one KI-protected step: nothing can come between stop and record
            stopped = record_unanswered(scope, [transaction], exc)
            if stopped:
                await announce_interrupted(scope, stopped)
            if durable and not holding:
                await self._held_before_raising(exc, [request], [transaction], lost)
            raise
        finally:
            key = id(request)
            if key in running:  # (not, if not admitted)
                running.discard(key)
                _set(self, "_in_flight", self._in_flight - 1)
            if self.retain is not None and not durable:  # (as act() trims)
                self._trim(self.retain, before=None)

    async def _held_before_raising(
        self,
        exc: BaseException,
        requests: list[ActionRequest],
        transactions: list[CallTransaction],
        lost: list[int],
    ) -> None:
        """Before *exc* leaves an act() on a branch with durable sinks: if it is an
        ``Exception`` (a failed call's own, with ``suppress_errors=False``), wait until the
        sinks hold what the act recorded (:meth:`_held`), as a returning act() does: a caller
        that sees the failure can rely on its record. ``NotDurableError`` if they do not
        (*exc* its context). A cancellation or a ``KeyboardInterrupt`` leaves at once: the
        services write the records."""
        if isinstance(exc, Exception):
            await self._held(requests, [t.response for t in transactions], lost)

    async def _held(
        self, requests: list[ActionRequest], results: list[Any], lost: list[int]
    ) -> None:
        """After the calls of an act() on a branch with durable sinks: wait until each sink
        holds what it has accepted so far (everything appended so far that has been
        answered, the caller is about to see it), check that it holds *requests*
        (``check_held``; *lost*: each feed's count when the act began), then trim what every
        durable sink holds (``retain=``)."""
        durable = self._durable
        settled = self.messages.appended
        accepted = [feed.accepted for feed in durable]
        for feed, mark in zip(durable, accepted, strict=True):
            await feed.wait_settled(mark)
        check_held(self.name, durable, self.messages, requests, results, lost, accepted)
        if self.retain is not None:  # only what every durable sink holds
            held = [getattr(feed.sink, "committed", settled) for feed in durable]
            self._trim(self.retain, before=min(settled, *held))

    async def _check_trimmed(self, proposals: list[Proposal]) -> None:
        """Refuse a call id the durable sinks hold, on a branch whose history no longer
        holds every call (``retain=`` trimmed some, which its sinks keep): its own index
        (:meth:`_check_new`) knows only what it holds. One read of each sink that can say
        (``known_call_ids``)."""
        call_ids = [p.call_id for p in proposals]
        for call_id, sink in (await self._trimmed_call_ids(call_ids)).items():
            raise DuplicateCallError(
                f"call id {call_id!r} is already in this branch's history, as {sink!r} "
                "holds it (trimmed from memory by retain=); a model may not reuse a "
                "tool-call id",
                call_id=call_id,
            )

    async def _trimmed_call_ids(self, call_ids: list[str]) -> dict[str, EvidenceSink]:
        """Which of *call_ids* the durable sinks hold though the history no longer does
        (``retain=`` trimmed them), each with a sink that holds it; one read of each sink
        that can say (``known_call_ids``), none if the branch never trimmed."""
        found: dict[str, EvidenceSink] = {}
        if not self._durable or len(self.messages) == self.messages.appended:
            return found
        index = self.messages._by_call_id
        wanted = [call_id for call_id in call_ids if call_id not in index]
        if not wanted:
            return found
        for feed in self._durable:
            known_call_ids = getattr(feed.sink, "known_call_ids", None)
            if known_call_ids is None:
                continue
            known = await known_call_ids(wanted)
            for call_id in wanted:
                if call_id in known:
                    found.setdefault(call_id, feed.sink)
        return found

    @trio.lowlevel.enable_ki_protection
    def _admit(
        self, turn: AssistantResponse | None, requests: list[ActionRequest], made_here: bool
    ) -> None:
        """Write the turn and the requests (proposal order) and mark them in flight, in one
        synchronous, KI-protected step: a ``KeyboardInterrupt`` lands before the batch is in
        the history (nothing to answer) or after it (every request gets its response).

        *made_here*: every request was made by this ``act()``, with a new id and a call id
        checked against the history (:meth:`_check_new`), so they are appended without the
        history's checks (:meth:`MessageManager._append_new`)."""
        messages = self.messages
        if turn is not None:
            messages.add_message(turn)
        if made_here:
            messages._append_new(requests)
        else:
            for request in requests:  # each response is linked as its call ends
                messages.add_message(request)
        running.update(map(id, requests))
        _set(self, "_in_flight", self._in_flight + len(requests))

    @trio.lowlevel.enable_ki_protection
    def _admit_one(self, request: ActionRequest) -> None:
        """:meth:`_admit` for the one request :meth:`_act_one` made (no turn)."""
        self.messages._append_one(request)
        running.add(id(request))
        _set(self, "_in_flight", self._in_flight + 1)

    @trio.lowlevel.enable_ki_protection
    def _trim(self, retain: int, *, before: int | None) -> None:
        """Forget the oldest calls past *retain* (history and log together), amortized; only
        among the first *before* messages appended, if given."""
        if self.messages.calls <= retain + max(1, retain // 10):
            return
        removed = self.messages.trim_calls(retain, before=before)
        if removed:
            self.log.discard({m.id for m in removed if isinstance(m, ActionResponse)})

    def _scope(self) -> CallScope:
        failures, hooks, observer = self.failures, self.hooks, self.observer
        messages = self.messages
        # one log: stored, logged once (each part's, unless someone replaced it since)
        if hooks.failures is not failures:
            hooks.failures = failures
        if observer is not None and observer.failures is not failures:
            observer.failures = failures
        if messages.failures is not failures:
            messages.failures = failures
        scope = self._last_scope
        if scope is None:  # reused until a collaborator is replaced (see _RESCOPE): per act
            # it would cost a sixth of a one-call act's own work
            scope = self._last_scope = CallScope(
                branch_id=self.id,
                branch_name=self.name,
                registry=self.registry,
                hooks=self.hooks,
                observer=self.observer,
                policy=self.policy,
                evidence=Evidence(self.messages, self.log, self._feeds),
                history=self.messages,
                failures=failures,
                cancel_grace=self.cancel_grace,
            )
            if self.policy is not None:
                _report_unknown_tools(self.policy, self.registry)
        return scope

    def _check_new(self, proposals: list[Proposal], requests: list[ActionRequest]) -> bool:
        """Refuse, before anything is recorded, calls that could not get one new response.

        Returns whether every request was made just now (none was the caller's or a turn's).
        """
        history = self.messages
        by_call_id = history._by_call_id
        made_here = True
        seen: set[uuid.UUID] = set()
        for proposal, request in zip(proposals, requests, strict=True):
            call_id = proposal.call_id
            existing = by_call_id.get(call_id)  # (request_for_call_id, without the call)
            if existing is not None and existing is not request:
                raise _reused(call_id, existing)
            if proposal.request is None:
                continue  # a request made just now, with a new id: nothing else to check
            made_here = False
            if id(request) in running:
                raise DuplicateCallError(
                    f"action request {request.id} (call {call_id!r}) is already running in "
                    "another act(), of this branch or another",
                    call_id=call_id,
                )
            if request.action_response_id is not None:
                raise DuplicateCallError(
                    f"action request {request.id} ({request.function}) is already answered by "
                    f"response {request.action_response_id}; propose the call again instead",
                    call_id=call_id,
                )
            if request.id in seen:
                raise DuplicateCallError(
                    f"action request {request.id} appears twice in one batch", call_id=call_id
                )
            seen.add(request.id)
            if request.id in history and history[request.id] is not request:
                raise DuplicateCallError(
                    f"a different message with id {request.id} is already in this history",
                    call_id=call_id,
                )
        return made_here


def _reused(call_id: str, existing: ActionRequest) -> DuplicateCallError:
    """The error refusing a batch whose call id *existing* (in the history) holds already."""
    return DuplicateCallError(
        f"call id {call_id!r} is already in this history (request {existing.id}); "
        "a model may not reuse a tool-call id",
        call_id=call_id,
    )


def _report_unknown_tools(policy: PermissionPolicy, registry: ActionManager) -> None:
    """Log the policy's rules that name no registered tool (a typo never matches anything)."""
    names = registry.names
    for tool in policy.unknown_tools(names):
        close = difflib.get_close_matches(tool, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        _log.warning(
            "the permission policy has rules for tool %r, which is not registered%s: "
            "they never apply",
            tool,
            hint,
        )


def _reporter(branch: Branch) -> Callable[[EvidenceSink, str | None, BaseException], None]:
    """Where *branch*'s feeds report a sink's failure: its failure log, the branch held
    weakly. (The branch holds its feeds: a feed holding the branch would keep a dropped
    branch, and its whole history, for the next full collection instead of freeing it.)"""
    ref = weakref.ref(branch)

    def report(sink: EvidenceSink, call_id: str | None, error: BaseException) -> None:
        live = ref()
        if live is not None:  # (else nobody is left to read the report)
            live._sink_failed(sink, call_id, error)

    return report
