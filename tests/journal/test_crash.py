"""Crash matrix: real subprocesses SIGKILLed at each kill point, then recovery.

For each (kill point × effect class × durable backend × durability): a worker process runs a
concurrent batch on a journaled branch and kills itself with SIGKILL at the point (see
``crash_worker.py``); then recovery runs here. After it, every journaled request has exactly
one response, ``pure``/``idempotent``/``keyed`` calls ran at least once and ``unsafe`` ones at
most once (side effects counted in a file outside the journal), and the history committed
before the crash is the start of the history after recovery.

The test suite runs a small sample; ``LIONEXEC_CRASH_MATRIX=full`` (``nox -s crash``) runs
all of it.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.journal import open_journal

from .conftest import PostgresServer
from .crash_worker import POINTS, make_tool

WORKER = Path(__file__).with_name("crash_worker.py")
EFFECTS = ("pure", "idempotent", "keyed", "unsafe")
CALLS = 4
#: At which arrival at its point each worker dies: the second (something is committed by
#: then, something is not); a request commit's, in the second batch (the first arrivals all
#: come before the first commit ends).
HITS = {"before_request": CALLS + 2}

FULL = list(itertools.product(POINTS, EFFECTS, ("sqlite", "postgres"), ("process", "power")))
SAMPLE = [
    ("before_request", "idempotent", "sqlite", "process"),
    ("after_request", "keyed", "sqlite", "process"),
    ("during_invoke", "unsafe", "sqlite", "process"),
    ("before_outcome", "pure", "postgres", "process"),
    ("during_commit", "unsafe", "postgres", "process"),
    # (power commits the write-ahead of a pure call without an fsync of its own)
    ("during_invoke", "pure", "sqlite", "power"),
    ("after_request", "idempotent", "postgres", "power"),
]
MATRIX = FULL if os.environ.get("LIONEXEC_CRASH_MATRIX") == "full" else SAMPLE


def ran(effects_file: Path) -> collections.Counter[int]:
    if not effects_file.exists():
        return collections.Counter()
    return collections.Counter(int(line) for line in effects_file.read_text().split())


def report_case(line: dict[str, object]) -> None:
    """With ``LIONEXEC_CRASH_REPORT=path``, append the case's counts there as a JSON line."""
    path = os.environ.get("LIONEXEC_CRASH_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("point", "effect", "backend", "durability"), MATRIX)
async def test_after_a_kill_every_request_gets_exactly_one_response(
    point: str,
    effect: str,
    backend: str,
    durability: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if backend == "sqlite":
        target = str(tmp_path / "journal.db")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        target = server.create_database()
    effects_file = tmp_path / "effects"
    branch_id = str(uuid.uuid4())
    worker = await trio.run_process(
        [
            sys.executable,
            str(WORKER),
            target,
            effect,
            point,
            str(effects_file),
            branch_id,
            str(CALLS),
            str(HITS.get(point, 2)),
            durability,
        ],
        check=False,
        capture_stdout=True,
        capture_stderr=True,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr.decode()[-2000:]
    before_recovery = ran(effects_file)

    async with open_journal(target) as journal:
        committed = await journal.history(branch_id)
        report = await journal.recover([make_tool(effect, str(effects_file))])
        history = await journal.history(branch_id)
        assert await journal.calls(unfinished=True) == []
    counts = ran(effects_file)
    report_case(
        {
            "point": point,
            "effect": effect,
            "backend": backend,
            "durability": durability,
            "journaled_requests": len(history.requests()),
            "resolutions": report.counts(),
            "tool_runs": sum(counts.values()),
            "runs_before_recovery": sum(before_recovery.values()),
        }
    )

    # the history committed before the crash is the start of the recovered one
    assert [m.id for m in history.messages[: len(committed)]] == [m.id for m in committed]
    # every journaled request has exactly one response
    requests, responses = history.requests(), history.responses()
    assert history.unanswered() == []
    assert len(responses) == len(requests)
    assert len({r.content.action_request_id for r in responses}) == len(requests)
    assert len(report.resolutions) == len(committed.unanswered())
    for req in requests:
        n = req.arguments["n"]
        response = history.response_for(req)
        assert response is not None
        if effect == "unsafe":
            assert counts[n] <= 1, (n, counts)
            assert counts[n] == before_recovery[n]  # recovery never ran an unsafe call again
            if response.outcome is ActionOutcome.COMPLETED:
                assert counts[n] == 1
        else:
            assert counts[n] >= 1, (n, counts)
            assert response.outcome is ActionOutcome.COMPLETED
            assert response.output == n * 2
