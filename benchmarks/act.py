"""Branch.act (issues 6, 10, 13): batches of calls to a trivial async tool, governed, recorded.

Implementations (each in its own process):

* lionexec: ``lionexec.act.Branch``;
* lionagi 0.36.0: ``Branch(log_config={"auto_save_on_exit": False})`` (no key, no network on
  this path);
* raw (the *bare* floor): a nursery (or a loop, for sequential) that appends two dict records
  per call, a request and its response; nothing else;
* floor (the *equivalent-work* floor, :mod:`benchmarks._floor`): the same contract as
  lionexec in lean, slotted plain trio (envelope parsing, argument validation, call id,
  private argument copy, event, log record, two-way linked pair, cancellation safety).

Every run uses a fresh branch with the tools registered. Scenarios: concurrent, sequential and
failing batches; a single-call ``act`` repeated in sequence (the server's shape); a governed
batch (session gate, rules policy, ``tool.pre``/``tool.post`` hooks) beside the ungoverned one
in the same process; lionexec / floor and governed / ungoverned ratios from runs interleaved in
one process (robust to load from elsewhere on a shared machine); memory retained per successful
and per failing call; a long-lived branch (100 batches of 1k calls: total time, max GC pause,
the same with ``gc.freeze()`` after each batch, memory growth after warm-up); and the
longest trio scheduler step of a 10k-call batch with a JSONL log, against a sink that writes
synchronously on the trio thread (the old JSONL sink). Logging is disabled in every process:
lionagi logs each failing call, and stderr output is not what is measured.
"""

from __future__ import annotations

import gc
import logging
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from lionexec._ids import uuid4  # the fast id generator, in every floor (issue 13)

from ._harness import Case, MemoryProbe, k, main, unavailable
from ._toolfuncs import add, boom

#: Long-lived scenario: batches per run, and the batches counted as warm-up.
BATCHES, WARM_BATCHES = 100, 10
QUICK_BATCHES, QUICK_WARM_BATCHES = 20, 5
#: How many calls a long-lived lionexec branch keeps, if ``Branch(retain=...)`` exists.
RETAIN, QUICK_RETAIN = 10_000, 1_000


def requests(n: int, function: str = "add") -> list[dict[str, Any]]:
    if function == "boom":
        return [{"function": "boom", "arguments": {"a": i}} for i in range(n)]
    return [{"function": "add", "arguments": {"a": i, "b": 1}} for i in range(n)]


