"""lionexec.server on the durable journal.

A server on an SQLite file (or PostgreSQL) is stopped and a new one started on the same
journal: it serves the same conversations. Two replicas on one PostgreSQL database with a
worker pool serve one conversation between them. Real servers on 127.0.0.1, real HTTP.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lionexec.journal import JournalConnectionError, open_journal
from lionexec.journal.workers import Worker
from lionexec.otel import OtelSink
from lionexec.server import _locks
from lionexec.server._conversations import branch_id_of
from lionexec.server._locks import _try_lock
from lionexec.tools import ActionManager, Tool

from ..support.postgres import PostgresServer
from .conftest import DEMO_TOOLS, SERVER_PATH, announced_url, call, server

BUDGET = 30.0


@asynccontextmanager
async def running_server(
    config: Any, tools: list[Callable[..., Any]]
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """A server (``open_app`` + ``serve``) on 127.0.0.1, and a client for it."""
    stop = trio.Event()
    async with server.open_app(config, tools=tools) as app, trio.open_nursery() as nursery:
        binds = await nursery.start(partial(server.serve, app, shutdown_trigger=stop.wait))
        async with httpx.AsyncClient(base_url=binds[0]) as client:
            yield app, client
        stop.set()


def counted_tools(runs: list[str]) -> list[Callable[..., Any]]:
    def note(text: str) -> str:
        """Record a note (counts its runs outside the journal)."""
        runs.append(text)
        return f"noted {text}"

    return [*DEMO_TOOLS, note]


async def history_of(client: httpx.AsyncClient, conversation_id: str) -> dict[str, Any]:
    reply = await client.get(f"/v1/conversations/{conversation_id}")
    assert reply.status_code == 200, reply.text
    data: dict[str, Any] = reply.json()
    return data


async def records(client: httpx.AsyncClient, conversation_id: str) -> list[str]:
    reply = await client.get(f"/v1/conversations/{conversation_id}/records")
    assert reply.status_code == 200, reply.text
    return reply.text.splitlines()


@pytest.fixture(params=["sqlite", "postgres"])
def journal_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "server.db")
    pg: PostgresServer = request.getfixturevalue("postgres_server")
    return pg.create_database()


async def test_a_restarted_server_serves_the_same_conversations(journal_target: str) -> None:
    runs: list[str] = []
    config = server.ServerConfig(port=0, journal=journal_target)
    body = {
        "conversation_id": "durable-1",
        "tool_calls": [
            call("get_weather", {"city": "Oslo"}, "w"),
            call("note", {"text": "a"}, "n"),
            call("no_such_tool", {}, "u"),
        ],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, counted_tools(runs)) as (app, client):
            assert app.journal is not None
            first = await client.post("/v1/act", json=body)
            assert first.status_code == 200, first.text
            before = await history_of(client, "durable-1")
            lines_before = await records(client, "durable-1")
        assert [m["outcome"] for m in first.json()["messages"]] == [
            "completed",
            "completed",
            "invalid",
        ]
        assert before["total"] == 6  # three requests, three responses

        async with running_server(config, counted_tools(runs)) as (_, client):
            assert await history_of(client, "durable-1") == before
            assert await records(client, "durable-1") == lines_before
            # a retry of a recorded call is answered from the journal, not run again
            retry = await client.post("/v1/act", json=body)
            assert retry.status_code == 200, retry.text
            assert retry.json() == first.json()
            # and the conversation goes on where it was
            more = {
                "conversation_id": "durable-1",
                "tool_calls": [call("note", {"text": "b"}, "n2")],
            }
            reply = await client.post("/v1/act", json=more)
            assert reply.status_code == 200, reply.text
            after = await history_of(client, "durable-1")
            assert (await client.get("/v1/conversations/unknown")).status_code == 404
    assert runs == ["a", "b"]
    assert after["total"] == 8
    assert after["records"][:6] == before["records"]


async def test_a_server_killed_mid_call_leaves_one_response_after_restart(
    tmp_path: Path,
) -> None:
    """``python examples/server.py`` (a real process) is killed with SIGKILL while a call
    runs; the next server on its journal recovers the call (``unsafe``: ``interrupted``)
    before serving, and the history holds exactly one response for it."""
    target = str(tmp_path / "crash.db")
    body = {
        "conversation_id": "crash-1",
        "tool_calls": [call("slow_echo", {"text": "x", "seconds": 600}, "s")],
    }
    command = [sys.executable, str(SERVER_PATH), "--port", "0", "--journal", target]
    with trio.fail_after(BUDGET):
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
        try:
            url = await announced_url(process)
            async with httpx.AsyncClient(base_url=url) as client, trio.open_nursery() as nursery:

                async def post() -> None:
                    with pytest.raises(httpx.HTTPError):  # the server dies first
                        await client.post("/v1/act", json=body)

                nursery.start_soon(post)
                # the write-ahead commit (the request) precedes the tool: wait for it
                while (await client.get("/v1/conversations/crash-1")).status_code != 200:  # noqa: ASYNC110 (another process: nothing to wait on)
                    await trio.sleep(0.01)
                process.send_signal(signal.SIGKILL)
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == -signal.SIGKILL

        config = server.ServerConfig(port=0, journal=target)
        async with running_server(config, list(DEMO_TOOLS)) as (_, client):
            data = await history_of(client, "crash-1")
    assert data["total"] == 2
    request, response = data["records"]
    assert (request["kind"], response["kind"]) == ("action_request", "action_response")
    assert response["content"]["outcome"] == "interrupted"
    assert response["content"]["action_request_id"] == request["id"]


async def test_a_traced_server_writes_one_span_per_call_it_answers(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    config = server.ServerConfig(
        port=0, journal=str(tmp_path / "server.db"), trace_file=str(trace)
    )
    body = {
        "conversation_id": "traced-1",
        "tool_calls": [
            call("get_weather", {"city": "Oslo"}, "w"),
            call("no_such_tool", {}, "u"),
        ],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, list(DEMO_TOOLS)) as (app, client):
            assert len(app.sinks) == 1
            first = await client.post("/v1/act", json=body)
            assert first.status_code == 200, first.text
            # a retry is answered from the journal: nothing runs, no span
            retry = await client.post("/v1/act", json=body)
            assert retry.json() == first.json()
            other = {
                "conversation_id": "traced-2",
                "tool_calls": [call("word_count", {"text": "a b"}, "c")],
            }
            assert (await client.post("/v1/act", json=other)).status_code == 200
    spans = [json.loads(line) for line in trace.read_text().splitlines()]
    by_id = {span["attributes"]["gen_ai.tool.call.id"]: span for span in spans}
    assert len(spans) == len(by_id) == 3
    assert {i: s["attributes"]["lionexec.call.status"] for i, s in by_id.items()} == {
        "w": "completed",
        "u": "invalid",
        "c": "completed",
    }
    assert by_id["u"]["status"]["code"] == "ERROR"
    assert by_id["u"]["attributes"]["error.type"] == "invalid"
    branch_ids = {s["attributes"]["lionexec.branch.id"] for s in spans}
    assert len(branch_ids) == 2  # one journal branch per conversation


def test_the_command_line_keeps_conversations_in_a_journal_by_default() -> None:
    assert server.config_from_args([], {}).journal == server.DEFAULT_JOURNAL
    assert server.config_from_args(["--journal", "/tmp/x.db"], {}).journal == "/tmp/x.db"
    assert server.config_from_args(["--journal", ":memory:"], {}).journal is None
    url = "postgresql://app@db/app"
    config = server.config_from_args(["--database", url, "--workers"], {})
    assert (config.journal, config.workers) == (url, True)
    assert url not in repr(config)  # a URL may carry a password
    assert config.recover and not server.config_from_args(["--no-recover"], {}).recover
    with pytest.raises(SystemExit):
        server.config_from_args(["--database", "/tmp/x.db"], {})
    with pytest.raises(SystemExit):
        server.config_from_args(["--journal", ":memory:", "--workers"], {})
    with pytest.raises(ValueError, match="workers needs a journal"):
        server.ServerConfig(workers=True)
    with pytest.raises(ValueError, match="open_app"):
        server.App(server.ServerConfig(journal="x.db"))


@pytest.mark.parametrize("workers", [True, False], ids=["worker-pool", "in-server"])
async def test_two_replicas_on_one_postgres_serve_one_conversation(
    postgres_server: PostgresServer, workers: bool
) -> None:
    """Act via replica A, read and act via replica B, both at once: one history."""
    url = postgres_server.create_database()
    runs: list[str] = []
    tools = counted_tools(runs)
    config = server.ServerConfig(port=0, journal=url, workers=workers)
    first = {
        "conversation_id": "shared",
        "tool_calls": [
            call("note", {"text": "a"}, "a"),
            call("word_count", {"text": "x y"}, "wc"),
        ],
    }
    second = {"conversation_id": "shared", "tool_calls": [call("note", {"text": "b"}, "b")]}
    with trio.fail_after(BUDGET):
        async with (
            open_journal(url) as worker_journal,
            trio.open_nursery() as pool,
        ):
            registry = [Tool.from_function(t) for t in tools]
            if workers:
                await pool.start(Worker(worker_journal, registry, poll=0.05).run)
            async with (
                running_server(config, tools) as (_, replica_a),
                running_server(config, tools) as (_, replica_b),
            ):
                reply = await replica_a.post("/v1/act", json=first)
                assert reply.status_code == 200, reply.text
                assert [m["content"] for m in reply.json()["messages"]] == ["noted a", "2"]
                seen_by_b = await history_of(replica_b, "shared")
                assert seen_by_b == await history_of(replica_a, "shared")
                assert seen_by_b["total"] == 4

                # B goes on with the conversation; a retry of A's call through B is not re-run
                reply = await replica_b.post("/v1/act", json=second)
                assert reply.status_code == 200, reply.text
                retry = await replica_b.post("/v1/act", json=first)
                assert retry.status_code == 200, retry.text
                assert [m["content"] for m in retry.json()["messages"]] == ["noted a", "2"]
                changed = {**first, "tool_calls": [call("note", {"text": "other"}, "a")]}
                assert (await replica_b.post("/v1/act", json=changed)).status_code == 409

                # both replicas at once, on the same conversation: every call answered once
                statuses: list[int] = []

                async def post(client: httpx.AsyncClient, name: str) -> None:
                    batch = {
                        "conversation_id": "shared",
                        "tool_calls": [call("note", {"text": name}, name)],
                    }
                    statuses.append((await client.post("/v1/act", json=batch)).status_code)

                async with trio.open_nursery() as both:
                    both.start_soon(post, replica_a, "c")
                    both.start_soon(post, replica_b, "d")
                assert statuses == [200, 200]
                final_a = await history_of(replica_a, "shared")
                assert final_a == await history_of(replica_b, "shared")
            pool.cancel_scope.cancel()
    assert sorted(runs) == ["a", "b", "c", "d"]
    calls = [m["tool_call_id"] for m in final_a["messages"] if m["role"] == "tool"]
    assert sorted(calls) == ["a", "b", "c", "d", "wc"]
    assert final_a["total"] == 10


# -- approvals -------------------------------------------------------------------------------


def payment_tools(paid: list[str]) -> list[Callable[..., Any]]:
    def pay(invoice: str, amount: int) -> str:
        """Pay an invoice (counts its runs outside the journal)."""
        paid.append(invoice)
        return f"paid {invoice}"

    return [*DEMO_TOOLS, pay]


async def test_a_parked_call_survives_a_restart_and_runs_once_when_approved(
    tmp_path: Path,
) -> None:
    paid: list[str] = []
    config = server.ServerConfig(port=0, journal=str(tmp_path / "a.db"), approve=("pay",))
    body = {
        "conversation_id": "bills",
        "tool_calls": [
            call("pay", {"invoice": "A1", "amount": 7}, "p1"),
            call("word_count", {"text": "a b"}, "wc"),
        ],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools(paid)) as (_, client):
            reply = await client.post("/v1/act", json=body)
            assert reply.status_code == 200, reply.text
            parked, counted = reply.json()["messages"]
            assert (parked["status"], parked["outcome"]) == ("pending", "awaiting_approval")
            assert counted["outcome"] == "completed"
            approval_id = parked["approval_id"]
            assert approval_id in parked["content"]
            again = await client.post("/v1/act", json=body)  # a retry while it waits
            assert again.json()["messages"][0]["approval_id"] == approval_id
            listed = (await client.get("/v1/approvals")).json()["approvals"]
            assert [(a["approval_id"], a["call_id"], a["function"]) for a in listed] == [
                (approval_id, "p1", "pay")
            ]
            assert listed[0]["arguments"] == {"invoice": "A1", "amount": 7}
            assert listed[0]["conversation_id"] == "bills"
            only = await client.get("/v1/approvals", params={"conversation_id": "other"})
            assert only.json() == {"approvals": []}
        assert paid == []

        async with running_server(config, payment_tools(paid)) as (_, client):  # restarted
            listed = (await client.get("/v1/approvals")).json()["approvals"]
            assert [a["approval_id"] for a in listed] == [approval_id]
            decided = await client.post(f"/v1/approvals/{approval_id}", content=b"")
            assert decided.status_code == 200, decided.text
            data = decided.json()
            assert data["approval"]["state"] == "used"
            assert data["message"]["outcome"] == "completed"
            assert data["message"]["content"] == "paid A1"
            assert paid == ["A1"]
            twice = await client.post(f"/v1/approvals/{approval_id}", json={"by": "eve"})
            assert twice.status_code == 409, twice.text  # an approval is used once
            assert (await client.get("/v1/approvals")).json() == {"approvals": []}
            retry = await client.post("/v1/act", json=body)
            assert [m["outcome"] for m in retry.json()["messages"]] == ["completed", "completed"]
            history = await history_of(client, "bills")
    assert paid == ["A1"]
    outcomes = [
        r["content"]["outcome"] for r in history["records"] if r["kind"] == "action_response"
    ]
    assert sorted(outcomes) == ["completed", "completed"]


async def test_an_approval_resumed_here_keeps_its_conversation_history(
    tmp_path: Path, whole_reads: list[str]
) -> None:
    """Resuming an approved call of a conversation this server holds reads only what was
    committed since its last request, and keeps the history with the call's answer in it."""
    paid: list[str] = []
    config = server.ServerConfig(port=0, journal=str(tmp_path / "k.db"), approve=("pay",))
    body = {
        "conversation_id": "k",
        "tool_calls": [call("pay", {"invoice": "K", "amount": 1}, "p")],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools(paid)) as (app, client):
            whole_reads.clear()
            reply = await client.post("/v1/act", json=body)
            approval_id = reply.json()["messages"][0]["approval_id"]
            decided = await client.post(f"/v1/approvals/{approval_id}", content=b"")
            assert decided.status_code == 200, decided.text
            assert decided.json()["message"]["outcome"] == "completed" and paid == ["K"]
            assert whole_reads == [str(branch_id_of("k"))]  # the first request's only
            kept = app.conversations["k"].kept
            assert kept is not None and kept == await app.journal.history(branch_id_of("k"))
            answers = [m.content.outcome.value for m in kept.responses()]
            assert answers == ["completed"]


