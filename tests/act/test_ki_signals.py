"""A real SIGINT at random instants never tears the evidence.

Each run starts ``tests/support/ki_driver.py`` as a subprocess; once the driver says it is
inside ``trio.run`` (its ``ready`` line), the test waits a random delay (seeded) spanning the
whole run of batches, plus a little past its end, and sends one real ``SIGINT``. The driver
checks the evidence itself (:func:`lionexec.testing.assert_consistent`, one response per
request, log and event statuses equal to the response's, the ``KeyboardInterrupt`` not
replaced) and prints its verdict as one JSON line.

This test keeps time with the real clock on purpose: the instant a signal lands is the point.
Every wait is bounded; a run that does not exit in time is *wedged*, dumped (``SIGUSR1``,
faulthandler) and killed, and counted apart. Wedges are rare (1 in 800 runs so far: the trio
thread idle in its epoll wait, no worker thread left) and not yet traced to lionexec or shown
in raw trio (``ki_driver.py --raw``), so up to :data:`WEDGES_TOLERATED` are reported, not
failed; a violation of the evidence never is.

The suite runs :data:`RUNS` runs (``LIONEXEC_KI_RUNS`` overrides, as ``nox -s ki-soak`` does
with 200); ``LIONEXEC_KI_SEED`` picks the delays; ``LIONEXEC_KI_JOBS`` runs that many at once.

Real signals land where the machine's timing puts them, mostly at trio checkpoints. The second
test is the deterministic complement: the driver's ``--sweep`` plays trio's SIGINT handler
itself (raise in unprotected code, defer in KI-protected code) at sampled *lines* of lionexec
code, so every window between two evidence writes is reached, in one process, in seconds
(``LIONEXEC_KI_SWEEP_POINTS``; the nox session runs many more).
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

DRIVER = Path(__file__).resolve().parents[1] / "support" / "ki_driver.py"

RUNS = int(os.environ.get("LIONEXEC_KI_RUNS", "20"))
SEED = int(os.environ.get("LIONEXEC_KI_SEED", "20261201"))
JOBS = int(os.environ.get("LIONEXEC_KI_JOBS", "2"))
#: Seconds of batches in each run (trio's clock inside the driver).
DURATION = float(os.environ.get("LIONEXEC_KI_DURATION", "0.4"))
#: Signals are sent up to this far past the end of the batches (some runs finish first).
OVERSHOOT = 0.1
READY_TIMEOUT = 60.0  # interpreter start-up and imports, on a busy machine
EXIT_TIMEOUT = 30.0  # after the signal (or the end of the batches)

#: In-process runs of the line sweep, each interrupted at one line of lionexec code.
SWEEP_POINTS = int(os.environ.get("LIONEXEC_KI_SWEEP_POINTS", "60"))

#: Wedged runs tolerated (reported in the summary): about one in a hundred.
WEDGES_TOLERATED = RUNS // 100 + 1

VERDICTS = {0: "ok-interrupted", 10: "finished-before-signal", 20: "violation", 30: "other"}


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes | None, bytes]:
    """The first line *proc* writes to stdout within *timeout* seconds, and what followed it."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffered = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in buffered:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None, buffered
            chunk = os.read(fd, 65536)
            if not chunk:
                return None, buffered
            buffered += chunk
    line, _, rest = buffered.partition(b"\n")
    return line, rest


