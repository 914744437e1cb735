"""The server's configuration: :class:`ServerConfig` and the checks of its fields."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs

__all__ = ["ServerConfig"]

# -- configuration -------------------------------------------------------------------------------


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0:  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


def _positive_int(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {value!r}")


def _non_negative_int(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be an int >= 0, got {value!r}")


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


def _trace_file(_instance: object, _attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value or "\0" in value):
        raise ValueError(f"trace_file must be None or a file path, got {value!r}")


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
            recorded calls are still answered). A request of a journaled conversation whose
            history is not kept (see ``history_cache``) reads it whole from the journal, so
            this bounds what each one costs. (An in-memory conversation has no such cap: it
            is read in place.)
        history_cache: messages of journaled conversations kept in memory between their
            requests, all conversations together (20,000; ``0`` keeps none). A request (``POST
            /v1/act``, a history page or stream, an approval's resume) of a conversation
            whose history is kept reads only the messages committed since its last request
            here (by another replica, a recovery, an approval), not the whole history; the
            least recently kept histories are dropped past the budget, and so is a
            conversation's when it is evicted.
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
        console: serve the approvals console (:class:`~lionexec.server.Console`) at
            ``/console/`` (``True``): HTML pages behind the same token, see ``docs/console.md``.
        trace_file: a file to append an OpenTelemetry span of each tool call run here to,
            one JSON line per span (``None``: no tracing); :func:`open_app` opens it, with the
            ``otel`` extra (see ``docs/tracing.md``). Needs a journal, and the calls run here
            (not with ``workers``).
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
    history_cache: int = attrs.field(default=20_000, validator=_non_negative_int)
    max_json_depth: int = attrs.field(default=32, validator=_positive_int)
    subscriber_buffer: int = attrs.field(default=256, validator=_positive_int)
    graceful_timeout: float = attrs.field(default=3.0, validator=_positive)
    journal: str | None = attrs.field(default=None, validator=_journal_target, repr=False)
    workers: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    recover: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    approve: tuple[str, ...] = attrs.field(default=(), converter=_names)
    console: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    trace_file: str | None = attrs.field(default=None, validator=_trace_file)

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
        if self.trace_file is not None and (self.journal is None or self.workers):
            raise ValueError(
                "trace_file needs a journal (the journaled branches carry the trace) and calls "
                "run in the server (not workers)"
            )
        if self.page_size > self.max_page_size:
            raise ValueError(
                f"page_size ({self.page_size}) must not exceed max_page_size "
                f"({self.max_page_size})"
            )
