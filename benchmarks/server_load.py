"""Server load (issue 7): ``examples/server.py`` under 2,000 requests from 50 concurrent clients.

The server runs in a subprocess (``python examples/server.py --port 0``, on 127.0.0.1) so
that client and server do not share an event loop; it is stopped with SIGINT at the end.
Each client keeps one HTTP/1.1 keep-alive connection and its own conversation (so clients
run in parallel, and each client's requests one after another, as a real client's would) and
sends ``POST /v1/act`` with one ``get_weather`` call until the shared count is reached. A
short warm-up (not measured) comes first. Reported: requests/s over the measured wall time,
and p50/p99 latency (request written to response read), from one measured run.

Server CPU per request (issue 13, item 6): the server process samples its own CPU time
(``time.process_time()``, user + system, all threads) when the load driver asks on its stdin,
before and after each run of ``CPU_REQUESTS`` one-call requests (``CPU_CLIENTS`` keep-alive
clients, a fresh conversation per client and run); the figure is the difference over the
requests, for ``CPU_RUNS`` runs after a warm-up, reported as the median and the interquartile
range. Three apps, each on hypercorn's trio worker with the same configuration: a **bare**
hypercorn app that reads the body and returns a fixed JSON reply (hypercorn's own floor), the
**raw** trio app (the same HTTP work as the example, the tool called directly) and
**lionexec**'s example server. Standalone (``--cpu``) the three run interleaved (run *i* of
each app back to back, in rotated order) and the report gives lionexec's share of its server's
CPU, ``(lionexec - raw) / lionexec``: what lionexec and the example's glue (strict JSON
parsing, limits, the idempotency lookup, events) add to the same HTTP work.

Run it alone with ``python -m benchmarks.server_load`` (``--requests``, ``--clients``,
``--quick``; ``--cpu`` for the CPU comparison only). As a :mod:`benchmarks` area it speaks the
harness's child protocol (``--impl lionexec --json``): the lionexec child reports the load and
the lionexec server's CPU per request (and, run interleaved with it, its ratio to the raw
app's: :func:`paired_cpu`), the raw child the raw app's and the bare app's; lionagi has no
counterpart and shows as n/a. Only 127.0.0.1 traffic; bounded in count (the requests) and in
time (``TIME_LIMIT``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from ._harness import IMPLS, MARKER, Measurement, k

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "examples" / "server.py"
TIME_LIMIT = 300.0  # seconds for the whole run, server start and stop included
REQUESTS, CLIENTS = 2_000, 50
QUICK_REQUESTS, QUICK_CLIENTS = 300, 10
WARMUP = 100
CPU_APPS = ("bare", "raw", "lionexec")
CPU_REQUESTS, CPU_CLIENTS, CPU_RUNS, CPU_WARMUP = 1_000, 10, 11, 300
QUICK_CPU_REQUESTS, QUICK_CPU_RUNS = 300, 3


@dataclass
class LoadResult:
    requests: int
    clients: int
    seconds: float
    latencies: list[float]
    errors: int

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Connection:
    """A minimal HTTP/1.1 keep-alive client for the server's Content-Length replies."""

    def __init__(self, stream: trio.SocketStream, port: int) -> None:
        self.stream = stream
        self.host = f"127.0.0.1:{port}".encode()
        self.buffer = b""

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n"
        )  # fmt: skip
        await self.stream.send_all(head + body)
        while b"\r\n\r\n" not in self.buffer:
            await self._receive()
        header, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = header.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines[1:]
            if line.lower().startswith(b"content-length:")
        )
        while len(self.buffer) < length:
            await self._receive()
        reply, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, reply

    async def _receive(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buffer += data


def act_body(conversation_id: str, n: int) -> bytes:
    call = {
        "id": f"call-{n}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})},
    }
    return json.dumps({"conversation_id": conversation_id, "tool_calls": [call]}).encode()


def ok(status: int, reply: bytes) -> bool:
    if status != 200:
        return False
    messages = json.loads(reply)["messages"]
    return len(messages) == 1 and messages[0]["status"] == "completed"


async def load(port: int, requests: int, clients: int, prefix: str) -> LoadResult:
    """*requests* ``POST /v1/act`` from *clients* concurrent keep-alive connections.

    Client *i* talks to conversation ``{prefix}-{i}``.
    """
    remaining = requests
    latencies: list[float] = []
    errors = 0

    async def client(conversation_id: str) -> None:
        nonlocal remaining, errors
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            connection = Connection(stream, port)
            while remaining > 0:
                remaining -= 1
                body = act_body(conversation_id, remaining)
                started = time.perf_counter()
                status, reply = await connection.post("/v1/act", body)
                latencies.append(time.perf_counter() - started)
                errors += not ok(status, reply)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(clients):
            nursery.start_soon(client, f"{prefix}-{index}")
    seconds = time.perf_counter() - started
    return LoadResult(requests, clients, seconds, latencies, errors)


# -- the raw trio counterpart: the same HTTP work, the tool called directly ---------------------


async def get_weather(city: str) -> dict[str, Any]:
    """The example's ``get_weather`` tool, verbatim."""
    await trio.lowlevel.checkpoint()
    return {"city": city, "forecast": "sunny", "high_c": 21}


def raw_app() -> Any:
    """An ASGI app doing what ``examples/server.py`` does for ``POST /v1/act`` minus lionexec.

    It reads and parses the body, takes the conversation's lock, watches for a disconnect while
    the calls run, calls the tool directly and replies in the same shape. No validation, no
    history, no governance, no events.
    """
    locks: dict[str, trio.Lock] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]  # lifespan.startup, then lifespan.shutdown
                await send({"type": f"{kind}.complete"})
                if kind == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        data = json.loads(body)
        messages: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            async with locks.setdefault(data["conversation_id"], trio.Lock()):
                for call in data["tool_calls"]:
                    output = await get_weather(**json.loads(call["function"]["arguments"]))
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call["id"],
                            "content": json.dumps(output),
                            "status": "completed",
                            "outcome": "completed",
                        }
                    )
            nursery.cancel_scope.cancel()
        reply = json.dumps({"conversation_id": data["conversation_id"], "messages": messages})
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": reply.encode(), "more_body": False})

    return app