async def test_a_rejected_call_is_denied_and_bad_decisions_are_refused(tmp_path: Path) -> None:
    paid: list[str] = []
    config = server.ServerConfig(port=0, journal=str(tmp_path / "r.db"), approve=["pay"])
    body = {
        "conversation_id": "r",
        "tool_calls": [call("pay", {"invoice": "B", "amount": 1}, "p")],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools(paid)) as (_, client):
            approval_id = (await client.post("/v1/act", json=body)).json()["messages"][0][
                "approval_id"
            ]
            url = f"/v1/approvals/{approval_id}"
            for bad, status in (
                ({"decision": "reject"}, 400),  # a rejection needs a reason
                ({"decision": "maybe"}, 400),
                ({"decision": "approve", "extra": 1}, 400),
                ([1, 2], 400),
            ):
                reply = await client.post(url, json=bad)
                assert reply.status_code == status, (bad, reply.text)
                assert "error" in reply.json()
            assert (await client.post(url, content=b"{nope")).status_code == 400
            assert (await client.post("/v1/approvals/apr_unknown")).status_code == 404
            assert (await client.get(url)).status_code == 405
            rejected = await client.post(
                url, json={"decision": "reject", "reason": "not this month", "by": "bob"}
            )
            assert rejected.status_code == 200, rejected.text
            data = rejected.json()
            assert (data["approval"]["state"], data["approval"]["decided_by"]) == (
                "rejected",
                "bob",
            )
            assert data["message"]["outcome"] == "denied"
            assert "not this month" in data["message"]["content"]
            retry = await client.post("/v1/act", json=body)
            assert retry.json()["messages"][0]["outcome"] == "denied"
    assert paid == []


