"""Tools (issue 4): resolve-and-invoke a registered tool, the sync-tool policy, registration.

Per call, each implementation resolves the tool by name, builds its call and runs it:

* lionexec: ``manager.match_tool(name, arguments)`` then ``await call.invoke()``; sync tools
  registered as ``Tool.from_function(func, inline=True)`` run inline, plain
  ``Tool.from_function(func)`` in a worker thread.
* lionagi 0.36.0: ``await ActionManager.invoke({"function": name, "arguments": ...})``. It
  always runs sync tools inline on the event loop (it has no sync-tool policy), so the offload
  rows are n/a.
* raw trio: a dict lookup and ``await func(**arguments)`` (or a direct call, or
  ``trio.to_thread.run_sync``) inside the capture wrapper of :mod:`benchmarks._subjects`.

Registration: ``register_tools`` of 1k distinct functions, then every schema (raw: n/a).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from ._harness import Case, k, main, unavailable
from ._subjects import RawEvent
from ._toolfuncs import add, add_sync

TEMPLATE = '''
def tool_{i}(a: int, b: float, name: str = "x", flag: bool = False) -> int:
    """Tool number {i}: a realistic small signature.

    Args:
        a: an integer.
        b: a float.
        name: a label.
        flag: a switch.
    """
    return a
'''


def many_functions(n: int) -> list[Callable[..., Any]]:
    namespace: dict[str, Any] = {}
    source = "".join(TEMPLATE.format(i=i) for i in range(n))
    # dont_inherit: real annotations, not this module's postponed (string) ones
    exec(compile(source, "<tools>", "exec", dont_inherit=True), namespace)
    return [namespace[f"tool_{i}"] for i in range(n)]


class RawCall(RawEvent):
    """The floor for one tool call: the capture wrapper around a looked-up function."""

    __slots__ = ("arguments", "func", "mode")

    def __init__(self, func: Callable[..., Any], arguments: dict[str, Any], mode: str) -> None:
        super().__init__()
        self.func, self.arguments, self.mode = func, arguments, mode

    async def _work(self) -> Any:
        if self.mode == "async":
            return await self.func(**self.arguments)
        if self.mode == "thread":
            return await trio.to_thread.run_sync(lambda: self.func(**self.arguments))
        return self.func(**self.arguments)


class Invoker:
    """``await invoker(name, arguments)`` runs one resolved call; returns it when done."""

    def __init__(self, impl: str, sync_mode: str) -> None:
        self.impl = impl
        tool = add if sync_mode == "async" else add_sync
        if impl == "raw":
            self.raw_tools = {tool.__name__: tool}
            self.mode = sync_mode
        elif impl == "lionagi":
            from lionagi.protocols.action.manager import (  # type: ignore[import-not-found,unused-ignore]
                ActionManager as LionagiManager,
            )

            self.manager: Any = LionagiManager()
            self.manager.register_tools([tool])
        else:
            from lionexec.tools import ActionManager, Tool

            self.manager = ActionManager()
            self.manager.register_tool(Tool.from_function(tool, inline=sync_mode == "inline"))

    async def __call__(self, name: str, arguments: dict[str, Any]) -> Any:
        if self.impl == "raw":
            call: Any = RawCall(self.raw_tools[name], arguments, self.mode)
            await call.invoke()
        elif self.impl == "lionagi":
            call = await self.manager.invoke({"function": name, "arguments": arguments})
        else:
            call = self.manager.match_tool(name, arguments)
            await call.invoke()
        return call


def _check(calls: list[Any]) -> None:
    bad = [c for c in calls if c.status != "completed"]
    if bad:
        raise AssertionError(f"{len(bad)} of {len(calls)} calls did not complete: {bad[0]!r}")


def invoke_body(impl: str, sync_mode: str, concurrent: bool = False) -> Any:
    name = "add" if sync_mode == "async" else "add_sync"

    async def body(n: int) -> float:
        invoke = Invoker(impl, sync_mode)
        arguments = [{"a": i, "b": 1} for i in range(n)]
        calls: list[Any] = []
        start = time.perf_counter()
        if concurrent:

            async def one(args: dict[str, Any]) -> None:
                calls.append(await invoke(name, args))

            async with trio.open_nursery() as nursery:
                for args in arguments:
                    nursery.start_soon(one, args)
        else:
            for args in arguments:
                calls.append(await invoke(name, args))
        elapsed = time.perf_counter() - start
        _check(calls)
        return elapsed

    return body


def register_body(impl: str) -> Any:
    if impl == "lionagi":
        from lionagi.protocols.action.manager import (  # type: ignore[import-not-found,unused-ignore]
            ActionManager as LionagiManager,
        )

        def register(funcs: list[Callable[..., Any]]) -> list[dict[str, Any]]:
            manager = LionagiManager()
            manager.register_tools(funcs)
            return list(manager.schema_list)
    else:
        from lionexec.tools import ActionManager

        def register(funcs: list[Callable[..., Any]]) -> list[dict[str, Any]]:
            manager = ActionManager()
            manager.register_tools(funcs)
            return manager.schemas()

    async def body(n: int) -> float:
        funcs = many_functions(n)
        start = time.perf_counter()
        schemas = register(funcs)
        elapsed = time.perf_counter() - start
        if len(schemas) != n:
            raise AssertionError(f"{len(schemas)} schemas for {n} tools")
        return elapsed

    return body


def cases(impl: str, quick: bool) -> list[Case]:
    n, n_thread, n_tools = (2_000, 500, 100) if quick else (20_000, 5_000, 1_000)
    names = {
        "async": f"tools: invoke {k(n)} async tool calls",
        "inline": f"tools: invoke {k(n)} sync tools inline",
        "thread": f"tools: {k(n_thread)} sync tools offloaded, one at a time",
        "threads": f"tools: {k(n_thread)} sync tools offloaded, concurrently",
        "register": f"tools: register {k(n_tools)} tools + schemas",
    }
    if impl == "lionexec":
        try:
            import lionexec.tools  # noqa: F401
        except ImportError as exc:
            return unavailable(cases("raw", quick), f"not implemented yet ({exc})")
    no_offload = "lionagi runs sync tools inline; it has no thread offload"
    if impl == "lionagi":
        thread_cases = [
            Case(names["thread"], n_thread, None, unavailable=no_offload),
            Case(names["threads"], n_thread, None, unavailable=no_offload),
        ]
    else:
        thread_cases = [
            Case(names["thread"], n_thread, invoke_body(impl, "thread"), warmup=200),
            Case(names["threads"], n_thread, invoke_body(impl, "thread", True), warmup=200),
        ]
    if impl == "raw":
        register = Case(names["register"], n_tools, None, unavailable="no raw-trio equivalent")
    else:
        register = Case(names["register"], n_tools, register_body(impl), warmup=50)
    out = [
        Case(names["async"], n, invoke_body(impl, "async")),
        Case(names["inline"], n, invoke_body(impl, "inline")),
        *thread_cases,
        register,
    ]
    if impl == "lionexec":
        out.append(paired_register_case(n_tools, runs=6 if quick else 16))
    return out


def paired_register_case(n_tools: int, runs: int) -> Case:
    """lionagi / lionexec registering *n_tools* tools, interleaved in this process.

    Registration is synchronous, so both libraries can run side by side here; the unpaired
    row compares processes run minutes apart, and on a shared VM their medians moved between
    0.9× and 1.5× from one bench run to the next.
    """
    name = f"tools: lionagi / lionexec, paired in one process, {k(n_tools)}"
    try:
        import lionagi  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return Case(name, n_tools, None, kind="report", unavailable="lionagi is not installed")
    from .act import paired_body

    pair = {"register tools + schemas": (register_body("lionagi"), register_body("lionexec"))}
    return Case(name, n_tools, paired_body(pair, runs), kind="report", warmup=50)


if __name__ == "__main__":
    main(cases)
