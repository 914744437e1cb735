"""Durable agent runs under SIGKILL: a real agent process (``agent_child.py``) is killed at
random points (its model call in flight, its tools running, between turns, while it starts
and recovers), restarted, and killed again, until its run ends.

After each run, from outside the agent: the instruction and every model turn are recorded
exactly once; no turn was asked of the model again once its reply was recorded (the scripted
provider marks each reply with the serial number of its request); every request has exactly
one response; the ``unsafe`` tool ran at most once per call (its runs counted in a file
outside the journal) and exactly once per call recorded ``completed``; the final answer is
the recorded one, and a restart after the end asks the model nothing.

The test suite kills a few times; ``LIONEXEC_AGENT_KILLS=200`` (``nox -s agent-soak``) many.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from lionexec.conversation import ActionOutcome, AssistantResponse, Instruction
from lionexec.journal import SqliteJournal
from lionexec.models.testing import LocalProvider, Reply
from lionexec.testing import assert_consistent

from .agent_child import BRANCH, INSTRUCTION

CHILD = Path(__file__).with_name("agent_child.py")
KILLS = int(os.environ.get("LIONEXEC_AGENT_KILLS", "6"))
#: Kills per run before it is let finish (then a fresh journal for the next run).
PER_RUN = 3
TURNS = 4


def script(position: int, serial: int) -> Reply:
    """The reply to a request for turn *position*, marked with the request's *serial*."""
    mark = f"#{serial}"
    if position == 0:
        calls = [("lookup", {"invoice": "A"}), ("charge", {"invoice": f"A{mark}"})]
    elif position == 1:
        calls = [("charge", {"invoice": f"B{mark}"}), ("charge", {"invoice": f"C{mark}"})]
    elif position == 2:
        calls = [("lookup", {"invoice": "C"})]
    else:
        return Reply(f"paid {mark}")
    return Reply(f"turn {position} {mark}", tool_calls=calls)  # type: ignore[arg-type]


