"""The ASGI application (:class:`App`), and serving it (:func:`serve`, :func:`open_app`)."""

from __future__ import annotations

import hmac
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, cast

import trio

from ..act import EvidenceSink
from ..journal import Journal, open_journal
from ..tools import ActionManager
from ._act import ActHandlers
from ._approvals import ApprovalHandlers, approval_policy
from ._asgi import (
    SSE_HEADERS,
    ClientGone,
    HTTPError,
    _allow,
    _header,
    _lifespan,
    browser_refusal,
    check_declared_size,
    query_parameters,
    read_body,
    send_chunk,
    send_json,
    until_disconnect,
)
from ._config import ServerConfig
from ._console import Console
from ._conversations import CONVERSATION_ID, Conversation
from ._events import OVERFLOW, EventHub
from ._json import _preview
from ._locks import ReplicaLocks
from ._trace import check_tracing, open_trace

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

__all__ = ["MISSING_HYPERCORN", "App", "open_app", "serve"]


class App(ActHandlers, ApprovalHandlers):
    """The ASGI application: the conversations, the event hub, the shared call limiter.

    Each endpoint has a handler method: ``act`` (``POST /v1/act``), ``history`` and
    ``stream_history`` (``GET /v1/conversations/{id}`` and ``.../records``), ``events``
    (``GET /v1/events``), ``pending_approvals`` and ``decide`` (``GET /v1/approvals``, ``POST
    /v1/approvals/{id}``; ``settle`` decides one, for the console too); ``console`` serves
    ``/console/``; ``find``, ``conversation`` and ``evict_idle`` manage the live
    conversations, and ``sweep`` evicts the idle ones periodically (:func:`serve` runs it).

    Args:
        config: the limits (see :class:`ServerConfig`; its defaults otherwise).
        tools: the tools (functions or :class:`~lionexec.tools.Tool` objects) the
            conversations may call: registered once, in the one registry every
            conversation's branch shares (none by default: the embedding program brings its
            own).
        journal: the open journal conversations are kept in (``None``: in memory). A
            ``config.journal`` is opened by :func:`open_app`, which passes it here.
        sinks: more evidence sinks for every journaled conversation's branch (an
            :class:`~lionexec.otel.OtelSink`, as :func:`open_app` makes for
            ``config.trace_file``); each one serves many branches, one after another and at
            once, and is closed (flushed) whenever one of them closes. Needs a journal.

    Attributes:
        conversations: the live conversations by id, least recently used first.
        limiter: the :class:`trio.CapacityLimiter` every tool call of every conversation runs
            under (``config.max_concurrent_calls`` tokens). Create the app inside ``trio.run``.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        tools: Iterable[Callable[..., Any]] = (),
        journal: Journal | None = None,
        sinks: Iterable[EvidenceSink] = (),
    ) -> None:
        self.config = config if config is not None else ServerConfig()
        self.tools = tuple(tools)
        if journal is None and self.config.journal is not None:
            raise ValueError(
                "config.journal names a journal: open it with `async with open_app(config)` "
                "(or pass an open journal as journal=)"
            )
        #: The open journal conversations are kept in, or ``None`` (in memory).
        self.journal = journal
        #: The evidence sinks every journaled conversation's branch has besides the journal.
        self.sinks = tuple(sinks)
        if self.sinks and journal is None:
            raise ValueError(
                "sinks need a journal: they are given to each journaled conversation's branch "
                "(open the app with a journal)"
            )
        #: The tools of journaled conversations (one registry, shared by their branches).
        self.registry = ActionManager()
        if journal is not None:
            self.registry.register_tools(list(self.tools))
        unknown = set(self.config.approve) - set(self.registry.names)
        if unknown:  # a misspelt name would leave the real tool running unapproved
            raise ValueError(
                f"approve names unknown tools: {', '.join(map(repr, sorted(unknown)))} (the "
                f"tools are {', '.join(sorted(self.registry.names)) or 'none'})"
            )
        #: The tools of in-memory conversations, registered on first use (one registry,
        #: shared by their branches: registering the tools per conversation cost more than
        #: creating the conversation's branch).
        self._memory_registry: ActionManager | None = None
        #: Conversation locks across replicas (a PostgreSQL journal; set by open_app).
        self.replica_locks: ReplicaLocks | None = None
        #: The policy of journaled conversations: ``config.approve`` tools wait for approval.
        self.policy = (
            approval_policy(self.config.approve, self.registry.names)
            if self.config.approve
            else None
        )
        #: This process's lock of each journaled conversation, by branch id (shared by its
        #: requests and the approvals of its calls); dropped with the conversation when idle.
        self._locks: dict[uuid.UUID, trio.Lock] = {}
        self.hub = EventHub(self.config.subscriber_buffer, on_watch=self._watch_all)
        self.conversations: OrderedDict[str, Conversation] = OrderedDict()
        self._kept: OrderedDict[str, tuple[Conversation, int]] = OrderedDict()
        self._kept_messages = 0
        self.limiter = trio.CapacityLimiter(self.config.max_concurrent_calls)
        token = self.config.token
        self._authorization = None if token is None else token.encode()
        #: The approvals console served at ``/console/`` (``None`` if ``config.console`` is
        #: false); it signs people in with the token itself.
        self.console = Console(self) if self.config.console else None

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            path = scope["path"]
            if self.console is not None and (path == "/console" or path.startswith("/console/")):
                root = scope.get("root_path", "") + "/console"
                await self.console(cast("HTTPScope", {**scope, "root_path": root}), receive, send)
                return
            try:
                self._authorize(scope)
                await self._route(scope, receive, send)
            except HTTPError as exc:
                await send_json(send, exc.status, {"error": exc.message}, exc.headers)
            except ClientGone:
                pass

    def _authorize(self, scope: HTTPScope) -> None:
        refusal = browser_refusal(scope, self.config)
        if refusal is not None:
            raise HTTPError(403, refusal)
        if self._authorization is None:
            return
        scheme, _, presented = (_header(scope, b"authorization") or b"").partition(b" ")
        # The scheme in any case (RFC 9110); the token in constant time: how much of a
        # guess matches must not show in the response time.
        matches = hmac.compare_digest(presented.strip(b" "), self._authorization)
        if not (matches and scheme.lower() == b"bearer"):
            raise HTTPError(
                401,
                "missing or wrong bearer token (send Authorization: Bearer <token>)",
                [(b"www-authenticate", b"Bearer")],
            )

    async def _route(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/v1/act":
            _allow(method, "POST")
            await self.act(scope, receive, send)
        elif path.startswith("/v1/conversations/"):
            _allow(method, "GET")
            conversation_id = path.removeprefix("/v1/conversations/")
            if conversation_id.endswith("/records"):
                conversation_id = conversation_id.removesuffix("/records")
                await self.stream_history(conversation_id, query_parameters(scope), receive, send)
            else:
                await self.history(conversation_id, query_parameters(scope), send)
        elif path == "/v1/events":
            _allow(method, "GET")
            subscribed = query_parameters(scope).get("conversation_id", [None])[-1]
            await self.events(subscribed, receive, send)
        elif path == "/v1/approvals":
            _allow(method, "GET")
            await self.pending_approvals(query_parameters(scope), send)
        elif path.startswith("/v1/approvals/"):
            _allow(method, "POST")
            approval_id = path.removeprefix("/v1/approvals/")
            await self.decide(approval_id, await self._body(scope, receive), send)
        else:
            raise HTTPError(404, f"no such endpoint: {method} {path}")

    async def _body(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> bytes:
        check_declared_size(scope, self.config.max_body)
        return await read_body(receive, self.config.max_body, self.config.body_timeout)

    # -- GET /v1/events -----------------------------------------------------------------------

    async def events(
        self, conversation_id: str | None, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if conversation_id is not None and not CONVERSATION_ID.fullmatch(conversation_id):
            # no conversation can have it: a stream of it would never carry an event
            raise HTTPError(400, f"no such conversation id {_preview(conversation_id)}")
        with self.hub.subscribe(conversation_id) as subscription:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send_chunk(send, b": subscribed\n\n")

            async def pump() -> None:
                async for event in subscription.receive_channel:
                    await send_chunk(send, event.encode())
                await send_chunk(send, OVERFLOW if subscription.overflowed else b"", more=False)

            await until_disconnect(receive, pump)


# -- serving -------------------------------------------------------------------------------------

#: What :func:`serve` (and ``python -m lionexec serve``) says when hypercorn is missing.
MISSING_HYPERCORN: Final = (
    "serving needs hypercorn, which is not installed: pip install 'lionexec[server]'"
)


def _hypercorn() -> tuple[Any, Any]:
    """hypercorn's ``Config`` and trio ``serve``, imported on first use (the ``server``
    extra): :mod:`lionexec.server` itself imports without hypercorn."""
    try:
        import hypercorn  # noqa: F401  (first: a missing package, not a stale submodule)
        from hypercorn.config import Config
        from hypercorn.trio import serve as hypercorn_serve
    except ImportError as exc:
        raise ImportError(MISSING_HYPERCORN, name="hypercorn") from exc
    return Config, hypercorn_serve


async def serve(
    app: App,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *app* on ``app.config.host``/``port`` until *shutdown_trigger* returns.

    Meant for ``await nursery.start(serve, app)``: the start value is hypercorn's list of
    bound URLs (``["http://127.0.0.1:54321"]``), so ``port=0`` is usable. Blocks until the
    trigger returns (forever if ``None``) or the surrounding scope is cancelled. Alongside the
    server it sweeps expired conversations (``sweep_interval``). On shutdown the event streams
    end, and requests still running get ``graceful_timeout`` seconds before being cancelled.

    Needs hypercorn (the ``server`` extra, ``pip install 'lionexec[server]'``), imported here
    only: :class:`ImportError` naming the extra if it is missing.
    """
    Config, hypercorn_serve = _hypercorn()
    config = Config()
    config.bind = [f"{app.config.host}:{app.config.port}"]
    config.graceful_timeout = app.config.graceful_timeout

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        app.hub.close()

    async with trio.open_nursery() as nursery:
        if app.config.idle_ttl is not None:
            nursery.start_soon(app.sweep)
        await hypercorn_serve(app, config, shutdown_trigger=trigger, task_status=task_status)
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_app(
    config: ServerConfig | None = None,
    *,
    tools: Iterable[Callable[..., Any]] = (),
    recover: bool | None = None,
    sinks: Iterable[EvidenceSink] = (),
) -> AsyncIterator[App]:
    """An :class:`App` for *config*, its journal (``config.journal``) open for the block.

    Before the app is returned, every call that was running when the last server on this
    journal stopped gets its one response (:meth:`Journal.recover
    <lionexec.journal.Journal.recover>`: ``unsafe`` tools, like the demo's, are recorded
    ``interrupted``), unless *recover* (by default ``config.recover``) is false or calls run
    on workers (the workers reclaim those). Recover with one process only: with several
    replicas running calls themselves, pass ``recover=False`` to all but one. Blocks while the
    journal opens; closes it at the end. *tools* and *sinks* are the :class:`App`'s (sinks
    need ``config.journal``: :class:`ValueError` otherwise).

    With ``config.trace_file``, the app's branches also feed an
    :class:`~lionexec.otel.OtelSink` whose spans are appended to that file as JSON lines
    (:func:`lionexec.otel.jsonl.open_trace_file`), calls re-run by the recovery included; at
    the end the last spans are written (for a few seconds at most) and the file is closed.
    That needs the ``otel`` extra: :class:`ModuleNotFoundError` naming it otherwise (before
    the journal opens).
    """
    config = config if config is not None else ServerConfig()
    sinks = tuple(sinks)
    if config.journal is None:
        await trio.lowlevel.checkpoint()
        yield App(config, tools=tools, sinks=sinks)
        return
    async with AsyncExitStack() as stack:
        if config.trace_file is not None:
            check_tracing()
            sinks += (await stack.enter_async_context(open_trace(config.trace_file)),)
        journal = await stack.enter_async_context(open_journal(config.journal))
        app = App(config, tools=tools, journal=journal, sinks=sinks)
        if (config.recover if recover is None else recover) and not config.workers:
            kwargs: dict[str, Any] = {} if app.policy is None else {"policy": app.policy}
            await journal.recover(app.registry, sinks=sinks, **kwargs)
        if not config.journal.startswith(("postgresql://", "postgres://")):
            yield app
            return
        async with ReplicaLocks(config.journal, config.max_concurrent_calls) as locks:
            app.replica_locks = locks
            yield app
