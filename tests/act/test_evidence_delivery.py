"""Evidence whole: every message recorded in the history reaches every ``on_message_added``
callback exactly once, whatever is cancelled around it; and immutable: nothing a hook, an
observer or a callback receives shares mutable state with what was recorded.

The sweep cancels a batch at each checkpoint in turn, from inside the tools, the hooks and
the callbacks (just before one of their checkpoints, or just after, so that it lands at
lionexec's own next checkpoint), and compares what two mirrors heard with the history.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio

from lionexec import ActionOutcome, Branch, HookPoint
from lionexec.act._copies import copy_error
from lionexec.conversation import ActionRequest, ActionResponse
from lionexec.testing import assert_consistent as check_history
from lionexec.testing import tool_call as call


class Sweep:
    """Counts the checkpoints taken by user code; cancels *scope* at the *at*-th."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.count = 0
        self.scope: trio.CancelScope | None = None

    async def tick(self) -> None:
        self.count += 1
        before = self.count % 2 == 0  # even: cancelled here; odd: at the next checkpoint
        if self.count == self.at and before:
            self._cancel()
        await trio.lowlevel.checkpoint()
        if self.count == self.at and not before:
            self._cancel()

    def _cancel(self) -> None:
        assert self.scope is not None
        self.scope.cancel()


def mirrored_branch(sweep: Sweep) -> tuple[Branch, list[Any], list[Any]]:
    """A branch with ticking tools, hooks and two mirrors (a plain and an async callback)."""

    async def ok(n: int) -> int:
        """Answer n after two checkpoints."""
        await sweep.tick()
        await sweep.tick()
        return n

    async def bad() -> None:
        """Fail after a checkpoint."""
        await sweep.tick()
        raise RuntimeError("kaput")

    branch = Branch(cancel_grace=5.0)
    branch.register_tools([ok, bad])

    async def post(**_: Any) -> None:
        await sweep.tick()
        await sweep.tick()

    async def error(**_: Any) -> None:
        await sweep.tick()

    async def message_add(message: Any) -> None:
        await sweep.tick()

    branch.hooks.on(HookPoint.TOOL_POST, post)
    branch.hooks.on(HookPoint.TOOL_ERROR, error)
    branch.hooks.on(HookPoint.MESSAGE_ADD, message_add)
    heard_plain: list[Any] = []
    heard_async: list[Any] = []

    async def mirror(message: Any) -> None:
        heard_async.append(message.id)  # heard on entry; what follows may be cancelled
        await sweep.tick()
        await sweep.tick()

    branch.messages.on_message_added.append(lambda message: heard_plain.append(message.id))
    branch.messages.on_message_added.append(mirror)
    return branch, heard_plain, heard_async


async def run_batch(at: int) -> tuple[Branch, Sweep, list[Any], list[Any]]:
    sweep = Sweep(at)
    branch, heard_plain, heard_async = mirrored_branch(sweep)
    with trio.CancelScope() as scope:
        sweep.scope = scope
        await branch.act([call("ok", n=1), call("bad"), call("ok", n=2)])
    return branch, sweep, heard_plain, heard_async


def recorded(branch: Branch) -> Counter[Any]:
    return Counter(m.id for m in branch.messages if isinstance(m, (ActionRequest, ActionResponse)))


@pytest.mark.timeout(120)
async def test_every_recorded_message_reaches_every_callback_once_wherever_cancelled() -> None:
    branch, sweep, heard_plain, heard_async = await run_batch(0)  # never cancelled
    total = sweep.count
    assert total > 20 and Counter(heard_plain) == recorded(branch) == Counter(heard_async)
    assert len(recorded(branch)) == 6
    cancelled_in_announce = 0
    for at in range(1, total + 2):
        branch, sweep, heard_plain, heard_async = await run_batch(at)
        check_history(branch)
        expected = recorded(branch)
        assert Counter(heard_plain) == expected, f"cancelled at checkpoint {at}"
        assert Counter(heard_async) == expected, f"cancelled at checkpoint {at}"
        outcomes = [r.content.outcome for r in branch.messages.responses()]
        if sweep.count >= at and ActionOutcome.COMPLETED in outcomes:
            cancelled_in_announce += 1
    assert cancelled_in_announce > 5  # (the sweep did cancel calls after they were recorded)


