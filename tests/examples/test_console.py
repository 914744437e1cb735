"""The approvals console over HTTP: sign-in, forgery refusals, escaping, mounting.

Real servers on 127.0.0.1 (``open_app`` + ``serve``), real HTTP with httpx, a real SQLite
journal; a tool counts its runs outside the journal, so "nothing was decided" is checked by
the count as well as by the journal. The browser tests are in ``test_console_browser.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from .conftest import DEMO_TOOLS, call, server

BUDGET = 30.0
TOKEN = "s3cret-token"
HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def paying(paid: list[str]) -> list[Callable[..., Any]]:
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice (counts its runs outside the journal)."""
        paid.append(invoice)
        return f"paid {invoice}"

    return [*DEMO_TOOLS, pay]


@asynccontextmanager
async def console_server(
    tmp_path: Path, paid: list[str], **options: Any
) -> AsyncIterator[tuple[Any, str]]:
    """A journaled server whose ``pay`` calls wait for approval, and its base URL."""
    options.setdefault("journal", str(tmp_path / "console.db"))
    config = server.ServerConfig(port=0, approve=("pay",), **options)
    stop = trio.Event()
    async with server.open_app(config, tools=paying(paid)) as app, trio.open_nursery() as n:
        binds = await n.start(partial(server.serve, app, shutdown_trigger=stop.wait))
        yield app, binds[0]
        stop.set()


async def park(api: httpx.AsyncClient, call_id: str, invoice: str, cid: str = "bills") -> str:
    """Send one ``pay`` call through the API; return the approval id it waits for."""
    body = {
        "conversation_id": cid,
        "tool_calls": [call("pay", {"invoice": invoice, "amount": 3}, call_id)],
    }
    reply = await api.post("/v1/act", json=body)
    assert reply.status_code == 200, reply.text
    message = reply.json()["messages"][0]
    assert message["outcome"] == "awaiting_approval", message
    approval_id: str = message["approval_id"]
    return approval_id


async def sign_in(client: httpx.AsyncClient, url: str) -> str:
    """Sign in as a browser would; return the inbox page's anti-forgery token."""
    reply = await client.post(
        "/console/login", data={"token": TOKEN, "next": "/approvals"}, headers={"origin": url}
    )
    assert reply.status_code == 303, reply.text
    page = await client.get("/console/approvals")
    assert page.status_code == 200, page.text
    match = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert match is not None, page.text
    return match.group(1)


def session_cookie(issued: int, nonce: str = "ab" * 16) -> str:
    """A session cookie signed as the console signs one (HMAC-SHA256 under a key that the
    token derives)."""
    key = hmac.new(TOKEN.encode(), b"lionexec console session", hashlib.sha256).digest()
    mac = hmac.new(key, f"{issued}.{nonce}".encode(), hashlib.sha256).hexdigest()
    return f"{issued}.{nonce}.{mac}"


def api_client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKEN}"})


