"""Approved calls resumed by many at once (threads with journal objects of their own, and
real processes) on SQLite and PostgreSQL: each call runs exactly once, is recorded
``completed`` exactly once, and a resumer that lost the race records nothing and says what
became of the call."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.journal import open_journal

from .approval_resumer import POLICY, pay_tool, resume
from .conftest import JournalFactory

RESUMER = Path(__file__).with_name("approval_resumer.py")
RESUMERS = 6
#: Calls parked per branch: two branches, ten approved calls.
BRANCHES = (6, 4)


async def park_and_approve(target: str, effects_file: str) -> dict[str, str]:
    """Park every call of :data:`BRANCHES` and approve it; return {call id: branch id}."""
    where: dict[str, str] = {}
    async with open_journal(target) as journal:
        for b, calls in enumerate(BRANCHES):
            branch = await journal.branch(policy=POLICY)
            branch.register_tools([pay_tool(effects_file)])
            batch = [
                {"function": "pay", "arguments": {"invoice": f"b{b}c{i}"}, "call_id": f"b{b}c{i}"}
                for i in range(calls)
            ]
            async with branch:
                responses = await branch.act(batch)
            assert {r.outcome for r in responses} == {ActionOutcome.AWAITING_APPROVAL}
            where.update(dict.fromkeys((c["call_id"] for c in batch), branch.name))
        for approval in await journal.approvals():
            await journal.approve(approval.approval_id, by="alice")
    assert not await trio.Path(effects_file).exists()  # nothing ran yet
    return where


async def journal_state(target: str, where: dict[str, str]) -> None:
    """Each call answered exactly once, ``completed``; its approval used; nothing left."""
    async with open_journal(target) as journal:
        for branch_id in set(where.values()):
            history = await journal.history(branch_id)
            assert history.unanswered() == []
            requests = history.requests()
            assert sorted(r.call_id for r in requests) == sorted(
                c for c, b in where.items() if b == branch_id
            )
            assert len(history.responses()) == len(requests)  # one answer each
            for request in requests:
                response = history.response_for(request)
                assert response is not None
                assert response.outcome is ActionOutcome.COMPLETED, response.error
                assert response.output == f"paid {request.call_id}"
        calls = await journal.calls()
        assert sorted(c.call_id for c in calls) == sorted(where)
        assert {(c.done, c.outcome, c.attempts) for c in calls} == {(True, "completed", 1)}
        approvals = await journal.approvals(state=None)
        assert sorted(a.call_id for a in approvals) == sorted(where)
        assert {a.state for a in approvals} == {"used"}
        assert await journal.resume([pay_tool("/dev/null")], policy=POLICY) == []
        report = await journal.recover([pay_tool("/dev/null")], policy=POLICY)
        assert report.resolutions == ()


def check(reports: list[Any], effects_file: Path, where: dict[str, str]) -> None:
    runs = collections.Counter(effects_file.read_text().split())
    assert runs == collections.Counter(list(where)), runs  # each call ran exactly once
    errors = [r for r in reports if isinstance(r, dict)]
    assert errors == []
    ran_by: collections.Counter[str] = collections.Counter()
    for report in reports:
        for call_id, action, outcome in report:
            assert call_id in where
            if action == "approved":
                assert outcome == "completed"
                ran_by[call_id] += 1
            else:  # a loser says the call is another's, with its outcome if it has one
                assert action == "resumed_elsewhere", (call_id, action, outcome)
                assert outcome in (None, "completed")
    assert ran_by == collections.Counter(list(where))  # one resumer ran each, and said so


def resume_in_threads(target: str, effects_file: Path) -> list[Any]:
    """:data:`RESUMERS` resumes at once, each in a thread with a journal of its own (released
    together by the file *effects_file* ``.go``); their reports."""
    reports: list[Any] = [None] * RESUMERS

    def run(i: int) -> None:
        reports[i] = trio.run(resume, target, str(effects_file))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(RESUMERS)]
    for thread in threads:
        thread.start()
    Path(f"{effects_file}.go").touch()
    for thread in threads:
        thread.join(100)
    assert not any(thread.is_alive() for thread in threads)
    return reports


@pytest.mark.timeout(120)
def test_resumers_in_threads_with_journals_of_their_own(
    durable: JournalFactory, tmp_path: Path
) -> None:
    effects_file = tmp_path / "effects"
    where = trio.run(park_and_approve, durable.target, str(effects_file))
    reports = resume_in_threads(durable.target, effects_file)
    check(reports, effects_file, where)
    trio.run(journal_state, durable.target, where)


@pytest.mark.timeout(120)
def test_resumers_in_processes(durable: JournalFactory, tmp_path: Path) -> None:
    effects_file = tmp_path / "effects"
    where = trio.run(park_and_approve, durable.target, str(effects_file))
    procs = [
        subprocess.Popen(
            [sys.executable, str(RESUMER), durable.target, str(effects_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RESUMERS)
    ]
    (tmp_path / "effects.go").touch()
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    check(reports, effects_file, where)
    trio.run(journal_state, durable.target, where)


@pytest.mark.timeout(120)
def test_a_resumer_killed_after_its_claim_leaves_the_calls_to_run_once(
    durable: JournalFactory, tmp_path: Path
) -> None:
    """Its approvals were used, its calls never started: recovery gives the claims back and
    runs each call once (it used to answer them ``cancelled``, never run)."""
    effects_file = tmp_path / "effects"
    where = trio.run(park_and_approve, durable.target, str(effects_file))
    (tmp_path / "effects.go").touch()
    died = subprocess.run(
        [sys.executable, str(RESUMER), durable.target, str(effects_file), "die_after_claim"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    assert not effects_file.exists()

    async def recover() -> list[tuple[str, str, Any]]:
        async with open_journal(durable.target) as journal:
            assert {a.state for a in await journal.approvals(state=None)} == {"used", "approved"}
            report = await journal.recover([pay_tool(str(effects_file))], policy=POLICY)
        return [(r.call_id, r.action, r.outcome) for r in report.resolutions]

    resolutions = trio.run(recover)
    assert sorted(resolutions) == sorted(
        (call_id, "approved", ActionOutcome.COMPLETED) for call_id in where
    )
    assert collections.Counter(effects_file.read_text().split()) == collections.Counter(
        list(where)
    )
    trio.run(journal_state, durable.target, where)


@pytest.mark.timeout(120)
def test_rejected_calls_resumed_at_once_are_denied_once(
    durable: JournalFactory, tmp_path: Path
) -> None:
    """Two resumers used to both answer a rejected call: the second writer of the branch was
    refused, and its resume raised. The claim answers it, once."""
    effects_file = tmp_path / "effects"
    target = durable.target

    async def park_and_reject() -> list[str]:
        async with open_journal(target) as journal:
            branch = await journal.branch(policy=POLICY)
            branch.register_tools([pay_tool(str(effects_file))])
            async with branch:
                await branch.act(
                    [
                        {"function": "pay", "arguments": {"invoice": f"r{i}"}, "call_id": f"r{i}"}
                        for i in range(5)
                    ]
                )
            for approval in await journal.approvals():
                await journal.reject(approval.approval_id, reason="not now", by="bob")
            return [a.call_id for a in await journal.approvals(state="rejected")]

    calls = trio.run(park_and_reject)
    reports = resume_in_threads(target, effects_file)
    assert not effects_file.exists()  # nothing ran
    assert [r for r in reports if isinstance(r, dict)] == []  # no resume raised
    answered_by: collections.Counter[str] = collections.Counter()
    for report in reports:
        for call_id, action, outcome in report:
            assert outcome == "denied"
            assert action in ("rejected", "resumed_elsewhere")
            answered_by[call_id] += action == "rejected"
    assert answered_by == collections.Counter(calls)

    async def history() -> None:
        async with open_journal(target) as journal:
            [branch_id] = await journal.branch_ids()
            messages = await journal.history(branch_id)
            assert messages.unanswered() == []
            assert len(messages.responses()) == len(calls)
            for response in messages.responses():
                assert response.outcome is ActionOutcome.DENIED
                assert response.error is not None and "not now" in response.error.message

    trio.run(history)
