"""Branch.act (issue 6): a batch of calls to a trivial async tool, governed and recorded.

lionexec: ``lionexec.act.Branch`` (n/a until it exists); lionagi 0.36.0:
``Branch(log_config={"auto_save_on_exit": False})`` (no key, no network on this path); raw
trio: a nursery (or a loop, for sequential) that appends two dict records per call, a request
and its response. Every run uses a fresh branch with the tool registered. Logging is disabled
in every process: lionagi logs each failing call, and stderr output is not what is measured.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ._harness import Case, MemoryProbe, k, main, unavailable
from ._toolfuncs import add, boom


def requests(n: int, function: str = "add") -> list[dict[str, Any]]:
    if function == "boom":
        return [{"function": "boom", "arguments": {"a": i}} for i in range(n)]
    return [{"function": "add", "arguments": {"a": i, "b": 1}} for i in range(n)]


class RawBranch:
    """The floor: look the tool up, call it, keep a request record and a response record."""

    def __init__(self) -> None:
        self.tools: dict[str, Callable[..., Awaitable[Any]]] = {}
        self.records: list[dict[str, Any]] = []

    def register_tools(self, tools: list[Callable[..., Awaitable[Any]]]) -> None:
        for tool in tools:
            self.tools[tool.__name__] = tool

    async def _one(self, index: int, call: dict[str, Any], out: list[Any]) -> None:
        request = {
            "id": uuid.uuid4(),
            "function": call["function"],
            "arguments": call["arguments"],
        }
        self.records.append(request)
        error: dict[str, str] | None = None
        output = None
        try:
            output = await self.tools[call["function"]](**call["arguments"])
        except Exception as exc:
            error = {"error": type(exc).__name__, "message": str(exc)}
        response = {"request_id": request["id"], "output": output, "error": error}
        self.records.append(response)
        out[index] = response

    async def act(self, calls: list[dict[str, Any]], strategy: str = "concurrent") -> list[Any]:
        out: list[Any] = [None] * len(calls)
        if strategy == "sequential":
            for index, call in enumerate(calls):
                await self._one(index, call, out)
        else:
            async with trio.open_nursery() as nursery:
                for index, call in enumerate(calls):
                    nursery.start_soon(self._one, index, call, out)
        return out


def branch_factory(impl: str) -> Callable[[], Any]:
    """A fresh branch with ``add`` and ``boom`` registered (ImportError if there is none)."""
    if impl == "raw":
        make: Callable[[], Any] = RawBranch
    elif impl == "lionagi":
        from lionagi import Branch as LionagiBranch  # type: ignore[import-not-found,unused-ignore]

        def make() -> Any:
            return LionagiBranch(log_config={"auto_save_on_exit": False})
    else:
        from lionexec.act import Branch

        make = Branch

    def fresh() -> Any:
        branch = make()
        branch.register_tools([add, boom])
        return branch

    return fresh


def act_body(impl: str, strategy: str = "concurrent", function: str = "add") -> Any:
    """Time one ``act`` over *n* calls on a fresh branch."""
    fresh = branch_factory(impl)

    async def body(n: int) -> float:
        branch = fresh()
        calls = requests(n, function)
        start = time.perf_counter()
        responses = await branch.act(calls, strategy=strategy)
        elapsed = time.perf_counter() - start
        _verify(responses, n, function == "add")
        return elapsed

    return body


def _succeeded(response: Any) -> bool:
    if isinstance(response, dict):  # raw
        return response["error"] is None
    outcome = getattr(response, "outcome", None)  # lionexec: completed, failed, denied, ...
    if outcome is not None:
        return bool(outcome == "completed")
    return response.output is not None  # lionagi: a failure's output is None


def _verify(responses: list[Any], n: int, ok: bool) -> None:
    """Every call answered, and answered as expected (not denied, invalid, ...)."""
    if len(responses) != n:
        raise AssertionError(f"{len(responses)} responses for {n} calls")
    wrong = [r for r in responses if _succeeded(r) != ok]
    if wrong:
        raise AssertionError(f"{len(wrong)} of {n} calls ended unexpectedly: {wrong[0]!r}")


def cases(impl: str, quick: bool) -> list[Case]:
    logging.disable(logging.CRITICAL)
    small, large = (200, 2_000) if quick else (1_000, 10_000)
    try:
        fresh = branch_factory(impl)
    except ImportError as exc:
        return unavailable(cases("raw", quick), f"not implemented yet ({exc})")

    async def retained(n: int) -> tuple[int, int]:
        branch = fresh()
        calls = requests(n)
        probe = MemoryProbe()
        responses = await branch.act(calls, strategy="concurrent")
        _verify(responses, n, ok=True)
        del responses
        return probe.stop()

    return [
        Case(f"act: {k(small)} concurrent calls", small, act_body(impl), warmup=100),
        Case(f"act: {k(large)} concurrent calls", large, act_body(impl), warmup=100),
        Case(
            f"act: {k(small)} sequential calls",
            small,
            act_body(impl, "sequential"),
            warmup=100,
        ),
        Case(
            f"act: {k(small)} failing calls (concurrent)",
            small,
            act_body(impl, function="boom"),
            warmup=100,
        ),
        Case(
            f"act: retained per call, {k(large)} concurrent",
            large,
            retained,
            kind="memory",
            peak=True,
            warmup=100,
        ),
    ]


if __name__ == "__main__":
    main(cases)