async def serve_raw() -> None:
    """Serve :func:`raw_app` on 127.0.0.1 (a free port, printed) until SIGINT or SIGTERM."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def on_signal() -> None:
            async for _ in signals:
                return

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                partial(serve, raw_app(), config, shutdown_trigger=on_signal)
            )
            print(f"raw trio server on {binds[0]}", flush=True)


# -- server CPU per request ----------------------------------------------------------------------


def bare_app() -> Any:
    """Hypercorn's floor: read the body, reply a fixed JSON (the shape the driver checks)."""
    message = {
        "role": "tool",
        "tool_call_id": "call-0",
        "content": json.dumps({"city": "Oslo", "forecast": "sunny", "high_c": 21}),
        "status": "completed",
        "outcome": "completed",
    }
    reply = json.dumps({"conversation_id": "bare", "messages": [message]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                await send({"type": f"{kind}.complete"})
                if kind == "lifespan.shutdown":
                    return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": reply, "more_body": False})

    return app


def example_server() -> Any:
    """``examples/server.py`` as a module (it is a script, not a package): its demo tools."""
    spec = importlib.util.spec_from_file_location("lionexec_example_server", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def serve_cpu(app_name: str) -> None:
    """Serve one of :data:`CPU_APPS` on a free port; answer ``cpu`` lines on stdin.

    Prints the URL first; then, for each line read on stdin, ``cpu <process_time()>``. Runs
    until SIGINT/SIGTERM or the end of stdin.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        stop = trio.Event()

        async def on_signal() -> None:
            async for _ in signals:
                break
            stop.set()

        async def trigger() -> None:
            await stop.wait()

        async def answer() -> None:
            stdin = trio.lowlevel.FdStream(os.dup(0))
            buffer = b""
            async with stdin:
                while data := await stdin.receive_some():
                    buffer += data
                    while b"\n" in buffer:
                        _, buffer = buffer.split(b"\n", 1)
                        print(f"cpu {time.process_time()!r}", flush=True)
            stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signal)
            nursery.start_soon(answer)
            if app_name == "lionexec":
                import lionexec.server

                tools = example_server().DEMO_TOOLS  # the example's: lionexec.server has none
                app = lionexec.server.App(lionexec.server.ServerConfig(port=0), tools=tools)
                serving = partial(lionexec.server.serve, app, shutdown_trigger=trigger)
                binds = await nursery.start(serving)
            else:
                config = Config()
                config.bind = ["127.0.0.1:0"]
                asgi = bare_app() if app_name == "bare" else raw_app()
                binds = await nursery.start(partial(serve, asgi, config, shutdown_trigger=trigger))
            # as lionexec.server.main does once serving (issue 13 item 3's guidance for
            # servers), whichever the app: what start-up made leaves the collector's
            # generations
            gc.freeze()
            print(f"{app_name} server on {binds[0]}", flush=True)
            await stop.wait()
            nursery.cancel_scope.cancel()


class CpuServer:
    """The parent's handle on a :func:`serve_cpu` subprocess."""

    def __init__(self, app_name: str, process: trio.Process, port: int, buffer: bytes) -> None:
        self.app_name = app_name
        self.process = process
        self.port = port
        self._buffer = buffer

    @classmethod
    async def start(cls, nursery: trio.Nursery, app_name: str) -> CpuServer:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "benchmarks.server_load", "--serve-cpu", app_name]
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                command,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                check=False,
            )
        )
        server = cls(app_name, process, 0, b"")
        line = await server._line()
        server.port = int(line.split("http://127.0.0.1:", 1)[1].split()[0].rstrip(","))
        return server

    async def _line(self) -> str:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            data = await self.process.stdout.receive_some()
            if not data:
                raise RuntimeError(
                    f"the {self.app_name} server exited (exit {self.process.poll()})"
                )
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    async def cpu(self) -> float:
        """The server process's CPU seconds so far (user + system)."""
        assert self.process.stdin is not None
        await self.process.stdin.send_all(b"cpu\n")
        return float((await self._line()).removeprefix("cpu "))

    async def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        with trio.move_on_after(10) as stopping:
            await self.process.wait()
        if stopping.cancelled_caught:
            self.process.kill()


