"""Scaling (issue 7): per-item cost against batch size (1k, 10k, 100k).

Two series, written to ``latest.json`` under ``"scaling"`` for the plot: the processor
(enqueue n trivial events, ``join()``; as in :mod:`benchmarks.processor`) and ``Branch.act``
with n concurrent calls (as in :mod:`benchmarks.act`). Flat lines mean linear cost.
lionagi's ``act`` is not run at 100k (about 75 s per run at its 10k per-call cost).
"""

from __future__ import annotations

import logging

from ._harness import Body, Case, k, main
from .act import act_body
from .processor import processor_body

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (100, 1_000, 5_000)


def cases(impl: str, quick: bool) -> list[Case]:
    logging.disable(logging.CRITICAL)  # as in benchmarks.act
    sizes = QUICK_SIZES if quick else SIZES
    out: list[Case] = []
    for n in sizes:
        out.append(
            Case(
                f"scaling: processor, {k(n)} events",
                n,
                processor_body(impl),
                series="processor",
                repeats=3,
                warmup=100,
            )
        )
    reason = ""
    body: Body | None
    try:
        body = act_body(impl)
    except ImportError as exc:
        body, reason = None, f"not implemented yet ({exc})"

    for n in sizes:
        capped = impl == "lionagi" and n > 10_000
        out.append(
            Case(
                f"scaling: act, {k(n)} concurrent calls",
                n,
                None if capped else body,
                series="act",
                repeats=3,
                warmup=100,
                unavailable="not run: too slow at this size" if capped else reason,
            )
        )
    return out


if __name__ == "__main__":
    main(cases)