def one_run(index: int, seed: int, delay: float, duration: float) -> dict[str, Any]:
    """Run the driver once, send SIGINT *delay* seconds after it is ready; its verdict."""
    command = [
        sys.executable,
        str(DRIVER),
        "--seed",
        str(seed),
        "--duration",
        str(duration),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    result: dict[str, Any] = {"run": index, "seed": seed, "delay": round(delay, 4)}
    try:
        ready, rest = _read_line(proc, READY_TIMEOUT)
        if ready is None:
            result["verdict"] = "wedged"
            result["stage"] = "start-up"
            return result
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack
            time.sleep(1.0)
            proc.kill()
            out, err = proc.communicate()
            result["verdict"] = "wedged"
            result["stage"] = "after the signal"
            result["stderr"] = err.decode(errors="replace")[-4000:]
            return result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = (rest + out).decode(errors="replace").splitlines()
    report = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    result.update(report)
    result["verdict"] = VERDICTS.get(proc.returncode, f"exit {proc.returncode}")
    if report.get("verdict") != result["verdict"]:
        result["problems"] = [*report.get("problems", []), f"exit code {proc.returncode}"]
        result["verdict"] = "other"
    if result["verdict"] != "ok-interrupted" and result["verdict"] != "finished-before-signal":
        result["stderr"] = err.decode(errors="replace")[-5000:]
    return result


def soak(runs: int, *, seed: int, jobs: int, duration: float) -> list[dict[str, Any]]:
    """*runs* driver runs, *jobs* at a time, with delays drawn from ``Random(seed)``."""
    rng = random.Random(seed)
    plan = [
        (index, rng.randrange(2**31), rng.uniform(0.0, duration + OVERSHOOT))
        for index in range(runs)
    ]
    results: list[dict[str, Any]] = []
    every = max(runs // 10, 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for result in pool.map(lambda p: one_run(*p, duration), plan):
            results.append(result)
            if len(results) % every == 0:  # progress, seen with -s (nox -s ki-soak)
                verdicts = Counter(r["verdict"] for r in results)
                counts = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
                print(f"ki-soak: {len(results)}/{runs} runs: {counts}", file=sys.stderr)
    return results


def summary(results: list[dict[str, Any]]) -> str:
    verdicts = Counter(r["verdict"] for r in results)
    landed = Counter(r.get("ki_at") for r in results if r["verdict"] == "ok-interrupted")
    lines = [
        f"{len(results)} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())),
        "KeyboardInterrupt landed at (top 12): "
        + "; ".join(f"{where} x{n}" for where, n in landed.most_common(12)),
    ]
    for result in results:
        if result["verdict"] not in ("ok-interrupted", "finished-before-signal"):
            lines.append(json.dumps(result)[:6000])
    return "\n".join(lines)


@pytest.mark.timeout(60 + RUNS * 8 // max(JOBS, 1))
def test_sigint_at_random_instants_never_tears_the_evidence() -> None:
    results = soak(RUNS, seed=SEED, jobs=JOBS, duration=DURATION)
    report = summary(results)
    print(report)
    verdicts = Counter(r["verdict"] for r in results)
    assert verdicts["violation"] == 0, report
    assert verdicts["wedged"] <= WEDGES_TOLERATED, report
    assert set(verdicts) <= {"ok-interrupted", "finished-before-signal", "wedged"}, report
    # the signals must mostly land inside the batches, or this proves nothing
    assert verdicts["ok-interrupted"] >= RUNS // 2, report


@pytest.mark.timeout(60 + SWEEP_POINTS // 2)
def test_an_interrupt_at_any_line_never_tears_the_evidence() -> None:
    command = [sys.executable, str(DRIVER), "--sweep", str(SWEEP_POINTS), "--batches", "6"]
    command += ["--seed", str(SEED)]
    done = subprocess.run(command, capture_output=True, timeout=50 + SWEEP_POINTS // 2)
    lines = done.stdout.decode(errors="replace").splitlines()
    assert lines, done.stderr.decode(errors="replace")[-4000:]
    summary = json.loads(lines[-1])
    print(f"line sweep: {summary}")
    violations = [json.loads(line) for line in lines[:-1]]
    shown = "\n".join(json.dumps(v)[:1500] for v in violations[:5])
    assert not violations, f"{summary}\n{shown}"
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    verdicts = summary["sweep"]
    # a point past the end of the workload (worker threads shift the count a little) finishes
    assert set(verdicts) <= {"ok-interrupted", "finished-before-signal"}, summary
    assert verdicts.get("ok-interrupted", 0) >= summary["points"] * 9 // 10, summary
