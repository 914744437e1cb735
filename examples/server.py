"""lionexec inside a trio server: tool calls over HTTP, on hypercorn's trio worker.

Run it with ``python examples/server.py --port 8000`` (127.0.0.1 unless ``--host`` says
otherwise; ``--port 0`` picks a free port and prints it; ``--token`` or the
``LIONEXEC_SERVER_TOKEN`` environment variable turns on bearer-token authentication). It needs
``hypercorn``. To embed it in your own trio program, ``async with open_app(config) as app:``
then ``await nursery.start(serve, app)``.

Durability: conversations are kept in lionexec's journal, by default the SQLite file
``lionexec.db`` in the current directory (``--journal PATH``; ``--journal :memory:`` keeps
them in memory only), or in PostgreSQL (``--database postgresql://...``). A restarted server
serves the same conversations, and first gives every call that was running when the last one
stopped its one response (the demo tools are ``unsafe``: ``interrupted``). Each request loads
its conversation's branch from the journal, under the conversation's lock, and commits before
it replies, so nothing is cached between requests. With PostgreSQL the lock is also held
across replicas (a session advisory lock per conversation, :class:`ReplicaLocks`): any number
of replicas serve any conversation. ``--workers`` runs no tool in the server: calls are
queued in the journal for ``python -m lionexec worker`` processes and their responses
recorded in the conversation as they arrive. An ``App`` built directly (``App(config)``, as
the tests do) keeps conversations in memory: the eviction rules below are for that mode; a
journaled conversation is never lost to eviction (only its lock is freed).

This file is meant to be copied, so it is careful with whatever arrives over the network:
every limit below is a field of :class:`ServerConfig` (one attrs class, defaults documented
there), and every refusal is a JSON ``{"error": "<what was wrong>"}`` with a 4xx status, never
a 500.

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

Authentication: with a token configured, every request needs ``Authorization: Bearer
<token>``; anything else gets a 401 (compared in constant time, ``hmac.compare_digest``).
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

import argparse
import gc
import hmac
import json
import math
import os
import re
import signal
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from functools import partial
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from lionexec import ActionOutcome, ActionRequest, ActionResponse, Branch, HookPoint
from lionexec._jsonable import is_unicode, json_encoder, repeated_name, utf8_text
from lionexec.act import read_proposal
from lionexec.conversation import ErrorInfo, Message, MessageManager, result_text, to_openai
from lionexec.errors import DuplicateCallError, NotDurableError
from lionexec.governance import PermissionPolicy
from lionexec.journal import (
    Approval,
    ApprovalClosed,
    ApprovalNotFound,
    Journal,
    JournalError,
    canonical_json,
    open_journal,
)
from lionexec.journal.workers import load_request
from lionexec.serialization import converter
from lionexec.tools import ActionManager

__all__ = [
    "DEMO_TOOLS",
    "TOKEN_VARIABLE",
    "App",
    "Conversation",
    "EventHub",
    "ServerConfig",
    "ServerEvent",
    "branch_id_of",
    "config_from_args",
    "dumps",
    "loads",
    "open_app",
    "serve",
]

T = TypeVar("T")

STRATEGIES: Final = ("concurrent", "sequential")
CONVERSATION_ID: Final = re.compile(r"[A-Za-z0-9._~:-]{1,128}")
CURSOR: Final = re.compile(r"[0-9]{1,15}")
#: What an approval id in a URL may be (the journal's are ``apr_`` + 32 hex digits).
APPROVAL_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The state an approval is in once a decision (``approve``/``reject``) has been made.
DECIDED: Final = {"approve": "approved", "reject": "rejected"}
#: The environment variable ``main()`` reads the bearer token from (``--token`` wins).
TOKEN_VARIABLE: Final = "LIONEXEC_SERVER_TOKEN"
#: Where ``main()`` keeps its journal unless ``--journal`` or ``--database`` says otherwise.
DEFAULT_JOURNAL: Final = "lionexec.db"
#: Conversation ids map to journal branch ids (UUIDs) as ``uuid5(CONVERSATIONS, id)``.
CONVERSATIONS: Final = uuid.UUID("6d1b2f4e-8a43-5c1e-9f0b-3a2d4c5e6f70")
JSON_HEADERS: Final = [(b"content-type", b"application/json")]
NDJSON_HEADERS: Final = [(b"content-type", b"application/x-ndjson")]
OVERFLOW: Final = b'event: overflow\ndata: {"reason": "subscriber buffer full"}\n\n'
SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


# -- configuration -------------------------------------------------------------------------------


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0:  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


def _positive_int(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {value!r}")


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _positive(instance, attribute, value)


def _token(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value or not value.isascii()):
        raise ValueError("token must be None or a non-empty ASCII string")


def _journal_target(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value or "\0" in value):
        raise ValueError(
            f"journal must be None, a file path or a postgresql:// URL, got {value!r}"
        )


def _names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes):  # tuple("pay") would be ("p", "a", "y")
        raise ValueError(f"approve must be a sequence of tool names, not the string {value!r}")
    return tuple(value)


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Everything the server can be told, with the defaults a copy starts from.

    Sizes are counts or bytes; durations are seconds on trio's clock.

    Attributes:
        host: the address to bind (``127.0.0.1``: only this machine can connect).
        port: the port to bind (8000; 0 picks a free one).
        token: the bearer token every request must present, or ``None`` (no authentication).
        max_body: bytes a request body may have (1 MiB); more gets a 413.
        body_timeout: seconds the whole request body may take to arrive (10); then a 408.
        request_timeout: seconds a ``POST /v1/act`` may take, waiting for the conversation
            included (60); then its calls still running are recorded ``cancelled`` and it
            gets a 504.
        max_calls: tool calls one request may carry (64); more gets a 400.
        max_concurrent_calls: tool calls running at once across all conversations (64).
        max_conversations: conversations kept (10,000); the least recently used idle one
            is evicted to make room.
        idle_ttl: seconds an idle conversation is kept (3,600), or ``None`` to keep it until
            ``max_conversations`` pushes it out.
        sweep_interval: seconds between sweeps for conversations past ``idle_ttl`` (60; each
            request also evicts the expired ones it finds).
        page_size: messages in a history page when the request names no ``limit`` (100).
        max_page_size: the largest ``limit`` a history page may ask for (1,000).
        stream_chunk: messages written per chunk of a streamed history (100).
        max_history: messages a journaled conversation may hold (10,000): a ``POST
            /v1/act`` whose new calls would take it past that gets a 409 (retries of
            recorded calls are still answered). Every request of a journaled conversation
            reads its whole history from the journal, so this bounds what each one costs.
            (An in-memory conversation has no such cap: it is read in place.)
        max_json_depth: nesting levels a JSON body, or a call's ``arguments`` string, may
            have (32).
        subscriber_buffer: events buffered per event-stream subscriber before it is dropped
            (256).
        graceful_timeout: seconds requests still running get at shutdown (3).
        journal: where conversations are kept: ``None`` (in memory, gone with the process:
            what an embedded ``App(config)`` uses), an SQLite file path, or a
            ``postgresql://`` URL. ``main()`` passes ``lionexec.db`` (in the current
            directory) unless told otherwise. Opened by :func:`open_app`.
        workers: submit tool calls to worker processes (``python -m lionexec worker``) through
            the journal instead of running them in the server (``False``). Needs a journal;
            with PostgreSQL, any number of server replicas share the conversations.
        recover: whether :func:`open_app` recovers the journal before serving (``True``): the
            calls that were running when the last server stopped get their one response.
            With several replicas that run calls themselves, let only one recover (the
            others would take its running calls for lost ones: ``--no-recover``).
        approve: names of tools whose calls wait for a person's approval (``()``): each such
            call is answered ``awaiting_approval`` with an approval id, parked durably in the
            journal, and runs once when ``POST /v1/approvals/{id}`` approves it (or is
            answered ``denied`` when that rejects it). Needs a journal, and the calls run
            here (not with ``workers``). A sequence, not a string; :class:`App` refuses a
            name that is not one of its tools (``ValueError``).
    """

    host: str = "127.0.0.1"
    port: int = attrs.field(default=8000)
    token: str | None = attrs.field(default=None, validator=_token, repr=False)
    max_body: int = attrs.field(default=1 << 20, validator=_positive_int)
    body_timeout: float = attrs.field(default=10.0, validator=_positive)
    request_timeout: float = attrs.field(default=60.0, validator=_positive)
    max_calls: int = attrs.field(default=64, validator=_positive_int)
    max_concurrent_calls: int = attrs.field(default=64, validator=_positive_int)
    max_conversations: int = attrs.field(default=10_000, validator=_positive_int)
    idle_ttl: float | None = attrs.field(default=3600.0, validator=_optional_positive)
    sweep_interval: float = attrs.field(default=60.0, validator=_positive)
    page_size: int = attrs.field(default=100, validator=_positive_int)
    max_page_size: int = attrs.field(default=1000, validator=_positive_int)
    stream_chunk: int = attrs.field(default=100, validator=_positive_int)
    max_history: int = attrs.field(default=10_000, validator=_positive_int)
    max_json_depth: int = attrs.field(default=32, validator=_positive_int)
    subscriber_buffer: int = attrs.field(default=256, validator=_positive_int)
    graceful_timeout: float = attrs.field(default=3.0, validator=_positive)
    journal: str | None = attrs.field(default=None, validator=_journal_target, repr=False)
    workers: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    recover: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    approve: tuple[str, ...] = attrs.field(default=(), converter=_names)

    @port.validator
    def _check_port(self, _attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
            raise ValueError(f"port must be an int from 0 to 65535, got {value!r}")

    def __attrs_post_init__(self) -> None:
        if self.workers and self.journal is None:
            raise ValueError(
                "workers needs a journal (an SQLite path or a postgresql:// URL) to submit to"
            )
        if any(not isinstance(name, str) or not name for name in self.approve):
            raise ValueError(f"approve must name tools (strings), got {self.approve!r}")
        if self.approve and (self.journal is None or self.workers):
            raise ValueError(
                "approve needs a journal (approvals wait in it) and calls run in the server "
                "(not workers)"
            )
        if self.page_size > self.max_page_size:
            raise ValueError(
                f"page_size ({self.page_size}) must not exceed max_page_size "
                f"({self.max_page_size})"
            )


# -- strict JSON, both ways ----------------------------------------------------------------------


class BadJSON(ValueError):
    """A JSON text was refused. ``hostile``: it broke a limit (as opposed to a plain syntax
    error), so it is refused even where a syntax error is the model's to correct."""

    def __init__(self, message: str, *, hostile: bool) -> None:
        super().__init__(message)
        self.hostile = hostile


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON number (NaN and Infinity are refused)", hostile=True)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"the number {text[:40]} is too large for a float", hostile=True)
    return value


class _Repeated(BadJSON):
    """An object repeats a name: JSON readers differ on which value counts (Python's keeps
    the last, others the first), so it is refused rather than read one way."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        name = str(repeated_name(pairs))
        raise _Repeated(f"repeats the name {name[:40]!r} within one object", hostile=False)
    return mapping


#: One decoder for every parse (building one per call costs more than a small body's parse).
_DECODER: Final = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_object
)


def loads(data: str | bytes, *, max_depth: int, what: str = "body") -> Any:
    """Parse strict JSON (UTF-8): no ``NaN``/``Infinity``, no float overflow, bounded nesting.

    Raises :class:`BadJSON` whose message starts with *what*. Never raises anything else for
    bad input (deep nesting, 5,000-digit integers and undecodable bytes included).
    """
    try:
        text = data.decode() if isinstance(data, bytes) else data
        value = _DECODER.decode(text)
    except _Repeated as exc:  # not a limit broken: arguments are left to Branch.act's reader
        raise BadJSON(f"{what} {exc}", hostile=False) from None
    except BadJSON as exc:
        raise BadJSON(f"{what}: {exc}", hostile=True) from None
    except RecursionError:
        raise BadJSON(
            f"{what} is nested more than {max_depth} levels deep", hostile=True
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadJSON(f"{what} is not valid JSON: {exc}", hostile=False) from None
    except ValueError as exc:  # int conversion limits: a number with thousands of digits
        limit = sys.get_int_max_str_digits()
        message = f"{what} has an integer longer than {limit} digits"
        if "digits" not in str(exc):
            message = f"{what} is not valid JSON: {exc}"
        raise BadJSON(message, hostile=True) from None
    # Each level opens with a bracket, so a text with no more brackets than max_depth (in
    # strings or not) cannot nest deeper: counted in C, that spares the walk for almost
    # every body (server CPU row of nox -s bench).
    if (
        type(value) in (dict, list)
        and text.count("[") + text.count("{") > max_depth
        and _depth_exceeds(value, max_depth)
    ):
        raise BadJSON(f"{what} is nested more than {max_depth} levels deep", hostile=True)
    return value


def _depth_exceeds(value: dict[str, Any] | list[Any], max_depth: int) -> bool:
    """Whether *value* nests containers more than *max_depth* levels (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            return True
        for item in container.values() if type(container) is dict else container:
            if type(item) is dict or type(item) is list:
                stack.append((item, depth + 1))
    return False


def dumps(value: object) -> bytes:
    """Strict JSON bytes for *value* (``allow_nan=False`` holds; never raises).

    A non-finite float becomes ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, an int too long to
    print ``"<int with N bits>"``, anything else JSON cannot hold ``"<unserializable T>"``.
    The fast path is one encoding (``json.dumps``'s text); only a value it refuses is rewritten.
    """
    try:
        return _ENCODE(value).encode()
    except (ValueError, TypeError, RecursionError):
        return _ENCODE(_strict(value, 0)).encode()


#: ``json.dumps(value, ensure_ascii=False, allow_nan=False)``'s text with its encoder built once,
#: not per reply (server CPU row of nox -s bench); a cycle raises RecursionError, which
#: :func:`dumps` rewrites like any value it refuses.
_ENCODE: Final = json_encoder(separators=(", ", ": "))


def _strict(value: Any, depth: int) -> Any:
    if depth > 200:
        return "<max depth exceeded>"
    if isinstance(value, str):
        return utf8_text(value)  # a lone surrogate cannot be sent as UTF-8: U+FFFD
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:
            return f"<int with {value.bit_length()} bits>"
        return value
    if isinstance(value, Mapping):
        return {utf8_text(str(k)): _strict(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v, depth + 1) for v in value]
    return f"<unserializable {type(value).__name__}>"


# -- demo tools ----------------------------------------------------------------------------------


async def get_weather(city: str) -> dict[str, Any]:
    """Today's (made-up) weather for a city. An async tool."""
    await trio.lowlevel.checkpoint()
    return {"city": city, "forecast": "sunny", "high_c": 21}


def word_count(text: str) -> int:
    """Count the words in a text. A sync tool: lionexec runs it in a worker thread."""
    return len(text.split())


async def slow_echo(text: str, seconds: float = 60.0) -> str:
    """Echo a text after waiting some seconds: a call long enough to walk away from."""
    await trio.sleep(seconds)
    return text


DEMO_TOOLS: Final[tuple[Callable[..., Any], ...]] = (get_weather, word_count, slow_echo)


# -- lifecycle events ----------------------------------------------------------------------------


@attrs.frozen
class ServerEvent:
    """One lifecycle event, as a server-sent event."""

    id: int
    type: str
    conversation_id: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        payload = dumps({"conversation_id": self.conversation_id, **self.data})
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (self.id, self.type.encode(), payload)


@attrs.define(eq=False)
class Subscription:
    """One subscriber's bounded buffer. ``overflowed`` says why the stream ended early."""

    conversation_id: str | None
    send_channel: trio.MemorySendChannel[ServerEvent]
    receive_channel: trio.MemoryReceiveChannel[ServerEvent]
    overflowed: bool = False


class EventHub:
    """Fans lifecycle events out to subscribers without ever waiting for one.

    :meth:`publish` is synchronous: it puts the event into each matching subscriber's memory
    channel with ``send_nowait``. A subscriber whose buffer is full is dropped (its channel is
    closed, ``overflowed`` set): it reads what was buffered, then the end of the channel.

    *on_watch* is called with ``True`` when the first subscriber arrives and ``False`` when
    the last one leaves, so the app listens to its branches only while someone listens to it
    (lionexec copies each message for every message callback; with nobody subscribed there
    is no callback to copy for).
    """

    def __init__(self, buffer: int = 256, on_watch: Callable[[bool], None] | None = None) -> None:
        if buffer < 1:
            raise ValueError(f"a subscriber buffer holds at least 1 event, got {buffer}")
        self.buffer = buffer
        self._subscriptions: set[Subscription] = set()
        self._last_id = 0
        self._on_watch = on_watch

    @property
    def watched(self) -> bool:
        """Whether anyone is subscribed."""
        return bool(self._subscriptions)

    @contextmanager
    def subscribe(self, conversation_id: str | None = None) -> Iterator[Subscription]:
        """Receive the events of one conversation (or all, for ``None``) while in the block."""
        send_channel, receive_channel = trio.open_memory_channel[ServerEvent](self.buffer)
        subscription = Subscription(conversation_id, send_channel, receive_channel)
        self._subscriptions.add(subscription)
        if len(self._subscriptions) == 1 and self._on_watch is not None:
            self._on_watch(True)
        try:
            yield subscription
        finally:
            self._drop(subscription)
            receive_channel.close()

    def publish(self, type: str, conversation_id: str, **data: Any) -> None:
        self._last_id += 1
        if not self._subscriptions:
            return
        event = ServerEvent(self._last_id, type, conversation_id, data)
        for subscription in list(self._subscriptions):
            if subscription.conversation_id not in (None, conversation_id):
                continue
            try:
                subscription.send_channel.send_nowait(event)
            except trio.WouldBlock:
                subscription.overflowed = True
                self._drop(subscription)

    def close(self) -> None:
        """End every subscriber's stream (after what is buffered)."""
        for subscription in list(self._subscriptions):
            self._drop(subscription)

    def _drop(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
            if not self._subscriptions and self._on_watch is not None:
                self._on_watch(False)
        subscription.send_channel.close()


# -- conversations -------------------------------------------------------------------------------


@attrs.define(eq=False)
class Conversation:
    """A conversation: its branch, the lock that runs its requests one at a time, and what
    eviction needs (when it was last used, how many requests are using it now)."""

    id: str
    branch: Branch
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    last_used: float = 0.0
    active: int = 0
    #: Stops publishing this conversation's events; set while the hub has subscribers.
    unwatch: Callable[[], None] | None = None
    #: Journaled: the branch stand-in between requests (no history is kept in memory).
    idle: Branch | None = None

    @property
    def branch_id(self) -> uuid.UUID:
        """The journal branch that keeps this conversation."""
        return branch_id_of(self.id)

    def call_id(self, response: ActionResponse) -> str:
        request_id = response.content.action_request_id
        request = self.branch.messages[request_id] if request_id is not None else None
        return request.content.call_id if isinstance(request, ActionRequest) else ""

    def tool_message(self, response: ActionResponse) -> dict[str, Any]:
        """The OpenAI tool message for *response*, with its status and outcome."""
        return tool_message(response, self.call_id(response))


def tool_message(response: ActionResponse, call_id: str) -> dict[str, Any]:
    """The OpenAI tool message for *response* (to call *call_id*), with its status and
    outcome; a call waiting for an approval also names it (``approval_id``)."""
    content, _ = result_text(response)
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": call_id,
        "content": content,
        "status": response.content.status.value,
        "outcome": response.content.outcome.value,
    }
    if response.content.outcome is ActionOutcome.AWAITING_APPROVAL:
        output = response.content.output
        message["approval_id"] = output.get("approval_id") if isinstance(output, dict) else None
    return message


def approval_policy(approve: Iterable[str], tools: Iterable[str]) -> PermissionPolicy:
    """A policy that escalates every call of the *approve* tools and allows the others."""
    escalate = set(approve)
    return PermissionPolicy(
        mode="rules",
        allow={name: ["*"] for name in tools if name not in escalate},
        escalate={name: ["*"] for name in sorted(escalate)},
    )


def _awaiting(request: ActionRequest, approval: Approval, branch: Branch) -> ActionResponse:
    """The (unrecorded) answer for a call still waiting for *approval*: the one act gave
    when it parked the call, word for word (the policy's ``escalate`` reason, then
    ``; awaiting approval <id>``, as :class:`~lionexec.governance.PermissionPolicy` words
    it; ``tests/examples`` checks that a retry's answer equals the first)."""
    return ActionResponse.create(
        request,
        output={"approval_id": approval.approval_id, "expires_at": approval.expires_at},
        error=ErrorInfo(
            "AwaitingApproval", f"{approval.escalation}; awaiting approval {approval.approval_id}"
        ),
        outcome=ActionOutcome.AWAITING_APPROVAL,
        attempts=0,
        sender=request.content.function,
        recipient=branch.name,
    )


def _approval_record(approval: Approval, conversation_id: str | None) -> dict[str, Any]:
    return {
        "approval_id": approval.approval_id,
        "conversation_id": conversation_id,
        "call_id": approval.call_id,
        "function": approval.function,
        "arguments": approval.arguments,
        "state": approval.state,
        "escalation": approval.escalation,
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
        "decided_by": approval.decided_by,
        "reason": approval.reason,
    }


def branch_id_of(conversation_id: str) -> uuid.UUID:
    """The journal branch id of a conversation: the same on every replica and restart."""
    return uuid.uuid5(CONVERSATIONS, conversation_id)


def _seconds(duration: object) -> float | None:
    return duration if isinstance(duration, float) else None


def _watch(conversation: Conversation, hub: EventHub) -> Callable[[], None]:
    """Publish the branch's hook and message events on *hub*; return what undoes that."""
    cid = conversation.id

    def on_post(
        *, tool_name: str, call_id: str, result: str, duration: object, **_: object
    ) -> None:
        hub.publish(
            "tool.post", cid, call_id=call_id, tool=tool_name, result=result,
            duration=_seconds(duration),
        )  # fmt: skip

    def on_error(
        *,
        tool_name: str,
        call_id: str,
        error: object,
        status: Any,
        duration: object,
        **_: object,
    ) -> None:
        hub.publish(
            "tool.error", cid, call_id=call_id, tool=tool_name, status=status.value,
            error=None if error is None else f"{type(error).__name__}: {error}",
            duration=_seconds(duration),
        )  # fmt: skip

    def on_message(message: Message) -> None:
        data: dict[str, Any] = {"message_id": str(message.id), "kind": message.kind}
        if isinstance(message, ActionRequest):
            data.update(call_id=message.content.call_id, function=message.content.function)
        elif isinstance(message, ActionResponse):
            data.update(
                call_id=conversation.call_id(message),
                function=message.content.function,
                status=message.content.status.value,
                outcome=message.content.outcome.value,
            )
        hub.publish("message.add", cid, **data)

    hooks, callbacks = conversation.branch.hooks, conversation.branch.messages.on_message_added
    hooks.on(HookPoint.TOOL_POST, on_post)
    hooks.on(HookPoint.TOOL_ERROR, on_error)
    callbacks.append(on_message)

    def unwatch() -> None:
        hooks.off(HookPoint.TOOL_POST, on_post)
        hooks.off(HookPoint.TOOL_ERROR, on_error)
        callbacks.remove(on_message)

    return unwatch


def _recorded_requests(messages: MessageManager, call_ids: set[str]) -> dict[str, ActionRequest]:
    """The requests already in *messages* whose call id is one of *call_ids*."""
    lookup = getattr(messages, "request_for_call_id", None)
    if lookup is not None:  # lionexec's index, where this version has it
        found = {call_id: lookup(call_id) for call_id in call_ids}
        return {call_id: r for call_id, r in found.items() if isinstance(r, ActionRequest)}
    return {r.content.call_id: r for r in messages.requests() if r.content.call_id in call_ids}


# -- HTTP plumbing -------------------------------------------------------------------------------


class HTTPError(Exception):
    """Reply *status* with ``{"error": message}`` (and *headers*)."""

    def __init__(
        self, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


async def send_json(
    send: ASGISendCallable,
    status: int,
    payload: object,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    body = dumps(payload)
    head = [*JSON_HEADERS, *headers, (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_chunk(send: ASGISendCallable, body: bytes, *, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def read_body(receive: ASGIReceiveCallable, limit: int, seconds: float) -> bytes:
    """The request body: 413 past *limit* bytes, 408 if it takes over *seconds*."""
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(seconds):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            if message["type"] != "http.request":
                continue
            chunks.append(message["body"])
            size += len(message["body"])
            if size > limit:
                raise HTTPError(413, f"request body is larger than max_body ({limit} bytes)")
            if not message["more_body"]:
                return b"".join(chunks)
    raise HTTPError(408, f"request body did not arrive within body_timeout ({seconds:g} s)")


async def until_disconnect(
    receive: ASGIReceiveCallable, work: Callable[[], Awaitable[T]]
) -> T | None:
    """Run *work*, cancelling it if the client disconnects first (then return ``None``).

    Call it once the request body has been read: from then on this owns ``receive``.
    """
    result: T | None = None

    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        result = await work()
        nursery.cancel_scope.cancel()
    return result


def _query(scope: HTTPScope) -> dict[str, list[str]]:
    """The request's query parameters (read only by the routes that take any)."""
    return parse_qs(scope["query_string"].decode("latin-1"))


def _header(scope: HTTPScope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value
    return None


@attrs.frozen
class Call:
    """One checked tool call of a request: its id, function, arguments and what act gets."""

    call_id: str
    function: str
    arguments: dict[str, Any] | None
    envelope: object


@attrs.frozen
class ActBody:
    conversation_id: str
    calls: list[Call]
    strategy: str


# -- replicas ------------------------------------------------------------------------------------


class ReplicaLocks:
    """One lock per conversation shared by every server replica on one PostgreSQL database.

    A journaled branch has one writer at a time; replicas that serve the same conversation
    take turns through a PostgreSQL *session advisory lock* keyed by the conversation's
    branch id, held on a connection of this pool for the whole request (a replica that dies
    drops its connection, and the server releases its locks). Waiting polls
    ``pg_try_advisory_lock`` with a short backoff, so it is cancellable like any trio wait.
    At most *size* locks are held at once (a request beyond that waits for a connection).
    A connection whose unlock failed is closed, not pooled still holding the lock.

    Use it as ``async with ReplicaLocks(url, size) as locks:`` (needs the ``postgres``
    extra).
    """

    def __init__(self, url: str, size: int) -> None:
        self.url = url
        self._limiter = trio.CapacityLimiter(size)
        self._size = size
        self._pool: Any = None

    async def __aenter__(self) -> ReplicaLocks:
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self._size,
            open=False,
            kwargs={"autocommit": True},
            name="lionexec-server-locks",
        )
        await trio.to_thread.run_sync(partial(pool.open, wait=True, timeout=10.0))
        self._pool = pool
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pool, self._pool = self._pool, None
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close)

    @asynccontextmanager
    async def hold(self, branch_id: uuid.UUID) -> AsyncIterator[None]:
        """Hold the lock of *branch_id* for the block. Waits (cancellably) for it."""
        key = int.from_bytes(branch_id.bytes[:8], "big", signed=True)
        pool = self._pool
        async with self._limiter:
            conn = await trio.to_thread.run_sync(pool.getconn)
            held = False
            try:
                delay = 0.002
                while not await trio.to_thread.run_sync(_try_lock, conn, key):
                    await trio.sleep(delay)
                    delay = min(delay * 2, 0.1)
                held = True
                try:
                    yield
                finally:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(_unlock, conn, key)
                    held = False
            finally:  # bounded: closing or returning one connection, off the trio thread
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(_release, pool, conn, held)


def _try_lock(conn: Any, key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    return bool(row[0])


def _unlock(conn: Any, key: int) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _release(pool: Any, conn: Any, held: bool) -> None:
    """Return *conn* to *pool*; closed first if it may still hold a lock (an unlock that
    failed): the server then frees its session locks, and the pool replaces it."""
    if held:
        conn.close()
    pool.putconn(conn)


# -- the application -----------------------------------------------------------------------------


class App:
    """The ASGI application: the conversations, the event hub, the shared call limiter.

    Args:
        config: the limits (see :class:`ServerConfig`; its defaults otherwise).
        tools: registered on each new conversation's branch (the demo tools by default).

    Attributes:
        conversations: the live conversations by id, least recently used first.
        limiter: the :class:`trio.CapacityLimiter` every tool call of every conversation runs
            under (``config.max_concurrent_calls`` tokens). Create the app inside ``trio.run``.
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        tools: Iterable[Callable[..., Any]] = DEMO_TOOLS,
        journal: Journal | None = None,
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
        self.limiter = trio.CapacityLimiter(self.config.max_concurrent_calls)
        token = self.config.token
        self._authorization = None if token is None else token.encode()

    # -- conversations, eviction ------------------------------------------------------------

    def find(self, conversation_id: str) -> Conversation | None:
        """The live conversation with this id (marked used), or ``None``."""
        self.evict_idle()
        conversation = self.conversations.get(conversation_id)
        if conversation is not None:
            self._touch(conversation)
        return conversation

    def conversation(self, conversation_id: str) -> Conversation:
        """The conversation with this id, created (with the tools registered) if new.

        Creating one when ``max_conversations`` exist evicts the least recently used idle
        one; if none is idle, :class:`HTTPError` 503.
        """
        conversation = self.find(conversation_id)
        if conversation is not None:
            return conversation
        if len(self.conversations) >= self.config.max_conversations:
            idle = next((c for c in self.conversations.values() if not c.active), None)
            if idle is None:
                raise HTTPError(
                    503,
                    f"max_conversations ({self.config.max_conversations}) are in use and "
                    "none is idle; try again later",
                )
            self._forget(self.conversations.pop(idle.id))
        if self.journal is None:
            branch = Branch()
            branch.register_tools(self.tools)
        else:  # a placeholder: each request loads the branch from the journal
            branch = Branch(id=branch_id_of(conversation_id), registry=self.registry)
        conversation = Conversation(conversation_id, branch)
        if self.journal is not None:
            conversation.lock = self._lock_for(conversation.branch_id)
            conversation.idle = branch
        if self.hub.watched:
            conversation.unwatch = _watch(conversation, self.hub)
        self.conversations[conversation_id] = conversation
        self._touch(conversation)
        return conversation

    def evict_idle(self) -> int:
        """Evict the conversations idle for longer than ``idle_ttl``; return how many.

        Cheap: conversations are kept in order of last use, so the scan stops at the first
        one still fresh.
        """
        ttl = self.config.idle_ttl
        if ttl is None or not self.conversations:
            return 0
        horizon = trio.current_time() - ttl
        expired = []
        for conversation in self.conversations.values():
            if conversation.last_used > horizon:
                break
            if not conversation.active:
                expired.append(conversation.id)
        for conversation_id in expired:
            self._forget(self.conversations.pop(conversation_id))
        return len(expired)

    def _lock_for(self, branch_id: uuid.UUID) -> trio.Lock:
        lock = self._locks.get(branch_id)
        if lock is None:
            lock = self._locks[branch_id] = trio.Lock()
        return lock

    def _forget(self, conversation: Conversation) -> None:
        """Drop an evicted conversation's lock too, unless someone holds or waits for it."""
        lock = self._locks.get(conversation.branch_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[conversation.branch_id]

    async def sweep(self) -> None:
        """Evict expired conversations every ``sweep_interval`` seconds, forever."""
        while True:
            await trio.sleep(self.config.sweep_interval)
            self.evict_idle()

    def _watch_all(self, on: bool) -> None:
        """Publish every conversation's events while the hub has subscribers (only then)."""
        for conversation in self.conversations.values():
            if on and conversation.unwatch is None:
                conversation.unwatch = _watch(conversation, self.hub)
            elif not on and conversation.unwatch is not None:
                conversation.unwatch()
                conversation.unwatch = None

    def _touch(self, conversation: Conversation) -> None:
        conversation.last_used = trio.current_time()
        self.conversations.move_to_end(conversation.id)

    @contextmanager
    def _using(self, conversation: Conversation) -> Iterator[None]:
        """Mark *conversation* busy (never evicted) for the block; used again at the end."""
        conversation.active += 1
        try:
            yield
        finally:
            conversation.active -= 1
            if self.conversations.get(conversation.id) is conversation:
                self._touch(conversation)

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            try:
                self._authorize(scope)
                await self._route(scope, receive, send)
            except HTTPError as exc:
                await send_json(send, exc.status, {"error": exc.message}, exc.headers)
            except ClientGone:
                pass

    def _authorize(self, scope: HTTPScope) -> None:
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
            await self.act(await self._body(scope, receive), receive, send)
        elif path.startswith("/v1/conversations/"):
            _allow(method, "GET")
            conversation_id = path.removeprefix("/v1/conversations/")
            if conversation_id.endswith("/records"):
                conversation_id = conversation_id.removesuffix("/records")
                await self.stream_history(conversation_id, _query(scope), receive, send)
            else:
                await self.history(conversation_id, _query(scope), send)
        elif path == "/v1/events":
            _allow(method, "GET")
            await self.events(_query(scope).get("conversation_id", [None])[-1], receive, send)
        elif path == "/v1/approvals":
            _allow(method, "GET")
            await self.pending_approvals(_query(scope), send)
        elif path.startswith("/v1/approvals/"):
            _allow(method, "POST")
            approval_id = path.removeprefix("/v1/approvals/")
            await self.decide(approval_id, await self._body(scope, receive), send)
        else:
            raise HTTPError(404, f"no such endpoint: {method} {path}")

    async def _body(self, scope: HTTPScope, receive: ASGIReceiveCallable) -> bytes:
        limit = self.config.max_body
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared[:20]) > limit:
            raise HTTPError(413, f"request body is larger than max_body ({limit} bytes)")
        return await read_body(receive, limit, self.config.body_timeout)

    # -- POST /v1/act -------------------------------------------------------------------------

    async def act(self, body: bytes, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        request = _act_body(body, self.config)
        conversation = self.conversation(request.conversation_id)
        with self._using(conversation):
            outcome = await until_disconnect(receive, partial(self._act, conversation, request))
        if outcome is None:
            return  # the client is gone
        if isinstance(outcome, HTTPError):
            raise outcome
        # in input order: each response answers the call at its position
        messages = [
            tool_message(response, call.call_id)
            for response, call in zip(outcome, request.calls, strict=True)
        ]
        payload = {"conversation_id": request.conversation_id, "messages": messages}
        await send_json(send, 200, payload)

    async def _act(
        self, conversation: Conversation, request: ActBody
    ) -> list[ActionResponse] | HTTPError:
        """Run *request* within ``request_timeout``; an HTTPError is returned, not raised
        (it would leave the disconnect watcher's nursery wrapped in an exception group)."""
        timeout = self.config.request_timeout
        with trio.move_on_after(timeout):
            async with conversation.lock:
                if self.journal is None:
                    return await self._run(conversation, request)
                return await self._run_journaled(conversation, request)
        if self.config.workers:
            return HTTPError(
                504,
                f"the request took longer than request_timeout ({timeout:g} s); its calls stay "
                "queued for the workers: retry with the same tool call ids for their results",
            )
        return HTTPError(
            504,
            f"the request took longer than request_timeout ({timeout:g} s); calls still "
            "running were recorded cancelled",
        )

    async def _run_journaled(
        self, conversation: Conversation, request: ActBody
    ) -> list[ActionResponse] | HTTPError:
        """:meth:`_run` on the conversation's branch as the journal holds it now.

        Under the conversation's lock across replicas (PostgreSQL), the branch is loaded
        from the journal for this request (so it holds what any replica committed) and
        closed, its records committed, before this returns. A journal that refuses a
        commit (a lost connection, a writer that does not take the lock) gets the client a
        503: nothing it did not commit is reported as done.
        """
        try:
            async with self._replica_lock(conversation), self._loaded(conversation):
                return await self._run(conversation, request)
        except BaseException as exc:
            refused = _journal_refusal(exc)
            if refused is None:
                raise
            return HTTPError(503, f"the journal refused this request ({refused}); try again")

    def _replica_lock(self, conversation: Conversation) -> Any:
        return self._replica_lock_of(conversation.branch_id)

    @asynccontextmanager
    async def _replica_lock_of(self, branch_id: uuid.UUID) -> AsyncIterator[None]:
        """Hold the conversation across replicas for the block (PostgreSQL: an advisory
        lock, see :class:`ReplicaLocks`); a no-op for an SQLite journal (one server)."""
        if self.replica_locks is None:
            yield
            return
        async with self.replica_locks.hold(branch_id):
            yield

    @asynccontextmanager
    async def _loaded(self, conversation: Conversation) -> AsyncIterator[Branch]:
        """The conversation's journaled branch, loaded from the journal, running for the
        block (its hooks published while the hub has subscribers); closed at the end."""
        assert self.journal is not None
        branch = await self.journal.branch(
            conversation.branch_id, registry=self.registry, policy=self.policy
        )
        self._swap(conversation, branch)
        try:
            async with branch:
                yield branch
        finally:  # the history goes with the request: nothing stays cached
            assert conversation.idle is not None
            self._swap(conversation, conversation.idle)

    def _swap(self, conversation: Conversation, branch: Branch) -> None:
        """Make *branch* the conversation's, its events published if anyone listens."""
        if conversation.unwatch is not None:
            conversation.unwatch()
            conversation.unwatch = None
        conversation.branch = branch
        if self.hub.watched:
            conversation.unwatch = _watch(conversation, self.hub)

    async def _run(
        self, conversation: Conversation, request: ActBody
    ) -> list[ActionResponse] | HTTPError:
        cid, branch = conversation.id, conversation.branch
        calls = request.calls
        recorded = _recorded_requests(branch.messages, {call.call_id for call in calls})
        slots: list[ActionResponse | None] = [None] * len(calls)
        fresh: list[int] = []
        for index, call in enumerate(calls):  # every check before anything runs
            previous = recorded.get(call.call_id)
            if previous is None:
                fresh.append(index)
                continue
            content = previous.content
            if not _same_call(content.function, content.arguments, call):
                return HTTPError(
                    409,
                    f"tool call id {call.call_id!r} is already recorded in this conversation "
                    "with a different function or arguments; use a new id for a new call",
                )
            response = branch.messages.response_for(previous)
            if response is None and self.journal is not None:
                response = await self._parked(branch, previous)
            if response is None:
                return HTTPError(409, f"tool call id {call.call_id!r} has no recorded response")
            slots[index] = response
        cap = self.config.max_history
        if self.journal is not None and fresh and len(branch.messages) + 2 * len(fresh) > cap:
            return HTTPError(
                409,
                f"conversation {cid!r} has {len(branch.messages)} messages; {len(fresh)} new "
                f"calls (a request and a response each) would take it past max_history "
                f"({cap}): start a new conversation",
            )
        if self.config.workers and fresh:
            conflict = await self._check_queued(branch, calls, fresh)
            if conflict is not None:
                return conflict
        self.hub.publish(
            "act.start", cid, calls=len(calls), strategy=request.strategy,
            replayed=len(calls) - len(fresh),
        )  # fmt: skip
        first_new = len(branch.messages)
        try:
            await self._run_fresh(branch, calls, fresh, slots, request.strategy)
        except BaseException as exc:
            if _is_cancellation(exc):
                cancelled = [
                    conversation.call_id(message)
                    for message in branch.messages.messages[first_new:]
                    if isinstance(message, ActionResponse)
                    and message.content.outcome is ActionOutcome.CANCELLED
                ]
                self.hub.publish("act.cancelled", cid, call_ids=cancelled)
            raise
        responses = [r for r in slots if r is not None]
        if self.hub.watched:
            statuses = [
                {"call_id": conversation.call_id(r), "status": r.content.status.value}
                for r in responses
            ]
            self.hub.publish("act.end", cid, results=statuses)
        else:
            self.hub.publish("act.end", cid)  # nobody listens: only the event id advances
        return responses

    async def _run_fresh(
        self,
        branch: Branch,
        calls: list[Call],
        fresh: list[int],
        slots: list[ActionResponse | None],
        strategy: Any,
    ) -> None:
        """Run the calls at the *fresh* indexes, each holding a token of :attr:`limiter`."""
        if not fresh:
            return
        if self.config.workers:
            await self._submit_and_wait(branch, calls, fresh, slots, strategy)
            return
        envelopes = [calls[index].envelope for index in fresh]
        responses = await branch.act(envelopes, strategy=strategy, limiter=self.limiter)
        for index, response in zip(fresh, responses, strict=True):
            slots[index] = response

    async def _parked(self, branch: Branch, request: ActionRequest) -> ActionResponse | None:
        """The ``awaiting_approval`` answer of a call parked for an approval not yet used,
        or ``None`` (a retry while it waits gets the answer its first request got)."""
        assert self.journal is not None
        # The journal looks approvals up by id or by state, not by call: read only the
        # undecided and the unused ones (few), not every approval the branch ever had.
        for state in ("pending", "approved"):
            for approval in await self.journal.approvals(branch.id, state=state):
                if approval.call_id == request.content.call_id:
                    return _awaiting(request, approval, branch)
        return None

    async def _check_queued(
        self, branch: Branch, calls: list[Call], fresh: list[int]
    ) -> HTTPError | None:
        """A 409 if a call id is already queued (by any replica) with another function or
        other arguments; ``None`` otherwise (a queued call is waited for, not run again)."""
        assert self.journal is not None
        wanted = {calls[index].call_id: calls[index] for index in fresh}
        for row in await self.journal.queued(branch.id):
            call = wanted.get(row.call_id)
            if call is None or row.request is None:
                continue
            content = load_request(row.request).content
            if not _same_call(content.function, content.arguments, call):
                return HTTPError(
                    409,
                    f"tool call id {call.call_id!r} is already queued in this conversation "
                    "with a different function or arguments; use a new id for a new call",
                )
        return None

    async def _submit_and_wait(
        self,
        branch: Branch,
        calls: list[Call],
        fresh: list[int],
        slots: list[ActionResponse | None],
        strategy: Any,
    ) -> None:
        """Queue the *fresh* calls for the workers (those not queued yet) and wait for their
        responses, which are recorded in *branch*'s history (and committed) as they come.

        ``sequential``: one call at a time, each submitted once the previous one is answered.
        """
        assert self.journal is not None
        journal = self.journal
        queued = {row.call_id for row in await journal.queued(branch.id)}
        groups = [[index] for index in fresh] if strategy == "sequential" else [fresh]
        for group in groups:
            new = [calls[index].envelope for index in group if calls[index].call_id not in queued]
            await _submit(journal, branch.id, new)
            ids = [calls[index].call_id for index in group]
            responses = await journal.wait(ids, branch_id=branch.id, into=branch)
            for index, response in zip(group, responses, strict=True):
                slots[index] = response

    # -- GET /v1/conversations/{id} ------------------------------------------------------------

    def _existing(self, conversation_id: str) -> Conversation:
        conversation = self.find(conversation_id)
        if conversation is None:
            raise HTTPError(404, f"no conversation {_preview(conversation_id)}")
        return conversation

    async def history(
        self, conversation_id: str, query: dict[str, list[str]], send: ASGISendCallable
    ) -> None:
        """One page of the history (bounded by ``max_page_size``; see the module docs)."""
        messages = await self._history_of(conversation_id)
        after = _cursor(query, "after", 0)
        limit = _cursor(query, "limit", self.config.page_size)
        if not 1 <= limit <= self.config.max_page_size:
            raise HTTPError(
                400, f"limit must be from 1 to max_page_size ({self.config.max_page_size})"
            )
        snapshot = messages.messages
        page = snapshot[after : after + limit]
        on_page = {message.id for message in page}
        answers: list[Message] = []
        for message in page:  # results recorded past this page belong with their calls here
            if isinstance(message, ActionRequest):
                response = messages.response_for(message)
                if response is not None and response.id not in on_page:
                    answers.append(response)
        end = after + len(page)
        payload = {
            "conversation_id": conversation_id,
            "total": len(snapshot),
            "after": after,
            "next": end if end < len(snapshot) else None,
            "records": [converter.unstructure(message) for message in page],
            "messages": to_openai([*page, *answers]),
        }
        await send_json(send, 200, payload)

    async def stream_history(
        self,
        conversation_id: str,
        query: dict[str, list[str]],
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
    ) -> None:
        """Every message from ``after`` on as JSON lines, ``stream_chunk`` at a time."""
        conversation = self._existing(conversation_id) if self.journal is None else None
        messages = await self._history_of(conversation_id)
        after = _cursor(query, "after", 0)
        snapshot = messages.messages[after:]
        chunk = self.config.stream_chunk

        async def pump() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": NDJSON_HEADERS})
            for start in range(0, len(snapshot), chunk):
                lines = [dumps(converter.unstructure(m)) for m in snapshot[start : start + chunk]]
                lines.append(b"")
                await send_chunk(send, b"\n".join(lines))
                await trio.lowlevel.checkpoint()  # even if send did not yield
            await send_chunk(send, b"", more=False)

        if conversation is None:  # journaled: the snapshot is this request's own copy
            await until_disconnect(receive, pump)
            return
        with self._using(conversation):
            await until_disconnect(receive, pump)

    async def _history_of(self, conversation_id: str) -> MessageManager:
        """The conversation's history: the live branch's (in memory), or the journal's
        committed copy (so any replica, or a restarted server, serves it); 404 if none."""
        if self.journal is None:
            return self._existing(conversation_id).branch.messages
        if CONVERSATION_ID.fullmatch(conversation_id):
            try:
                history = await self.journal.history(branch_id_of(conversation_id))
            except JournalError as exc:
                raise HTTPError(
                    503,
                    f"the journal could not read conversation {conversation_id!r} ({exc}); "
                    "try again",
                ) from None
            if len(history):
                return history
        raise HTTPError(404, f"no conversation {_preview(conversation_id)}")

    # -- approvals ------------------------------------------------------------------------------

    def _journal(self) -> Journal:
        if self.journal is None:
            raise HTTPError(404, "approvals need a journal (start the server with one)")
        return self.journal

    async def pending_approvals(self, query: dict[str, list[str]], send: ASGISendCallable) -> None:
        """``GET /v1/approvals[?conversation_id=...]``: the pending approvals, oldest first."""
        journal = self._journal()
        conversation_id = query.get("conversation_id", [None])[-1]
        branch_id = None
        if conversation_id is not None:
            if not CONVERSATION_ID.fullmatch(conversation_id):
                raise HTTPError(400, f"no such conversation id {conversation_id[:40]!r}")
            branch_id = branch_id_of(conversation_id)
        try:
            approvals = await journal.approvals(branch_id, state="pending")
        except JournalError as exc:
            raise HTTPError(
                503, f"the journal could not list approvals ({exc}); try again"
            ) from None
        names = {c.branch_id: c.id for c in self.conversations.values()}
        records = [
            _approval_record(a, names.get(uuid.UUID(a.branch_id), conversation_id))
            for a in approvals
        ]
        await send_json(send, 200, {"approvals": records})

    async def decide(self, approval_id: str, body: bytes, send: ASGISendCallable) -> None:
        """``POST /v1/approvals/{id}``: approve (or reject) a parked call, then run it.

        Body (optional; empty means approve): ``{"decision": "approve" | "reject",
        "reason": str (required to reject), "by": str}``. The decision is one
        compare-and-set in the journal (an approval is decided once: 409 after that, except
        that the same decision again, approving an ``approved`` one or rejecting a
        ``rejected`` one, finishes resuming it); then, holding the
        conversation like a request does, the call is resumed: an approved call runs once
        through the whole transaction, a rejected one is answered ``denied`` with the
        reason. Replies ``{"approval": {...}, "message": <the call's tool message>}``; a 504
        after ``request_timeout`` (the decision stands).
        """
        journal = self._journal()
        if not APPROVAL_ID.fullmatch(approval_id):
            raise HTTPError(404, f"no approval {approval_id[:80]!r}")
        decision, reason, by = _decision_body(body, self.config)
        try:
            approval = await journal.approval(approval_id)
            # The same decision again (a retry after a 504) goes straight to resuming.
            if approval.state != DECIDED[decision]:
                if decision == "approve":
                    approval = await journal.approve(approval_id, by=by)
                else:
                    approval = await journal.reject(approval_id, reason=reason or "", by=by)
        except ApprovalNotFound:
            raise HTTPError(404, f"no approval {approval_id[:80]!r}") from None
        except ApprovalClosed as exc:
            raise HTTPError(409, str(exc)) from None
        except JournalError as exc:  # decided after all? the same decision again resumes it
            raise HTTPError(503, f"the journal refused the decision ({exc}); try again") from None
        branch_id = uuid.UUID(approval.branch_id)
        timeout = self.config.request_timeout
        with trio.move_on_after(timeout) as scope:
            message = await self._resume(branch_id, approval)
        if scope.cancelled_caught:
            raise HTTPError(504, await self._unfinished(approval_id, approval))
        try:
            approval = await journal.approval(approval_id)  # used, once its call ran
        except JournalError as exc:
            raise HTTPError(
                503,
                f"the call was resumed, but the journal could not be read back ({exc}); its "
                "conversation's history has its answer",
            ) from None
        names = {c.branch_id: c.id for c in self.conversations.values()}
        payload = {
            "approval": _approval_record(approval, names.get(branch_id)),
            "message": message,
        }
        await send_json(send, 200, payload)

    async def _unfinished(self, approval_id: str, approval: Approval) -> str:
        """What a 504 of ``POST /v1/approvals/{id}`` says: what became of the call, as the
        journal holds it now."""
        assert self.journal is not None
        late = f"within request_timeout ({self.config.request_timeout:g} s)"
        with suppress(JournalError):  # then say what was known before
            approval = await self.journal.approval(approval_id)
        if approval.state == "used":
            return (
                f"approval {approval_id} was approved and used: its call started, but it did "
                f"not finish {late} and was cancelled (it is not run again)"
            )
        return (
            f"approval {approval_id} is {approval.state}, but its call was not resumed "
            f"{late}; POST the same decision again to finish resuming it"
        )

    async def _resume(self, branch_id: uuid.UUID, approval: Approval) -> dict[str, Any] | None:
        """Resume the decided calls of branch *branch_id* under its locks, holding a token
        of :attr:`limiter` (as any call does); the tool message of *approval*'s call
        (``None`` if it has no answer yet). Its events are published like a request's
        when this server knows the conversation (it served it since it started)."""
        assert self.journal is not None
        journal = self.journal
        lock = self._lock_for(branch_id)
        known = (c for c in self.conversations.values() if c.branch_id == branch_id)
        conversation = next(known, None)
        call_id = approval.call_id
        try:
            async with lock, self._replica_lock_of(branch_id):
                branch = await journal.branch(
                    branch_id, registry=self.registry, policy=self.policy
                )
                with self._resuming(conversation, branch) as publish:
                    async with branch, self.limiter:
                        publish("act.start", calls=1, strategy="concurrent", replayed=0)
                        first_new = len(branch.messages)
                        try:
                            await journal.resume(
                                self.registry, only_branch=branch_id, policy=self.policy
                            )
                        except BaseException as exc:
                            if _is_cancellation(exc):
                                cancelled = any(
                                    isinstance(message, ActionResponse)
                                    and message.content.outcome is ActionOutcome.CANCELLED
                                    for message in branch.messages.messages[first_new:]
                                )
                                publish("act.cancelled", call_ids=[call_id] if cancelled else [])
                            raise
                    request = branch.messages.request_for_call_id(call_id)
                    response = branch.messages.response_for(request) if request else None
                    status = None if response is None else response.content.status.value
                    publish("act.end", results=[{"call_id": call_id, "status": status}])
        except BaseException as exc:
            refused = _journal_refusal(exc)
            if refused is None:
                raise
            raise HTTPError(503, f"the journal refused to resume the call ({refused})") from None
        finally:
            idle = not lock.locked() and not lock.statistics().tasks_waiting
            if idle and not any(c.branch_id == branch_id for c in self.conversations.values()):
                self._locks.pop(branch_id, None)
        return None if response is None else tool_message(response, call_id)

    @contextmanager
    def _resuming(
        self, conversation: Conversation | None, branch: Branch
    ) -> Iterator[Callable[..., None]]:
        """Make *branch* the conversation's for the block (its hook and message events
        published while anyone listens; busy, so never evicted meanwhile); yields what
        publishes the request-level events (nothing, for a conversation not known here)."""
        if conversation is None or conversation.idle is None:
            yield lambda *_, **__: None
            return
        cid = conversation.id
        with self._using(conversation):
            self._swap(conversation, branch)
            try:
                yield lambda kind, **data: self.hub.publish(kind, cid, **data)
            finally:
                self._swap(conversation, conversation.idle)

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


async def _submit(journal: Journal, branch_id: uuid.UUID, envelopes: list[object]) -> None:
    """Queue *envelopes*; one another replica queued meanwhile is left as it is."""
    if not envelopes:
        return
    try:
        await journal.submit(branch_id, envelopes)
    except DuplicateCallError:  # all or nothing: queue the others one by one
        for envelope in envelopes:
            with suppress(DuplicateCallError):
                await journal.submit(branch_id, [envelope])


def _journal_refusal(exc: BaseException) -> JournalError | None:
    """The :class:`JournalError` that *exc* is (or is only made of), else ``None``. A
    :class:`NotDurableError` (the calls ran, their outcomes were not committed) counts as
    the journal error that caused it."""
    if isinstance(exc, NotDurableError) and isinstance(exc.__cause__, JournalError):
        return exc.__cause__
    if isinstance(exc, JournalError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        match, rest = exc.split((JournalError, NotDurableError))
        if match is not None and rest is None:
            leaf: BaseException = match
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return _journal_refusal(leaf)
    return None


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise HTTPError(
            405,
            f"method {method[:20]} not allowed here; use {allowed}",
            [(b"allow", allowed.encode())],
        )


def _cursor(query: dict[str, list[str]], name: str, default: int) -> int:
    values = query.get(name)
    if not values:
        return default
    if not CURSOR.fullmatch(values[-1]):
        raise HTTPError(400, f"{name} must be a non-negative integer, got {values[-1][:40]!r}")
    return int(values[-1])


def _decision_body(body: bytes, config: ServerConfig) -> tuple[str, str | None, str | None]:
    """``(decision, reason, by)`` of a ``POST /v1/approvals/{id}`` body; a 400 if bad."""
    if not body.strip():
        return "approve", None, None
    try:
        data = loads(body, max_depth=config.max_json_depth)
    except BadJSON as exc:
        raise HTTPError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise HTTPError(400, f"body must be a JSON object, got {_json_type(data)}")
    unknown = set(data) - {"decision", "reason", "by"}
    if unknown:
        raise HTTPError(400, f"unknown fields: {', '.join(map(repr, sorted(unknown)))[:200]}")
    decision = data.get("decision", "approve")
    if decision not in ("approve", "reject"):
        raise HTTPError(400, f"decision must be 'approve' or 'reject', got {_preview(decision)}")
    reason, by = data.get("reason"), data.get("by")
    for name, value in (("reason", reason), ("by", by)):
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 1000):
            raise HTTPError(400, f"{name} must be a string of 1-1000 characters")
        if value is not None and not is_unicode(value):
            raise HTTPError(400, f"{name} must be valid Unicode (no lone surrogates)")
    if decision == "reject" and reason is None:
        raise HTTPError(400, "a rejection needs a reason")
    return decision, reason, by


def _act_body(body: bytes, config: ServerConfig) -> ActBody:
    """Check a ``POST /v1/act`` body; raise a 400 naming the first problem."""
    try:
        data = loads(body, max_depth=config.max_json_depth)
    except BadJSON as exc:
        raise HTTPError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise HTTPError(400, f"body must be a JSON object, got {_json_type(data)}")
    if "conversation_id" not in data:
        raise HTTPError(400, "missing conversation_id")
    conversation_id = data["conversation_id"]
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.fullmatch(conversation_id):
        raise HTTPError(
            400,
            "conversation_id must be a string of 1-128 letters, digits or ._~:- characters, "
            f"got {_preview(conversation_id)}",
        )
    if "tool_calls" not in data:
        raise HTTPError(400, "missing tool_calls")
    tool_calls = data["tool_calls"]
    if not isinstance(tool_calls, list):
        raise HTTPError(400, f"tool_calls must be a list, got {_json_type(tool_calls)}")
    if len(tool_calls) > config.max_calls:
        raise HTTPError(
            400,
            f"at most max_calls ({config.max_calls}) tool calls per request, "
            f"got {len(tool_calls)}",
        )
    strategy = data.get("strategy", "concurrent")
    if strategy not in STRATEGIES:
        raise HTTPError(
            400, f"strategy must be 'concurrent' or 'sequential', got {_preview(strategy)}"
        )
    if not tool_calls:  # (it would create an empty conversation)
        raise HTTPError(400, "tool_calls is empty: a request runs at least one tool call")
    calls: list[Call] = []
    seen: set[str] = set()
    for index, tool_call in enumerate(tool_calls):
        envelope = _parsed_arguments(tool_call, index, config)
        # Branch.act reads every call before running any and raises ValueError for one it
        # cannot read; reading them here first gives the same message without creating the
        # conversation.
        try:
            proposal = read_proposal(envelope)
        except ValueError as exc:
            raise HTTPError(400, f"tool_calls[{index}]: {exc}") from None
        if proposal.call_id in seen:
            raise HTTPError(
                400, f"tool_calls[{index}]: call id {proposal.call_id!r} appears twice"
            )
        seen.add(proposal.call_id)
        calls.append(Call(proposal.call_id, proposal.function, proposal.arguments, envelope))
    return ActBody(conversation_id, calls, strategy)


def _parsed_arguments(tool_call: object, index: int, config: ServerConfig) -> object:
    """*tool_call* with its ``arguments`` string parsed under the body's limits.

    A string that breaks a limit is a 400; one that is simply not JSON is left for
    ``Branch.act`` to record as an ``invalid`` call. Act gets the parsed object, so it never
    parses model text with looser rules than these.
    """
    slot = _arguments_slot(tool_call)
    if slot is None:
        return tool_call
    holder, key = slot
    raw = holder.get(key)
    if not isinstance(raw, str) or not raw.strip():
        return tool_call
    where = f"tool_calls[{index}] arguments"
    try:
        parsed = loads(raw, max_depth=config.max_json_depth, what=where)
    except BadJSON as exc:
        if exc.hostile:
            raise HTTPError(400, str(exc)) from None
        return tool_call
    if holder is not tool_call:
        return {**tool_call, "function": {**holder, key: parsed}}
    return {**tool_call, key: parsed}


def _arguments_slot(tool_call: object) -> tuple[dict[str, Any], str] | None:
    """``(holder, key)`` of the arguments :func:`read_proposal` reads from *tool_call*, in
    its order of shapes: Chat ``function.arguments``, Anthropic ``tool_use`` ``input``,
    Responses ``function_call`` ``arguments``, or a plain ``{"function", "arguments"}``."""
    if not isinstance(tool_call, dict):
        return None
    kind = tool_call.get("type")
    spec = tool_call.get("function")
    if kind == "function" and isinstance(spec, dict):
        return spec, "arguments"
    if kind == "tool_use":
        return tool_call, "input"
    if kind == "function_call" or ("function" in tool_call and "arguments" in tool_call):
        return tool_call, "arguments"
    return None


def _same_call(function: str, arguments: dict[str, Any], call: Call) -> bool:
    """Whether a recorded request is *call* again: the same function, and arguments equal as
    JSON (``false`` is not ``0``, nor ``1.0`` ``1``), not merely as Python values."""
    return function == call.function and canonical_json(arguments) == canonical_json(
        call.arguments or {}
    )


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _preview(value: object) -> str:
    text = repr(value) if isinstance(value, str) else dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."


async def _lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


# -- serving -------------------------------------------------------------------------------------


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
    """
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
    tools: Iterable[Callable[..., Any]] = DEMO_TOOLS,
    recover: bool | None = None,
) -> AsyncIterator[App]:
    """An :class:`App` for *config*, its journal (``config.journal``) open for the block.

    Before the app is returned, every call that was running when the last server on this
    journal stopped gets its one response (:meth:`Journal.recover
    <lionexec.journal.Journal.recover>`: ``unsafe`` tools, like the demo's, are recorded
    ``interrupted``), unless *recover* (by default ``config.recover``) is false or calls run
    on workers (the workers reclaim those). Recover with one process only: with several
    replicas running calls themselves, pass ``recover=False`` to all but one. Blocks while the
    journal opens; closes it at the end.
    """
    config = config if config is not None else ServerConfig()
    if config.journal is None:
        await trio.lowlevel.checkpoint()
        yield App(config, tools=tools)
        return
    async with open_journal(config.journal) as journal:
        app = App(config, tools=tools, journal=journal)
        if (config.recover if recover is None else recover) and not config.workers:
            kwargs = {} if app.policy is None else {"policy": app.policy}
            await journal.recover(app.registry, **kwargs)
        if not config.journal.startswith(("postgresql://", "postgres://")):
            yield app
            return
        async with ReplicaLocks(config.journal, config.max_concurrent_calls) as locks:
            app.replica_locks = locks
            yield app


def config_from_args(
    argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> ServerConfig:
    """The :class:`ServerConfig` for these command-line arguments (and environment)."""
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--token",
        default=environ.get(TOKEN_VARIABLE) or None,
        help=f"require Authorization: Bearer <token> (default: ${TOKEN_VARIABLE})",
    )
    parser.add_argument(
        "--journal",
        default=DEFAULT_JOURNAL,
        metavar="PATH",
        help=f"the SQLite journal file (default: ./{DEFAULT_JOURNAL}); ':memory:' keeps "
        "conversations in memory only",
    )
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="a postgresql:// URL: keep the journal in PostgreSQL instead (several replicas)",
    )
    parser.add_argument(
        "--workers",
        action="store_true",
        help="run no tool here: queue calls for `python -m lionexec worker` processes",
    )
    parser.add_argument(
        "--no-recover",
        action="store_true",
        help="do not recover the journal on start (all replicas but one, when they run calls)",
    )
    parser.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="TOOL",
        help="calls of TOOL wait for POST /v1/approvals/{id} (repeat for several tools)",
    )
    args = parser.parse_args(argv)
    journal: str | None = args.journal
    if args.database is not None:
        if not args.database.startswith(("postgresql://", "postgres://")):
            parser.error("--database takes a postgresql:// URL (use --journal for a file)")
        journal = args.database
    elif journal == ":memory:":
        journal = None
    if args.workers and journal is None:
        parser.error("--workers needs a journal: --journal PATH or --database URL")
    if args.approve and (journal is None or args.workers):
        parser.error("--approve needs a journal, and calls run in the server (not --workers)")
    unknown = sorted(set(args.approve) - {tool.__name__ for tool in DEMO_TOOLS})
    if unknown:  # main() serves the demo tools: a misspelt name would approve nothing
        names = ", ".join(tool.__name__ for tool in DEMO_TOOLS)
        parser.error(f"--approve: no tool {', '.join(unknown)} (the tools are {names})")
    return ServerConfig(
        host=args.host,
        port=args.port,
        token=args.token,
        journal=journal,
        workers=args.workers,
        recover=not args.no_recover,
        approve=tuple(args.approve),
    )


async def _main(config: ServerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def on_signal() -> None:
            async for _ in signals:
                return

        async with open_app(config) as app, trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, app, shutdown_trigger=on_signal))
            # What start-up made (modules, the app, recovered conversations) lives as long as
            # the server: out of the cyclic collector's generations, full collections no
            # longer walk it (docs/concepts/act.md, "Long-lived branches").
            gc.freeze()
            kept = "in memory" if app.journal is None else f"in the journal {app.journal.target}"
            runs = "; calls run on workers" if config.workers else ""
            print(
                f"lionexec demo server on {', '.join(binds)}: conversations {kept}{runs} "
                "(Ctrl+C to stop)",
                flush=True,
            )


def main(argv: list[str] | None = None) -> None:
    trio.run(_main, config_from_args(argv))


if __name__ == "__main__":
    main()
