"""Tools for the worker processes of these tests (``--tools tests.workers.tools:registry``).

Every run appends ``KIND N PID TIME`` to the file named by ``LIONEXEC_TEST_EFFECTS``
(``O_APPEND``): side effects counted outside the journal. ``LIONEXEC_TEST_HANG`` makes every
call of this process hang after its side effect: ``forever``, or the path of a file whose
appearance releases it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import trio

from lionexec.journal import Limit
from lionexec.tools import ActionManager, Tool


def side_effect(kind: str, n: int) -> None:
    path = os.environ["LIONEXEC_TEST_EFFECTS"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{kind} {n} {os.getpid()} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


async def hang() -> None:
    mode = os.environ.get("LIONEXEC_TEST_HANG")
    if not mode:
        return
    if mode == "forever":
        await trio.sleep_forever()
    release = trio.Path(mode)
    with trio.fail_after(60):
        while True:  # another process creates the file: no trio.Event reaches here
            if await release.exists():
                return
            await trio.sleep(0.01)


async def safe(n: int) -> int:
    """An idempotent tool: run again after a lost lease."""
    side_effect("safe", n)
    await hang()
    return n * 2


async def unsafe(n: int) -> int:
    """An unsafe tool: answered `interrupted` after a lost lease."""
    side_effect("unsafe", n)
    await hang()
    return n * 2


async def held(n: int) -> int:
    """A call that takes a while: ``held+`` when it starts, ``held-`` when it ends."""
    side_effect("held+", n)
    await trio.sleep(0.05)
    side_effect("held-", n)
    return n


async def priced(n: int) -> int:
    """A call whose cost is its argument (``budgets``)."""
    side_effect("priced", n)
    return n


def cost_of(arguments: Mapping[str, Any]) -> float:
    return float(arguments["n"])


registry = ActionManager()
registry.register_tools(
    [
        Tool.from_function(safe, effect="idempotent"),
        Tool.from_function(unsafe, effect="unsafe"),
        Tool.from_function(held, effect="idempotent"),
        Tool.from_function(priced, effect="pure"),
    ]
)

#: ``--limits tests.workers.tools:limits``: a shared rate (``LIONEXEC_TEST_RATE`` per second).
limits = {"safe": Limit(rate=float(os.environ.get("LIONEXEC_TEST_RATE", "50")), burst=3)}

#: ``--limits tests.workers.tools:branch_rates``: each branch its own rate (20/s, burst 2).
branch_rates = {"branch:*": Limit(rate=20, burst=2)}

#: ``--limits tests.workers.tools:concurrent``: at most 3 ``held`` calls at once, 2 per branch.
concurrent = {"held": Limit(concurrency=3), "branch:*": Limit(concurrency=2)}

#: ``--limits tests.workers.tools:budgets``: ``priced`` calls cost their ``n``, 50 in all;
#: each branch may start 6 calls of any tool.
budgets = {"priced": Limit(budget=50, cost=cost_of), "branch:*": Limit(budget=6)}
