"""The journal (issue 14): journaled act against in-memory act, and recovery time.

Rows (lionexec only; the other implementations have no journal and show as n/a), for ``N``
calls of a trivial async tool (``pure``):

* **concurrent**: one ``Branch.act`` batch of ``N`` calls; **sequential**: the same with
  ``strategy="sequential"``. Microseconds per call with no journal (a plain ``Branch()``),
  with an SQLite journal (a fresh file in a temporary directory: WAL,
  ``synchronous=NORMAL``) and with a PostgreSQL journal; the journaled figures include the
  outcome commits (``act()`` returns once they are committed). PostgreSQL rows also give
  calls per second.
* **paired**: SQLite-journaled against in-memory ``act``, concurrent and sequential, from
  runs interleaved in one process (:func:`benchmarks.act.paired_body`): separate rows run
  minutes apart swing by up to 2× on this machine, the in-memory row most.
* **transactions per call**: how many transactions a journaled call costs (commits over
  calls), sequential and concurrent, on SQLite and PostgreSQL: a sequential call pays one
  (its write-ahead; the outcome before it rides along), a concurrent batch a few in all.
* **lionexec serve**: CPU per one-call ``POST /v1/act`` of a journaled server (SQLite, in
  process, conversations of 50 requests), with the conversation's history kept between its
  requests (the default) and read whole by each (``history_cache=0``), and the two paired.
* **recovery**: the time ``journal.recover`` takes for ``R`` journaled calls a crash left
  without an outcome (``unsafe``: each gets ``interrupted``), per call (times ``R`` for the
  whole), on SQLite and on PostgreSQL.

The **equivalent floor** column (``--impl floor``) runs the same batches on the act floor
(:mod:`benchmarks._floor`) in memory and, for the SQLite rows, made durable by hand in plain
trio and ``sqlite3`` with the journal's schema (:mod:`benchmarks._journal_floor`): what the
journal's promise costs at least, written lean.

* **paired against a floor**: SQLite-journaled ``act`` against the journal floor, and
  PostgreSQL-journaled ``act`` against in-memory ``act``, interleaved the same way.

The targets, checked in the report: SQLite sequential under 150 µs per call and within 1.3×
of the journal floor (paired), SQLite concurrent within 2.5× of in-memory (paired),
PostgreSQL concurrent within 3× of in-memory (paired) and at least 2,000 calls/s.

PostgreSQL: the server of :class:`benchmarks.workers.Postgres` (started by this process in a
temporary directory, stopped at exit), or the one at ``LIONEXEC_BENCH_POSTGRES`` (an admin
URL; a fresh database is created in it). Without server binaries or ``psycopg`` (the
``postgres`` extra) the PostgreSQL rows show as n/a. Run it alone with
``python -m benchmarks.journal_cost --impl lionexec --quick``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ._harness import Body, Case, k, main, unavailable
from .act import paired_body

CALLS, QUICK_CALLS = 1_000, 200
#: Interleaved runs (each side) of the paired SQLite / in-memory ratios.
PAIRED_RUNS = 8
UNFINISHED, QUICK_UNFINISHED = 10_000, 2_000
#: An existing server's admin URL to use instead of starting one.
POSTGRES_VARIABLE = "LIONEXEC_BENCH_POSTGRES"


async def noop(x: int) -> int:
    """The trivial tool every row runs."""
    return x


def _tool() -> Any:
    from lionexec.tools import Tool

    return Tool.from_function(noop, effect="pure")


def _proposals(n: int) -> list[dict[str, Any]]:
    return [{"function": "noop", "arguments": {"x": i}} for i in range(n)]


_TMP: list[Path] = []


def _sqlite_target() -> str:
    if not _TMP:
        _TMP.append(Path(tempfile.mkdtemp(prefix="lionexec-journal-bench-")))
    return str(_TMP[0] / f"j{uuid.uuid4().hex[:8]}.db")


def _postgres_database() -> str:
    admin = os.environ.get(POSTGRES_VARIABLE)
    if admin is None:
        from .workers import Postgres

        return Postgres.get().database()
    import psycopg

    name = "bench_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return admin.rsplit("/", 1)[0] + "/" + name


_PG_URL: list[str] = []


def _postgres_target() -> str:
    """One database for the act rows of this process (each run a new branch in it)."""
    if not _PG_URL:
        _PG_URL.append(_postgres_database())
    return _PG_URL[0]


def act_body(strategy: str, target: Callable[[], str] | None, **options: Any) -> Body:
    """``N`` calls in one act (per *strategy*), in memory (*target* ``None``) or journaled
    (*options*: the journal's, ``durability=`` say)."""

    async def in_memory(n: int) -> float:
        from lionexec.act import Branch

        branch = Branch()
        branch.register_tools(_tool())
        batch = _proposals(n)
        start = time.perf_counter()
        responses = await branch.act(batch, strategy=strategy)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        assert all(r.success for r in responses)
        return elapsed

    async def journaled(n: int) -> float:
        from lionexec.journal import open_journal

        assert target is not None
        async with open_journal(target(), **options) as journal:
            branch = await journal.branch()
            branch.register_tools(_tool())
            batch = _proposals(n)
            async with branch:
                start = time.perf_counter()
                responses = await branch.act(batch, strategy=strategy)  # type: ignore[arg-type]
                await journal.flush()  # (act already waited for its outcome commits)
                elapsed = time.perf_counter() - start
        assert all(r.success for r in responses)
        return elapsed

    return in_memory if target is None else journaled


def floor_body(strategy: str, target: Callable[[], str] | None) -> Body:
    """The equivalent floor of :func:`act_body`: the act floor in memory, durable on SQLite
    (:mod:`benchmarks._journal_floor`)."""

    async def body(n: int) -> float:
        from lionexec.journal import open_journal

        from ._floor import FloorBranch
        from ._journal_floor import DurableFloorBranch

        branch: FloorBranch
        if target is None:
            branch = FloorBranch()
        else:
            path = target()
            async with open_journal(path):  # the journal's schema, nothing else
                pass
            branch = DurableFloorBranch(path)
        branch.register_tools([noop])
        batch = _proposals(n)
        try:
            start = time.perf_counter()
            responses = await branch.act(batch, strategy=strategy)
            elapsed = time.perf_counter() - start
        finally:
            if isinstance(branch, DurableFloorBranch):
                branch.fold()  # (as lionexec's journal folds when it closes: not timed)
                branch.close()
        assert all(r.outcome == "completed" for r in responses)
        return elapsed

    return body


def transactions_body(targets: dict[str, Callable[[], str]]) -> Body:
    """Commits per call of ``n`` journaled calls, each strategy, each backend."""

    async def body(n: int) -> dict[str, tuple[str, float]]:
        from lionexec.journal import open_journal

        figures: dict[str, tuple[str, float]] = {}
        for name, target in targets.items():
            for strategy in ("sequential", "concurrent"):
                async with open_journal(target()) as journal:
                    branch = await journal.branch()
                    branch.register_tools(_tool())
                    async with branch:
                        before = journal.commits
                        await branch.act(_proposals(n), strategy=strategy)  # type: ignore[arg-type]
                        figures[f"{strategy}, {name}"] = (
                            "tx/call",
                            (journal.commits - before) / n,
                        )
        return figures

    return body


def recovery_body(target: Callable[[], str]) -> Body:
    """The time to recover ``n`` unfinished journaled calls (a crash left them: unsafe)."""

    async def body(n: int) -> float:
        from lionexec import _unstructure
        from lionexec.conversation import ActionRequest
        from lionexec.journal import canonical_json, open_journal
        from lionexec.journal.backends import Batch, MessageRow, RequestOp
        from lionexec.tools import Tool

        where = target()
        branch_id = str(uuid.uuid4())
        batch = Batch(branches=[(branch_id, time.time())])
        for i in range(n):
            request = ActionRequest.create("noop", {"x": i})
            record = _unstructure.converter.unstructure(request)
            batch.messages.append(
                MessageRow(branch_id, i, str(request.id), request.kind, json.dumps(record))
            )
            batch.requests.append(
                RequestOp(
                    key=f"{branch_id}/{request.call_id}",
                    branch_id=branch_id,
                    call_id=request.call_id,
                    request_id=str(request.id),
                    function="noop",
                    arguments=canonical_json({"x": i}),
                    effect="unsafe",
                    at=time.time(),
                )
            )
        async with open_journal(where) as journal:
            await journal.backend.run(lambda store: store.commit(batch), cancellable=False)
        async with open_journal(where) as journal:  # the restarted process
            start = time.perf_counter()
            report = await journal.recover([Tool.from_function(noop, name="noop")])
            elapsed = time.perf_counter() - start
        assert report.counts() == {"interrupted": n}, report.counts()
        return elapsed

    return body


#: Requests per conversation of the journaled-server rows (its history grows to twice that).
SERVER_CONVERSATION = 50


def server_body(history_cache: int) -> Body:
    """CPU time (all threads) of ``n`` one-call ``POST /v1/act`` requests to a journaled
    ``lionexec serve`` app (``examples/server.py``'s tools, an SQLite journal), called in
    process as ASGI (no HTTP), :data:`SERVER_CONVERSATION` requests per conversation, one
    after another; with ``history_cache=0`` every request reads its conversation's whole
    history, otherwise only what was committed since its last one."""

    async def body(n: int) -> float:
        from lionexec import server

        from .server_load import act_body as request_body
        from .server_load import example_server, ok

        config = server.ServerConfig(port=0, journal=_sqlite_target(), history_cache=history_cache)
        tools = example_server().DEMO_TOOLS
        async with server.open_app(config, tools=tools) as app:
            replies: list[dict[str, Any]] = []
            bodies: list[bytes] = []

            async def receive() -> dict[str, Any]:
                if bodies:  # the request's body, then nothing (the client stays connected)
                    return {"type": "http.request", "body": bodies.pop(), "more_body": False}
                await trio.sleep_forever()
                raise AssertionError("unreachable")

            async def send(message: Any) -> None:
                replies.append(message)

            start = time.process_time()
            for i in range(n):
                bodies.append(request_body(f"c{i // SERVER_CONVERSATION}", i))
                replies.clear()
                await app(_scope(len(bodies[0])), receive, send)  # type: ignore[arg-type]
                assert ok(replies[0]["status"], replies[1]["body"]), replies
            elapsed = time.process_time() - start
        return elapsed

    return body


def _scope(length: int) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/act",
        "raw_path": b"/v1/act",
        "query_string": b"",
        "root_path": "",
        "headers": [*headers, (b"content-length", str(length).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }


def cases(impl: str, quick: bool) -> list[Case]:
    n = QUICK_CALLS if quick else CALLS
    unfinished = QUICK_UNFINISHED if quick else UNFINISHED
    backends: dict[str, Callable[[], str] | None] = {
        "in memory": None,
        "SQLite": _sqlite_target,
        "PostgreSQL": _postgres_target,
    }
    floor = impl == "floor"
    act_rows = [
        Case(
            f"journal: {k(n)} {strategy} calls, {name}",
            n,
            (floor_body if floor else act_body)(strategy, target),
            throughput=name == "PostgreSQL",
            repeats=5,
            warmup=50,
        )
        for strategy in ("concurrent", "sequential")
        for name, target in backends.items()
    ]
    recovery_rows = [
        Case(
            f"journal: recover {k(unfinished)} unfinished calls (per call), {name}",
            unfinished,
            recovery_body(target),
            repeats=1,
            warmup=50,
        )
        for name, target in (("SQLite", _sqlite_target), ("PostgreSQL", _postgres_database))
    ]
    strategies = ("concurrent", "sequential")
    paired = Case(
        f"journal: SQLite / in memory, paired in one process, {k(n)}",
        n,
        paired_body(
            {
                f"{strategy} calls": (act_body(strategy, _sqlite_target), act_body(strategy, None))
                for strategy in strategies
            },
            PAIRED_RUNS,
        ),
        kind="report",
        warmup=10,
    )
    # the journal against the same promise written lean (the journal floor, same schema)
    paired_floor = Case(
        f"journal: SQLite / equivalent floor, paired in one process, {k(n)}",
        n,
        paired_body(
            {
                f"{strategy} calls": (
                    act_body(strategy, _sqlite_target),
                    floor_body(strategy, _sqlite_target),
                )
                for strategy in strategies
            },
            PAIRED_RUNS,
        ),
        kind="report",
        warmup=10,
    )
    paired_postgres = Case(
        f"journal: PostgreSQL / in memory, paired in one process, {k(n)}",
        n,
        paired_body(
            {
                f"{strategy} calls": (
                    act_body(strategy, _postgres_target),
                    act_body(strategy, None),
                )
                for strategy in strategies
            },
            PAIRED_RUNS,
        ),
        kind="report",
        warmup=10,
    )
    # what surviving a power loss costs: every commit fsync'd (rows beside the default ones)
    power_rows = [
        Case(
            f"journal: {k(n)} {strategy} calls, {name}, durability='power'",
            n,
            act_body(strategy, target, durability="power"),
            throughput=name == "PostgreSQL",
            repeats=5,
            warmup=50,
        )
        for strategy in ("concurrent", "sequential")
        for name, target in (("SQLite", _sqlite_target), ("PostgreSQL", _postgres_target))
    ]
    power = Case(
        f"journal: durability 'power' / 'process', paired in one process, {k(n)}",
        n,
        paired_body(
            {
                f"{strategy} calls, {name}": (
                    act_body(strategy, target, durability="power"),
                    act_body(strategy, target),
                )
                for strategy in ("concurrent", "sequential")
                for name, target in (("SQLite", _sqlite_target), ("PostgreSQL", _postgres_target))
            },
            PAIRED_RUNS,
        ),
        kind="report",
        warmup=10,
    )
    requests = 100 if quick else 300
    server_rows = [
        Case(
            f"journal: lionexec serve request CPU, SQLite, {how}",
            requests,
            server_body(cache),
            repeats=5,
            warmup=50,
            note="CPU time of the process per request",
        )
        for how, cache in (("history kept", 20_000), ("history read whole", 0))
    ]
    server_paired = Case(
        f"journal: lionexec serve request CPU, history kept / read whole, paired, {requests}",
        requests,
        paired_body(
            {"one-call requests": (server_body(20_000), server_body(0))},
            PAIRED_RUNS,
        ),
        kind="report",
        warmup=10,
    )
    transactions = Case(
        f"journal: transactions per call, {k(n)} calls",
        n,
        transactions_body({"SQLite": _sqlite_target, "PostgreSQL": _postgres_target}),
        kind="report",
        warmup=10,
    )
    if floor:  # the floor journals to SQLite only (and counts no transactions)
        kept = [c for c in act_rows if not c.name.endswith("PostgreSQL")]
        rest = [c for c in act_rows + recovery_rows if c not in kept]
        return kept + unavailable(rest, "no floor written: SQLite only")
    if impl != "lionexec":
        return unavailable(act_rows + recovery_rows, "no counterpart: lionexec's durable journal")
    out = act_rows + power_rows + recovery_rows
    out += [paired, paired_floor, paired_postgres, power, transactions]
    out += [*server_rows, server_paired]
    try:
        _postgres_target()
    except Exception as exc:  # no server binaries, no psycopg: those rows n/a, with the reason
        reason = f"no PostgreSQL: {type(exc).__name__}: {exc}"[:160]
        postgres = [c for c in out if "PostgreSQL" in c.name or c is power]
        others = [c for c in out if c not in postgres]
        return others + unavailable(postgres, reason)
    return out


if __name__ == "__main__":
    main(cases)
