"""Ctrl+C soak driver: run tool-call batches until a real SIGINT, then check the evidence.

Run as a plain script (``python tests/support/ki_driver.py --seed 7 --duration 0.6``). It
builds a :class:`~lionexec.Branch` with a mix of tools (fast async, slow async on
``trio.sleep``, sync tools offloaded to worker threads, an inline sync tool, a transformed
tool, failing and retried tools, timeouts, invalid calls, hooks and a message callback), prints
one ``{"ready": ...}`` line once it is inside ``trio.run``, then runs concurrent, sequential,
overlapping and error-raising batches in a loop for ``--duration`` seconds of trio's clock
under trio's default ``KeyboardInterrupt`` delivery.

Whatever ends the run (a ``KeyboardInterrupt`` caught at the top level, outside
``trio.run``, or the loop running out of time), it checks the evidence of the branch:

* :func:`lionexec.testing.assert_consistent`;
* every request has exactly one response (counted independently of the history's index);
* every log record's event status, record status and outcome equal its response's;
* what escaped ``trio.run`` is the ``KeyboardInterrupt`` (bare, or in a group whose other
  members are only ``trio.Cancelled`` or this driver's own tool failures): no
  ``HistoryError`` or other error replaced it.

It prints one JSON line (``{"verdict": ..., ...}``) and exits with the verdict's code:

====================== ==== ================================================================
verdict                code meaning
====================== ==== ================================================================
ok-interrupted            0 interrupted by the ``KeyboardInterrupt``; every invariant holds
finished-before-signal   10 the batches ended before the signal landed; invariants hold
violation                20 an invariant failed (the JSON line says which)
other                    30 the driver itself broke (bad arguments, an unexpected error), or
                            trio's own state was corrupted where the interrupt landed
                            ("nursery stack corrupted": raw trio does the same), counted apart
====================== ==== ================================================================

A run that never exits is *wedged*: the caller detects it with a timeout. ``SIGUSR1`` dumps
every thread's stack to stderr (``faulthandler``) so a wedge can be diagnosed before it is
killed. ``--raw`` runs comparable work in raw trio (no lionexec) for comparing wedges.

``--sweep POINTS`` sends no signal: it runs the workload (``--batches`` batches on trio's mock
clock) POINTS times in this process and, in each run, plays trio's SIGINT handler itself at
one sampled line of lionexec code (``KeyboardInterrupt`` raised there if the frame is not
KI-protected, ``deliver_ki()`` if it is), so the windows a real signal rarely hits are all
reached. It prints a JSON line per violation and a summary; exit code 20 if any.

Imports are kept to what the run needs: subprocess start-up dominates a soak.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import linecache
import os
import signal
import sys
import time
import traceback
from collections import Counter
from functools import partial
from typing import Any

EXIT_OK_INTERRUPTED = 0
EXIT_FINISHED = 10
EXIT_VIOLATION = 20
EXIT_OTHER = 30

VERDICT_CODES = {
    "ok-interrupted": EXIT_OK_INTERRUPTED,
    "finished-before-signal": EXIT_FINISHED,
    "violation": EXIT_VIOLATION,
    "other": EXIT_OTHER,
}


class ToolFailure(Exception):
    """What the driver's failing tools raise (expected in a group next to the interrupt)."""


class State:
    """What the run did, read after ``trio.run`` returns or raises."""

    def __init__(self) -> None:
        self.batches = 0
        self.raised = 0  # batches whose act() raised a tool failure (suppress_errors=False)
        self.finished = False  # the loop ran out of time: every batch returned


# -- the run --------------------------------------------------------------------------------


