"""The benchmark report's target table: paired journal rows, lower bounds and verdicts.

The report is how a run says which targets it met; these build a small document by hand (no
benchmark is run) and read the verdicts back.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.report import _DBOS_PAIRED, _targets

pytestmark = pytest.mark.timeout(30)


def _row(scenario: str, value: float, unit: str = "µs", **extra: float) -> dict[str, Any]:
    area = scenario.split(":", 1)[0]
    result = {"value": value, **extra}
    return {"scenario": scenario, "area": area, "unit": unit, "results": {"lionexec": result}}


def _verdicts(*rows: dict[str, Any]) -> dict[str, str]:
    lines = _targets({"scenarios": list(rows)}, None)
    table = [line for line in lines if line.startswith("| 37 |")]
    return {line.split(" | ")[1]: line.split(" | ")[2].rstrip(" |") for line in table}


def test_journal_rows_are_judged_by_their_paired_ratios() -> None:
    verdicts = _verdicts(
        _row("journal: 1k sequential calls, SQLite", 140.0),
        _row("journal: 1k concurrent calls, SQLite", 80.0),
        _row("journal: 1k concurrent calls, PostgreSQL", 120.0),
        _row(
            "journal: SQLite / equivalent floor, paired in one process, 1k, sequential calls",
            1.25,
            "x",
            q1=1.2,
            q3=1.3,
            repeats=8,
        ),
        _row("journal: SQLite / in memory, paired in one process, 1k, concurrent calls", 2.7, "x"),
        _row(
            "journal: PostgreSQL / in memory, paired in one process, 1k, concurrent calls",
            2.9,
            "x",
        ),
    )
    floor = verdicts[
        "journal: 1k sequential calls, SQLite: ≤ 1.3× the equivalent floor, paired in one "
        "process (median)"
    ]
    assert floor.startswith("1.25×, met") and "[1.20–1.30]" in floor
    sqlite = (
        "journal: 1k concurrent calls, SQLite: ≤ 2.5× in memory, paired in one process (median)"
    )
    assert verdicts[sqlite].startswith("2.70×, **missed**")
    postgres = (
        "journal: 1k concurrent calls, PostgreSQL: ≤ 3× in memory, paired in one process (median)"
    )
    assert verdicts[postgres].startswith("2.90×, met")
    assert verdicts["journal: 1k sequential calls, SQLite: ≤ 150 µs"] == ("140 µs, met")


def test_lower_bounds_are_met_from_above_and_a_missing_row_is_left_out() -> None:
    verdicts = _verdicts(
        _row(
            f"{_DBOS_PAIRED}, SQLite, default durability", 17.4, "x", q1=16.0, q3=18.0, repeats=6
        ),
        _row(f"{_DBOS_PAIRED}, PostgreSQL, default durability", 1.69, "x"),
        _row("server CPU per request: lionexec / raw app, interleaved in one run", 1.25, "x"),
    )
    sqlite = verdicts[f"{_DBOS_PAIRED}, SQLite, default durability: ≥ 10.00×"]
    assert sqlite.startswith("17.40×, met") and "[16.0–18.0]" in sqlite
    assert verdicts[f"{_DBOS_PAIRED}, PostgreSQL, default durability: ≥ 3.00×"].startswith(
        "1.69×, **missed**"
    )
    server = "server CPU per request: lionexec / raw app, interleaved in one run: ≤ 1.20×"
    assert verdicts[server] == "1.25×, **missed**"
    # rows not measured in this run (the power-durability pairs) have no line at all
    assert not any("durability='power'" in target for target in verdicts)