async def test_approvals_need_a_journal() -> None:
    with pytest.raises(ValueError, match="approve needs a journal"):
        server.ServerConfig(approve=("pay",))
    with pytest.raises(ValueError, match="approve needs a journal"):
        server.ServerConfig(journal="x.db", workers=True, approve=("pay",))
    config = server.config_from_args(
        ["--approve", "slow_echo", "--approve", "word_count"], {}, tools=DEMO_TOOLS
    )
    assert config.approve == ("slow_echo", "word_count")
    with pytest.raises(SystemExit):  # a misspelt tool: refused, not left unapproved
        server.config_from_args(["--approve", "slow-echo"], {}, tools=DEMO_TOOLS)
    with pytest.raises(SystemExit):
        server.config_from_args(["--journal", ":memory:", "--approve", "slow_echo"], {})
    app = server.App(server.ServerConfig(port=0))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(server.serve, app, shutdown_trigger=stop.wait))
        async with httpx.AsyncClient(base_url=binds[0]) as client:
            assert (await client.get("/v1/approvals")).status_code == 404
            assert (await client.post("/v1/approvals/apr_x")).status_code == 404
        stop.set()


@pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)\.[\w.]+' was garbage collected:ResourceWarning"
)
async def test_events_of_a_journaled_conversation_are_published(tmp_path: Path) -> None:
    from .test_server import sse_frames

    config = server.ServerConfig(port=0, journal=str(tmp_path / "e.db"))
    body = {"conversation_id": "ev", "tool_calls": [call("word_count", {"text": "a b"}, "w")]}
    seen: list[tuple[str, str]] = []
    with trio.fail_after(BUDGET):
        async with (
            running_server(config, list(DEMO_TOOLS)) as (_, client),
            client.stream("GET", "/v1/events", params={"conversation_id": "ev"}) as stream,
        ):
            frames = sse_frames(stream)
            assert (await anext(frames)) == {"comment": "subscribed"}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(client.post, "/v1/act", json=body))
                async for frame in frames:
                    seen.append((frame["event"], frame["data"].get("call_id", "")))
                    if frame["event"] == "act.end":
                        break
            await frames.aclose()
    assert ("tool.post", "w") in seen
    assert ("message.add", "w") in seen
    assert seen[0][0] == "act.start" and seen[-1][0] == "act.end"


