"""A missing extra is named, with the line that installs it: in the library, the command line
and the examples. Each case runs Python in a subprocess where the extra's package cannot be
imported (tests/support/extras.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.extras import blocking

ROOT = Path(__file__).resolve().parent.parent


def python(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=env,
    )


LIBRARY = [
    ("httpx", "http", "import lionexec.models as m; m.Model"),
    ("httpx", "http", "from lionexec.models import run_stream"),
    ("hypercorn", "server", "import lionexec.models.testing"),
    ("mcp", "mcp", "import lionexec.mcp"),
    ("opentelemetry", "otel", "import lionexec.otel"),
    ("opentelemetry.sdk", "otel", "import lionexec.otel.jsonl"),
    (
        "psycopg",
        "postgres",
        "from lionexec.journal import PostgresJournal as P; P('postgresql://x')",
    ),
    (
        "psycopg_pool",
        "postgres",
        "from lionexec.journal import open_journal as o; o('postgres://x')",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("package", "extra", "code"), LIBRARY)
def test_the_library_names_the_extra(package: str, extra: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "use.py"
    script.write_text(code + "\n")
    done = python(blocking(package, str(script)))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: ")
    assert f"pip install 'lionexec[{extra}]'" in last
    assert package in last


COMMANDS = [
    (
        "hypercorn",
        "server",
        "lionexec.__main__",
        ["serve", "--journal", ":memory:", "--port", "0"],
    ),
    ("psycopg", "postgres", "lionexec.__main__", ["journal", "show", "postgresql://u@h/db"]),
    (
        "psycopg",
        "postgres",
        "lionexec.__main__",
        ["worker", "--database", "postgresql://u@h/db", "--tools", "tests.journal.test_cli:TOOLS"],
    ),
    (
        "opentelemetry.sdk",
        "otel",
        "lionexec.__main__",
        ["serve", "--port", "0", "--journal", "/nonexistent/j.db", "--trace-file", "/none/t"],
    ),
    ("httpx", "http", "examples/agent.py", []),
    ("hypercorn", "server", "examples/agent.py", []),
    ("hypercorn", "server", "examples/server.py", ["--port", "0", "--journal", ":memory:"]),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("package", "extra", "target", "argv"), COMMANDS)
def test_commands_and_examples_say_one_line(
    package: str, extra: str, target: str, argv: list[str]
) -> None:
    done = python(blocking(package, target), *argv)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ")
    assert f"pip install 'lionexec[{extra}]'" in line


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("package", "extra"), [("httpx", "http"), ("hypercorn", "server")])
def test_the_demo_runs_without_the_extras_of_its_agent_part(package: str, extra: str) -> None:
    done = python(blocking(package, "lionexec.__main__"), "demo")
    assert done.returncode == 0, done.stderr
    assert "exactly one response each" in done.stdout  # the parts before it ran
    [skipped] = [line for line in done.stdout.splitlines() if "(skipped: " in line]
    assert f"pip install 'lionexec[{extra}]'" in skipped
