"""``journal.wait`` on PostgreSQL: one LISTEN connection per journal, shared by every wait."""

from __future__ import annotations

import uuid
from typing import Any

import trio

from lionexec.journal.workers import Worker
from lionexec.tools import Tool

from .conftest import PostgresServer


def double(n: int) -> int:
    """Double n."""
    return n * 2


def listen_connections(url: str) -> int:
    """Sessions of *url*'s database whose last statement was a LISTEN on lionexec_done."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN %lionexec_done%'"
        ).fetchone()
    return int(row[0]) if row is not None else 0


async def test_concurrent_waits_share_one_listen_connection(
    postgres_server: PostgresServer,
) -> None:
    from lionexec.journal import PostgresJournal

    url = postgres_server.create_database()
    n = 25
    results: dict[str, Any] = {}
    with trio.fail_after(30):  # real clock: the waits poll once a minute, NOTIFY must wake them
        async with PostgresJournal(url) as journal:
            ids = await journal.submit(
                uuid.uuid4(), [{"function": "double", "arguments": {"n": i}} for i in range(n)]
            )
            listener = journal.backend.shared_listener("lionexec_done")  # type: ignore[attr-defined]
            parked: set[int] = set()
            all_parked = trio.Event()
            wait = listener.wait

            async def one(call_id: str) -> None:
                [results[call_id]] = await journal.wait([call_id], poll=60)

            async with trio.open_nursery() as workers:
                async with trio.open_nursery() as waits:
                    for call_id in ids:
                        waits.start_soon(one, call_id)

                    async def counting(seen: int, seconds: float) -> bool:
                        parked.add(id(trio.lowlevel.current_task()))
                        if len(parked) == n:
                            all_parked.set()
                        return await wait(seen, seconds)

                    listener.wait = counting
                    await all_parked.wait()  # every wait is parked on the listener
                    assert listen_connections(url) == 1
                    worker = Worker(journal, [Tool.from_function(double, effect="pure")])
                    await workers.start(worker.run)
                workers.cancel_scope.cancel()
            assert listener.connections == 1
            assert listen_connections(url) == 1
    assert sorted(r.output for r in results.values()) == [2 * i for i in range(n)]


async def test_a_lost_listen_connection_is_opened_again(postgres_server: PostgresServer) -> None:
    import psycopg

    from lionexec.journal import PostgresJournal

    url = postgres_server.create_database()
    with trio.fail_after(30):  # real clock: the wait polls once a minute
        async with PostgresJournal(url) as journal:
            [call_id] = await journal.submit(
                uuid.uuid4(), [{"function": "double", "arguments": {"n": 4}}]
            )
            listener = journal.backend.shared_listener("lionexec_done")  # type: ignore[attr-defined]
            wait = listener.wait
            parks: list[int] = []
            parked = trio.Event()

            async def counting(seen: int, seconds: float) -> bool:
                parks.append(seen)
                parked.set()
                return await wait(seen, seconds)

            listener.wait = counting
            result: list[Any] = []

            async def one() -> None:
                result.extend(await journal.wait([call_id], poll=60))

            async with trio.open_nursery() as workers:
                async with trio.open_nursery() as waits:
                    waits.start_soon(one)
                    await parked.wait()
                    parked = trio.Event()
                    with psycopg.connect(url, autocommit=True) as admin:  # the server drops it
                        admin.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() "
                            "AND query ILIKE 'LISTEN %lionexec_done%'"
                        )
                    await parked.wait()  # woken by the loss, parked again on a new connection
                    assert listener.connections == 2
                    assert listen_connections(url) == 1
                    worker = Worker(journal, [Tool.from_function(double, effect="pure")])
                    await workers.start(worker.run)
                workers.cancel_scope.cancel()
    assert [r.output for r in result] == [8]


async def test_a_listener_whose_server_never_answers_fails_within_its_connect_timeout() -> None:
    import socket

    import pytest

    from lionexec.journal import JournalConnectionError
    from lionexec.journal.backends import SharedListener

    silent = socket.socket()  # accepts TCP connections (the backlog), never speaks
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        port = silent.getsockname()[1]
        url = f"postgresql://nobody@127.0.0.1:{port}/nothing"
        listener = SharedListener(url, url, "lionexec_done", connect_timeout=1)
        try:
            with trio.fail_after(30):  # (the bound is the listener's, on the wall clock)
                with pytest.raises(JournalConnectionError, match="PostgreSQL at"):
                    await listener.start()
        finally:
            listener.stop()
    finally:
        silent.close()


async def test_every_waiter_of_a_failed_listener_gets_its_own_error(
    monkeypatch: Any,
) -> None:
    import psycopg

    from lionexec.journal import JournalConnectionError
    from lionexec.journal.backends import SharedListener

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("not a psycopg error")

    monkeypatch.setattr(psycopg, "connect", broken)
    listener = SharedListener("postgresql://x@127.0.0.1:1/x", "x", "lionexec_done")
    errors: list[BaseException] = []

    async def start() -> None:
        try:
            await listener.start()
        except JournalConnectionError as exc:
            errors.append(exc)

    with trio.fail_after(30):  # (a waiter left waiting would hang here)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(start)
            nursery.start_soon(start)
    listener.stop()
    assert len(errors) == 2
    assert errors[0] is not errors[1]
    assert all("not a psycopg error" in str(e) for e in errors)
    assert errors[0].__cause__ is errors[1].__cause__ is not None