@dataclass
class CpuResult:
    app: str
    requests: int
    runs: list[float]  # server CPU seconds per request, one figure per run
    errors: int

    def quartiles(self) -> tuple[float, float, float]:
        """Median and the interquartile range's ends (inclusive method)."""
        if len(self.runs) < 2:
            value = self.runs[0]
            return value, value, value
        q1, median, q3 = statistics.quantiles(self.runs, n=4, method="inclusive")
        return median, q1, q3


async def measure_cpu(
    apps: tuple[str, ...], requests: int, clients: int, runs: int
) -> dict[str, CpuResult]:
    """Server CPU per request for each of *apps*, their runs interleaved (rotated order)."""
    results = {app: CpuResult(app, requests, [], 0) for app in apps}
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            servers = [await CpuServer.start(nursery, app) for app in apps]
            try:
                for server in servers:
                    await load(server.port, CPU_WARMUP, clients, "warm-up")
                for index in range(runs):
                    shift = index % len(servers)
                    for server in servers[shift:] + servers[:shift]:
                        before = await server.cpu()
                        result = await load(server.port, requests, clients, f"run{index}")
                        after = await server.cpu()
                        results[server.app_name].runs.append((after - before) / requests)
                        results[server.app_name].errors += result.errors
            finally:
                for server in servers:
                    await server.stop()
    return results


CPU_LABELS = {
    "bare": "server CPU per request: bare hypercorn app (fixed JSON reply)",
    "raw": "server CPU per request: one-call POST /v1/act",
    "lionexec": "server CPU per request: one-call POST /v1/act",
}


def cpu_measurements(result: CpuResult, clients: int) -> list[Measurement]:
    median, q1, q3 = result.quartiles()
    note = (
        f"server process CPU (process_time) per request, {len(result.runs)} runs of "
        f"{k(result.requests)} requests from {clients} clients; median, IQR in extra"
    )
    if result.errors:
        note += f"; {result.errors} requests failed"
    m = Measurement(
        CPU_LABELS[result.app],
        "us/op",
        result.requests,
        median * 1e6,
        median=median * 1e6,
        repeats=len(result.runs),
        note=note,
    )
    m.extra.update(q1_us=q1 * 1e6, q3_us=q3 * 1e6)
    return [m]


#: The scenario of :func:`paired_cpu`'s ratio.
PAIRED_CPU = "server CPU per request: lionexec / raw app, interleaved in one run"