class TurnProvider(LocalProvider):
    """Answers each request by the turn it asks for (the assistant turns its body holds),
    after a random delay (a window for a kill), and logs (turn, serial) per request."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng
        self.asked: list[tuple[int, int]] = []
        self.in_flight = 0
        #: What happened, in order, for a failure's message: requests and agent starts/ends.
        self.story: list[str] = []

    async def _answer(self, api: Any, body: dict[str, Any], receive: Any, send: Any) -> None:
        serial = len(self.log.requests)
        position = sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
        self.asked.append((position, serial))
        self.story.append(f"request {serial} for turn {position}")
        self.in_flight += 1
        try:
            await trio.sleep(self.rng.uniform(0, 0.04))
            self.script.appendleft(script(position, serial))
            await super()._answer(api, body, receive, send)
        finally:
            self.in_flight -= 1


def output(out: Path) -> str:
    """What an agent printed (the end of it)."""
    return out.read_text()[-3000:]


def effects_ran(effects: Path) -> collections.Counter[str]:
    """How often each charge ran, by its invoice (the file outside the journal)."""
    return collections.Counter(effects.read_text().split() if effects.exists() else ())


async def start(database: Path, base_url: str, effects: Path, out: Path) -> trio.Process:
    with out.open("wb") as stdout:
        return await trio.lowlevel.open_process(
            [sys.executable, str(CHILD), str(database), base_url, str(effects)],
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )


async def kill_somewhere(
    database: Path, provider: TurnProvider, effects: Path, out: Path, rng: random.Random
) -> str | None:
    """Start the agent and SIGKILL it at a random point; where the kill landed, or ``None``
    if the agent finished first."""
    assert provider.base_url is not None
    asked, requests = len(provider.asked), len(provider.log.requests)
    process = await start(database, provider.base_url, effects, out)
    provider.story.append(f"agent {process.pid} started")
    if rng.random() < 0.2:  # anywhere from its start (recovery, reopening the branch)
        await trio.sleep(rng.uniform(0, 0.6))
    else:  # somewhere in its run: from its first model call on
        async with trio.open_nursery() as race:

            async def first_request() -> None:
                await provider.wait_for(lambda log: len(log.requests) > requests)
                race.cancel_scope.cancel()

            async def exited() -> None:
                await process.wait()
                race.cancel_scope.cancel()

            race.start_soon(first_request)
            race.start_soon(exited)
        await trio.sleep(rng.uniform(0, 0.3))
    if process.poll() is not None:
        assert process.returncode == 0, output(out)
        return None
    if len(provider.asked) == asked:
        where = "before its first model call"
    elif provider.in_flight:
        where = "model call in flight"
    else:
        where = "tools running or between turns"
    process.send_signal(signal.SIGKILL)
    await process.wait()
    provider.story.append(f"agent {process.pid} killed ({where})")
    return where


async def finish(database: Path, provider: TurnProvider, effects: Path, out: Path) -> Any:
    assert provider.base_url is not None
    process = await start(database, provider.base_url, effects, out)
    await process.wait()
    assert process.returncode == 0, output(out)
    return json.loads(output(out).splitlines()[-1])


async def check_run(database: Path, provider: TurnProvider, effects: Path, result: Any) -> None:
    async with SqliteJournal(database) as journal:
        branch = await journal.branch(BRANCH)
        history = list(branch.messages)
        assert [m.content for m in history if isinstance(m, Instruction)] == [INSTRUCTION]
        turns = [m.content for m in history if isinstance(m, AssistantResponse)]
        assert len(turns) == TURNS, turns
        serials = [int(re.search(r"#(\d+)$", text).group(1)) for text in turns]  # type: ignore[union-attr]
        assert turns[:-1] == [f"turn {k} #{s}" for k, s in enumerate(serials[:-1])]
        for position, serial in provider.asked:
            assert serial <= serials[position], (
                f"turn {position} asked again (request {serial}) after its reply "
                f"(request {serials[position]}) was recorded; " + "; ".join(provider.story)
            )
        assert result == {"text": turns[-1], "stop_reason": "answered"}
        assert_consistent(branch)  # one linked response per request
        ran = effects_ran(effects)
        assert all(count == 1 for count in ran.values()), ran  # unsafe: at most once
        charged = {
            request.arguments["invoice"]: branch.messages.response_for(request)
            for request in branch.messages.requests()
            if request.function == "charge"
        }
        assert set(ran) <= set(charged)  # nothing ran that the journal does not know of
        for invoice, response in charged.items():
            assert response is not None
            if response.outcome is ActionOutcome.COMPLETED:
                assert ran[invoice] == 1, invoice
            elif response.outcome is ActionOutcome.CANCELLED:  # killed before its claim
                assert invoice not in ran, invoice  # committed: so it never ran
            else:  # a charge the kill interrupted is never run again
                assert response.outcome is ActionOutcome.INTERRUPTED, response.outcome


@pytest.mark.timeout(60 + KILLS * 5)
async def test_a_killed_agent_resumes_its_run_exactly_once(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    seed = int(os.environ.get("LIONEXEC_AGENT_SEED", random.randrange(2**32)))
    print(f"\nagent crash: seed {seed} (LIONEXEC_AGENT_SEED repeats it)")
    rng = random.Random(seed)
    provider = TurnProvider(rng)
    await nursery.start(provider.serve)
    landed: collections.Counter[str] = collections.Counter()
    runs = restarts = 0
    while sum(landed.values()) < KILLS:
        runs += 1
        assert runs <= KILLS * 3, f"kills keep missing the runs (seed {seed})"
        folder = tmp_path / f"run{runs}"
        folder.mkdir()
        database, effects, out = folder / "journal.db", folder / "effects", folder / "out"
        provider.asked.clear()
        provider.story.clear()
        for _ in range(min(PER_RUN, KILLS - sum(landed.values()))):
            where = await kill_somewhere(database, provider, effects, out, rng)
            restarts += 1
            if where is None:
                break
            landed[where] += 1
        result = await finish(database, provider, effects, out)
        asked = len(provider.asked)
        again = await finish(database, provider, effects, out)  # after the end: nothing asked
        assert (again, len(provider.asked)) == (result, asked)
        await check_run(database, provider, effects, result)
    print(
        f"agent crash: {runs} runs, {sum(landed.values())} kills "
        f"({dict(landed)}), {restarts + 2 * runs} agent processes, 0 violations"
    )