async def test_an_approval_decided_elsewhere_is_resumed_by_the_next_post(tmp_path: Path) -> None:
    paid: list[str] = []
    path = tmp_path / "d.db"
    config = server.ServerConfig(port=0, journal=str(path), approve=("pay",))
    body = {
        "conversation_id": "d",
        "tool_calls": [call("pay", {"invoice": "C", "amount": 2}, "p")],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools(paid)) as (_, client):
            reply = await client.post("/v1/act", json=body)
            approval_id = reply.json()["messages"][0]["approval_id"]
            async with open_journal(path) as elsewhere:  # another process decides
                await elsewhere.approve(approval_id, by="carol")
            assert paid == []
            finished = await client.post(f"/v1/approvals/{approval_id}")
            assert finished.status_code == 200, finished.text
            assert finished.json()["message"]["outcome"] == "completed"
            assert finished.json()["approval"]["decided_by"] == "carol"
            assert (await client.post(f"/v1/approvals/{approval_id}")).status_code == 409
    assert paid == ["C"]


async def test_a_rejection_whose_resume_timed_out_is_finished_by_posting_it_again(
    tmp_path: Path,
) -> None:
    paid: list[str] = []
    config = server.ServerConfig(
        port=0, journal=str(tmp_path / "t.db"), approve=("pay",), request_timeout=0.2
    )
    body = {
        "conversation_id": "t",
        "tool_calls": [call("pay", {"invoice": "T", "amount": 3}, "p")],
    }
    reject = {"decision": "reject", "reason": "too late", "by": "dan"}
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools(paid)) as (app, client):
            approval_id = (await client.post("/v1/act", json=body)).json()["messages"][0][
                "approval_id"
            ]
            url = f"/v1/approvals/{approval_id}"
            # the conversation is busy past request_timeout: the rejection stands, unanswered
            async with app._lock_for(server.branch_id_of("t")):
                timed_out = await client.post(url, json=reject)
            assert timed_out.status_code == 504, timed_out.text
            assert "rejected" in timed_out.json()["error"]
            assert "POST the same decision again" in timed_out.json()["error"]
            finished = await client.post(url, json=reject)  # the same decision again
            assert finished.status_code == 200, finished.text
            assert finished.json()["approval"]["state"] == "rejected"
            assert finished.json()["message"]["outcome"] == "denied"
            assert "too late" in finished.json()["message"]["content"]
            other = await client.post(url, content=b"")  # the other decision: refused
            assert other.status_code == 409, other.text
            retry = await client.post("/v1/act", json=body)
            assert retry.json()["messages"][0]["outcome"] == "denied"
    assert paid == []