def paired_cpu(lionexec: CpuResult, raw: CpuResult, clients: int) -> Measurement:
    """lionexec's server CPU per request over the raw app's, run *i* against run *i*.

    :func:`measure_cpu` runs the two back to back (who goes first rotates), so a burst of load
    elsewhere hits both sides of a pair; the median of the ratios is steadier than the ratio of
    medians taken from two child processes minutes apart. lionexec's share of its server's
    CPU is ``1 - 1 / ratio``.
    """
    m = Measurement(
        PAIRED_CPU,
        "x",
        lionexec.requests,
        None,
        samples=[mine / theirs for mine, theirs in zip(lionexec.runs, raw.runs, strict=True)],
        note=f"{len(lionexec.runs)} pairs of runs of {k(lionexec.requests)} one-call requests "
        f"from {clients} clients, interleaved",
    )
    m.summarize()
    return m


def cpu_summary(results: dict[str, CpuResult]) -> str:
    lines = ["server CPU per one-call request (median, IQR q1-q3), µs:"]
    for app, result in results.items():
        median, q1, q3 = result.quartiles()
        lines.append(
            f"  {app:8} {median * 1e6:8.1f}  ({q1 * 1e6:.1f}-{q3 * 1e6:.1f}), "
            f"{len(result.runs)} runs x {result.requests} requests, {result.errors} errors"
        )
    if {"raw", "lionexec"} <= results.keys():
        lionexec = results["lionexec"].quartiles()[0]
        raw = results["raw"].quartiles()[0]
        share = (lionexec - raw) / lionexec
        lines.append(
            f"  lionexec's share of its server's CPU, (lionexec - raw) / lionexec: {share:.0%}"
            f" (target <= 20%)"
        )
        if "bare" in results:
            bare = results["bare"].quartiles()[0]
            lines.append(
                f"  hypercorn alone (bare) is {bare / lionexec:.0%} of the lionexec server's "
                f"CPU; the raw app's work above it {(raw - bare) / lionexec:.0%}"
            )
    return "\n".join(lines)


# -- running a load --------------------------------------------------------------------------


