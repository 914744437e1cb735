"""An agent process for ``test_agent_crash.py``, SIGKILLed by the test at random points.

``python agent_child.py DATABASE BASE_URL EFFECTS_FILE``: recover the journal, open the
agent's branch, and run (or continue) its one durable run to the end; print the result as a
JSON line. ``charge`` is an ``unsafe`` tool whose every run appends its argument to
EFFECTS_FILE (outside the journal), ``lookup`` a ``pure`` one; both take a little time, so
that kills land while tools run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from lionexec.journal import SqliteJournal
from lionexec.models import Endpoint, Model, run
from lionexec.tools import Tool

BRANCH = "c5c2f006-8116-4b2b-9fbb-e2b6b1948399"
RUN = "pay-invoices"
INSTRUCTION = "Look the invoices up and pay them."


def tools(effects: Path) -> list[Tool]:
    async def charge(invoice: str) -> str:
        """Charge an invoice."""
        await trio.sleep(0.01)
        with effects.open("a", encoding="utf-8") as out:
            out.write(invoice + "\n")
        await trio.sleep(0.01)
        return f"charged {invoice}"

    async def lookup(invoice: str) -> str:
        """Look an invoice up."""
        await trio.sleep(0.02)
        return f"invoice {invoice}: 10 EUR"

    return [
        Tool.from_function(charge, effect="unsafe"),
        Tool.from_function(lookup, effect="pure"),
    ]


async def main(database: str, base_url: str, effects: str) -> None:
    registry = tools(Path(effects))
    async with SqliteJournal(database) as journal:
        await journal.recover(registry)
        branch = await journal.branch(BRANCH)
        branch.register_tools(registry)
        async with branch, Model(endpoint=Endpoint(base_url), name="local-model") as model:
            result = await run(branch, model, INSTRUCTION, run_id=RUN, max_turns=8)
    print(json.dumps({"text": result.text, "stop_reason": result.stop_reason}), flush=True)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:4])
