"""Development sessions: ``nox -s tests``, ``lint``, ``typing``, ``docs``, ``build``, ``bench``,
``demo``, ``crash``, ``ki-soak``, ``agent-soak``, ``workers``, ``screenshots``.

Every session builds its own virtualenv with the interpreter nox runs on, so the only thing a
fresh machine needs is Python and ``pip install nox``. The sessions that run a part of the test
suite (``crash``, ``ki-soak``, ``agent-soak``, ``workers``) share one environment,
``.nox/soak-env``: its dependencies are installed once (again only when ``pyproject.toml``
changes) and lionexec itself is reinstalled (without its dependencies, a few seconds) each
run. They run pytest with
``-v -s`` and unbuffered output, so their progress shows while they run.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import sys

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False

PYPROJECT = nox.project.load_toml("pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PYPROJECT, "test")
REFERENCE = "lionagi==0.36.0"
#: The environment the test-subset sessions share (see the module docstring).
SOAK_ENV = pathlib.Path(".nox") / "soak-env"
#: pytest's arguments for long runs: a line per test, the tests' own progress, no cache.
LONG_RUN = ("-v", "-s", "-p", "no:cacheprovider")


def _soak_python(session: nox.Session) -> str:
    """The shared environment's python: created, its dependencies installed if
    ``pyproject.toml`` changed since, and the current lionexec installed into it."""
    python = SOAK_ENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    stamp = SOAK_ENV / "pyproject.sha256"
    digest = hashlib.sha256(pathlib.Path("pyproject.toml").read_bytes()).hexdigest()
    if not python.exists():
        session.run(sys.executable, "-m", "venv", str(SOAK_ENV), external=True)
        stamp.unlink(missing_ok=True)
    if not stamp.exists() or stamp.read_text() != digest:
        session.run(
            str(python), "-m", "pip", "install", "-q", ".[postgres]", *TEST_DEPS, external=True
        )
        stamp.write_text(digest)
    session.run(
        str(python),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--force-reinstall",
        ".",
        external=True,
    )
    return str(python)


def _pytest(session: nox.Session, *args: str, env: dict[str, str]) -> None:
    python = _soak_python(session)
    session.run(
        python,
        "-m",
        "pytest",
        *args,
        *LONG_RUN,
        *session.posargs,
        env={**env, "PYTHONUNBUFFERED": "1"},
        external=True,
    )


@nox.session
def tests(session: nox.Session) -> None:
    """Install lionexec (non-editable) with the test dependencies and run pytest."""
    session.install(".", *TEST_DEPS)
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typing(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install(".", *nox.project.dependency_groups(PYPROJECT, "typing"))
    session.run("mypy", "--strict", "lionexec")


@nox.session
def build(session: nox.Session) -> None:
    """Build the sdist and the wheel into dist/ and check them (twine check --strict)."""
    shutil.rmtree("dist", ignore_errors=True)
    session.install("build", "twine")
    session.run("python", "-m", "build", "--outdir", "dist", ".")
    session.run(
        "twine", "check", "--strict", *sorted(str(p) for p in pathlib.Path("dist").glob("*"))
    )


@nox.session
def demo(session: nox.Session) -> None:
    """Run lionexec's main job: the scripted tool-call demo (its agent part needs the http
    and server extras)."""
    session.install(".[http,server]")
    session.run("python", "-m", "lionexec", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: lionexec, the reference implementation and raw trio, side by side."""
    session.install(
        ".[http,postgres]",
        REFERENCE,
        "hypercorn",
        "matplotlib",
        *nox.project.dependency_groups(PYPROJECT, "bench"),
    )
    session.run("python", "-m", "benchmarks", *session.posargs)
    # instructions per call of the act rows against their targets (valgrind's cachegrind;
    # the table says so where valgrind is not installed)
    session.run("python", "-m", "benchmarks.instructions")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation strictly (every warning is an error) into docs/_build/html."""
    # The extras too: the API reference documents the names that import them.
    session.install(
        ".[postgres,http,server,otel]", *nox.project.dependency_groups(PYPROJECT, "docs")
    )
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")


@nox.session(python=False)
def crash(session: nox.Session) -> None:
    """The journal's full crash matrix: every kill point x effect class x SQLite/PostgreSQL x
    durability.

    Subprocesses SIGKILLed at each point, then recovery (tests/journal/test_crash.py; the
    test suite runs a sample). Needs PostgreSQL server binaries (initdb, pg_ctl).
    """
    _pytest(session, "tests/journal/test_crash.py", env={"LIONEXEC_CRASH_MATRIX": "full"})


@nox.session(name="ki-soak", python=False)
def ki_soak(session: nox.Session) -> None:
    """Ctrl+C soak: real SIGINTs at random instants into running batches, then the evidence.

    tests/act/test_ki_signals.py with ``LIONEXEC_KI_RUNS`` (default 200) subprocess runs,
    each interrupted once, and ``LIONEXEC_KI_SWEEP_POINTS`` (default 2000) in-process runs of
    the line sweep; ``LIONEXEC_KI_SEED`` and ``LIONEXEC_KI_JOBS`` pass through. Zero
    violations allowed; the summary (``-s``) counts each verdict and where interrupts landed.
    """
    env = {
        "LIONEXEC_KI_RUNS": os.environ.get("LIONEXEC_KI_RUNS", "200"),
        "LIONEXEC_KI_SWEEP_POINTS": os.environ.get("LIONEXEC_KI_SWEEP_POINTS", "2000"),
    }
    for name in ("LIONEXEC_KI_SEED", "LIONEXEC_KI_JOBS"):
        if name in os.environ:
            env[name] = os.environ[name]
    _pytest(session, "tests/act/test_ki_signals.py", env=env)


@nox.session(name="agent-soak", python=False)
def agent_soak(session: nox.Session) -> None:
    """Durable agent runs under SIGKILL: an agent process killed at random points and
    restarted until its run ends, then its run checked from outside.

    tests/models/test_agent_crash.py with ``LIONEXEC_AGENT_KILLS`` (default 200) kills;
    ``LIONEXEC_AGENT_SEED`` repeats a run. Zero violations allowed; the summary (``-s``)
    counts where the kills landed.
    """
    env = {"LIONEXEC_AGENT_KILLS": os.environ.get("LIONEXEC_AGENT_KILLS", "200")}
    if "LIONEXEC_AGENT_SEED" in os.environ:
        env["LIONEXEC_AGENT_SEED"] = os.environ["LIONEXEC_AGENT_SEED"]
    _pytest(session, "tests/models/test_agent_crash.py", env=env)


@nox.session(python=False)
def workers(session: nox.Session) -> None:
    """Worker processes at scale: three workers and one submitter, 5,000 calls on PostgreSQL.

    tests/workers/test_processes.py with ``LIONEXEC_WORKERS_N`` (default 5000): each call
    executed exactly once (side effects counted outside the journal), plus the kill -9 and
    zombie cases, and a rate limit shared by three workers for
    ``LIONEXEC_WORKERS_RATE_SECONDS`` (default 30; achieved rate within 5 %, never over the
    burst allowance); prints the throughput and the achieved rate. Needs PostgreSQL server
    binaries (initdb, pg_ctl).
    """
    _pytest(
        session,
        "tests/workers/test_processes.py",
        env={
            "LIONEXEC_WORKERS_N": os.environ.get("LIONEXEC_WORKERS_N", "5000"),
            "LIONEXEC_WORKERS_RATE_SECONDS": os.environ.get("LIONEXEC_WORKERS_RATE_SECONDS", "30"),
        },
    )


@nox.session
def screenshots(session: nox.Session) -> None:
    """The console's screenshots in docs/_static (console-*.png), taken by the browser test.

    tests/examples/test_console_browser.py with ``LIONEXEC_SCREENSHOTS=docs/_static``: a real
    headless Chromium signs in, parks, approves and rejects calls, and saves each page (each
    under 150 KB, or the test fails). Needs Chromium (``apt-get install chromium``).
    """
    session.install(".", *TEST_DEPS)
    session.run(
        "pytest",
        "tests/examples/test_console_browser.py",
        "-p",
        "no:cacheprovider",
        "-k",
        "person_approves",
        *session.posargs,
        env={"LIONEXEC_SCREENSHOTS": str(pathlib.Path("docs/_static").resolve()), "CI": "1"},
    )
