"""The JSONL call log fed from the journal (``call_records``, ``export --jsonl``)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.errors import NotDurableError
from lionexec.journal import SqliteJournal, call_records, write_jsonl
from lionexec.journal._cli import main
from lionexec.tools import Tool


def _refuse(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """An OpenAI ``tool_calls`` item."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def strict_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line, parse_constant=_refuse) for line in text.splitlines()]


async def test_every_answered_call_is_one_strict_line_in_commit_order(tmp_path: Path) -> None:
    def nan(x: int) -> float:
        """Returns NaN."""
        return math.nan

    def boom(x: int) -> int:
        """Fails."""
        raise RuntimeError("boom")

    async with SqliteJournal(tmp_path / "j.db") as journal:
        branch = await journal.branch()
        branch.register_tools([Tool.from_function(nan, effect="pure"), boom])
        async with branch:
            await branch.act(
                [
                    call("nan", {"x": 1}, "a"),
                    call("boom", {"x": 2}, "b"),
                    call("missing", {}, "c"),
                ]
            )
            await branch.act(call("nan", {"x": 3}, "d"))
        out = io.StringIO()
        assert await write_jsonl(journal, out) == 4
        records = [r async for r in call_records(journal, branch.name)]
    lines = strict_lines(out.getvalue())
    assert lines == records
    assert {r["call_id"] for r in lines[:3]} == {"a", "b", "c"}
    assert lines[3]["call_id"] == "d"
    by_id = {r["call_id"]: r for r in lines}
    assert by_id["a"]["output"] is None and by_id["a"]["outcome"] == "failed"  # NaN: not JSON
    assert "tool 'nan' returned the float nan" in by_id["a"]["error"]["message"]
    assert by_id["a"]["effect"] == "pure" and by_id["a"]["idempotency_key"]
    assert by_id["b"]["error"] == {"type": "RuntimeError", "message": "boom"}
    assert by_id["c"]["outcome"] == "invalid"
    assert by_id["c"]["idempotency_key"] is None  # never reached its tool: no call row
    assert [r["seq"] for r in lines] == sorted(r["seq"] for r in lines)
    assert {r["branch_id"] for r in lines} == {branch.name}


async def test_a_call_answered_by_recovery_is_in_the_log(tmp_path: Path) -> None:
    """The branch's own JSONL file never sees a call that recovery answered; the journal's
    log does: it is the source of truth."""
    path = tmp_path / "crash.db"
    journal = SqliteJournal(path)
    await journal.open()

    async def dies(n: int) -> int:
        """The process 'dies' while this runs."""
        await journal.aclose()
        return n

    branch = await journal.branch()
    branch.register_tools(Tool.from_function(dies, name="pay"))
    async with branch:
        with pytest.raises(NotDurableError):  # the outcome commit never happens
            await branch.act(call("pay", {"n": 1}, "p"))

    async with SqliteJournal(path) as restarted:
        before = [r async for r in call_records(restarted)]
        await restarted.recover([Tool.from_function(lambda n: n, name="pay")])
        after = [r async for r in call_records(restarted)]
    assert before == []
    [line] = after
    assert (line["call_id"], line["outcome"], line["effect"]) == ("p", "interrupted", "unsafe")


def test_export_jsonl_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "cli.db"

    async def build() -> None:
        async with SqliteJournal(path) as journal:
            branch = await journal.branch()
            branch.register_tools(Tool.from_function(lambda n: n * 2, name="double"))
            async with branch:
                await branch.act([{"function": "double", "arguments": {"n": n}} for n in range(3)])

    trio.run(build)
    out = io.StringIO()
    assert main(["export", "--jsonl", str(path)], out=out) == 0
    lines = strict_lines(out.getvalue())
    assert sorted(r["output"] for r in lines) == [0, 2, 4]


async def test_call_records_checkpoint_every_256_records_wherever_the_responses_are(
    monkeypatch: Any,
) -> None:
    import sys

    from lionexec.conversation import Instruction
    from lionexec.journal import MemoryJournal

    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    async with MemoryJournal() as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        async with branch:
            branch.messages.add_message(Instruction(content="go"))  # responses at even positions
            for i in range(300):
                await branch.act({"function": "add", "arguments": {"a": i, "b": 1}})
        real = trio.lowlevel.checkpoint
        seen: list[int] = []

        async def counting() -> None:
            if sys._getframe(1).f_globals["__name__"] == "lionexec.journal._jsonl":
                seen.append(len(records))
            await real()

        records: list[dict[str, Any]] = []
        monkeypatch.setattr(trio.lowlevel, "checkpoint", counting)
        async for record in call_records(journal):
            records.append(record)
    assert len(records) == 300
    assert seen == [256, 300]  # (after the 256th record, then after the branch)