async def test_an_approved_call_that_outlives_request_timeout_is_not_resumed_again(
    tmp_path: Path,
) -> None:
    async def hang(seconds: int) -> str:
        """Wait (longer than any request may take)."""
        await trio.sleep(seconds)
        return "woke"

    config = server.ServerConfig(
        port=0, journal=str(tmp_path / "h.db"), approve=("hang",), request_timeout=0.2
    )
    body = {"conversation_id": "h", "tool_calls": [call("hang", {"seconds": 3600}, "z")]}
    with trio.fail_after(BUDGET):
        async with running_server(config, [*DEMO_TOOLS, hang]) as (_, client):
            approval_id = (await client.post("/v1/act", json=body)).json()["messages"][0][
                "approval_id"
            ]
            url = f"/v1/approvals/{approval_id}"
            timed_out = await client.post(url)
            assert timed_out.status_code == 504, timed_out.text
            assert "was cancelled" in timed_out.json()["error"]
            assert "not run again" in timed_out.json()["error"]
            assert (await client.post(url)).status_code == 409  # used: nothing to resume


async def test_approve_names_registered_tools_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="approve must be a sequence of tool names"):
        server.ServerConfig(journal=str(tmp_path / "s.db"), approve="pay")
    config = server.ServerConfig(journal=str(tmp_path / "u.db"), approve=("pay", "pya"))
    with pytest.raises(ValueError, match=r"approve names unknown tools: 'pya'"):
        async with server.open_app(config, tools=payment_tools([])):
            pass  # pragma: no cover
    async with open_journal(":memory:") as journal:
        with pytest.raises(ValueError, match=r"unknown tools: 'pya'"):
            server.App(config, tools=payment_tools([]), journal=journal)


async def test_a_replica_lock_that_fails_to_unlock_is_not_pooled_still_held(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    url = postgres_server.create_database()
    branch_id = server.branch_id_of("locked")
    key = int.from_bytes(branch_id.bytes[:8], "big", signed=True)

    def failing_unlock(conn: Any, key: int) -> None:
        raise psycopg.OperationalError("unlock failed (injected)")

    with trio.fail_after(BUDGET):
        async with server.ReplicaLocks(url, 1) as locks:
            monkeypatch.setattr(_locks, "_unlock", failing_unlock)
            with pytest.raises(psycopg.OperationalError, match="injected"):
                async with locks.hold(branch_id):
                    pass
            monkeypatch.undo()
            other = await trio.to_thread.run_sync(partial(psycopg.connect, url, autocommit=True))
            try:  # another replica can take the lock: the connection holding it was closed
                assert await trio.to_thread.run_sync(_try_lock, other, key)
            finally:
                other.close()
            async with locks.hold(branch_id):  # and the pool still serves
                pass


async def test_a_malformed_approval_id_is_a_404(journal_target: str) -> None:
    config = server.ServerConfig(port=0, journal=journal_target, approve=("pay",))
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools([])) as (_, client):
            for bad in ("apr_%00", "%00", "apr_" + "a" * 200, "apr_%E2%80%AE"):
                reply = await client.post(f"/v1/approvals/{bad}", content=b"")
                assert reply.status_code == 404, (bad, reply.text)
                assert "no approval" in reply.json()["error"]


