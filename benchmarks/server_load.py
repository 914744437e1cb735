"""Server load (issue 7): ``examples/server.py`` under 2,000 requests from 50 concurrent clients.

The server runs in a subprocess (``python examples/server.py --port 0``, on 127.0.0.1) so
that client and server do not share an event loop; it is stopped with SIGINT at the end.
Each client keeps one HTTP/1.1 keep-alive connection and its own conversation (so clients
run in parallel, and each client's requests one after another, as a real client's would) and
sends ``POST /v1/act`` with one ``get_weather`` call until the shared count is reached. A
short warm-up (not measured) comes first. Reported: requests/s over the measured wall time,
and p50/p99 latency (request written to response read), from one measured run.

Run it alone with ``python -m benchmarks.server_load`` (``--requests``, ``--clients``,
``--quick``). As a :mod:`benchmarks` area it speaks the harness's child protocol
(``--impl lionexec --json``); lionagi and raw trio have no counterpart and show as n/a.
Only 127.0.0.1 traffic; bounded in count (the requests) and in time (``TIME_LIMIT``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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


# -- running a load --------------------------------------------------------------------------


async def start_server(nursery: trio.Nursery, impl: str) -> tuple[trio.Process, int]:
    """Start the *impl* server on a free port; read the port it prints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if impl == "raw":
        command = [sys.executable, "-m", "benchmarks.server_load", "--serve-raw"]
    else:
        command = [sys.executable, str(SERVER), "--port", "0"]
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
    port = int(line.split("http://127.0.0.1:", 1)[1].split()[0].rstrip(","))
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


def child(impl: str, requests: int, clients: int) -> dict[str, Any]:
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
    parser.add_argument("--serve-raw", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_raw:
        trio.run(serve_raw)
        return
    requests = args.requests or (QUICK_REQUESTS if args.quick else REQUESTS)
    clients = args.clients or (QUICK_CLIENTS if args.quick else CLIENTS)
    if args.impl is not None:  # a child of ``python -m benchmarks``
        report = child(args.impl, requests, clients)
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
