"""One resumer of a journal's approved calls (run by test_approval_contention.py).

Usage: ``python approval_resumer.py TARGET EFFECTS_FILE [die_after_claim]``

Opens the journal at TARGET, waits until the file ``EFFECTS_FILE.go`` exists (so that every
resumer starts at once), resumes every approved call with the ``pay`` tool (whose every run
appends its invoice to EFFECTS_FILE, ``O_APPEND``: side effects counted outside the journal),
and prints the resolutions as one JSON line: ``[[call_id, action, outcome], ...]``, or
``{"error": "Type: message"}`` if the resume raised. With ``die_after_claim`` it SIGKILLs
itself once its first claim of approvals committed, before any call starts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import trio

from lionexec.governance import PermissionPolicy
from lionexec.journal import open_journal
from lionexec.tools import Tool

POLICY = PermissionPolicy(mode="rules", escalate={"pay": ["*"]})


def side_effect(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def pay_tool(effects_file: str) -> Tool:
    async def pay(invoice: str) -> str:
        """Pay an invoice (unsafe: never run twice)."""
        side_effect(effects_file, invoice)
        await trio.sleep(0.02)  # a real payment takes a while: others resume meanwhile
        return f"paid {invoice}"

    return Tool.from_function(pay, effect="unsafe")


async def resume(target: str, effects_file: str) -> list[Any] | dict[str, str]:
    async with open_journal(target) as journal:
        go = trio.Path(effects_file + ".go")
        # (another process creates the file: no trio.Event reaches across processes)
        while not await go.exists():  # noqa: ASYNC110
            await trio.sleep(0.005)
        try:
            resolutions = await journal.resume([pay_tool(effects_file)], policy=POLICY)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    return [
        [r.call_id, r.action, None if r.outcome is None else r.outcome.value] for r in resolutions
    ]


def die_after_claim() -> None:
    from lionexec.journal import _approvals

    async def die(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)  # the claim committed; no call started

    _approvals._resume_branch = die  # type: ignore[assignment]


def main() -> None:
    target, effects_file = sys.argv[1:3]
    if sys.argv[3:] == ["die_after_claim"]:
        die_after_claim()
    print(json.dumps(trio.run(resume, target, effects_file)), flush=True)


if __name__ == "__main__":
    main()
