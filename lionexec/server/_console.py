"""The approvals console: HTML pages over an :class:`~lionexec.server.App`.

:class:`Console` is an ASGI application. :class:`~lionexec.server.App` serves one at
``/console/`` (unless ``ServerConfig.console`` is false); a program with an ASGI app of its own
mounts ``Console(app)`` at any path (it reads the mount point from ``root_path``). The pages:
``approvals`` (the inbox: each pending call's tool, arguments and the policy that asked, with
Approve and Reject), ``conversations`` (the journal's branches) and ``conversations/{branch
id}`` (one conversation's calls: outcomes and evidence). Decisions go through
``App.settle``, the same path as ``POST /v1/approvals/{id}``.

Sign-in: with a token (``ServerConfig.token``) a person signs in once with it on the login
page and gets a session cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over https),
signed with a key derived from the token: it holds no secret, is valid on every replica that
has the token and for ``session_ttl`` seconds, and changing the token ends every session.
Without a token the console is open, like the API, but answers only requests addressed to a
loopback name (``localhost``, ``127.0.0.1``, ``[::1]``) or the bound host, so a web page
cannot reach it through a DNS name of its own. Every form POST must carry the session's
anti-forgery token (compared with :func:`hmac.compare_digest`) and an ``Origin`` header naming
this host: anything else is a 403 and decides nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qs, quote

import attrs

from ..conversation import ActionRequest, MessageManager, result_text
from ..journal import Approval, ApprovalNotFound, JournaledCall, JournalError
from . import _console_pages as pages
from ._approvals import APPROVAL_ID
from ._asgi import (
    MAX_QUERY_FIELDS,
    ClientGone,
    HTTPError,
    _lifespan,
    open_server_host_refusal,
    query_parameters,
    same_origin,
)
from ._console_pages import badge, shown_json, table, text, when

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

    from ._app import App

__all__ = ["COOKIE", "Console"]

#: The session cookie's name.
COOKIE: Final = "lionexec_console"
SESSION: Final = re.compile(r"([0-9]{1,12})\.([0-9a-f]{32})\.([0-9a-f]{64})")
#: Rows per page of the conversations list, and calls per page of a conversation.
PAGE: Final = 50
#: Pending approvals the inbox shows at once (the oldest first).
SHOWN: Final = 100
POLICY: Final = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = [
    (b"content-security-policy", POLICY),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
HTML: Final = (b"content-type", b"text/html; charset=utf-8")


@attrs.define
class _Request:
    scope: HTTPScope
    receive: ASGIReceiveCallable
    send: ASGISendCallable
    root: str
    path: str
    #: The session's anti-forgery token, once it has one.
    csrf: str | None = None
    #: ``Set-Cookie`` of a session started by this request (an open console's).
    cookies: list[tuple[bytes, bytes]] = attrs.Factory(list)


class Console:
    """The approvals console of *app*, an ASGI application (see the module docs).

    Args:
        app: the :class:`~lionexec.server.App` whose conversations and approvals it shows
            (its token, if any, is the console's sign-in).
        session_ttl: seconds a sign-in lasts (12 hours).

    Pages are rendered per request from the journal (an in-memory app: its live
    conversations); each is one or a few journal reads, bounded by paging (a conversation's
    page reads its history, at most ``max_history`` messages). Live updates ride ``GET
    events``, the app's event stream (:class:`~lionexec.server.EventHub`): a page fetches
    itself again when an event arrives.

    Blocking and cancellation: a page blocks while the journal is read (a journal that fails
    is a 503 page). A decision blocks until its call has been resumed, for at most
    ``request_timeout`` seconds, exactly as ``POST /v1/approvals/{id}`` does (the same
    ``App.settle``): a 504 page then says what became of the call, and the decision stands.
    A client that leaves before its form arrived decides nothing.
    """

    def __init__(self, app: App, *, session_ttl: float = 12 * 3600.0) -> None:
        if not session_ttl > 0:
            raise ValueError(f"session_ttl must be > 0 seconds, got {session_ttl!r}")
        self.app = app
        self.session_ttl = session_ttl
        token = app.config.token
        # Derived, not the token itself: a leaked cookie key is not the API's credential.
        # Without a token sessions are this process's only (a random key).
        secret = secrets.token_bytes(32) if token is None else token.encode()
        self._key = hmac.new(secret, b"lionexec console session", hashlib.sha256).digest()

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] == "lifespan":  # served on its own (a mount passes only http)
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        root = scope.get("root_path", "").rstrip("/")
        path = scope["path"]
        if root and (path == root or path.startswith(root + "/")):
            path = path[len(root) :]
        request = _Request(scope, receive, send, root, path or "/")
        try:
            await self._route(request)
        except HTTPError as exc:
            await self._error(request, exc.status, exc.message)
        except ClientGone:  # left before its form arrived: nothing was done, nobody to tell
            pass

    async def _route(self, request: _Request) -> None:
        path, method = request.path, request.scope["method"]
        if path.startswith("/static/"):
            await self._static(request, path.removeprefix("/static/"))
            return
        self._check_host(request)
        if path == "/login":
            await (self._login(request) if method == "POST" else self._login_page(request))
            return
        if not self._signed_in(request):
            await self._login_page(request, status=401)
            return
        if method == "POST":
            await self._post(request)
        elif method not in ("GET", "HEAD"):
            raise HTTPError(405, f"method {method[:20]} not allowed here")
        elif path in ("/", ""):
            await self._redirect(request, "/approvals")
        elif path == "/approvals":
            await self._approvals(request)
        elif path == "/conversations":
            await self._conversations(request)
        elif path.startswith("/conversations/"):
            await self._conversation(request, path.removeprefix("/conversations/"))
        elif path == "/events":
            await self.app.events(None, request.receive, request.send)
        else:
            raise HTTPError(404, "no such page")

    async def _post(self, request: _Request) -> None:
        body = await self.app._body(request.scope, request.receive)
        form = self._form(request, body)
        if request.path == "/logout":
            expired = self._cookie(request, "", max_age=0)
            await self._redirect(request, "/login", headers=[expired])
        elif request.path.startswith("/approvals/"):
            await self._decide(request, request.path.removeprefix("/approvals/"), form)
        else:
            raise HTTPError(404, "no such form")

    # -- sessions, forgery ------------------------------------------------------------------

    def _check_host(self, request: _Request) -> None:
        """An open console (no token) answers loopback names and the bound host only."""
        refusal = open_server_host_refusal(request.scope, self.app.config, "console")
        if refusal is not None:
            raise HTTPError(403, refusal)

    def _mac(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def _signed_in(self, request: _Request) -> bool:
        """Whether the request has a valid session (an open console starts one)."""
        for value in _cookies(request.scope).get(COOKIE, []):
            match = SESSION.fullmatch(value)
            if match is None:
                continue
            issued, nonce, mac = match.groups()
            fresh = (
                int(issued) <= time.time() + 60 and time.time() < int(issued) + self.session_ttl
            )
            if fresh and hmac.compare_digest(mac, self._mac(f"{issued}.{nonce}")):
                request.csrf = self._mac(f"csrf.{nonce}")
                return True
        if self.app.config.token is None:
            request.cookies.append(self._start_session(request))
            return True
        return False

    def _start_session(self, request: _Request) -> tuple[bytes, bytes]:
        issued, nonce = str(int(time.time())), secrets.token_hex(16)
        request.csrf = self._mac(f"csrf.{nonce}")
        value = f"{issued}.{nonce}.{self._mac(f'{issued}.{nonce}')}"
        return self._cookie(request, value, max_age=int(self.session_ttl))

    def _cookie(self, request: _Request, value: str, *, max_age: int) -> tuple[bytes, bytes]:
        secure = "; Secure" if request.scope.get("scheme") == "https" else ""
        path = quote(request.root or "/", safe="/")
        cookie = f"{COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict"
        return (b"set-cookie", (cookie + secure).encode("latin-1"))

    def _form(self, request: _Request, body: bytes) -> dict[str, str]:
        """The fields of a form POST, once it is proven to come from the console's page:
        ``Origin`` names this host and the anti-forgery token matches (else a 403)."""
        if not same_origin(request.scope):
            raise HTTPError(
                403,
                "this form must be sent from the console's own page (the Origin header must "
                "name this host); nothing was done",
            )
        form = _parse_form(body)
        if request.path != "/login":
            presented = form.get("csrf", "").encode()
            expected = (request.csrf or "").encode()
            if not (expected and hmac.compare_digest(presented, expected)):
                raise HTTPError(
                    403,
                    "missing or wrong anti-forgery token (reload the page and try again); "
                    "nothing was done",
                )
        return form

    async def _login_page(self, request: _Request, status: int = 200, error: str = "") -> None:
        target = request.path if status == 401 and request.scope["method"] == "GET" else ""
        if self.app.config.token is None:  # nothing to sign in to
            await self._redirect(request, "/approvals")
            return
        notice = f'<p class="notice error">{text(error)}</p>' if error else ""
        body = (
            f"<h1>Sign in</h1>{notice}"
            f'<form method="post" action="{text(request.root)}/login" class="card">'
            f'<input type="hidden" name="next" value="{text(target)}">'
            '<p><label>Server token <input type="password" name="token" autocomplete='
            '"current-password" required autofocus></label></p>'
            '<p><button type="submit">Sign in</button></p></form>'
            '<p class="muted">The token the server was started with (<code>--token</code> or '
            "<code>$LIONEXEC_SERVER_TOKEN</code>).</p>"
        )
        document = pages.page("Sign in", body, root=request.root, csrf=None, live=False)
        await self._html(request, status, document)

    async def _login(self, request: _Request) -> None:
        body = await self.app._body(request.scope, request.receive)
        form = self._form(request, body)
        token = self.app.config.token
        if token is None:
            await self._redirect(request, "/approvals")
            return
        if not hmac.compare_digest(form.get("token", "").encode(), token.encode()):
            await self._login_page(request, 401, "Wrong token.")
            return
        target = form.get("next", "")
        # Only a page of this console: never another site, nor the login itself.
        if not re.fullmatch(r"/(approvals|conversations(/[0-9a-f-]{36})?)", target):
            target = "/approvals"
        await self._redirect(request, target, headers=[self._start_session(request)])

    # -- pages ---------------------------------------------------------------------------------

    async def _approvals(self, request: _Request) -> None:
        journal = self.app.journal
        if journal is None:
            body = (
                "<h1>Approvals</h1><p class=empty>Approvals need a journal: start the server "
                "with one (<code>--journal</code>) and <code>--approve TOOL</code>.</p>"
            )
            await self._page(request, "Approvals", body, "approvals")
            return
        shown = _query(request.scope).get("decided", "")
        try:
            pending = await journal.approvals(None, state="pending")
            just = await journal.approval(shown) if APPROVAL_ID.fullmatch(shown) else None
        except ApprovalNotFound:
            just = None
        except JournalError as exc:
            raise HTTPError(
                503, f"the journal could not list approvals ({exc}); try again"
            ) from None
        names = self._names()
        notice = ""
        if just is not None:
            who = f" by {text(just.decided_by)}" if just.decided_by else ""
            why = f": {text(pages._cut(just.reason, 300))}" if just.reason else ""
            link = self._conversation_link(request, just.branch_id, names, "its conversation")
            notice = (
                f'<p class="notice" id="decided">Approval <code>{text(just.approval_id)}</code> '
                f"of <code>{text(just.function)}</code> is now {badge(just.state)}{who}{why} "
                f"({link}).</p>"
            )
        cards = "".join(self._approval_card(request, a, names) for a in pending[:SHOWN])
        more = len(pending) - SHOWN
        body = (
            f"<h1>Approvals waiting for a decision ({len(pending)})</h1>{notice}"
            + (cards or '<p class="empty" id="no-pending">No call is waiting for approval.</p>')
            + (f'<p class="muted">and {more} more: decide these first.</p>' if more > 0 else "")
            + '<p class="muted">Decided approvals are shown on their conversation\'s page.</p>'
        )
        await self._page(request, "Approvals", body, "approvals")

    def _approval_card(self, request: _Request, approval: Approval, names: dict[str, str]) -> str:
        root, aid = text(request.root), text(approval.approval_id)
        action = f"{root}/approvals/{text(quote(approval.approval_id, safe=''))}"
        csrf = f'<input type="hidden" name="csrf" value="{text(request.csrf or "")}">'
        rule = f" (rule <code>{text(approval.rule)}</code>)" if approval.rule else ""
        link = self._conversation_link(request, approval.branch_id, names)
        return (
            f'<article class="card approval" id="{aid}" data-approval="{aid}">'
            f"<h2><code>{text(approval.function)}</code> {badge(approval.state)}</h2><dl>"
            f'<dt>Arguments</dt><dd><pre class="arguments">{shown_json(approval.arguments)}</pre>'
            f"</dd><dt>Policy</dt><dd>{text(approval.escalation)}{rule}<br>"
            f'<span class="muted">policy digest <code>{text(approval.policy)}</code></span></dd>'
            f"<dt>Conversation</dt><dd>{link}</dd><dt>Call</dt><dd><code>{text(approval.call_id)}</code></dd>"
            f"<dt>Approval</dt><dd><code>{aid}</code></dd>"
            f"<dt>Asked</dt><dd>{when(approval.created_at)}</dd>"
            f"<dt>Expires</dt><dd>{when(approval.expires_at)}</dd></dl>"
            f'<div class="actions"><form method="post" action="{action}">{csrf}'
            '<input type="hidden" name="decision" value="approve">'
            '<button type="submit" class="approve">Approve</button></form>'
            f'<form method="post" action="{action}">{csrf}'
            '<input type="hidden" name="decision" value="reject">'
            '<input type="text" name="reason" required maxlength="1000" '
            'placeholder="Why it is rejected">'
            '<button type="submit" class="reject">Reject</button></form></div></article>'
        )

    def _conversation_link(
        self, request: _Request, branch_id: str, names: dict[str, str], label: str = ""
    ) -> str:
        label = label or names.get(branch_id, branch_id)
        href = f"{text(request.root)}/conversations/{text(quote(branch_id, safe=''))}"
        return f'<a href="{href}">{text(label)}</a>'

    def _names(self) -> dict[str, str]:
        """The conversation id of each branch this server has served since it started."""
        return {str(c.branch_id): c.id for c in self.app.conversations.values()}

    async def _conversations(self, request: _Request) -> None:
        names = self._names()
        number = _page_number(request.scope)
        journal = self.app.journal
        rows: list[list[str]] = []
        try:
            if journal is None:
                live = list(reversed(self.app.conversations.values()))
                total = len(live)
                for conversation in live[number * PAGE : (number + 1) * PAGE]:
                    summary = _summary_of_history(conversation.branch.messages)
                    rows.append([str(conversation.branch_id), *summary])
            else:
                branch_ids = list(reversed(await journal.branch_ids()))
                total = len(branch_ids)
                for branch_id in branch_ids[number * PAGE : (number + 1) * PAGE]:
                    calls = await journal.calls(branch_id)
                    parked = await journal.approvals(branch_id, None)
                    summary = _summary_of_calls(calls, parked)
                    rows.append([str(branch_id), *summary])
        except JournalError as exc:
            raise HTTPError(503, f"the journal could not be read ({exc}); try again") from None
        listing = table(
            ["Conversation", "Calls", "Outcomes", "Waiting for approval", "Last activity"],
            ([self._conversation_link(request, r[0], names), *r[1:]] for r in rows),
            empty="No conversation yet.",
        )
        pager = _pager(request, number, total)
        body = f"<h1>Conversations ({total})</h1>{listing}{pager}"
        await self._page(request, "Conversations", body, "conversations")

    async def _conversation(self, request: _Request, raw_id: str) -> None:
        try:
            branch_id = uuid.UUID(raw_id)
        except ValueError:
            raise HTTPError(404, f"no conversation {raw_id[:80]!r}") from None
        journal = self.app.journal
        calls: dict[str, JournaledCall] = {}
        approvals: dict[str, Approval] = {}
        try:
            if journal is None:
                known = (c for c in self.app.conversations.values() if c.branch_id == branch_id)
                found = next(known, None)
                history = found.branch.messages if found is not None else MessageManager()
            else:
                history = await journal.history(branch_id)
                calls = {c.call_id: c for c in await journal.calls(branch_id)}
                approvals = {a.call_id: a for a in await journal.approvals(branch_id, None)}
        except JournalError as exc:
            raise HTTPError(503, f"the journal could not be read ({exc}); try again") from None
        requests = list(history.requests())
        if not requests and not len(history):
            raise HTTPError(404, f"no conversation {raw_id[:80]!r}")
        number = _page_number(request.scope)
        shown = requests[number * PAGE : (number + 1) * PAGE]
        cards = "".join(
            _call_card(request, r, history, calls.get(r.content.call_id), approvals) for r in shown
        )
        name = self._names().get(str(branch_id))
        title = f"Conversation {name}" if name else "Conversation"
        body = (
            f"<h1>{text(title)}</h1><p class=muted>branch <code>{text(branch_id)}</code> · "
            f"{len(requests)} calls, {len(history)} messages</p>"
            + (cards or '<p class="empty">No tool call in this conversation.</p>')
            + _pager(request, number, len(requests))
        )
        await self._page(request, title, body, "conversations")

    async def _decide(self, request: _Request, approval_id: str, form: dict[str, str]) -> None:
        decision = form.get("decision", "")
        if decision not in ("approve", "reject"):
            raise HTTPError(400, "decision must be approve or reject")
        reason = form.get("reason", "").strip() or None
        if reason is not None and len(reason) > 1000:
            raise HTTPError(400, "a reason has at most 1000 characters")
        client = request.scope.get("client")
        by = "console" if not client else f"console ({client[0]})"
        await self.app.settle(approval_id, decision, reason, by)
        await self._redirect(request, f"/approvals?decided={quote(approval_id, safe='')}")

    # -- responses -----------------------------------------------------------------------------

    async def _page(self, request: _Request, title: str, body: str, nav: str) -> None:
        # The logout button (a form needing the anti-forgery token) only where one signs in.
        signed = request.csrf if self.app.config.token is not None else None
        document = pages.page(title, body, root=request.root, csrf=signed, nav=nav)
        await self._html(request, 200, document)

    async def _error(self, request: _Request, status: int, message: str) -> None:
        body = (
            f'<h1>{status}</h1><p class="notice error">{text(message)}</p>'
            f'<p><a href="{text(request.root)}/approvals">Back to the approvals</a></p>'
        )
        document = pages.page("Error", body, root=request.root, csrf=request.csrf, live=False)
        await self._html(request, status, document)

    async def _html(self, request: _Request, status: int, document: bytes) -> None:
        head = [
            HTML,
            *SECURITY_HEADERS,
            *request.cookies,
            (b"content-length", b"%d" % len(document)),
        ]
        send = request.send
        await send({"type": "http.response.start", "status": status, "headers": head})
        body = b"" if request.scope["method"] == "HEAD" else document
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _redirect(
        self, request: _Request, target: str, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        location = quote(request.root, safe="/") + target
        head = [
            *SECURITY_HEADERS,
            *request.cookies,
            *headers,
            (b"location", location.encode("latin-1")),
            (b"content-length", b"0"),
        ]
        await request.send({"type": "http.response.start", "status": 303, "headers": head})
        await request.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _static(self, request: _Request, name: str) -> None:
        files = {
            "console.js": (pages.SCRIPT, b"text/javascript; charset=utf-8"),
            "console.css": (pages.STYLE, b"text/css; charset=utf-8"),
        }
        if name not in files:
            raise HTTPError(404, "no such file")
        content, kind = files[name]
        head = [
            (b"content-type", kind),
            *SECURITY_HEADERS[:3],
            (b"cache-control", b"no-cache"),
            (b"content-length", b"%d" % len(content)),
        ]
        await request.send({"type": "http.response.start", "status": 200, "headers": head})
        await request.send({"type": "http.response.body", "body": content, "more_body": False})


# -- helpers -------------------------------------------------------------------------------------


def _cookies(scope: HTTPScope) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, value in scope["headers"]:
        if key.lower() != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            name, _, content = part.strip().partition("=")
            found.setdefault(name, []).append(content)
    return found


def _parse_form(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body; a field twice, or not UTF-8, is a 400."""
    try:
        fields = parse_qs(
            body.decode("ascii"),
            keep_blank_values=True,
            strict_parsing=bool(body),
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_QUERY_FIELDS,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"the form could not be read ({exc})") from None
    if any(len(values) > 1 for values in fields.values()):
        raise HTTPError(400, "a form field was sent twice")
    return {name: values[0] for name, values in fields.items()}


def _query(scope: HTTPScope) -> dict[str, str]:
    """The query parameters, the last value of each (the server's bound applies)."""
    return {name: values[-1] for name, values in query_parameters(scope).items()}


def _page_number(scope: HTTPScope) -> int:
    raw = _query(scope).get("page", "0")
    if not re.fullmatch(r"[0-9]{1,6}", raw):
        raise HTTPError(400, f"page must be a page number (0 to 999999), got {raw[:20]!r}")
    return int(raw)


def _pager(request: _Request, number: int, total: int) -> str:
    links = []
    base = f"{text(request.root)}{text(quote(request.path))}?page="
    if number:
        links.append(f'<a href="{base}{number - 1}">← newer</a>')
    if (number + 1) * PAGE < total:
        links.append(f'<a href="{base}{number + 1}">older →</a>')
    return f'<p class="pager">{" · ".join(links)}</p>' if links else ""


#: The outcome of a call that never ran, by the state of its approval.
UNRUN: Final = {"pending": "awaiting_approval", "approved": "approved", "used": "running"}


def _summary_of_calls(calls: list[JournaledCall], approvals: list[Approval]) -> list[str]:
    """The cells of one conversation's row: the calls the journal holds (those that ran,
    and those parked for approval that did not), their outcomes, how many wait, when the
    last thing happened."""
    outcomes = Counter(c.outcome or "running" for c in calls)
    ran = {c.call_id for c in calls}
    unrun = [a for a in approvals if a.call_id not in ran]
    outcomes.update(UNRUN.get(a.state, "denied") for a in unrun)
    times = [c.finished_at or c.requested_at for c in calls]
    times += [a.decided_at or a.created_at for a in approvals]
    shown = ", ".join(f"{n} {text(o)}" for o, n in outcomes.most_common())
    waiting = sum(a.state == "pending" for a in approvals)
    return [
        str(len(calls) + len(unrun)),
        shown or "—",
        str(waiting),
        when(max(times, default=None)),
    ]


def _summary_of_history(history: MessageManager) -> list[str]:
    outcomes: Counter[str] = Counter()
    requests = list(history.requests())
    for request in requests:
        response = history.response_for(request)
        outcomes[response.content.outcome.value if response is not None else "running"] += 1
    waiting = outcomes.get("awaiting_approval", 0)
    shown = ", ".join(f"{n} {text(o)}" for o, n in outcomes.most_common())
    return [str(len(requests)), shown or "—", str(waiting), "—"]


def _call_card(
    request: _Request,
    call: ActionRequest,
    history: MessageManager,
    journaled: JournaledCall | None,
    approvals: dict[str, Approval],
) -> str:
    response = history.response_for(call)
    outcome = None if response is None else response.content.outcome.value
    result, is_error = result_text(response) if response is not None else ("", False)
    call_id = call.content.call_id
    rows = [
        ("Call", f"<code>{text(call_id)}</code>"),
        ("Arguments", f'<pre class="arguments">{shown_json(call.content.arguments)}</pre>'),
    ]
    if response is not None:
        label = "Error" if is_error else "Result"
        rows.append((label, f'<pre class="result">{text(pages._cut(result))}</pre>'))
        rows.append(("Attempts", text(response.content.attempts)))
    if journaled is not None:
        rows += [
            ("Effect", text(journaled.effect)),
            ("Idempotency key", f"<code>{text(journaled.idempotency_key)}</code>"),
            ("Requested", when(journaled.requested_at)),
            ("Finished", when(journaled.finished_at)),
        ]
    approval = approvals.get(call_id)
    if approval is not None:
        who = f" by {text(approval.decided_by)}" if approval.decided_by else ""
        why = f": {text(pages._cut(approval.reason, 300))}" if approval.reason else ""
        inbox = (
            f' · <a href="{text(request.root)}/approvals#{text(approval.approval_id)}">decide</a>'
            if approval.state == "pending"
            else ""
        )
        rows.append(
            (
                "Approval",
                f"{badge(approval.state)}{who}{why}{inbox}<br><span class=muted>asked: "
                f"{text(approval.escalation)}</span>",
            )
        )
    details = "".join(f"<dt>{text(k)}</dt><dd>{v}</dd>" for k, v in rows)
    state = outcome or "running"
    return (
        f'<article class="card call" data-call="{text(call_id)}" data-outcome="{text(state)}">'
        f"<h2><code>{text(call.content.function)}</code> {badge(state)}</h2>"
        f"<dl>{details}</dl></article>"
    )
