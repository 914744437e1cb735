"""``lionexec journal calls|approvals|approve|reject|export|recover``: tables, filters, JSON
Lines, paging, approvals decided from the command line, progress, ``| head``, and errors."""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome
from lionexec.governance import PermissionPolicy
from lionexec.journal import SqliteJournal, _scan, open_journal, write_jsonl
from lionexec.journal._cli import main
from lionexec.tools import Tool

POLICY = PermissionPolicy(mode="rules", allow={"echo": ["*"]}, escalate={"pay": ["*"]})


def echo(text: str) -> str:
    """Echo *text*."""
    if text == "boom":
        raise ValueError("boom")
    return text


def pay(invoice: str) -> str:
    """Pay an invoice."""
    return f"paid {invoice}"


TOOLS = [Tool.from_function(echo, effect="pure"), Tool.from_function(pay)]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def cli(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lionexec", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        **kwargs,
    )


def build(path: Path, calls: int = 12, *, park: int = 0, submit: int = 0) -> list[str]:
    """A journal with *calls* echo calls (every third fails), *park* parked pay calls and
    *submit* calls queued for workers; returns the branch ids."""

    async def go() -> list[str]:
        async with SqliteJournal(path) as journal:
            branch = await journal.branch(policy=POLICY)
            branch.register_tools(TOOLS)
            async with branch:
                texts = ["boom" if i % 3 == 2 else f"t{i}" for i in range(calls)]
                await branch.act([{"function": "echo", "arguments": {"text": t}} for t in texts])
                for i in range(park):
                    [parked] = await branch.act(
                        {
                            "function": "pay",
                            "arguments": {"invoice": f"A{i}"},
                            "call_id": f"pay{i}",
                        }
                    )
                    assert parked.outcome is ActionOutcome.AWAITING_APPROVAL
            other = await journal.branch()
            if submit:
                await journal.submit(
                    other.name,
                    [{"function": "echo", "arguments": {"text": f"w{i}"}} for i in range(submit)],
                )
            return [branch.name, other.name]

    return trio.run(go)


