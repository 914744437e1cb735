"""Turn the children's results into one document: JSON for machines, a Markdown table for people.

Every figure is "lower is better" (µs per operation or bytes per item), so both ratios read the
same way: ``speedup_vs_lionagi`` = lionagi / lionexec (above 1: lionexec is faster or smaller)
and ``cost_vs_raw`` = lionexec / raw trio (1 would be the floor itself).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

AREA_ORDER = ("events", "processor", "tools", "act", "scaling")
HEADER = (
    "| scenario | lionexec | lionagi 0.36.0 | raw trio "
    "| lionexec speedup vs lionagi | lionexec/raw cost |"
)


#: The issues' targets: (issue, check, scenario, bound[, larger scenario]). ``speedup`` must
#: reach the bound (lionagi / lionexec), ``cost`` stay within it (lionexec / raw), ``linear``
#: bounds lionexec's per-item cost at the larger size over the smaller one.
TARGETS: tuple[tuple[str, str, str, float, str], ...] = (
    ("2", "speedup", "events: create + invoke 20k", 3.0, ""),
    ("2", "cost", "events: create + invoke 20k", 2.0, ""),
    ("2", "speedup", "events: retained per completed event, 20k", 3.0, ""),
    ("3", "speedup", "processor: 20k trivial events", 20.0, ""),
    ("3", "speedup", "executor: 20k bulk (append all, forward, join)", 20.0, ""),
    ("3", "speedup", "executor: 20k in chunks of 100", 20.0, ""),
    ("3", "cost", "processor: 20k trivial events", 1 / 0.6, ""),
    ("3", "linear", "processor: 20k trivial events", 1.3, "processor: 100k trivial events"),
    ("4", "speedup", "tools: invoke 20k async tool calls", 5.0, ""),
    ("4", "speedup", "tools: invoke 20k sync tools inline", 5.0, ""),
    ("4", "cost", "tools: 5k sync tools offloaded, one at a time", 1.5, ""),
    ("4", "cost", "tools: 5k sync tools offloaded, concurrently", 1.5, ""),
    ("6", "speedup", "act: 1k concurrent calls", 15.0, ""),
    ("6", "speedup", "act: 10k concurrent calls", 15.0, ""),
    ("6", "speedup", "act: 1k sequential calls", 15.0, ""),
    ("6", "speedup", "act: 1k failing calls (concurrent)", 15.0, ""),
    ("6", "speedup", "act: retained per call, 10k concurrent", 4.0, ""),
    ("6", "linear", "act: 1k concurrent calls", 1.3, "act: 10k concurrent calls"),
)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def _revision() -> str:
    """The measured lionexec source: ``git describe --always --dirty``, if available."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def build(
    runs: dict[str, dict[str, dict[str, Any]]],
    *,
    quick: bool,
    loads: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """The document for the areas in *runs* (area -> impl -> child report)."""
    scenarios: dict[tuple[str, str], dict[str, Any]] = {}
    versions: dict[str, str] = {}
    areas: dict[str, Any] = {}
    for area, by_impl in runs.items():
        areas[area] = {
            "generated": _now(),
            "quick": quick,
            "load_average_at_start": (loads or {}).get(area, []),
            "unavailable": {},
        }
        for impl, child in by_impl.items():
            if "version" in child:
                versions[impl] = child["version"]
            if "unavailable" in child:
                areas[area]["unavailable"][impl] = child["unavailable"]
            for m in child["results"]:
                row = scenarios.setdefault(
                    (area, m["scenario"]),
                    {
                        "area": area,
                        "scenario": m["scenario"],
                        "unit": m["unit"],
                        "series": m.get("series", ""),
                        "results": {},
                    },
                )
                row["results"][impl] = {
                    k: m[k] for k in ("value", "median", "n", "repeats", "note")
                }
                row["results"][impl].update(m.get("extra", {}))
    document = {
        "meta": {
            "generated": _now(),
            "revision": _revision(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "versions": versions,
            "areas": areas,
        },
        "scenarios": list(scenarios.values()),
    }
    return _finish(document)


def _finish(document: dict[str, Any]) -> dict[str, Any]:
    """Sort scenarios by area, (re)compute ratios and the scaling series."""
    rows = document["scenarios"]
    rows.sort(key=lambda r: AREA_ORDER.index(r["area"]) if r["area"] in AREA_ORDER else 99)
    scaling: dict[str, dict[str, list[list[float]]]] = {}
    for row in rows:
        value = {impl: r.get("value") for impl, r in row["results"].items()}
        row["ratios"] = {
            "speedup_vs_lionagi": _ratio(value.get("lionagi"), value.get("lionexec")),
            "cost_vs_raw": _ratio(value.get("lionexec"), value.get("raw")),
        }
        if row["series"]:
            for impl, r in row["results"].items():
                if r.get("value") is not None:
                    points = scaling.setdefault(row["series"], {}).setdefault(impl, [])
                    points.append([r["n"], r["value"]])
    document["scaling"] = scaling
    return document


def merge(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """Replace the areas *document* covers in the document stored at *path*, keep the rest."""
    if not path.exists():
        return document
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return document
    fresh = set(document["meta"]["areas"])
    kept = [row for row in old.get("scenarios", []) if row["area"] not in fresh]
    document["scenarios"] = kept + document["scenarios"]
    old_meta = old.get("meta", {})
    areas = {a: v for a, v in old_meta.get("areas", {}).items() if a not in fresh}
    document["meta"]["areas"] = areas | document["meta"]["areas"]
    document["meta"]["versions"] = old_meta.get("versions", {}) | document["meta"]["versions"]
    return _finish(document)


def _cell(result: dict[str, Any] | None, unit: str) -> str:
    if result is None or result.get("value") is None:
        return "n/a"
    value = result["value"]
    if unit == "B/item":
        return f"{value:,.0f} B"
    digits = 2 if value < 10 else 1 if value < 100 else 0
    text = f"{value:,.{digits}f} µs"
    if "ops_per_s" in result:
        text += f" ({result['ops_per_s'] / 1000:,.1f}k/s)"
    return text


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:,.2f}×"


def markdown(document: dict[str, Any], *, only: list[str] | None = None) -> str:
    """The Markdown table (with notes) for every scenario, or those of the *only* areas."""
    meta = document["meta"]
    versions = ", ".join(meta.get("versions", {}).values())
    lines = [
        "# lionexec benchmarks",
        "",
        f"Generated {meta['generated']} from `{meta.get('revision', '?')}` "
        f"on Python {meta['python']}, {meta['platform']}, "
        f"{meta['cpus']} CPUs ({versions}). Figures are per operation (µs) or per item "
        "(bytes), best of all runs (up to 5 per pass, after a warm-up); lower is better. "
        "Throughput in parentheses. Speedup = lionagi / lionexec; cost = lionexec / raw trio. "
        f"1-minute load average as each area started (per pass): {_loads(meta) or '?'}.",
        "",
        HEADER,
        "|---|---:|---:|---:|---:|---:|",
    ]
    notes: dict[tuple[str, str], list[str]] = {}
    for row in document["scenarios"]:
        if only and row["area"] not in only:
            continue
        results, unit = row["results"], row["unit"]
        label = row["scenario"]
        cells = [_cell(results.get(impl), unit) for impl in ("lionexec", "lionagi", "raw")]
        ratios = row["ratios"]
        lines.append(
            f"| {label} | {' | '.join(cells)} | {_times(ratios['speedup_vs_lionagi'])} "
            f"| {_times(ratios['cost_vs_raw'])} |"
        )
        for impl, r in results.items():
            if r.get("note"):
                notes.setdefault((impl, r["note"]), []).append(row["scenario"])
    for area, info in meta.get("areas", {}).items():
        if only and area not in only:
            continue
        for impl, reason in info.get("unavailable", {}).items():
            notes.setdefault((impl, reason), []).append(f"all of {area}")
    if notes:
        lines += ["", "Notes:", ""]
        for (impl, note), where in notes.items():
            rows = "; ".join(where) if len(where) <= 2 else f"{len(where)} rows ({where[0]}, ...)"
            lines.append(f"- {impl}, {rows}: {note}")
    lines += _targets(document, only)
    if any(info.get("quick") for info in meta.get("areas", {}).values()):
        lines += ["", "(quick run: small sizes, not for comparison)"]
    return "\n".join(lines) + "\n"


def _loads(meta: dict[str, Any]) -> str:
    loads = {a: v.get("load_average_at_start") or [] for a, v in meta["areas"].items()}
    return ", ".join(f"{a} {'/'.join(f'{x:.1f}' for x in v)}" for a, v in loads.items() if v)


def _targets(document: dict[str, Any], only: list[str] | None) -> list[str]:
    rows = {row["scenario"]: row for row in document["scenarios"]}
    out: list[str] = []
    for issue, check, scenario, bound, larger in TARGETS:
        row = rows.get(scenario)
        if row is None or (only and row["area"] not in only):
            continue
        if check == "linear":
            big = rows.get(larger)
            small_value = row["results"].get("lionexec", {}).get("value")
            big_value = big["results"].get("lionexec", {}).get("value") if big else None
            ratio = _ratio(big_value, small_value)
            what = f"{larger} per item ≤ {bound:g}× {scenario}"
        elif check == "speedup":
            ratio = row["ratios"]["speedup_vs_lionagi"]
            what = f"{scenario}: ≥ {bound:g}× lionagi"
        else:
            ratio = row["ratios"]["cost_vs_raw"]
            what = f"{scenario}: ≤ {bound:.2g}× raw trio"
        if ratio is None:
            verdict = "not measured"
        else:
            met = ratio >= bound if check == "speedup" else ratio <= bound
            verdict = f"{ratio:.2f}×, {'met' if met else '**missed**'}"
        out.append(f"| {issue} | {what} | {verdict} |")
    if not out:
        return []
    header = [
        "",
        "Targets (from the issues):",
        "",
        "| issue | target | lionexec |",
        "|---|---|---|",
    ]
    return header + out


def write(directory: Path, name: str, document: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")
    (directory / f"{name}.md").write_text(markdown(document))