def build_branch() -> Any:
    import trio

    from lionexec import Branch, HookPoint, Tool

    async def add(a: int, b: int) -> int:
        """Fast async: no checkpoint of its own."""
        return a + b

    async def echo(text: str) -> str:
        """Fast async with one checkpoint."""
        await trio.lowlevel.checkpoint()
        return text

    async def nap(seconds: float) -> str:
        """Slow async, on trio's clock."""
        await trio.sleep(seconds)
        return "rested"

    def sync_sum(values: list[int]) -> int:
        """Sync, offloaded to a worker thread."""
        return sum(values)

    def sync_nap(seconds: float) -> float:
        """Sync and blocking, offloaded to a worker thread."""
        time.sleep(seconds)
        return seconds

    def inline_mul(a: int, b: int) -> int:
        """Sync, run inline on the trio thread."""
        return a * b

    async def fail(message: str) -> None:
        """Always fails."""
        raise ToolFailure(message)

    def sync_fail(message: str) -> None:
        """Always fails, in a worker thread."""
        raise ToolFailure(message)

    async def flaky(key: str) -> str:
        """Idempotent; fails on odd attempts (so it is retried)."""
        attempts[key] = attempts.get(key, 0) + 1
        await trio.lowlevel.checkpoint()
        if attempts[key] % 2:
            raise ToolFailure(f"flaky {key}")
        return key

    attempts: dict[str, int] = {}

    def double(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"a": arguments["a"] * 2, "b": arguments["b"]}

    branch = Branch()
    branch.register_tools(
        [
            add,
            echo,
            nap,
            sync_sum,
            sync_nap,
            Tool.from_function(inline_mul, inline=True),
            fail,
            sync_fail,
            Tool.from_function(flaky, idempotent=True),
            Tool.from_function(add, name="add_doubled", preprocessor=double),
        ]
    )
    branch.hooks.on(HookPoint.TOOL_PRE, lambda **kw: kw["tool_name"] != "denied_by_hook")
    branch.hooks.on(HookPoint.TOOL_POST, lambda **kw: None)
    branch.messages.on_message_added.append(lambda message: None)
    return branch


#: Proposal kinds (see :func:`proposals`), weighted towards quick calls: the trio thread then
#: spends most of a run in lionexec's own code, where a signal can land mid-bookkeeping.
KINDS = (0, 0, 0, 1, 1, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 9, 10, 11, 12, 12)


def proposals(rng: Any, count: int, *, serial: int) -> list[dict[str, Any]]:
    """*count* random proposals over every kind of call the branch knows."""
    made: list[dict[str, Any]] = []
    for index in range(count):
        tag = f"{serial}-{index}"
        kind = rng.choice(KINDS)
        if kind == 0:
            call = ("add", {"a": index, "b": serial})
        elif kind == 1:
            call = ("echo", {"text": tag})
        elif kind == 2:
            call = ("nap", {"seconds": rng.choice((0.0, 0.0, 0.001, 0.005, 0.02))})
        elif kind == 3:
            call = ("sync_sum", {"values": list(range(index + 3))})
        elif kind == 4:
            call = ("sync_nap", {"seconds": rng.choice((0.0, 0.001, 0.005))})
        elif kind == 5:
            call = ("inline_mul", {"a": index, "b": 3})
        elif kind == 6:
            call = ("fail", {"message": tag})
        elif kind == 7:
            call = ("sync_fail", {"message": tag})
        elif kind == 8:
            call = ("flaky", {"key": tag})
        elif kind == 9:
            call = ("add_doubled", {"a": index, "b": 1})
        elif kind == 10:
            call = ("no_such_tool", {"x": 1})  # invalid
        elif kind == 11:
            call = ("add", {"a": "not a number"})  # invalid
        else:
            call = ("add", {"a": 1, "b": 2})
        made.append({"function": call[0], "arguments": call[1]})
    return made


async def run_batches(
    branch: Any, state: State, duration: float, seed: int, batches: int | None = None
) -> None:
    import random

    import trio

    from lionexec import AlcallParams

    trio.lowlevel.enable_ki_protection(_overlapping)  # (registers its code: see there)
    rng = random.Random(seed)
    retrying = AlcallParams(retry_attempts=2, retry_initial_delay=0.001)
    timing_out = AlcallParams(timeout=0.004, return_exceptions=True)
    capped = AlcallParams(max_concurrent=3, retry_attempts=1)
    if batches is None:
        print(json.dumps({"ready": os.getpid()}), flush=True)
    deadline = trio.current_time() + duration
    while trio.current_time() < deadline and state.batches != batches:
        serial = state.batches
        step = serial % 6
        batch = proposals(rng, rng.randrange(1, 13), serial=serial)
        if step == 0:
            await branch.act(batch)
        elif step == 1:
            await branch.act(batch, strategy="sequential", call_params=retrying)
        elif step == 2:  # two batches overlapping on one branch
            other = proposals(rng, rng.randrange(1, 6), serial=-serial)
            await _overlapping(
                partial(branch.act, batch),
                partial(branch.act, other, strategy="sequential", call_params=capped),
            )
        elif step == 3:
            await branch.act(batch, call_params=timing_out)
        elif step == 4:  # a failure stops the batch: the rest is cancelled / never started
            stop = {"function": "fail", "arguments": {"message": "stop"}}
            batch.insert(rng.randrange(len(batch) + 1), stop)
            batch.append({"function": "nap", "arguments": {"seconds": 0.01}})
            try:
                await branch.act(batch, suppress_errors=False)
            except ToolFailure:
                state.raised += 1
            except Exception as exc:  # a tool's own group: still a tool failure
                if not _only(exc, ToolFailure):
                    raise
                state.raised += 1
        else:
            try:
                await branch.act(batch, strategy="sequential", suppress_errors=False)
            except ToolFailure:
                state.raised += 1
        state.batches += 1
    state.finished = True