async def test_a_decision_on_a_lost_database_connection_is_a_503(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    url = postgres_server.create_database()
    config = server.ServerConfig(port=0, journal=url, approve=("pay",))
    body = {
        "conversation_id": "lost",
        "tool_calls": [call("pay", {"invoice": "L", "amount": 1}, "p")],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools([])) as (_, client):
            approval_id = (await client.post("/v1/act", json=body)).json()["messages"][0][
                "approval_id"
            ]

            def drop_connections() -> None:
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )

            await trio.to_thread.run_sync(drop_connections)
            reply = await client.post(f"/v1/approvals/{approval_id}", content=b"")
            assert reply.status_code in (200, 503), reply.text
            if reply.status_code == 503:
                assert "journal" in reply.json()["error"]
            listed = await client.get("/v1/approvals")
            assert listed.status_code in (200, 503), listed.text


async def test_a_resumed_call_waits_for_a_token_of_the_call_limiter(tmp_path: Path) -> None:
    paid: list[str] = []
    config = server.ServerConfig(
        port=0,
        journal=str(tmp_path / "l.db"),
        approve=("pay",),
        request_timeout=0.2,
        max_concurrent_calls=1,
    )
    body = {
        "conversation_id": "l",
        "tool_calls": [call("pay", {"invoice": "L", "amount": 1}, "p")],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools(paid)) as (app, client):
            approval_id = (await client.post("/v1/act", json=body)).json()["messages"][0][
                "approval_id"
            ]
            url = f"/v1/approvals/{approval_id}"
            async with app.limiter:  # the only token: every call elsewhere waits
                waited = await client.post(url)
            assert waited.status_code == 504, waited.text
            assert paid == []
            finished = await client.post(url)
            assert finished.status_code == 200, finished.text
            assert paid == ["L"]


@pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)\.[\w.]+' was garbage collected:ResourceWarning"
)
async def test_the_events_of_a_resumed_call_are_published(tmp_path: Path) -> None:
    from .test_server import sse_frames

    config = server.ServerConfig(port=0, journal=str(tmp_path / "ev.db"), approve=("pay",))
    body = {
        "conversation_id": "re",
        "tool_calls": [call("pay", {"invoice": "E", "amount": 1}, "p")],
    }
    seen: list[tuple[str, str]] = []
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools([])) as (_, client):
            approval_id = (await client.post("/v1/act", json=body)).json()["messages"][0][
                "approval_id"
            ]
            async with client.stream(
                "GET", "/v1/events", params={"conversation_id": "re"}
            ) as stream:
                frames = sse_frames(stream)
                assert (await anext(frames)) == {"comment": "subscribed"}
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(partial(client.post, f"/v1/approvals/{approval_id}"))
                    async for frame in frames:
                        seen.append((frame["event"], frame["data"].get("call_id", "")))
                        if frame["event"] == "act.end":
                            break
                await frames.aclose()
    assert ("tool.post", "p") in seen
    assert ("message.add", "p") in seen
    assert seen[0][0] == "act.start" and seen[-1][0] == "act.end"


async def test_a_retry_of_a_parked_call_gets_the_same_answer(tmp_path: Path) -> None:
    config = server.ServerConfig(port=0, journal=str(tmp_path / "same.db"), approve=("pay",))
    body = {
        "conversation_id": "s",
        "tool_calls": [call("pay", {"invoice": "S", "amount": 1}, "p")],
    }
    with trio.fail_after(BUDGET):
        async with running_server(config, payment_tools([])) as (_, client):
            first = (await client.post("/v1/act", json=body)).json()
            again = (await client.post("/v1/act", json=body)).json()
    assert again == first
    assert first["messages"][0]["outcome"] == "awaiting_approval"


async def test_a_journaled_conversation_is_capped_at_max_history(tmp_path: Path) -> None:
    config = server.ServerConfig(port=0, journal=str(tmp_path / "cap.db"), max_history=4)
    first = {
        "conversation_id": "cap",
        "tool_calls": [
            call("word_count", {"text": "a"}, "w1"),
            call("word_count", {"text": "a b"}, "w2"),
        ],
    }
    more = {"conversation_id": "cap", "tool_calls": [call("word_count", {"text": "c"}, "w3")]}
    with trio.fail_after(BUDGET):
        async with running_server(config, list(DEMO_TOOLS)) as (_, client):
            assert (await client.post("/v1/act", json=first)).status_code == 200
            full = await client.post("/v1/act", json=more)
            assert full.status_code == 409, full.text
            assert "max_history (4)" in full.json()["error"]
            retry = await client.post("/v1/act", json=first)  # answered, not run: still served
            assert retry.status_code == 200, retry.text
            assert (await history_of(client, "cap"))["total"] == 4
    with pytest.raises(ValueError, match="max_history"):
        server.ServerConfig(max_history=0)


