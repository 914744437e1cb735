"""ASGI plumbing: JSON replies, bounded request bodies, cancelling work when the client
leaves, and the refusals (:class:`HTTPError`) every handler raises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

import trio

from ._json import dumps

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope

    from ._config import ServerConfig

T = TypeVar("T")

JSON_HEADERS: Final = [(b"content-type", b"application/json")]
NDJSON_HEADERS: Final = [(b"content-type", b"application/x-ndjson")]
SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]

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
    with trio.move_on_after(seconds):
        return await receive_body(receive, limit)
    raise late_body(seconds)


async def receive_body(receive: ASGIReceiveCallable, limit: int) -> bytes:
    """The request body, however long it takes (the caller bounds that): 413 past *limit*
    bytes; :class:`ClientGone` if the client disconnects first."""
    message = await receive()
    if message["type"] == "http.request" and not message["more_body"]:
        body: bytes = message["body"]  # the usual body: one message holds all of it
        if len(body) > limit:
            raise HTTPError(413, f"request body is larger than max_body ({limit} bytes)")
        return body
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            raise ClientGone
        if message["type"] == "http.request":
            chunks.append(message["body"])
            size += len(message["body"])
            if size > limit:
                raise HTTPError(413, f"request body is larger than max_body ({limit} bytes)")
            if not message["more_body"]:
                return b"".join(chunks)
        message = await receive()


def check_declared_size(scope: HTTPScope, limit: int) -> None:
    """A 413 before the body is read, if its declared ``Content-Length`` is over *limit*."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared[:20]) > limit:
        raise HTTPError(413, f"request body is larger than max_body ({limit} bytes)")


def late_body(seconds: float) -> HTTPError:
    """The 408 of a request body that did not arrive within *seconds* (``body_timeout``)."""
    return HTTPError(408, f"request body did not arrive within body_timeout ({seconds:g} s)")


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


#: The most query parameters a request may carry: no route reads more than a few, and parsing
#: is linear in what is sent.
MAX_QUERY_FIELDS: Final = 16


def query_parameters(scope: HTTPScope) -> dict[str, list[str]]:
    """The request's query parameters (read only by the routes that take any).

    More than :data:`MAX_QUERY_FIELDS` of them is a ``400``.
    """
    try:
        return parse_qs(scope["query_string"].decode("latin-1"), max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        raise HTTPError(400, "too many query parameters") from None


def _header(scope: HTTPScope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value
    return None


#: The names an open server (no token) answers to: this machine's own.
LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1"})


def same_origin(scope: HTTPScope) -> bool:
    """Whether the request's ``Origin`` names the host it was sent to."""
    origin, host = _header(scope, b"origin"), _header(scope, b"host")
    if origin is None or host is None:
        return False
    parsed = urlsplit(origin.decode("latin-1"))
    return (
        parsed.scheme in ("http", "https")
        and parsed.netloc.lower() == host.decode("latin-1").lower()
    )


def open_server_host_refusal(scope: HTTPScope, config: ServerConfig, what: str) -> str | None:
    """Why a server without a token refuses this request's ``Host``, or ``None``.

    With no token, the network boundary is the only protection, and a web page can move it:
    a hostile site whose DNS name points at 127.0.0.1 is same-origin with the server as far
    as a browser can tell. Only the ``Host`` header shows it, so an open server answers its
    loopback names and the host it is bound to, nothing else.
    """
    if config.token is not None:
        return None
    host = (_header(scope, b"host") or b"").decode("latin-1")
    name = urlsplit(f"//{host}").hostname or ""
    if name in LOOPBACK | {config.host.lower()}:
        return None
    return (
        f"this {what} has no token, so it answers only on this machine's loopback "
        f"names, not Host {host[:80]!r}; start the server with --token to serve it "
        "under another name"
    )


def browser_refusal(scope: HTTPScope, config: ServerConfig) -> str | None:
    """Why the JSON API refuses a request a web browser made, or ``None``.

    Browsers send ``Origin`` with every cross-origin POST, and a form can carry a JSON-shaped
    body as ``text/plain`` without a preflight, so a page on another site could otherwise
    act or decide approvals through the user's browser. Clients other than browsers send no
    ``Origin`` and are not affected.
    """
    if _header(scope, b"origin") is None:
        return None
    if not same_origin(scope):
        return "requests from another site's web page are refused (its Origin is not this server)"
    return open_server_host_refusal(scope, config, "server")


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise HTTPError(
            405,
            f"method {method[:20]} not allowed here; use {allowed}",
            [(b"allow", allowed.encode())],
        )


async def _lifespan(receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