async def start_server(nursery: trio.Nursery, impl: str) -> tuple[trio.Process, int]:
    """Start the *impl* server on a free port; read the port it prints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if impl == "raw":
        command = [sys.executable, "-m", "benchmarks.server_load", "--serve-raw"]
    else:
        # conversations in memory, as the raw app keeps them (the example's default is a
        # SQLite journal file; its cost is measured by the journal_cost area)
        command = [sys.executable, str(SERVER), "--port", "0", "--journal", ":memory:"]
    process: trio.Process = await nursery.start(
        partial(
            trio.run_process,
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            check=False,
        )
    )
    assert process.stdout is not None
    seen = b""
    while b"\n" not in seen:
        data = await process.stdout.receive_some()
        if not data:
            raise RuntimeError(f"the server exited before listening (exit {process.poll()})")
        seen += data
    line = seen.split(b"\n", 1)[0].decode()
    found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if found is None:
        raise RuntimeError(f"the server did not print its address: {line!r}")
    port = int(found[1])
    return process, port


async def run(impl: str, requests: int, clients: int) -> LoadResult:
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            process, port = await start_server(nursery, impl)
            try:
                await load(port, min(WARMUP, requests), min(clients, WARMUP), "warm-up")
                result = await load(port, requests, clients, "load")
            finally:
                process.send_signal(signal.SIGINT)
                with trio.move_on_after(10) as stopping:
                    await process.wait()
                if stopping.cancelled_caught:
                    process.kill()
    return result


def measurements(result: LoadResult) -> list[Measurement]:
    name = f"server: POST /v1/act, {k(result.requests)} requests, {result.clients} clients"
    note = "one run, server in a subprocess; HTTP on 127.0.0.1"
    if result.errors:
        note += f"; {result.errors} requests failed"
    figures = {
        " (wall per request)": result.seconds / result.requests,
        ", p50 latency": result.percentile(0.50),
        ", p99 latency": result.percentile(0.99),
    }
    out = [
        Measurement(name + label, "us/op", result.requests, seconds * 1e6, repeats=1, note=note)
        for label, seconds in figures.items()
    ]
    out[0].extra["ops_per_s"] = result.per_second
    return out


def summary(impl: str, result: LoadResult) -> str:
    return (
        f"{impl:8} {result.requests} requests from {result.clients} clients in "
        f"{result.seconds:.2f}s: {result.per_second:,.0f} requests/s, "
        f"p50 {result.percentile(0.50) * 1e3:.2f} ms, p99 {result.percentile(0.99) * 1e3:.2f} ms"
        f", {result.errors} errors"
    )


def child(impl: str, requests: int, clients: int, quick: bool = False) -> dict[str, Any]:
    """The harness report for one implementation."""
    report: dict[str, Any] = {"impl": impl, "results": []}
    if impl == "lionagi":
        report["unavailable"] = "no counterpart: the server example runs lionexec"
        return report
    try:
        import hypercorn  # noqa: F401  (both servers need it: say so clearly)

        if impl == "raw":
            report["version"] = f"trio {trio.__version__}"
        else:
            import lionexec

            report["version"] = f"lionexec {lionexec.__version__}"
        result = trio.run(run, impl, requests, clients)
    except Exception as exc:
        report["unavailable"] = f"{type(exc).__name__}: {exc}"[:160]
        return report
    report["results"] = [asdict(m) for m in measurements(result)]
    print(summary(impl, result), file=sys.stderr, flush=True)
    # lionexec's child runs the raw app too, interleaved with its own (its row is the raw
    # child's): the ratio of each pair of runs made back to back (see paired_cpu)
    apps = ("raw", "lionexec") if impl == "lionexec" else ("bare", "raw")
    cpu_requests, cpu_runs = (
        (QUICK_CPU_REQUESTS, QUICK_CPU_RUNS) if quick else (CPU_REQUESTS, CPU_RUNS)
    )
    try:
        cpu = trio.run(measure_cpu, apps, cpu_requests, CPU_CLIENTS, cpu_runs)
    except Exception as exc:
        note = f"error: {type(exc).__name__}: {exc}"[:160]
        for app in apps:
            report["results"].append(
                asdict(Measurement(CPU_LABELS[app], "us/op", cpu_requests, None, note=note))
            )
        return report
    if impl == "lionexec":
        report["results"] += [asdict(m) for m in cpu_measurements(cpu["lionexec"], CPU_CLIENTS)]
        report["results"].append(asdict(paired_cpu(cpu["lionexec"], cpu["raw"], CPU_CLIENTS)))
    else:
        for app in apps:
            report["results"] += [asdict(m) for m in cpu_measurements(cpu[app], CPU_CLIENTS)]
    print(cpu_summary(cpu), file=sys.stderr, flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_load", description=__doc__)
    parser.add_argument("--requests", type=int, default=None, help=f"default {REQUESTS}")
    parser.add_argument("--clients", type=int, default=None, help=f"default {CLIENTS}")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REQUESTS} requests")
    parser.add_argument("--impl", choices=IMPLS, help="harness protocol: one side only")
    parser.add_argument("--json", action="store_true", help="harness protocol: print JSON")
    parser.add_argument("--repeats", type=int, default=1, help="ignored: one measured run")
    parser.add_argument("--budget", type=float, default=0.0, help="ignored")
    parser.add_argument("--cpu", action="store_true", help="server CPU per request only")
    parser.add_argument("--runs", type=int, default=None, help=f"CPU runs (default {CPU_RUNS})")
    parser.add_argument("--serve-raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-cpu", choices=CPU_APPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_raw:
        trio.run(serve_raw)
        return
    if args.serve_cpu:
        trio.run(serve_cpu, args.serve_cpu)
        return
    requests = args.requests or (QUICK_REQUESTS if args.quick else REQUESTS)
    clients = args.clients or (QUICK_CLIENTS if args.quick else CLIENTS)
    if args.cpu:
        cpu_requests = args.requests or (QUICK_CPU_REQUESTS if args.quick else CPU_REQUESTS)
        runs = args.runs or (QUICK_CPU_RUNS if args.quick else CPU_RUNS)
        cpu = trio.run(measure_cpu, CPU_APPS, cpu_requests, args.clients or CPU_CLIENTS, runs)
        print(cpu_summary(cpu), flush=True)
        return
    if args.impl is not None:  # a child of ``python -m benchmarks``
        report = child(args.impl, requests, clients, args.quick)
        if args.json:
            print(MARKER + json.dumps(report), flush=True)
        return
    results: dict[str, LoadResult] = {}
    for impl in ("lionexec", "raw"):
        try:
            results[impl] = trio.run(run, impl, requests, clients)
        except Exception as exc:
            print(f"{impl:8} not run: {type(exc).__name__}: {exc}")
            continue
        print(summary(impl, results[impl]), flush=True)
    if len(results) == 2:
        ratio = results["raw"].per_second / results["lionexec"].per_second
        print(f"raw trio serves {ratio:.2f}x the requests/s of lionexec (same HTTP work)")


if __name__ == "__main__":
    main()
