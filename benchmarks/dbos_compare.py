"""DBOS beside the journal: a DBOS workflow of one step against one journaled lionexec call.

Both make one tool call durable, on the same database: DBOS Transact (``dbos``, a bench-only
dependency: the ``bench`` dependency group) records a workflow and its step in its system
database; lionexec's journal records the call's request ahead of the tool and its outcome
after (one ``Branch.act`` of one call, the server's shape). Each side runs ``N`` of them, one
after another, and the rows are the ratio DBOS / lionexec from runs interleaved in one
process (:func:`benchmarks.act.paired_body`), on SQLite (a fresh file) and on PostgreSQL
(the server of :class:`benchmarks.workers.Postgres`, or ``LIONEXEC_BENCH_POSTGRES``; a fresh
database each), against the journal's default durability and against
``durability="power"`` (every commit synced).

DBOS runs synchronously on the trio thread (its workflow functions are plain functions; a
benchmark has nothing else to run meanwhile). One DBOS instance per process: it is launched
on the first run of a backend and destroyed when the other backend's turn comes. Without
``dbos`` installed every row says so. Run it alone with
``python -m benchmarks.dbos_compare --impl lionexec --quick``.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable
from typing import Any

from ._harness import Body, Case, k, main, unavailable
from .act import paired_body
from .journal_cost import _postgres_target, _proposals, _sqlite_target, _tool

CALLS, QUICK_CALLS = 200, 50
PAIRED_RUNS = 6

#: The database URL DBOS is launched on in this process, if it is.
_LAUNCHED: list[str] = []
#: The workflow (registered once: DBOS keeps its registry across instances).
_WORKFLOW: list[Callable[[int], int]] = []


def _dbos_url(target: str) -> str:
    """DBOS's SQLAlchemy URL for the journal's *target* (a file path or a PostgreSQL URL);
    PostgreSQL through psycopg 3, the driver the journal uses."""
    if target.startswith("postgresql://"):
        return "postgresql+psycopg://" + target.removeprefix("postgresql://")
    return f"sqlite:///{target}"


def _registered() -> Callable[[int], int]:
    """The workflow of one step, registered with DBOS the first time."""
    if not _WORKFLOW:
        from dbos import DBOS

        @DBOS.step()
        def noop_step(x: int) -> int:
            return x

        @DBOS.workflow()
        def one_call(x: int) -> int:
            return noop_step(x)

        _WORKFLOW.append(one_call)
    return _WORKFLOW[0]


def _destroy() -> None:
    from dbos import DBOS

    if _LAUNCHED:
        DBOS.destroy()
        _LAUNCHED.clear()


def _workflow(target: str) -> Callable[[int], int]:
    """The workflow of one step, DBOS launched on *target*'s database (the instance on
    another database destroyed first)."""
    from dbos import DBOS

    workflow = _registered()
    if _LAUNCHED and _LAUNCHED[0] == target:
        return workflow
    if _LAUNCHED:
        _destroy()
    else:  # (before the PostgreSQL server stops: exit handlers run last registered first)
        atexit.register(_destroy)
    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "lionexec-bench",
            "system_database_url": _dbos_url(target),
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    _LAUNCHED.append(target)
    return workflow


def dbos_body(target: Callable[[], str]) -> Body:
    """``n`` DBOS workflows of one step, one after another."""

    async def body(n: int) -> float:
        workflow = _workflow(target())
        start = time.perf_counter()
        results = [workflow(i) for i in range(n)]
        elapsed = time.perf_counter() - start
        assert results == list(range(n))
        return elapsed

    return body


def journaled_body(target: Callable[[], str], **options: Any) -> Body:
    """``n`` journaled calls, each its own ``act`` (*options*: the journal's)."""

    async def body(n: int) -> float:
        from lionexec.journal import open_journal

        async with open_journal(target(), **options) as journal:
            branch = await journal.branch()
            branch.register_tools(_tool())
            calls = _proposals(n)
            async with branch:
                start = time.perf_counter()
                responses = [response for call in calls for response in await branch.act(call)]
                elapsed = time.perf_counter() - start
        assert all(r.success for r in responses)
        return elapsed

    return body


def cases(impl: str, quick: bool) -> list[Case]:
    n = QUICK_CALLS if quick else CALLS
    targets: dict[str, Callable[[], str]] = {
        "SQLite": _sqlite_target,
        "PostgreSQL": _postgres_target,
    }
    pairs = {
        f"{name}, {label}": (dbos_body(target), journaled_body(target, **options))
        for name, target in targets.items()
        for label, options in (
            ("default durability", {}),
            ("durability='power'", {"durability": "power"}),
        )
    }
    row = Case(
        f"DBOS workflow of one step / journaled call, paired in one process, {k(n)} in sequence",
        n,
        paired_body(pairs, PAIRED_RUNS),
        kind="report",
        warmup=10,
    )
    if impl != "lionexec":
        return unavailable([row], "no counterpart: lionexec's durable journal against DBOS")
    try:
        import dbos  # noqa: F401
    except ImportError:
        return unavailable([row], "dbos is not installed (the bench dependency group)")
    try:
        _postgres_target()
    except Exception as exc:
        reason = f"no PostgreSQL: {type(exc).__name__}: {exc}"[:160]
        sqlite_only = {name: pair for name, pair in pairs.items() if name.startswith("SQLite")}
        return [
            Case(
                row.name,
                n,
                paired_body(sqlite_only, PAIRED_RUNS),
                kind="report",
                warmup=10,
                note=f"SQLite only ({reason})",
            )
        ]
    return [row]


if __name__ == "__main__":
    main(cases)