async def test_signing_in_trades_the_token_for_a_strict_session_cookie(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with console_server(tmp_path, [], token=TOKEN) as (_, url):
            async with httpx.AsyncClient(base_url=url) as client:
                anonymous = await client.get("/console/approvals")
                assert anonymous.status_code == 401
                assert 'name="token"' in anonymous.text and "Sign in" in anonymous.text
                assert (await client.get("/console/events")).status_code == 401
                assert (await client.get("/v1/approvals")).status_code == 401  # API unchanged
                wrong = await client.post(
                    "/console/login", data={"token": "guess"}, headers={"origin": url}
                )
                assert wrong.status_code == 401 and "Wrong token" in wrong.text
                assert "set-cookie" not in wrong.headers
                no_origin = await client.post("/console/login", data={"token": TOKEN})
                assert no_origin.status_code == 403
                good = await client.post(
                    "/console/login",
                    data={"token": TOKEN, "next": "https://evil.example/"},
                    headers={"origin": url},
                )
                assert good.status_code == 303
                assert good.headers["location"] == "/console/approvals"  # never another site
                cookie = good.headers["set-cookie"]
                for attribute in ("HttpOnly", "SameSite=Strict", "Path=/console"):
                    assert attribute in cookie, cookie
                page = await client.get("/console/approvals")
                assert page.status_code == 200
                policy = page.headers["content-security-policy"]
                assert "script-src 'self'" in policy and "default-src 'none'" in policy
                assert "'unsafe-inline'" not in policy
                assert page.headers["x-frame-options"] == "DENY"
                out = await client.post(
                    "/console/logout",
                    data={"csrf": re.findall(r'name="csrf" value="(\w+)"', page.text)[0]},
                    headers={"origin": url},
                )
                assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
                client.cookies.clear()
                assert (await client.get("/console/approvals")).status_code == 401
            async with httpx.AsyncClient(base_url=url) as forged:  # a cookie it signed itself
                forged.cookies.set(
                    "lionexec_console", "1.00000000000000000000000000000000." + "0" * 64
                )
                assert (await forged.get("/console/approvals")).status_code == 401
                # Signed with the key the token derives (the documented scheme): a fresh
                # session is accepted, one past session_ttl (12 h) is not.
                for issued, status in ((time.time() - 60, 200), (time.time() - 13 * 3600, 401)):
                    forged.cookies.set("lionexec_console", session_cookie(int(issued)))
                    assert (await forged.get("/console/approvals")).status_code == status


async def test_a_forged_decision_is_refused_and_decides_nothing(tmp_path: Path) -> None:
    paid: list[str] = []
    with trio.fail_after(BUDGET):
        async with (
            console_server(tmp_path, paid, token=TOKEN) as (app, url),
            api_client(url) as api,
            httpx.AsyncClient(base_url=url) as browser,
        ):
            approval_id = await park(api, "p1", "A1")
            csrf = await sign_in(browser, url)
            target = f"/console/approvals/{approval_id}"
            attempts = [
                ({"decision": "approve"}, {"origin": url}),  # no token
                ({"decision": "approve", "csrf": "0" * 64}, {"origin": url}),  # wrong
                ({"decision": "approve", "csrf": csrf[:-1]}, {"origin": url}),  # shorter
                ({"decision": "approve", "csrf": csrf}, {}),  # no Origin
                ({"decision": "approve", "csrf": csrf}, {"origin": "https://evil.example"}),
            ]
            for form, headers in attempts:
                reply = await browser.post(target, data=form, headers=headers)
                assert reply.status_code == 403, (form, headers, reply.text)
                assert "nothing was done" in reply.text
            async with httpx.AsyncClient(base_url=url) as other:  # another person's token
                other_csrf = await sign_in(other, url)
                reply = await browser.post(
                    target,
                    data={"decision": "approve", "csrf": other_csrf},
                    headers={"origin": url},
                )
                assert reply.status_code == 403
            hostile = await browser.post(
                "/console/approvals/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
                data={"decision": "approve", "csrf": csrf},
                headers={"origin": url},
            )
            assert hostile.status_code == 404 and "<script>alert" not in hostile.text
            odd = await browser.post(
                target, data={"decision": "maybe", "csrf": csrf}, headers={"origin": url}
            )
            assert odd.status_code == 400
            twice = await browser.post(
                target, content=f"csrf={csrf}&csrf={csrf}&decision=approve",
                headers={"origin": url, "content-type": "application/x-www-form-urlencoded"},
            )  # fmt: skip
            assert twice.status_code == 400
            async with httpx.AsyncClient(base_url=url) as stranger:  # no session at all
                reply = await stranger.post(
                    target, data={"decision": "approve", "csrf": csrf}, headers={"origin": url}
                )
                assert reply.status_code == 401
            assert paid == []
            assert app.journal is not None
            assert (await app.journal.approval(approval_id)).state == "pending"
            # the same form, from the page, with its token: decided, run once
            reply = await browser.post(
                target, data={"decision": "approve", "csrf": csrf}, headers={"origin": url}
            )
            assert reply.status_code == 303, reply.text
            assert paid == ["A1"]
            again = await browser.post(
                target, data={"decision": "approve", "csrf": csrf}, headers={"origin": url}
            )
            assert again.status_code == 409 and "used" in again.text
            assert paid == ["A1"]
            assert (await app.journal.approval(approval_id)).state == "used"


async def test_a_rejection_from_the_console_denies_the_call(tmp_path: Path) -> None:
    paid: list[str] = []
    with trio.fail_after(BUDGET):
        async with (
            console_server(tmp_path, paid, token=TOKEN) as (_, url),
            api_client(url) as api,
            httpx.AsyncClient(base_url=url) as browser,
        ):
            approval_id = await park(api, "p1", "B1")
            csrf = await sign_in(browser, url)
            target = f"/console/approvals/{approval_id}"
            no_reason = await browser.post(
                target, data={"decision": "reject", "csrf": csrf}, headers={"origin": url}
            )
            assert no_reason.status_code == 400 and "reason" in no_reason.text
            reply = await browser.post(
                target,
                data={"decision": "reject", "reason": "not this month", "csrf": csrf},
                headers={"origin": url},
                follow_redirects=True,
            )
            assert reply.status_code == 200
            assert "rejected" in reply.text and "not this month" in reply.text
            history = (await api.get("/v1/conversations/bills")).json()
    assert paid == []
    outcomes = [
        r["content"]["outcome"] for r in history["records"] if r["kind"] == "action_response"
    ]
    assert outcomes == ["denied"]


async def test_hostile_arguments_are_shown_escaped(tmp_path: Path) -> None:
    with trio.fail_after(BUDGET):
        async with (
            console_server(tmp_path, [], token=TOKEN) as (_, url),
            api_client(url) as api,
            httpx.AsyncClient(base_url=url) as browser,
        ):
            body = {
                "conversation_id": "x",
                "tool_calls": [
                    call("pay", {"invoice": HOSTILE, "amount": 1}, "c\u202e1"),
                    call('"><img src=x onerror=alert(1)>', {"k": HOSTILE}, "c2"),  # no such tool
                ],
            }
            assert (await api.post("/v1/act", json=body)).status_code == 200
            await sign_in(browser, url)
            for page in ("/console/approvals", "/console/conversations"):
                text = (await browser.get(page)).text
                assert "<script>window" not in text and "<img" not in text
            bid = server.branch_id_of("x")
            text = (await browser.get(f"/console/conversations/{bid}")).text
            assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in text
            assert "\u202e" not in text and "c\\u202e1" in text  # no reordering trick
            assert text.count("<script") == 1  # the console's own, from a file
            assert "<img" not in text and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in text


async def test_an_open_console_answers_loopback_names_only(tmp_path: Path) -> None:
    paid: list[str] = []
    with trio.fail_after(BUDGET):
        async with (
            console_server(tmp_path, paid) as (_, url),
            httpx.AsyncClient(base_url=url) as browser,
        ):
            page = await browser.get("/console/approvals")  # no token: a session at once
            assert page.status_code == 200 and "set-cookie" in page.headers
            assert "Sign in" not in page.text
            rebound = await browser.get(
                "/console/approvals", headers={"host": "attacker.example:80"}
            )
            assert rebound.status_code == 403 and "--token" in rebound.text
            login = await browser.get("/console/login", follow_redirects=False)
            assert login.status_code == 303  # nothing to sign in to


async def test_the_console_mounts_in_another_asgi_app_under_a_prefix(tmp_path: Path) -> None:
    """A program's own ASGI app, with the console at ``/ops`` (``root_path``, as Starlette's
    ``Mount`` sets it) and everything else its own."""
    paid: list[str] = []
    config = server.ServerConfig(
        port=0, approve=("pay",), journal=str(tmp_path / "m.db"), token=TOKEN, console=False
    )
    async with server.open_app(config, tools=paying(paid)) as app:
        console = server.Console(app)
        assert app.console is None

        async def program(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/ops"):
                await console({**scope, "root_path": "/ops"}, receive, send)
            else:
                await app(scope, receive, send)

        transport = httpx.ASGITransport(app=program)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            client.headers["authorization"] = f"Bearer {TOKEN}"
            assert (await client.get("/console/approvals")).status_code == 404  # not served
            approval_id = await park(client, "p1", "M1")
            del client.headers["authorization"]
            login = await client.post(
                "/ops/login", data={"token": TOKEN}, headers={"origin": "http://127.0.0.1"}
            )
            assert login.headers["location"] == "/ops/approvals"
            assert "Path=/ops" in login.headers["set-cookie"]
            page = await client.get("/ops/approvals")
            assert f'action="/ops/approvals/{approval_id}"' in page.text
            assert 'href="/ops/static/console.css"' in page.text
            csrf = re.findall(r'name="csrf" value="(\w+)"', page.text)[0]
            done = await client.post(
                f"/ops/approvals/{approval_id}",
                data={"decision": "approve", "csrf": csrf},
                headers={"origin": "http://127.0.0.1"},
            )
            assert done.status_code == 303 and done.headers["location"].startswith("/ops/")
    assert paid == ["M1"]


async def test_an_in_memory_server_lists_its_live_conversations() -> None:
    async with server.open_app(server.ServerConfig(port=0), tools=DEMO_TOOLS) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            body = {
                "conversation_id": "mem",
                "tool_calls": [call("word_count", {"text": "a b"}, "w")],
            }
            assert (await client.post("/v1/act", json=body)).status_code == 200
            listing = await client.get("/console/conversations")
            assert listing.status_code == 200 and ">mem</a>" in listing.text
            calls = await client.get(f"/console/conversations/{server.branch_id_of('mem')}")
            assert 'data-outcome="completed"' in calls.text and "word_count" in calls.text
            inbox = await client.get("/console/approvals")
            assert "Approvals need a journal" in inbox.text
            missing = await client.get("/console/conversations/not-a-uuid")
            assert missing.status_code == 404
            flood = "&".join(f"p{i}=1" for i in range(40))
            assert (await client.get(f"/console/conversations?{flood}")).status_code == 400
            beyond = await client.get("/console/conversations?page=999999")
            assert beyond.status_code == 200 and ">mem</a>" not in beyond.text
            for page in ("99999999999", "-1", "x"):
                wrong = await client.get(f"/console/conversations?page={page}")
                assert wrong.status_code == 400
