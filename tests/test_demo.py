"""The demo (README's main job) runs offline and ends every proposed call truthfully."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from lionexec import ActionOutcome, demo
from lionexec.journal import SqliteJournal
from lionexec.testing import assert_consistent

EXPECTED = {
    "call_weather": ActionOutcome.COMPLETED,
    "call_note": ActionOutcome.COMPLETED,
    "call_divide": ActionOutcome.FAILED,
    "call_money": ActionOutcome.DENIED,
    "call_rm": ActionOutcome.DENIED,
    "call_ls": ActionOutcome.COMPLETED,
    "call_fly": ActionOutcome.INVALID,
    "call_bad_args": ActionOutcome.INVALID,
    "call_search": ActionOutcome.TIMED_OUT,
    "call_report_q1": ActionOutcome.COMPLETED,
    "call_report_q2": ActionOutcome.COMPLETED,
    "call_slow_1": ActionOutcome.CANCELLED,
    "call_slow_2": ActionOutcome.CANCELLED,
}


def test_demo_runs_every_scripted_call_to_its_expected_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "BLOCKING_SECONDS", 0.0)
    out = io.StringIO()
    log_path = tmp_path / "events.jsonl"
    clock = trio.testing.MockClock(autojump_threshold=0)
    branch = trio.run(demo.run_demo, out, log_path, clock=clock)

    got = {
        request.call_id: response.content.outcome
        for request in branch.messages.requests()
        if (response := branch.messages.response_for(request)) is not None
    }
    assert got == EXPECTED
    assert_consistent(branch)
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert sorted(r["call_id"] for r in records) == sorted(r.call_id for r in branch.log)
    text = out.getvalue()
    assert str(log_path) in text
    assert "Conversation history" in text
    assert "Event log" in text
    for call_id in EXPECTED:
        assert call_id in text


def test_demo_main_writes_the_log_where_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "BLOCKING_SECONDS", 0.0)
    clock = trio.testing.MockClock(autojump_threshold=0)
    real_run = trio.run

    def run(function: Any, *args: Any) -> Any:
        # the agent part serves HTTP: its server's timers must not jump
        if function is demo.run_agent_demo:
            return real_run(function, *args)
        return real_run(function, *args, clock=clock)

    monkeypatch.setattr(trio, "run", run)
    assert demo.main(["--log", str(tmp_path / "x.jsonl")]) == 0
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 9
    [durable] = tmp_path.glob("durable-*")
    assert (durable / "journal.db").exists()  # the durable part ran too
    # again with the same --log: a directory of its own (it reused the journal and failed)
    assert demo.main(["--log", str(tmp_path / "x.jsonl")]) == 0
    assert len(list(tmp_path.glob("durable-*/journal.db"))) == 2


@pytest.mark.parametrize(
    "where", ["missing/events.jsonl", "."], ids=["no-directory", "a-directory"]
)
def test_a_log_path_that_cannot_be_written_fails_before_the_demo_runs(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[object] = []
    monkeypatch.setattr(trio, "run", lambda *args, **kwargs: runs.append(args))
    bad = tmp_path / where
    with pytest.raises(SystemExit) as caught:
        demo.main(["--log", str(bad)])
    assert caught.value.code == 2
    assert f"error: lionexec demo: --log {bad}: cannot write the event log there: " in (
        capsys.readouterr().err
    )
    assert runs == []  # nothing ran, so nothing claims the log was written
    assert list(tmp_path.iterdir()) == []  # and nothing was created


def test_the_testing_helpers_check_under_python_O() -> None:
    # an unanswered request: under -O a bare assert would let it pass
    code = """if True:
        from lionexec import Branch
        from lionexec.conversation import ActionRequest
        from lionexec.testing import assert_consistent

        assert False, "not reached under -O"
        branch = Branch()
        branch.messages.add_message(ActionRequest.create("search", {"q": "x"}))
        try:
            assert_consistent(branch)
        except AssertionError as exc:
            print(exc)
    """
    done = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.startswith("requests without a response: [UUID(")


DURABLE = {
    "call_quote": ("pure", "rerun", ActionOutcome.COMPLETED),
    "call_seat": ("keyed", "rerun", ActionOutcome.COMPLETED),
    "call_charge": ("unsafe", "reconciled", ActionOutcome.COMPLETED),
    "call_email": ("unsafe", "interrupted", ActionOutcome.INTERRUPTED),
}


def test_the_durable_part_kills_a_batch_mid_call_and_recovers_one_response_each(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    clock = trio.testing.MockClock(autojump_threshold=0)  # it uses no timer
    report = trio.run(demo.run_durable_demo, out, tmp_path, clock=clock)

    got = {r.call_id: (r.effect, r.action, r.outcome) for r in report.resolutions}
    assert got == DURABLE

    async def history() -> list[tuple[str, int]]:
        async with SqliteJournal(tmp_path / "journal.db") as journal:
            assert await journal.calls(unfinished=True) == []
            messages = await journal.history(demo.DURABLE_BRANCH)
        return [
            (r.call_id, sum(s.action_request_id == r.id for s in messages.responses()))
            for r in messages.requests()
        ]

    assert sorted(trio.run(history)) == sorted((call_id, 1) for call_id in DURABLE)
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    ran = [line.split()[0] for line in ledger]
    # safe classes ran again; unsafe ones at most once (the charge found by reconcile)
    assert sorted(ran) == sorted(
        ["get_quote"] * 2 + ["book_seat"] * 2 + ["charge_card", "send_email"]
    )
    seat_keys = {line.split("key=")[1] for line in ledger if line.startswith("book_seat")}
    assert len(seat_keys) == 1  # re-run with the same idempotency key
    text = out.getvalue()
    assert "SIGKILL" in text
    assert "4 requests, 4 responses: exactly one response each" in text
    for call_id, (_, action, _) in DURABLE.items():
        assert any(call_id in line and action in line for line in text.splitlines())


def test_the_agent_part_kills_an_agent_mid_run_and_its_restart_goes_on(tmp_path: Path) -> None:
    out = io.StringIO()
    results = trio.run(demo.run_agent_demo, out, tmp_path)
    assert results == [
        {"text": demo.AGENT_ANSWER, "turns": 3, "asked": 1},  # the third turn only
        {"text": demo.AGENT_ANSWER, "turns": 3, "asked": 0},  # the recorded answer
    ]

    async def history() -> list[str]:
        async with SqliteJournal(tmp_path / "agent.db") as journal:
            branch = await journal.branch(demo.AGENT_BRANCH)
            assert_consistent(branch)
            return [message.kind for message in branch.messages]

    assert trio.run(history) == [
        "instruction",
        "assistant_response",
        "action_request",
        "action_response",
        "assistant_response",
        "action_request",
        "action_response",
        "assistant_response",
    ]
    assert (tmp_path / "ledger.txt").read_text().splitlines() == ["charge_card A-17 42.0"]
    text = out.getvalue()
    assert "killed with SIGKILL" in text
    assert "restarted: 1 model call, 3 turns in the run" in text
    assert "restarted after the end: no model call" in text
    assert "the model was asked 4 times in all" in text