def test_calls_is_a_table_that_fits_the_terminal(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "j.db"
    build(path)
    monkeypatch.setenv("COLUMNS", "70")
    status, text = run("calls", str(path))
    assert status == 0
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["requested", "branch", "call_id"]
    assert all(len(line) <= 70 for line in lines)
    assert "…" in text
    assert len(lines) == 1 + 12


def test_calls_filters_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    [_, other] = build(path, submit=3)
    status, text = run("calls", str(path), "--json")
    rows = [json.loads(line) for line in text.splitlines()]
    assert status == 0 and len(rows) == 15
    assert [r["via"] for r in rows].count("worker") == 3
    failed = [
        json.loads(x)
        for x in run("calls", str(path), "--status", "failed", "--json")[1].splitlines()
    ]
    assert len(failed) == 4 and {r["outcome"] for r in failed} == {"failed"}
    mine = run("calls", str(path), "--branch", other, "--json")[1].splitlines()
    assert len(mine) == 3
    assert run("calls", str(path), "--since", "2999-01-01", "--json")[1] == ""
    assert len(run("calls", str(path), "--since", "1h", "--json")[1].splitlines()) == 15
    status, text = run("calls", str(path), "--limit", "2", "--via", "branch")
    assert text.splitlines()[-1].startswith("… 10 more calls not shown")
    assert len(run("calls", str(path), "--limit", "5", "--json")[1].splitlines()) == 5


def test_show_counts_the_worker_queue_beside_branch_calls(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    build(path, calls=3, submit=4)
    status, text = run("show", str(path))
    assert status == 0
    assert "calls: 3 (completed 2, failed 1)" in text
    assert "worker queue: 4 (queued 4)" in text
    [summary] = [json.loads(line) for line in run("show", str(path), "--json")[1].splitlines()]
    assert summary["queue"]["states"] == {"queued": 4}


def test_approve_and_reject_by_approval_or_call_id(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "j.db"
    build(path, calls=1, park=3)
    rows = [json.loads(x) for x in run("approvals", str(path), "--json")[1].splitlines()]
    assert [r["state"] for r in rows] == ["pending"] * 3
    status, text = run("approve", str(path), rows[0]["approval_id"], "--by", "ana")
    assert status == 0 and text.startswith(f"approved {rows[0]['approval_id']} by ana: pay")
    assert run("reject", str(path), "pay1", "--reason", "not ours", "--by", "bo")[0] == 0
    assert run("approve", str(path), rows[0]["approval_id"])[0] == 1
    assert "ApprovalClosed" in capsys.readouterr().err

    async def states() -> dict[str, tuple[str, Any, Any]]:
        async with open_journal(path) as journal:
            return {
                a.call_id: (a.state, a.decided_by, a.reason)
                for a in await journal.approvals(state=None)
            }

    assert trio.run(states) == {
        "pay0": ("approved", "ana", None),
        "pay1": ("rejected", "bo", "not ours"),
        "pay2": ("pending", None, None),
    }
    text = run("approvals", str(path), "--status", "pending")[1]
    assert "pay2" in text and "pay0" not in text
    # the approved call runs, once, when recovery resumes the branch with its tools
    status, text = run("recover", str(path), "--tools", f"{__name__}:TOOLS", "--json")
    actions = sorted(json.loads(x)["action"] for x in text.splitlines())
    assert actions == ["approved", "awaiting_approval", "rejected"]


def test_exports_stream_in_pages_and_equal_the_library(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "j.db"
    build(path, calls=25, park=2, submit=2)
    monkeypatch.setattr(_scan, "PAGE", 4)  # many pages, requests and responses split across

    async def library() -> tuple[Any, str]:
        async with open_journal(path) as journal:
            buffer = io.StringIO()
            await write_jsonl(journal, buffer)
            return await journal.export(), buffer.getvalue()

    exported, log = trio.run(library)
    status, text = run("export", str(path))
    assert status == 0 and json.loads(text) == exported
    assert run("export", str(path), "--jsonl") == (0, log)
    # the parked calls never reached their tool: no call row
    assert len(run("calls", str(path), "--json")[1].splitlines()) == 25 + 2


def test_piped_into_head_it_ends_quietly(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    build(path, calls=1500)
    shell = f"{sys.executable} -m lionexec journal calls --json {path} | head -1"
    done = subprocess.run(
        ["bash", "-c", f"{shell}; echo status ${{PIPESTATUS[0]}} >&2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert len(done.stdout.splitlines()) == 1
    assert done.stderr == "status 141\n"


def test_recover_reports_progress_when_asked_and_hints_at_tools(tmp_path: Path) -> None:
    from tests.journal.test_cli import crashed_journal

    path = tmp_path / "j.db"
    crashed_journal(path)
    done = cli("journal", "recover", str(path), "--progress")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("recover: 0/2 calls answered")
    assert "recover: 1/2 calls answered" in done.stderr  # the safe one needs its tool
    assert "hint: 1 calls were left unanswered" in done.stderr
    assert "--tools MODULE:ATTRIBUTE" in done.stderr
    assert "safe" in done.stdout.split("left unanswered:")[1]
    again = cli("journal", "recover", str(path), "--no-progress")
    assert "recover: " not in again.stderr


def test_recover_progress_lines_on_a_long_recovery(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    build(path, calls=3)

    async def crash() -> None:  # many unanswered unsafe requests, committed by hand
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            from lionexec.conversation import ActionRequest

            async with branch:
                for i in range(300):
                    branch.messages.add_message(
                        ActionRequest.create("pay", {"invoice": str(i)}, call_id=f"c{i}")
                    )
                await journal.flush()

    trio.run(crash)
    done = cli("journal", "recover", str(path), "--progress", "--json")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 300
    lines = done.stderr.splitlines()
    assert lines[0].startswith("recover: 0/300 calls answered")
    assert lines[-1].startswith("recover: 300/300 calls answered")
    assert all(line.startswith("recover: ") for line in lines)


@pytest.mark.parametrize(
    "case", ["missing", "directory", "not-a-journal", "corrupt", "unknown-id", "usage"]
)
def test_each_error_is_one_line_and_no_traceback(tmp_path: Path, case: str) -> None:
    path = tmp_path / "j.db"
    argv = ["journal", "show", str(path)]
    expected, status = "", 1
    if case == "missing":
        expected = f"error: no journal at {path}"
    elif case == "directory":
        path.mkdir()
        expected = "is a directory, not a journal file"
    elif case == "not-a-journal":
        path.write_bytes(b"x" * 4096)
        expected = "error: NotAJournalError: "
    elif case == "corrupt":
        build(path, calls=2)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE lionexec_messages SET body = '{not json' WHERE seq = 1")
        argv = ["journal", "export", str(path)]
        expected = "error: JournalError: message 1 "
    elif case == "unknown-id":
        build(path, calls=1)
        argv = ["journal", "approve", str(path), "apr_0123"]
        expected = "error: ApprovalNotFound: "
    else:
        argv = ["journal", "calls", str(path), "--limit", "-1"]
        expected, status = "error: lionexec journal calls: argument --limit: -1 is negative", 2
    done = cli(*argv)
    assert done.returncode == status, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert expected in done.stderr and done.stderr.startswith("error: ")
    assert "Traceback" not in done.stderr


def test_a_missing_extra_is_named_by_the_command(tmp_path: Path) -> None:
    from tests.support.extras import blocking

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            blocking("psycopg", "lionexec.__main__"),
            "journal",
            "show",
            "postgresql://u@127.0.0.1:1/db",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert "pip install 'lionexec[postgres]'" in done.stderr and "Traceback" not in done.stderr


def _walk(parser: argparse.ArgumentParser, name: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if not choice.help:
                    missing.append(f"{name} {choice.dest}")
            for sub_name, sub in action.choices.items():
                missing += _walk(sub, f"{name} {sub_name}")
        elif action.help != argparse.SUPPRESS and not (action.help or "").strip():
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_command_has_help() -> None:
    from lionexec.__main__ import parsers

    found = parsers()
    assert {"lionexec serve", "lionexec worker", "lionexec journal recover"} <= set(found)
    missing = [m for prog, parser in found.items() for m in _walk(parser, prog)]
    assert missing == []
    assert (
        os.environ.get("LIONEXEC_SERVER_TOKEN") is None
        or "default: $" in found["lionexec serve"].format_help()
    )


def unanswered(path: Path, counts: list[int]) -> list[str]:
    """A journal with a branch per count of unanswered unsafe requests (committed by hand,
    as a process that died would leave them); the branch ids."""

    async def crash() -> list[str]:
        from lionexec.conversation import ActionRequest

        names = []
        async with SqliteJournal(path) as journal:
            for n in counts:
                branch = await journal.branch()
                names.append(branch.name)
                async with branch:
                    for i in range(n):
                        branch.messages.add_message(
                            ActionRequest.create("pay", {"invoice": str(i)}, call_id=f"c{i}")
                        )
                    await journal.flush()
        return names

    return trio.run(crash)


def test_recover_progress_is_reported_per_branch_and_stdout_stays_data(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    first, second = unanswered(path, [120, 30])
    done = cli("journal", "recover", str(path), "--progress", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in done.stdout.splitlines()]  # only data: every line JSON
    assert collections.Counter(r["branch_id"] for r in rows) == {first: 120, second: 30}
    lines = done.stderr.splitlines()
    assert f"recover: branch {first}: 120/120 calls" in lines
    assert f"recover: branch {second}: 30/30 calls" in lines
    assert not any(f"branch {first}: 121" in x or f"{second}: 0/30" in x for x in lines)
    assert lines[0].startswith("recover: 0/150 calls answered")
    assert lines[-1].startswith("recover: 150/150 calls answered")


def test_recover_progress_on_a_terminal_ends_with_each_branch(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    first, second = unanswered(path, [5, 2])
    primary, secondary = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lionexec", "journal", "recover", str(path), "--json"],
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            check=False,
            timeout=60,
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 7 and "recover:" not in done.stdout
    shown = b"".join(chunks).decode()
    assert f"recover: branch {first}: 5/5 calls" in shown
    assert f"recover: branch {second}: 2/2 calls" in shown
    last = [x for x in shown.replace("\r", "\n").splitlines() if x.strip()][-1]
    assert "recover: 7/7 calls answered" in last  # the total ends it
