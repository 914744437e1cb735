"""lionexec inside a trio server: tool calls over HTTP, on hypercorn's trio worker.

:class:`App` is the ASGI application and :func:`serve` runs it on hypercorn's trio worker
(hypercorn is the ``server`` extra, ``pip install 'lionexec[server]'``, imported by
:func:`serve` only). To embed it in your own trio program, ``async with open_app(config,
tools=[...]) as app:`` then ``await nursery.start(serve, app)``; the tools (and, through
:class:`ServerConfig`, which of them wait for approval) are the embedding program's. From the
command line, ``python -m lionexec serve --tools MODULE:ATTRIBUTE --port 8000`` (127.0.0.1
unless ``--host`` says otherwise; ``--port 0`` picks a free port and prints it; ``--token`` or
the ``LIONEXEC_SERVER_TOKEN`` environment variable turns on bearer-token authentication; see
:func:`main`). ``examples/server.py`` does the same with three demo tools.

Durability: conversations are kept in lionexec's journal, by default the SQLite file
``lionexec.db`` in the current directory (``--journal PATH``; ``--journal :memory:`` keeps
them in memory only), or in PostgreSQL (``--database postgresql://...``). A restarted server
serves the same conversations, and first gives every call that was running when the last one
stopped its one response (an ``unsafe`` tool's, like the demo tools': ``interrupted``). Each
request loads its conversation's branch from the journal, under the conversation's lock, and
commits before it replies, so nothing is cached between requests. With PostgreSQL the lock is
also held across replicas (a session advisory lock per conversation, :class:`ReplicaLocks`):
any number of replicas serve any conversation. ``--workers`` runs no tool in the server: calls
are queued in the journal for ``python -m lionexec worker`` processes and their responses
recorded in the conversation as they arrive. An ``App`` built directly (``App(config)``, as
the tests do) keeps conversations in memory: the eviction rules below are for that mode; a
journaled conversation is never lost to eviction (only its lock is freed).

The server is careful with whatever arrives over the network: every limit below is a field of
:class:`ServerConfig` (one attrs class, defaults documented there), and every refusal is a
JSON ``{"error": "<what was wrong>"}`` with a 4xx status, never a 500.

Endpoints (JSON in, JSON out):

``POST /v1/act``
    Body: ``{"conversation_id": str, "tool_calls": [OpenAI tool_calls items],
    "strategy"?: "concurrent" | "sequential"}``. Runs the calls through ``Branch.act`` and
    replies ``{"conversation_id": ..., "messages": [...]}``: one OpenAI tool message per call,
    in input order, ``{"role": "tool", "tool_call_id", "content", "status", "outcome"}``.
    A conversation is created by its first ``POST /v1/act`` (there is no create endpoint);
    ids are 1-128 characters of letters, digits and ``._~:-``.

    Refused before anything is recorded (and before a conversation is created): a body that is
    not a JSON object, invalid JSON, JSON nested deeper than ``max_json_depth``, an integer
    longer than Python will convert (4,300 digits), ``NaN``/``Infinity`` literals or a number
    that overflows to infinity, the same limits broken inside a call's argument string (Chat
    ``function.arguments``, Responses ``arguments``, Anthropic ``input``), an object that
    repeats a name (JSON readers differ on which value counts), a missing or malformed field,
    an unreadable tool call, one call id twice, no call at all, or more than ``max_calls``
    calls: 400, naming the problem. A body over ``max_body`` bytes gets a 413; one that does
    not arrive within ``body_timeout`` seconds a 408. (An ``arguments`` string that is simply
    not JSON, or repeats a name, is a model's mistake, not an attack: the call is recorded
    ``invalid``, as ``Branch.act`` reads it, so the model can correct itself.)

    Retrying is safe: a call whose id is already in the conversation is not run again; its
    recorded response is returned (whatever its outcome was, ``cancelled`` included). The
    same id with a different function or different arguments gets a 409 naming the id, and
    nothing runs. A request runs for at most ``request_timeout`` seconds, waiting for the
    conversation included; then the calls still running are recorded ``cancelled`` and the
    client gets a 504. At most ``max_concurrent_calls`` tool calls run at once across all
    conversations (one :class:`trio.CapacityLimiter`); the others wait for a token.

``GET /v1/conversations/{id}?after=<n>&limit=<n>``
    One page of the history: ``{"conversation_id", "total", "after", "next", "records",
    "messages"}``. ``records`` are the messages ``after`` (0 by default) up to ``after + limit``
    (``limit`` is ``page_size`` by default and at most ``max_page_size``), each as lionexec
    serializes it; ``next`` is the ``after`` of the next page, or ``null`` after the last.
    ``messages`` is the OpenAI rendering of the calls whose request is on this page, each with
    its result even if the response was recorded later, so the pages' ``messages`` together
    show every call exactly once. Unknown (or evicted) ids get a 404.

``GET /v1/conversations/{id}/records?after=<n>``
    Every message from ``after`` on, streamed as JSON lines (``application/x-ndjson``), in
    chunks of ``stream_chunk`` messages. Between chunks the handler yields to the event loop,
    so a huge conversation does not stall the server. It streams the messages present when
    it started. What it holds: an in-memory conversation is read in place (only the chunk
    being written is copied); a journaled one is first read whole from the journal, as is
    every history page and every ``POST /v1/act`` (each request loads the conversation's
    branch): time and memory linear in the conversation's length per request, which is why
    a journaled conversation holds at most ``max_history`` messages (10,000 by default;
    past that a ``POST /v1/act`` with new calls gets a 409).

``POST /v1/approvals/{id}`` and ``GET /v1/approvals[?conversation_id=...]``
    With ``--approve TOOL`` (``ServerConfig.approve``; a journal is needed), every call of
    TOOL is parked: ``POST /v1/act`` answers it ``{"status": "pending", "outcome":
    "awaiting_approval", "approval_id": ...}`` (a retry gets the same answer), and nothing
    runs. ``GET /v1/approvals`` lists the pending approvals (``approval_id``,
    ``conversation_id`` when this server knows it, ``call_id``, ``function``, the exact
    normalized ``arguments`` approved, ``escalation``, ``created_at``, ``expires_at``).
    ``POST /v1/approvals/{id}`` with an empty body (or ``{"decision": "approve", "by"?:
    str}``) approves; ``{"decision": "reject", "reason": str, "by"?: str}`` rejects. The
    decision is one compare-and-set in the journal (another decision gets a 409, an unknown
    id a 404), made from any replica, before or after a restart; then, holding the
    conversation like a request does, the call is resumed: approved, it runs once through
    the whole transaction; rejected, it is answered ``denied`` with the reason. The reply is
    ``{"approval": {... "state": "used" | "rejected"}, "message": <its tool message>}``.
    Resuming takes at most ``request_timeout`` seconds, then a 504 says what became of the
    call: not resumed yet (POST the same decision again to finish: repeating the decision
    an approval already has only resumes it), or, approved, started and cancelled (the
    approval is ``used``: the call does not run again). An approval id that is not 1-64
    letters, digits, ``_`` or ``-`` is a 404; a journal that fails (a lost database
    connection) a 503.

``GET /v1/events`` (optionally ``?conversation_id=...``)
    A server-sent-events stream of lifecycle events, each ``id: <n>``, ``event: <type>``,
    ``data: <JSON object with conversation_id>``. Types: ``act.start``, ``tool.post`` and
    ``tool.error`` (the branch's hook bus, for calls that ran), ``message.add`` (the history's
    message callbacks: each request and response written), ``act.end`` (the statuses, in input
    order) and ``act.cancelled`` (the client went away or the request timed out; the calls
    recorded ``cancelled``). The stream opens with the comment ``: subscribed``; once a client
    has read it, every later event reaches it. A ``conversation_id`` no conversation can have
    (the characters of a conversation id, at most 128) is a 400.

Every response body, event and JSON line is strict JSON: a ``NaN`` or infinite float that a
tool returned (or that a tool's argument conversion produced) is written as the string
``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, and an integer too long to print as
``"<int with N bits>"``; ``json.loads(..., parse_constant=<raise>)`` reads all of it.

``/console/`` (unless ``ServerConfig.console`` is false)
    The approvals console: HTML pages of the conversations, their calls and the approvals
    inbox, where a person approves or rejects a parked call (:class:`Console`, which a
    program can also mount in an ASGI app of its own; see ``docs/console.md``). A person
    signs in with the token and gets a session cookie; the bearer token is not asked there.

Authentication: with a token configured, every request (but the console's) needs
``Authorization: Bearer <token>``; anything else gets a 401 (compared in constant time,
``hmac.compare_digest``).
Without a token the server is open: bind it to 127.0.0.1 (the default).

Memory: conversations are freed. One idle for ``idle_ttl`` seconds (by trio's clock) is
evicted, and when ``max_conversations`` exist the least recently used idle one makes room for
a new one (if every one is busy, a new conversation gets a 503). A conversation with a request
in progress is never evicted. An evicted conversation is gone: ``GET`` gives 404, and a
``POST`` starts a new, empty one (so a retry after eviction runs its calls again).

Concurrency: each conversation is one :class:`~lionexec.Branch` with a :class:`trio.Lock`;
requests to one conversation run one after another, requests to different ones in parallel.

Cancellation: while a request runs, its handler also listens for ``http.disconnect``; a client
that goes away cancels the request. ``Branch.act`` then records each call it had not finished
as ``cancelled`` before the cancellation propagates (calls already finished keep their
outcome), and announces them (``tool.error`` with status ``cancelled`` for calls that had
started, ``message.add``) within ``Branch.cancel_grace``; the server then publishes
``act.cancelled`` with their ids. A request whose client leaves while it still waits for the
conversation's lock never reached the conversation, so nothing is recorded for it. Nothing is
sent back to a client that is gone.

Slow subscribers never hold up tool calls: events are published with ``send_nowait`` into a
bounded memory channel per subscriber (``subscriber_buffer`` events). A subscriber whose
buffer is full is disconnected, not silently thinned out: it gets the events already
buffered, then an ``event: overflow`` and the end of the stream. Event ids are consecutive
across the server, so a client can tell whether it missed anything and re-read the history
after reconnecting. On shutdown every stream ends. (There is no keep-alive comment: a client
that vanishes is noticed through ``http.disconnect``.) While nobody is subscribed the server
registers no hooks or message callbacks on its branches, so events cost nothing then.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._app import MISSING_HYPERCORN as MISSING_HYPERCORN
from ._app import App as App
from ._app import open_app as open_app
from ._app import serve as serve
from ._cli import DEFAULT_JOURNAL as DEFAULT_JOURNAL
from ._cli import TOKEN_VARIABLE as TOKEN_VARIABLE
from ._cli import config_from_args as config_from_args
from ._cli import main as main
from ._config import ServerConfig as ServerConfig
from ._console import Console as Console
from ._conversations import Conversation as Conversation
from ._conversations import branch_id_of as branch_id_of
from ._events import EventHub as EventHub
from ._events import ServerEvent as ServerEvent
from ._events import Subscription as Subscription
from ._locks import ReplicaLocks as ReplicaLocks

__all__ = [
    "DEFAULT_JOURNAL",
    "MISSING_HYPERCORN",
    "TOKEN_VARIABLE",
    "App",
    "Console",
    "Conversation",
    "EventHub",
    "ReplicaLocks",
    "ServerConfig",
    "ServerEvent",
    "Subscription",
    "branch_id_of",
    "config_from_args",
    "main",
    "open_app",
    "serve",
]

_publish(__name__, globals())
