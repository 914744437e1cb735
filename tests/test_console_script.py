"""The ``lionexec`` command is installed with the package and is ``python -m lionexec``."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest


def test_the_console_script_is_the_module_main() -> None:
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="lionexec")
    assert entry.value == "lionexec.__main__:main"


@pytest.mark.timeout(60)
def test_the_command_runs_and_says_how_to_use_it() -> None:
    command = shutil.which("lionexec", path=os.path.dirname(sys.executable))
    assert command is not None, "the lionexec command is not installed beside this Python"
    done = subprocess.run([command], capture_output=True, text=True, timeout=50)
    assert done.returncode == 2
    assert "usage:" in done.stderr and "serve" in done.stderr and "journal" in done.stderr


@pytest.mark.timeout(60)
def test_the_command_lists_its_commands_and_runs_the_journal_cli(tmp_path: object) -> None:
    command = shutil.which("lionexec", path=os.path.dirname(sys.executable))
    assert command is not None
    done = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0
    for name in ("demo", "serve", "worker", "journal"):
        assert f"    {name} " in done.stdout
    missing = subprocess.run(
        [command, "journal", "show", f"{tmp_path}/nothing.db"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert missing.returncode == 1
    assert (
        missing.stderr
        == f"error: no journal at {tmp_path}/nothing.db (give the path of an existing file)\n"
    )