async def _overlapping(*calls: Any) -> None:
    """Run the async callables *calls* concurrently, in a nursery of their own.

    KI-protected, as an application should hold a nursery around work that can outlive it: a
    ``KeyboardInterrupt`` that lands in this frame as it resumes from the nursery's
    ``__aexit__`` (after the body, outside the ``async with``'s exception table) leaves the
    nursery never exited. Its children (a cancelled call's shielded, bounded announcements)
    then outlive trio's init task, and ``trio.run`` ends in ``TrioInternalError``. This is
    trio's, not lionexec's (``test_ki_signals.py`` reproduces it in raw trio). It was the one
    violation in earlier soaks.
    """
    import trio

    async with trio.open_nursery() as nursery:
        for call in calls:
            nursery.start_soon(call)


async def run_raw(branch: Any, state: State, duration: float, seed: int) -> None:
    """Comparable work in raw trio: nurseries, sleeps, worker threads, failures."""
    import random

    import trio

    rng = random.Random(seed)

    async def one(kind: int) -> None:
        if kind == 0:
            await trio.lowlevel.checkpoint()
        elif kind == 1:
            await trio.sleep(rng.choice((0.0, 0.001, 0.005)))
        elif kind == 2:
            await trio.to_thread.run_sync(time.sleep, 0.001, abandon_on_cancel=True)
        else:
            try:
                raise ToolFailure("raw")
            except ToolFailure:
                pass

    print(json.dumps({"ready": os.getpid()}), flush=True)
    deadline = trio.current_time() + duration
    while trio.current_time() < deadline:
        async with trio.open_nursery() as nursery:
            for _ in range(rng.randrange(1, 9)):
                nursery.start_soon(one, rng.randrange(4))
        state.batches += 1
    state.finished = True


# -- line-level sweep (in-process, deterministic) ----------------------------------------------


