"""Sandbox fixtures: the real bubblewrap (required under CI), and directories outside /tmp.

The sandbox gives each command a private ``/tmp``, so what a test wants a command to see (or
to fail to change) lives under ``/var/tmp``, which the command sees read-only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

BWRAP = "/usr/bin/bwrap"


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run a sandbox here, or ``None`` if it can."""
    if not os.access(BWRAP, os.X_OK):
        return f"no bubblewrap at {BWRAP} (apt-get install bubblewrap)"
    probe = subprocess.run(
        [
            BWRAP,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "/bin/true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"bubblewrap cannot set a sandbox up: {probe.stderr.strip()[:300]}"
    return None


@pytest.fixture(scope="session")
def bwrap() -> str:
    """The bubblewrap executable; under CI a missing or refused one fails the test."""
    problem = bwrap_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI: the sandbox tests need a working bubblewrap: {problem}")
        pytest.skip(problem)
    return BWRAP


@attrs.frozen
class Site:
    """A writable directory and, beside it, one the command must not change."""

    work: Path
    outside: Path
    sentinels: tuple[Path, ...]

    def intact(self) -> bool:
        return all(p.read_text() == p.name for p in self.sentinels)


@pytest.fixture
def site(bwrap: str) -> Iterator[Site]:
    root = Path(tempfile.mkdtemp(prefix="lionexec-sandbox-", dir="/var/tmp"))
    try:
        work, outside = root / "work", root / "outside"
        work.mkdir()
        (outside / "deep").mkdir(parents=True)
        sentinels = (outside / "sentinel", outside / "deep" / "sentinel2")
        for path in sentinels:
            path.write_text(path.name)
        yield Site(work, outside, sentinels)
    finally:
        shutil.rmtree(root, ignore_errors=True)
