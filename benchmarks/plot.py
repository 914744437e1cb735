"""The scaling plot (issue 7): per-item cost against batch size, from ``latest.json``.

``python -m benchmarks.plot [results.json] [out.png]`` draws one panel per series (the
processor, ``Branch.act``) with a line per implementation, batch size on a log axis. Needs
matplotlib; without it, :func:`plot` returns ``None`` and the benchmark run only notes it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LABELS = {"lionexec": "lionexec", "lionagi": "lionagi 0.36.0", "raw": "raw trio"}
TITLES = {
    "processor": "Processor: enqueue n events, join()",
    "act": "Branch.act: n concurrent calls",
}


def plot(document: dict[str, Any], out: Path) -> Path | None:
    """Write the scaling plot of *document* to *out*; ``None`` if matplotlib is missing."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    series = document.get("scaling", {})
    if not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(5.5 * len(series), 4.2), squeeze=False)
    for ax, (name, by_impl) in zip(axes[0], series.items(), strict=True):
        for impl in ("lionexec", "lionagi", "raw"):
            points = sorted(by_impl.get(impl, []))
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=LABELS[impl])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size (items)")
        ax.set_ylabel("µs per item (lower is better)")
        ax.set_title(TITLES.get(name, name))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"Per-item cost vs batch size ({document['meta'].get('generated', '')})")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    here = Path(__file__).resolve().parent / "results"
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else here / "latest.json"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else source.with_name("scaling.png")
    written = plot(json.loads(source.read_text()), out)
    print(written or "matplotlib is not installed: no plot")


if __name__ == "__main__":
    main()