class Injector:
    """Plays trio's SIGINT handler at the *target*-th line executed in lionexec's code.

    A ``sys.settrace`` hook counts the ``line`` events of frames in the ``lionexec`` package
    on the trio thread; at the chosen one it does what trio's handler does when a signal
    arrives there: raise ``KeyboardInterrupt`` in that frame if it is not KI-protected,
    otherwise ``deliver_ki()`` (delivery at the main task's next checkpoint). Once.

    Line starts over-approximate where CPython runs a signal handler (after a call returns,
    at a function's start, on a backward jump), with one exception the model must respect to
    be faithful: an exception is handled without any such check, so the ``except`` line and
    the first line of its body are not counted (a handler whose first statement calls a
    KI-protected function is atomic with the exception's arrival).
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.lines = 0
        self.fired: str | None = None
        self._handling: Any = None  # the frame whose last line was an ``except`` clause

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "call" or "/lionexec/" not in frame.f_code.co_filename:
            return None
        return self.local

    def local(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "line" or self.fired is not None:
            return self.local if self.fired is None else None
        code = frame.f_code
        text = linecache.getline(code.co_filename, frame.f_lineno).lstrip()
        if text.startswith("except") or self._handling is frame:
            self._handling = frame if text.startswith("except") else None
            return self.local
        self.lines += 1
        if self.lines < self.target:
            return self.local
        from trio._core._ki import ki_protection_enabled
        from trio._core._run import GLOBAL_RUN_CONTEXT

        where = f"{code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {code.co_name}"
        if ki_protection_enabled(frame):
            self.fired = where + " [deferred]"
            GLOBAL_RUN_CONTEXT.runner.deliver_ki()
            return None
        self.fired = where + " [raised]"
        raise KeyboardInterrupt


def _traced_run(branch: Any, state: State, injector: Injector, seed: int, batches: int) -> Any:
    """One run of *batches* batches on trio's mock clock, traced by *injector*."""
    import trio
    import trio.testing

    sys.settrace(injector)
    try:
        trio.run(
            run_batches,
            branch,
            state,
            float("inf"),
            seed,
            batches,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    except BaseException as exc:
        return exc
    finally:
        sys.settrace(None)
    return None


def sweep(points: int, seed: int, batches: int) -> int:
    """Inject one interrupt in each of *points* runs, at line counts spread over the workload.

    A first run counts the lines of lionexec code the workload executes (``L``); run *i*
    then interrupts at a random line (``Random(seed)``) of the *i*-th of *points* equal
    slices of ``[1, L]``. Prints one JSON line per violation and a summary line.
    """
    import random

    counter = Injector(sys.maxsize)
    _traced_run(build_branch(), State(), counter, seed, batches)
    total = counter.lines
    rng = random.Random(seed)
    width = max(total // points, 1)
    targets = [1 + i * width + rng.randrange(width) for i in range(points) if i * width < total]
    violations = 0
    verdicts: Counter[str] = Counter()
    for target in targets:
        branch = build_branch()
        state = State()
        injector = Injector(target)
        escaped = _traced_run(branch, state, injector, seed, batches)
        problems, facts = check_escaped(escaped)
        problems += check_evidence(branch)[0]
        verdict = verdict_of(state, escaped, problems, facts)
        verdicts[verdict] += 1
        if verdict == "violation":
            violations += 1
            report = {"target": target, "fired": injector.fired, **facts, "problems": problems}
            print(json.dumps(report), flush=True)
    summary = {"sweep": dict(sorted(verdicts.items())), "lines": total, "points": len(targets)}
    print(json.dumps(summary), flush=True)
    return EXIT_VIOLATION if violations else EXIT_OK_INTERRUPTED


# -- the verdict ----------------------------------------------------------------------------


def _only(exc: BaseException, *allowed: type[BaseException]) -> bool:
    """Whether *exc* is one of *allowed*, or a group of nothing else (at any depth)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only(inner, *allowed) for inner in exc.exceptions)
    return isinstance(exc, allowed)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _landed_at(exc: BaseException) -> str | None:
    """Where an exception was raised, as ``file:line func``: the innermost frame outside
    trio, and how a ``KeyboardInterrupt`` got there (``[handler]``: the signal handler
    raised it in running code; ``[checkpoint]``: trio delivered it at a checkpoint)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    how = ""
    if isinstance(exc, KeyboardInterrupt):
        last = frames[-1].name
        how = (
            " [handler]"
            if last == "handler"
            else " [checkpoint]"
            if last == "raise_cancel"
            else ""
        )
    ours = [f for f in frames if "/lionexec/" in f.filename.replace(os.sep, "/")]
    frame = (ours or frames)[-1]
    parts = frame.filename.replace(os.sep, "/").split("/")
    where = "/".join(parts[-2:])
    return f"{where}:{frame.lineno} {frame.name}{how}"


def check_escaped(escaped: BaseException | None) -> tuple[list[str], dict[str, Any]]:
    """Problems with what escaped ``trio.run``, and facts about it."""
    import trio

    facts: dict[str, Any] = {"escaped": None if escaped is None else type(escaped).__name__}
    if escaped is None:
        return [], facts
    leaves = _leaves(escaped)
    interrupts = [leaf for leaf in leaves if isinstance(leaf, KeyboardInterrupt)]
    facts["grouped"] = isinstance(escaped, BaseExceptionGroup)
    if interrupts:
        facts["ki_at"] = _landed_at(interrupts[0])
    problems = []
    others = [
        leaf
        for leaf in leaves
        if not isinstance(leaf, KeyboardInterrupt | trio.Cancelled | ToolFailure)
    ]
    if others and all(_trio_corrupted(leaf) for leaf in others):
        # trio's own state was broken by where the interrupt landed (a nursery left without
        # its __aexit__): raw trio does the same; counted apart, not blamed on lionexec
        facts["trio_corrupted"] = True
        return problems, facts
    if not interrupts:
        problems.append(f"no KeyboardInterrupt escaped trio.run, but {escaped!r}")
    if others:
        shown = "; ".join(f"{type(o).__name__}: {o} at {_landed_at(o)}" for o in others[:3])
        problems.append(f"the KeyboardInterrupt came with or was replaced by: {shown}")
    if len(interrupts) > 1:
        problems.append(f"{len(interrupts)} KeyboardInterrupts for one signal")
    return problems, facts


def _trio_corrupted(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "stack corrupted" in str(exc)


def check_evidence(branch: Any) -> tuple[list[str], dict[str, Any]]:
    """Problems with the branch's evidence, and counts."""
    from lionexec.testing import assert_consistent

    problems: list[str] = []
    messages = branch.messages
    requests = messages.requests()
    responses = messages.responses()
    try:
        assert_consistent(branch)
    except AssertionError as exc:
        problems.append(f"assert_consistent: {exc}")
    except Exception as exc:  # a broken history is a violation too
        problems.append(f"assert_consistent raised {exc!r}")
    answers = Counter(r.content.action_request_id for r in responses)
    for request in requests:
        if answers[request.id] != 1:
            problems.append(
                f"request {request.id} ({request.content.function}) has "
                f"{answers[request.id]} responses"
            )
    request_ids = {r.id for r in requests}
    strays = [r.id for r in responses if r.content.action_request_id not in request_ids]
    if strays:
        problems.append(f"responses answering no request in the history: {strays[:3]}")
    by_id = {r.id: r for r in responses}
    logged = Counter(record.response_id for record in branch.log)
    for record in branch.log:
        response = by_id.get(record.response_id)
        if response is None:
            problems.append(f"log record for call {record.call_id!r} names no response")
            continue
        content = response.content
        if logged[record.response_id] != 1:
            problems.append(f"{logged[record.response_id]} log records for {record.call_id!r}")
        if record.event.status is not content.status:
            problems.append(
                f"call {record.call_id!r}: event {record.event.status.value}, "
                f"response {content.status.value} ({content.outcome.value})"
            )
        if record.status is not content.status or record.outcome is not content.outcome:
            problems.append(
                f"call {record.call_id!r}: log {record.status.value}/{record.outcome.value}, "
                f"response {content.status.value}/{content.outcome.value}"
            )
    outcomes = Counter(r.content.outcome.value for r in responses)
    counts = {
        "requests": len(requests),
        "responses": len(responses),
        "log_records": len(branch.log),
        "outcomes": dict(sorted(outcomes.items())),
        "in_flight": branch.statistics().in_flight,
    }
    return problems[:10], counts


def verdict_of(
    state: State, escaped: BaseException | None, problems: list[str], facts: dict[str, Any]
) -> str:
    if problems:
        return "violation"
    if facts.get("trio_corrupted"):
        return "other"
    if escaped is None or state.finished:
        return "finished-before-signal"
    return "ok-interrupted"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=0.6, help="seconds of batches")
    parser.add_argument("--raw", action="store_true", help="raw trio work, no lionexec")
    parser.add_argument(
        "--sweep",
        type=int,
        metavar="POINTS",
        help="no signal: POINTS in-process runs, each interrupted at one line (see sweep())",
    )
    parser.add_argument("--batches", type=int, default=12, help="batches per sweep run")
    args = parser.parse_args(argv)
    if args.sweep:
        return sweep(args.sweep, args.seed, args.batches)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # a parent started without job control (``cmd &`` in a script) passes SIGINT on ignored;
    # give it back to Python, so trio installs its handler
    signal.signal(signal.SIGINT, signal.default_int_handler)

    import trio

    state = State()
    branch = None if args.raw else build_branch()
    work = run_raw if args.raw else run_batches
    escaped: BaseException | None = None
    try:
        try:
            trio.run(work, branch, state, args.duration, args.seed)
        finally:
            # The one signal of a run has landed or will be ignored: nothing below is torn.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except BaseException as exc:  # the KeyboardInterrupt, or what replaced it
        escaped = exc
    problems, facts = check_escaped(escaped)
    if problems or facts.get("trio_corrupted"):
        # the whole chain (a TrioInternalError's cause is where the run loop broke), for
        # the parent's record of this run
        traceback.print_exception(escaped, file=sys.stderr)
    counts: dict[str, Any] = {}
    if branch is not None:
        evidence_problems, counts = check_evidence(branch)
        problems += evidence_problems
    verdict = verdict_of(state, escaped, problems, facts)
    report = {
        "verdict": verdict,
        "seed": args.seed,
        "raw": args.raw,
        "batches": state.batches,
        "raised": state.raised,
        "finished": state.finished,
        **facts,
        **counts,
        "problems": problems,
    }
    print(json.dumps(report, allow_nan=False), flush=True)
    return VERDICT_CODES[verdict]


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:  # the driver broke: say so with a distinct code
        traceback.print_exc()
        print(json.dumps({"verdict": "other", "problems": ["driver error"]}), flush=True)
        code = EXIT_OTHER
    sys.stdout.flush()
    os._exit(code)  # worker threads left by an abandoned offload must not delay the exit