async def test_a_completed_call_whose_post_hook_is_cancelled_still_reaches_the_callbacks(
    branch: Branch,
) -> None:
    heard: list[Any] = []

    async def post(**_: Any) -> None:
        await trio.sleep_forever()

    branch.hooks.on(HookPoint.TOOL_POST, post)
    branch.messages.on_message_added.append(heard.append)
    with trio.move_on_after(0.05):
        await branch.act(call("add", a=1, b=2))
    [response] = branch.messages.responses()
    assert response.content.output == 3
    assert [m.id for m in heard] == [m.id for m in branch.messages]


async def test_a_callback_cancelled_mid_way_does_not_stop_the_others(branch: Branch) -> None:
    heard: list[str] = []

    async def stuck(message: Any) -> None:
        heard.append(f"stuck {type(message).__name__}")
        await trio.sleep_forever()

    branch.cancel_grace = 0.05
    branch.messages.on_message_added.append(stuck)
    branch.messages.on_message_added.append(lambda m: heard.append(type(m).__name__))
    with trio.move_on_after(0.05):
        await branch.act(call("add", a=1, b=2))
    assert heard == [
        "stuck ActionRequest",
        "ActionRequest",
        "stuck ActionResponse",
        "ActionResponse",
    ]


# -- immutable ----------------------------------------------------------------------------------


class DetailedError(Exception):
    def __init__(self, message: str, *, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


class UncopyableError(Exception):
    """copy.copy cannot rebuild it (its __init__ wants a keyword argument)."""

    def __init__(self, *, details: dict[str, Any]) -> None:
        super().__init__("uncopyable")
        self.details = details


@pytest.mark.parametrize("kind", [DetailedError, UncopyableError])
async def test_nothing_a_seam_receives_shares_state_with_the_record(kind: type) -> None:
    async def explode(items: list[int]) -> None:
        """Fail with details."""
        if kind is DetailedError:
            raise DetailedError("boom", details={"items": [1, 2]})
        raise UncopyableError(details={"items": [1, 2]})

    branch = Branch()
    branch.register_tools(explode)

    def on_error(**kw: Any) -> None:
        error = kw["error"]
        assert isinstance(error, kind)
        error.details["items"].append(666)
        error.details["new"] = True
        error.args = ("changed",)

    def tamper(message: Any) -> None:
        message.content.arguments["items"].append(666)

    branch.hooks.on(HookPoint.TOOL_ERROR, on_error)
    branch.hooks.on(HookPoint.MESSAGE_ADD, tamper)
    branch.messages.on_message_added.append(tamper)
    await branch.act(call("explode", items=[1]))
    [record] = branch.log
    error = record.event.execution.error
    assert isinstance(error, kind)
    assert error.details == {"items": [1, 2]} and error.args[0] != "changed"
    [request] = branch.messages.requests()
    assert request.content.arguments == {"items": [1]}
    [response] = branch.messages.responses()
    assert response.content.arguments == {"items": [1]}
    assert len(branch.failures) == 0  # (the seams ran: nothing failed in them)


def test_an_exception_that_cannot_be_rebuilt_is_stood_in_for() -> None:
    class Odd(OSError):
        def __reduce__(self) -> Any:
            raise TypeError("no")

    original = Odd(2, "gone")
    original.extra = {"k": [1]}  # type: ignore[attr-defined]
    copied = copy_error(original)
    assert copied is not original
    if isinstance(copied, Odd):
        copied.extra["k"].append(2)  # type: ignore[attr-defined]
    assert original.extra == {"k": [1]}  # type: ignore[attr-defined]