async def test_a_kept_conversation_reads_only_what_was_committed_since(
    tmp_path: Path, whole_reads: list[str]
) -> None:
    """After its first request, a conversation's requests read only the messages committed
    since its last one: none, or what another writer of the journal added meanwhile."""
    runs: list[str] = []
    tools = counted_tools(runs)
    config = server.ServerConfig(port=0, journal=str(tmp_path / "kept.db"))
    branch_id = str(branch_id_of("k"))
    with trio.fail_after(BUDGET):
        async with running_server(config, tools) as (app, client):
            reads = whole_reads
            reads.clear()
            for name in ("a", "b", "c"):
                body = {"conversation_id": "k", "tool_calls": [call("note", {"text": name}, name)]}
                assert (await client.post("/v1/act", json=body)).status_code == 200
            assert reads == [branch_id]  # the first request only
            assert len(app.conversations["k"].kept) == 6

            # another writer goes on with the conversation's branch meanwhile
            registry = ActionManager()
            registry.register_tools(tools)
            other = await app.journal.branch(branch_id, registry=registry)
            async with other:
                await other.act([{"function": "note", "arguments": {"text": "d"}, "call_id": "d"}])
            # a retry of its call is answered from what it recorded: the request read it
            reads.clear()
            retry = {"conversation_id": "k", "tool_calls": [call("note", {"text": "d"}, "d")]}
            reply = await client.post("/v1/act", json=retry)
            assert reply.status_code == 200, reply.text
            assert [m["content"] for m in reply.json()["messages"]] == ["noted d"]
            assert reads == [] and runs == ["a", "b", "c", "d"]
            assert len(app.conversations["k"].kept) == 8
            # a history page reads what is new too, and the history stays kept
            assert (await history_of(client, "k"))["total"] == 8
            assert len(await records(client, "k")) == 8
            assert reads == [] and len(app.conversations["k"].kept) == 8


async def test_pages_read_while_requests_run_leave_the_kept_history_whole(
    tmp_path: Path,
) -> None:
    """History pages and streams taken while requests of the same conversation run: each
    page is the committed history, never shorter than the one before, and what stays kept
    is the journal's history."""
    config = server.ServerConfig(port=0, journal=str(tmp_path / "pages.db"))
    totals: list[int] = []
    with trio.fail_after(BUDGET):
        async with running_server(config, list(DEMO_TOOLS)) as (app, client):

            async def post() -> None:
                for i in range(8):
                    body = {
                        "conversation_id": "p",
                        "tool_calls": [call("word_count", {"text": "a b"}, f"w{i}")],
                    }
                    assert (await client.post("/v1/act", json=body)).status_code == 200

            async def read() -> None:
                for _ in range(16):
                    reply = await client.get("/v1/conversations/p")
                    if reply.status_code == 200:
                        totals.append(reply.json()["total"])
                        assert len(await records(client, "p")) >= totals[-1]
                    else:
                        assert reply.status_code == 404  # (before the first request)
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(post)
                nursery.start_soon(read)
            kept = app.conversations["p"].kept
            assert kept is not None
            assert kept == await app.journal.history(branch_id_of("p")) and len(kept) == 16
    # (a page between a call's write-ahead and its outcome holds its request alone)
    assert totals and totals == sorted(totals) and totals[-1] <= 16


async def test_kept_histories_stay_within_history_cache(
    tmp_path: Path, whole_reads: list[str]
) -> None:
    """``history_cache`` bounds the messages kept, all conversations together: the least
    recently kept go first, a history larger than all of it is not kept, and ``0`` keeps
    nothing (each request reads its conversation whole)."""

    def body(conversation: str, call_id: str) -> dict[str, Any]:
        return {
            "conversation_id": conversation,
            "tool_calls": [call("word_count", {"text": "a b"}, call_id)],
        }

    with trio.fail_after(BUDGET):
        config = server.ServerConfig(port=0, journal=str(tmp_path / "c.db"), history_cache=5)
        async with running_server(config, list(DEMO_TOOLS)) as (app, client):
            reads = whole_reads
            reads.clear()
            assert (await client.post("/v1/act", json=body("x", "1"))).status_code == 200
            assert (await client.post("/v1/act", json=body("y", "1"))).status_code == 200
            assert list(app._kept) == ["x", "y"] and app._kept_messages == 4
            assert (await client.post("/v1/act", json=body("y", "2"))).status_code == 200
            assert list(app._kept) == ["y"] and app._kept_messages == 4  # x went first
            assert app.conversations["x"].kept is None
            assert (await client.post("/v1/act", json=body("y", "3"))).status_code == 200
            assert not app._kept and app._kept_messages == 0  # 6 messages: more than it holds
            assert (await client.post("/v1/act", json=body("y", "4"))).status_code == 200
            assert reads == [str(branch_id_of(c)) for c in ("x", "y", "y")]
        config = server.ServerConfig(port=0, journal=str(tmp_path / "n.db"), history_cache=0)
        async with running_server(config, list(DEMO_TOOLS)) as (app, client):
            reads.clear()
            for call_id in ("1", "2"):
                assert (await client.post("/v1/act", json=body("z", call_id))).status_code == 200
            assert not app._kept and reads == [str(branch_id_of("z"))] * 2
    with pytest.raises(ValueError, match="history_cache"):
        server.ServerConfig(history_cache=-1)


