"""``python -m lionexec journal show|export|recover``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.errors import NotDurableError
from lionexec.journal import SqliteJournal
from lionexec.journal._cli import main
from lionexec.tools import Tool

TOOLS = [
    Tool.from_function(lambda n: n, name="safe", effect="pure"),
    Tool.from_function(lambda n: n, name="unsafe"),
]

NOT_TOOLS = 42
STRINGS = ["a string"]
BY_NAME = {"safe": TOOLS[0]}


def crashed_journal(path: Path) -> str:
    """A journal with two calls whose process "died" after their request commits."""

    async def build() -> str:
        journal = SqliteJournal(path)
        await journal.open()

        started: list[int] = []
        both = trio.Event()

        async def dying(n: int) -> int:  # the process "dies" once both calls are running
            started.append(n)
            if len(started) == 2:
                await journal.aclose()
                both.set()
            await both.wait()
            return n

        branch = await journal.branch()
        branch.register_tools(
            [
                Tool.from_function(dying, name="safe", effect="pure"),
                Tool.from_function(dying, name="unsafe"),
            ]
        )
        async with branch:
            with pytest.raises(NotDurableError):  # the outcome commit never happens
                await branch.act(
                    [
                        {"function": "safe", "arguments": {"n": 1}},
                        {"function": "unsafe", "arguments": {"n": 2}},
                    ]
                )
        return branch.name

    return trio.run(build)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def test_show_lists_branches_and_unfinished_calls(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    branch = crashed_journal(path)
    status, text = run("show", str(path))
    assert status == 0
    assert f"{branch}: 2 messages, 2 calls, 2 unanswered" in text
    assert "calls: 2 (unfinished 2)" in text
    assert "worker queue: 0 (none)" in text
    assert "unfinished calls:" in text
    assert text.count(" unfinished ") == 2


def test_export_is_strict_json(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    branch = crashed_journal(path)
    status, text = run("export", str(path))
    assert status == 0
    data: dict[str, Any] = json.loads(text)
    [exported] = data["branches"]
    assert exported["branch_id"] == branch
    assert len(exported["history"]["messages"]) == 2
    assert {c["function"] for c in data["calls"]} == {"safe", "unsafe"}


def test_recover_without_tools_resolves_only_what_needs_none(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path)
    status, text = run("recover", str(path), "--json")
    assert status == 0
    lines = [json.loads(line) for line in text.splitlines()]
    by_function = {line["function"]: line for line in lines}
    assert by_function["unsafe"]["action"] == by_function["unsafe"]["outcome"] == "interrupted"
    assert (by_function["safe"]["action"], by_function["safe"]["outcome"]) == ("left", None)
    assert "calls: 2 (interrupted 1, unfinished 1)" in run("show", str(path))[1]


def test_recover_with_tools_reruns_the_safe_call(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path)
    status, text = run("recover", str(path), "--tools", f"{__name__}:TOOLS")
    assert status == 0, text
    assert "recovered 2 calls: interrupted 1, rerun 1" in text
    assert [line.split() for line in text.splitlines()[2:]] == [
        ["interrupted", "interrupted", "unsafe", "1"],
        ["rerun", "completed", "safe", "1"],
    ]
    assert "unanswered" in run("show", str(path))[1]
    assert "0 unanswered" in run("show", str(path))[1]


def test_bad_targets_are_named_errors(tmp_path: Path, capsys: Any) -> None:
    assert run("show", str(tmp_path / "missing.db"))[0] == 1
    assert "no journal at" in capsys.readouterr().err
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"x" * 4096)
    assert run("show", str(garbage))[0] == 1
    assert "NotAJournalError" in capsys.readouterr().err
    assert run("frobnicate", str(garbage))[0] == 2
    empty = tmp_path / "empty.db"
    empty.touch()
    for command in ("show", "export", "recover"):
        assert run(command, str(empty))[0] == 1
        assert "is empty, not a journal" in capsys.readouterr().err
    assert empty.stat().st_size == 0  # left as it was: no schema written into it
    assert run("recover", str(garbage), "--tools", "nonexistent_module_xyz:tools")[0] == 2


@pytest.mark.parametrize(
    ("attribute", "problem"),
    [
        ("NOT_TOOLS", "expected an ActionManager or a list of tools, got int 42"),
        ("STRINGS", "cannot register str 'a string': not a Tool or callable"),
        ("BY_NAME", "expected an ActionManager or a list of tools, got dict {'safe': "),
    ],
)
def test_recover_names_a_tools_attribute_that_is_not_tools(
    attribute: str, problem: str, capsys: Any
) -> None:
    spec = f"{__name__}:{attribute}"
    assert run("recover", ":memory:", "--tools", spec) == (2, "")
    assert capsys.readouterr().err.startswith(f"error: --tools {spec}: {problem}")


def test_the_module_entry_point(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path)
    done = subprocess.run(
        [sys.executable, "-m", "lionexec", "journal", "show", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "calls: 2 (unfinished 2)" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("attribute", "problem"),
    [
        ("NOT_TOOLS", "expected an ActionManager or a list of tools, got int 42"),
        ("STRINGS", "cannot register str 'a string': not a Tool or callable"),
    ],
)
def test_the_worker_names_a_tools_attribute_that_is_not_tools(
    attribute: str, problem: str, capsys: Any
) -> None:
    from lionexec.journal.workers import _cli as worker_cli

    spec = f"{__name__}:{attribute}"
    assert worker_cli.main(["--database", ":memory:", "--tools", spec]) == 2
    assert capsys.readouterr().err.startswith(f"error: --tools {spec}: {problem}")


def test_a_tools_module_that_fails_to_import_is_named(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "broken_tools_mod.py").write_text("raise RuntimeError('boom at import')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert run("recover", ":memory:", "--tools", "broken_tools_mod:tools") == (2, "")
    finally:
        sys.path.remove(str(tmp_path))
    err = capsys.readouterr().err
    assert "importing broken_tools_mod failed: RuntimeError('boom at import')" in err
