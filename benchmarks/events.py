"""Event lifecycle (issue 2): create, invoke, fail, serialize, and what a completed event keeps.

lionexec: a ``lionexec.Event`` subclass overriding ``_invoke``; lionagi 0.36.0: a subclass of
``lionagi.protocols.generic.event.Event``; raw trio: a slotted record with a uuid4 and a
try/except capture wrapper (see :mod:`benchmarks._subjects`). Events run one after another,
so each figure is the per-event cost of the lifecycle itself.
"""

from __future__ import annotations

import time
from typing import Any

from ._harness import Case, MemoryProbe, k, main
from ._subjects import event_types


def cases(impl: str, quick: bool) -> list[Case]:
    n = 2_000 if quick else 20_000
    ok, fail, _ = event_types(impl)

    async def create(n: int) -> float:
        start = time.perf_counter()
        events = [ok() for _ in range(n)]
        elapsed = time.perf_counter() - start
        assert len(events) == n
        return elapsed

    async def invoke(n: int, kind: type[Any] = ok, status: str = "completed") -> float:
        events = [kind() for _ in range(n)]
        start = time.perf_counter()
        for event in events:
            await event.invoke()
        elapsed = time.perf_counter() - start
        assert all(event.status == status for event in events)
        return elapsed

    async def invoke_failing(n: int) -> float:
        return await invoke(n, fail, "failed")

    async def create_and_invoke(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            event = ok()
            await event.invoke()
        elapsed = time.perf_counter() - start
        assert event.status == "completed"
        return elapsed

    async def serialize(n: int) -> float:
        events = [ok() for _ in range(n)]
        for event in events:
            await event.invoke()
        start = time.perf_counter()
        records = [event.to_dict() for event in events]
        elapsed = time.perf_counter() - start
        assert records[-1]["execution"]["status"] == "completed"
        return elapsed

    async def retained(n: int) -> tuple[int, int]:
        probe = MemoryProbe()
        events = [ok() for _ in range(n)]
        for event in events:
            await event.invoke()
        return probe.stop()

    return [
        Case(f"events: create {k(n)}", n, create),
        Case(f"events: invoke {k(n)} (success)", n, invoke),
        Case(f"events: invoke {k(n)} (captured failure)", n, invoke_failing),
        Case(f"events: create + invoke {k(n)}", n, create_and_invoke),
        Case(f"events: serialize {k(n)} completed (to_dict)", n, serialize),
        Case(f"events: retained per completed event, {k(n)}", n, retained, kind="memory"),
    ]


if __name__ == "__main__":
    main(cases)