async def test_an_evicted_conversation_drops_its_kept_history(tmp_path: Path) -> None:
    config = server.ServerConfig(port=0, journal=str(tmp_path / "e.db"), max_conversations=1)
    with trio.fail_after(BUDGET):
        async with running_server(config, list(DEMO_TOOLS)) as (app, client):
            for conversation in ("p", "q"):
                body = {
                    "conversation_id": conversation,
                    "tool_calls": [call("word_count", {"text": "a"}, "w")],
                }
                assert (await client.post("/v1/act", json=body)).status_code == 200
                assert list(app._kept) == [conversation]
            assert list(app.conversations) == ["q"] and app._kept_messages == 2


async def test_a_call_whose_outcome_the_journal_refuses_is_a_503(tmp_path: Path) -> None:
    """The call ran but the journal refused its outcome: the client gets a 503, never a
    200 with a response the journal does not hold."""
    runs: list[str] = []
    config = server.ServerConfig(port=0, journal=str(tmp_path / "o.db"))
    body = {"conversation_id": "o", "tool_calls": [call("note", {"text": "x"}, "n")]}
    with trio.fail_after(BUDGET):
        async with running_server(config, counted_tools(runs)) as (app, client):
            journal = app.journal
            commit_batch = journal._engine._commit_batch

            async def outcomes_refused(batch: Any, **options: Any) -> Any:
                if batch.outcomes:
                    raise JournalConnectionError("the outcome commit was refused (test)")
                return await commit_batch(batch, **options)

            journal._engine._commit_batch = outcomes_refused
            reply = await client.post("/v1/act", json=body)
            assert app.conversations["o"].kept is None  # (what the journal refused is not kept)
    assert reply.status_code == 503, reply.text
    assert "the outcome commit was refused (test)" in reply.json()["error"]
    assert runs == ["x"]


@pytest.mark.parametrize("path", ["/v1/conversations/c1", "/v1/conversations/c1/records"])
async def test_a_history_the_journal_cannot_read_is_a_503(tmp_path: Path, path: str) -> None:
    config = server.ServerConfig(port=0, journal=str(tmp_path / "h.db"))
    body = {"conversation_id": "c1", "tool_calls": [call("word_count", {"text": "a b"}, "w1")]}
    with trio.fail_after(BUDGET):
        async with running_server(config, list(DEMO_TOOLS)) as (app, client):
            assert (await client.post("/v1/act", json=body)).status_code == 200

            async def lost(*args: Any, **kwargs: Any) -> Any:
                raise JournalConnectionError("the connection was lost (test)")

            app.journal.history = lost
            reply = await client.get(path)
    assert reply.status_code == 503, (reply.status_code, reply.content)
    assert "the connection was lost (test)" in reply.json()["error"]


async def test_open_app_gives_sinks_of_its_own_to_the_conversations(tmp_path: Path) -> None:
    """An embedding program's own tracer provider (here the SDK's in-memory exporter)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = OtelSink(tracer_provider=provider)
    config = server.ServerConfig(port=0, journal=str(tmp_path / "server.db"))
    body = {"conversation_id": "own", "tool_calls": [call("word_count", {"text": "a b"}, "c")]}
    with trio.fail_after(BUDGET):
        stop = trio.Event()
        async with (
            server.open_app(config, tools=DEMO_TOOLS, sinks=[sink]) as app,
            trio.open_nursery() as nursery,
        ):
            assert app.sinks == (sink,)
            binds = await nursery.start(partial(server.serve, app, shutdown_trigger=stop.wait))
            async with httpx.AsyncClient(base_url=binds[0]) as client:
                assert (await client.post("/v1/act", json=body)).status_code == 200
            stop.set()
        await sink.flush()
    [span] = exporter.get_finished_spans()
    assert span.name == "execute_tool word_count"
    assert (span.attributes or {})["gen_ai.tool.call.id"] == "c"
    with pytest.raises(ValueError, match="sinks need a journal"):
        async with server.open_app(server.ServerConfig(), sinks=[sink]):
            pass
