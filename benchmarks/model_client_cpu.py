"""CPU per model call: one pooled client per ``Model`` against a client opened per call.

The provider runs in a process of its own (``benchmarks.models.ProviderProcess``), so this
process's CPU time is the client side only. ``CALLS`` sequential non-streamed chat calls,
after a warm-up, each way:

* ``per-call client``: ``ModelCall(endpoint=...)`` with no client (it opens and closes an
  ``httpx.AsyncClient`` for itself: what a ``Model`` did by default before);
* ``Model (pooled)``: ``Model.complete`` with the model's own client (the default now).

Run: ``python -m benchmarks.model_client_cpu [--calls N]``.
"""

from __future__ import annotations

import argparse
import time

import trio

from benchmarks.models import ProviderProcess
from lionexec.models import Endpoint, Model, ModelCall

MESSAGES = [{"role": "user", "content": "hi"}]


async def per_call(base_url: str, calls: int) -> float:
    endpoint = Endpoint(base_url)
    payload = {"model": "bench", "messages": MESSAGES}
    start = time.process_time()
    for _ in range(calls):
        call = ModelCall(endpoint=endpoint, payload=payload)
        await call.invoke()
        assert call.execution.error is None, call.execution.error
    return (time.process_time() - start) / calls


async def pooled(base_url: str, calls: int) -> float:
    async with Model(endpoint=Endpoint(base_url), name="bench") as model:
        await model.complete(MESSAGES)  # the connection opened once, outside the timing
        start = time.process_time()
        for _ in range(calls):
            await model.complete(MESSAGES)
        return (time.process_time() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with ProviderProcess() as provider:
        trio.run(per_call, provider.base_url, 20)  # warm-up (imports, first connections)
        for label, measure in (("per-call client", per_call), ("Model (pooled)", pooled)):
            cpu = trio.run(measure, provider.base_url, args.calls)
            print(f"{label:16s} {cpu * 1000:7.2f} ms CPU per call ({args.calls} calls)")


if __name__ == "__main__":
    main()