class RawBranch:
    """The bare floor: look the tool up, call it, keep a request record and a response record."""

    def __init__(self) -> None:
        self.tools: dict[str, Callable[..., Awaitable[Any]]] = {}
        self.records: list[dict[str, Any]] = []

    def register_tools(self, tools: list[Callable[..., Awaitable[Any]]]) -> None:
        for tool in tools:
            self.tools[tool.__name__] = tool

    async def _one(self, index: int, call: dict[str, Any], out: list[Any]) -> None:
        request = {
            "id": uuid4(),
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


def _retention(retain: int) -> tuple[dict[str, Any], str]:
    """lionexec ``Branch`` keyword arguments for a bounded branch, and a note saying which."""
    import attrs

    from lionexec.act import Branch

    if "retain" not in attrs.fields_dict(Branch):
        return {}, "without retention: Branch(retain=...) does not exist yet"
    try:
        Branch(retain=retain)  # type: ignore[call-arg,unused-ignore]
    except Exception as exc:
        return {}, f"without retention: Branch(retain={retain}) refused: {exc}"[:160]
    return {"retain": retain}, f"with Branch(retain={retain})"


def branch_factory(
    impl: str, *, governed: bool = False, retain: int | None = None
) -> Callable[[], Any]:
    """A fresh branch with ``add`` and ``boom`` registered (ImportError if there is none).

    *governed* (lionexec only): a session gate, a rules policy and ``tool.pre``/``tool.post``
    hooks, all allowing every call. *retain* (lionexec and the floor): ``Branch(retain=retain)``,
    if that exists; the floor trims the same way.
    """
    make: Callable[[], Any]
    if impl == "raw":
        make = RawBranch
    elif impl == "floor":
        from ._floor import FloorBranch

        def make() -> Any:
            return FloorBranch(retain)
    elif impl == "lionagi":
        from lionagi import Branch as LionagiBranch  # type: ignore[import-not-found,unused-ignore]

        def make() -> Any:
            return LionagiBranch(log_config={"auto_save_on_exit": False})
    elif governed:
        from lionexec.act import Branch
        from lionexec.governance import HookPoint, PermissionPolicy, SessionObserver

        def make() -> Any:
            observer = SessionObserver()
            observer.gate(lambda invocation: True)
            policy = PermissionPolicy(mode="rules", allow={"add": ["*"], "boom": ["*"]})
            branch = Branch(observer=observer, policy=policy)
            branch.hooks.on(HookPoint.TOOL_PRE, lambda **_: None)
            branch.hooks.on(HookPoint.TOOL_POST, lambda **_: None)
            return branch
    else:
        from lionexec.act import Branch

        kwargs = _retention(retain)[0] if retain else {}

        def make() -> Any:
            return Branch(**kwargs)

    def fresh() -> Any:
        branch = make()
        branch.register_tools([add, boom])
        return branch

    return fresh


def act_body(
    impl: str, strategy: str = "concurrent", function: str = "add", governed: bool = False
) -> Any:
    """Time one ``act`` over *n* calls on a fresh branch."""
    fresh = branch_factory(impl, governed=governed)

    async def body(n: int) -> float:
        branch = fresh()
        calls = requests(n, function)
        start = time.perf_counter()
        responses = await branch.act(calls, strategy=strategy)
        elapsed = time.perf_counter() - start
        _verify(responses, n, function == "add")
        return elapsed

    return body


def single_call_body(impl: str) -> Any:
    """The server's shape: *n* ``act`` calls of one call each, one after another."""
    fresh = branch_factory(impl)

    async def body(n: int) -> float:
        branch = fresh()
        calls = [[call] for call in requests(n)]
        responses: list[Any] = []
        start = time.perf_counter()
        for call in calls:
            responses += await branch.act(call)
        elapsed = time.perf_counter() - start
        _verify(responses, n, ok=True)
        return elapsed

    return body


def retained_body(impl: str, function: str = "add") -> Any:
    fresh = branch_factory(impl)

    async def body(n: int) -> tuple[int, int]:
        branch = fresh()
        calls = requests(n, function)
        probe = MemoryProbe()
        responses = await branch.act(calls, strategy="concurrent")
        _verify(responses, n, ok=function == "add")
        del responses
        return probe.stop()

    return body


def long_lived_body(impl: str, batches: int, warm: int, retain: int) -> Any:
    """*batches* batches of *n* concurrent calls into one branch: time, GC pauses, memory.

    Three runs, each on a fresh branch: one timed, with every cyclic-GC pass timed through
    ``gc.callbacks``; the same with ``gc.freeze()`` after each batch (the guidance for servers:
    what survived a batch is not scanned again); one traced with :mod:`tracemalloc` (which
    slows everything down) for the memory after each batch.
    """
    fresh = branch_factory(impl, retain=retain)

    async def timed(n: int, freeze: bool) -> tuple[float, list[float], list[int]]:
        calls = requests(n)
        pauses: list[float] = []
        started = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pauses.append(time.perf_counter() - started[0])

        branch = fresh()
        frozen: list[int] = []  # objects in the permanent generation after each batch
        gc.collect()
        gc.callbacks.append(on_gc)
        try:
            start = time.perf_counter()
            for _ in range(batches):
                responses = await branch.act(calls)
                if freeze:
                    gc.freeze()
                    frozen.append(gc.get_freeze_count())
            elapsed = time.perf_counter() - start
        finally:
            gc.callbacks.remove(on_gc)
            gc.unfreeze()
        _verify(responses, n, ok=True)
        return elapsed, pauses, frozen

    async def traced(n: int) -> list[int]:
        calls = requests(n)
        branch = fresh()
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            sizes = []
            for _ in range(batches):
                await branch.act(calls)
                sizes.append(tracemalloc.get_traced_memory()[0] - base)
        finally:
            tracemalloc.stop()
        return sizes

    async def body(n: int) -> dict[str, tuple[str, float]]:
        elapsed, pauses, _ = await timed(n, freeze=False)
        frozen_elapsed, frozen_pauses, frozen = await timed(n, freeze=True)
        sizes = await traced(n)
        warmed, later = sizes[warm - 1], max(sizes[warm:])
        total = batches * n
        return {
            "time per call": ("us/op", elapsed / total * 1e6),
            "max GC pause": ("us", max(pauses, default=0.0) * 1e6),
            "GC time share": ("%", sum(pauses) / elapsed * 100),
            "time per call, gc.freeze() after each batch": ("us/op", frozen_elapsed / total * 1e6),
            "max GC pause, gc.freeze() after each batch": (
                "us",
                max(frozen_pauses, default=0.0) * 1e6,
            ),
            # trimmed calls caught in reference cycles stay in the permanent generation
            "frozen objects kept per call after the warm-up, gc.freeze() after each batch": (
                "objects/item",
                (max(frozen[warm:]) - frozen[warm - 1]) / ((batches - warm) * n),
            ),
            f"memory after {warm} batches (warm-up)": ("B", float(warmed)),
            "most memory after the warm-up": ("B", float(later)),
            "memory growth per call after the warm-up": (
                "B/item",
                (later - warmed) / ((batches - warm) * n),
            ),
        }

    return body


def paired_body(pairs: dict[str, tuple[Any, Any]], runs: int) -> Any:
    """The ratio first / second of each named pair of bodies, from runs interleaved in one
    process (who runs first alternates).

    Ratios across processes compare runs made minutes apart on a shared machine; here each
    run of one side is followed at once by the other's and the ratio of each pair is kept,
    so a burst of load elsewhere hits both sides. (Against the floor, the floor then runs with
    lionexec imported: its cyclic GC passes see more objects, a bias in lionexec's favour.)
    """

    async def body(n: int) -> dict[str, tuple[str, list[float]]]:
        out: dict[str, tuple[str, list[float]]] = {}
        for name, (mine, other) in pairs.items():
            ratios: list[float] = []
            for index in range(runs if n > 1 else 1):
                gc.collect()
                if index % 2 == 0:
                    a = await mine(n)
                    b = await other(n)
                else:
                    b = await other(n)
                    a = await mine(n)
                ratios.append(a / b)
            out[name] = ("x", ratios)
        return out

    return body


def floor_pairs() -> dict[str, tuple[Any, Any]]:
    """lionexec against the equivalent floor, per scenario (see :func:`paired_body`)."""
    return {
        "concurrent calls": (act_body("lionexec"), act_body("floor")),
        "sequential calls": (act_body("lionexec", "sequential"), act_body("floor", "sequential")),
        "failing calls (concurrent)": (
            act_body("lionexec", function="boom"),
            act_body("floor", function="boom"),
        ),
        "single-call act, in sequence": (single_call_body("lionexec"), single_call_body("floor")),
    }


# -- event-loop stall: the longest trio scheduler step --------------------------------------------


class LongestStep(trio.abc.Instrument):
    """The longest single task step (the time between two checkpoints of one task): overall,
    outside one task (the one that called ``act()``, whose own steps read, record and spawn
    the whole batch), and in the evidence sinks' drain tasks (``SinkFeed.serve``)."""

    def __init__(self, apart: trio.lowlevel.Task) -> None:
        self.longest = 0.0
        self.longest_elsewhere = 0.0
        self.longest_in_sink = 0.0
        self._apart = apart
        self._started: float | None = None  # the step that adds the instrument is not counted

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is not None:
            step = time.perf_counter() - self._started
            self.longest = max(self.longest, step)
            if task is not self._apart:
                self.longest_elsewhere = max(self.longest_elsewhere, step)
            if "SinkFeed" in task.name:
                self.longest_in_sink = max(self.longest_in_sink, step)
            self._started = None


def blocking_sink(path: Path) -> Any:
    """The old JSONL sink: each record written and flushed on the trio thread."""
    from lionexec._unstructure import converter
    from lionexec.act import EvidenceRecord, JsonlSink

    class BlockingJsonlSink(JsonlSink):
        async def write(self, records: Sequence[EvidenceRecord]) -> None:
            for record in records:
                if record.log is not None:
                    if self._file is None:
                        self._file = self.path.open("a", encoding="utf-8")
                    self._file.write(self._dumps(record.log) + "\n")
                    self._file.flush()
            await trio.lowlevel.checkpoint()

    return BlockingJsonlSink(path, dumps=converter.dumps)


def stall_body(sink: str, runs: int) -> Any:
    """The longest scheduler steps of *runs* batches of *n* calls into a branch with a JSONL log.

    *sink*: ``"thread"`` (``Branch.with_log_file``: serialized on the trio thread, written in
    a worker thread), ``"blocking"`` (written and flushed per record on the trio thread) or
    ``"none"`` (no log file: the batch's own steps). Measured from entering the branch to
    leaving it, so the drain at the end counts. Reported: the longest step of any task, and
    the longest of the sink's drain task (without a sink: the longest outside the task that
    called ``act()``, whose own steps read, record and spawn the whole batch).
    """
    from lionexec.act import Branch

    async def once(n: int, directory: str) -> LongestStep:
        calls = requests(n)
        path = Path(directory) / f"log-{sink}.jsonl"
        path.unlink(missing_ok=True)
        if sink == "thread":
            branch = Branch.with_log_file(path)
        elif sink == "blocking":
            branch = Branch(sinks=(blocking_sink(path),))
        else:
            branch = Branch()
        branch.register_tools([add, boom])
        instrument = LongestStep(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(instrument)
        try:
            async with branch:
                responses = await branch.act(calls)
        finally:
            trio.lowlevel.remove_instrument(instrument)
        _verify(responses, n, ok=True)
        if sink != "none":
            lines = path.read_text().count("\n")
            if lines != n:
                raise AssertionError(f"{lines} log lines for {n} calls")
        return instrument

    async def body(n: int) -> dict[str, tuple[str, list[float]]]:
        steps: list[LongestStep] = []
        with tempfile.TemporaryDirectory() as directory:
            for _ in range(runs if n > 1 else 1):
                gc.collect()
                steps.append(await once(n, directory))
        out = {"longest trio step": ("us", [s.longest * 1e6 for s in steps])}
        if sink == "none":
            out["longest trio step outside act()'s task"] = (
                "us",
                [s.longest_elsewhere * 1e6 for s in steps],
            )
        else:
            out["longest step of the sink's drain task"] = (
                "us",
                [s.longest_in_sink * 1e6 for s in steps],
            )
        return out

    return body


# -- checks --------------------------------------------------------------------------------------


def _succeeded(response: Any) -> bool:
    if isinstance(response, dict):  # raw
        return response["error"] is None
    outcome = getattr(response, "outcome", None)  # lionexec, floor: completed, failed, ...
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
    batches, warm = (QUICK_BATCHES, QUICK_WARM_BATCHES) if quick else (BATCHES, WARM_BATCHES)
    retain = QUICK_RETAIN if quick else RETAIN
    try:
        branch_factory(impl)
    except ImportError as exc:
        return unavailable(cases("floor", quick), f"not implemented yet ({exc})")

    names = {
        "governed": f"act: {k(small)} concurrent calls, governed (gate, rules, pre/post hooks)",
        "long": f"act: long-lived branch, {batches} batches × {k(small)} calls",
        "stall": f"act: {k(large)} calls with a JSONL log",
        "stall_blocking": f"act: {k(large)} calls with a JSONL log written on the trio thread "
        "(old sink)",
        "stall_none": f"act: {k(large)} calls without a log file",
    }
    out = [
        Case(f"act: {k(small)} concurrent calls", small, act_body(impl), warmup=100),
        Case(f"act: {k(large)} concurrent calls", large, act_body(impl), warmup=100),
        Case(f"act: {k(small)} sequential calls", small, act_body(impl, "sequential"), warmup=100),
        Case(
            f"act: {k(small)} failing calls (concurrent)",
            small,
            act_body(impl, function="boom"),
            warmup=100,
        ),
        Case(f"act: single-call act × {k(small)}, in sequence", small, single_call_body(impl)),
    ]
    if impl == "lionexec":  # against the ungoverned row above, same process
        out.append(Case(names["governed"], small, act_body(impl, governed=True), warmup=100))
        runs = 6 if quick else 10
        governed = {"concurrent calls": (act_body(impl, governed=True), act_body(impl))}
        out += [
            Case(
                f"act: governed / ungoverned, paired in one process, {k(small)}",
                small,
                paired_body(governed, runs),
                kind="report",
                warmup=100,
            ),
            Case(
                f"act: lionexec / equivalent floor, paired in one process, {k(small)}",
                small,
                paired_body(floor_pairs(), runs),
                kind="report",
                warmup=100,
            ),
        ]
    out += [
        Case(
            f"act: retained per call, {k(large)} concurrent",
            large,
            retained_body(impl),
            kind="memory",
            peak=True,
            warmup=100,
        ),
        Case(
            f"act: retained per failing call, {k(large)} concurrent",
            large,
            retained_body(impl, "boom"),
            kind="memory",
            warmup=100,
        ),
    ]
    # lionagi: not run (about 80 s per run at its per-call cost); raw: no history to keep
    if impl in ("lionexec", "floor"):
        if impl == "lionexec":
            note = _retention(retain)[1]
        else:
            note = f"retaining {retain} calls, trimmed as Branch(retain={retain}) trims"
        body = long_lived_body(impl, batches, warm, retain)
        out.append(Case(names["long"], small, body, kind="report", note=note, warmup=1))
    if impl == "lionexec":  # lionexec's sinks only
        sinks = {"stall": "thread", "stall_blocking": "blocking", "stall_none": "none"}
        for key, sink in sinks.items():
            body = stall_body(sink, runs=3 if quick else 5)
            out.append(Case(names[key], large, body, kind="report", warmup=1))
    return out


if __name__ == "__main__":
    main(cases)
