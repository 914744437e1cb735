"""The examples of README and the tutorial pass ``mypy --strict``, as a user's code would be
checked.

Each page's ``python`` blocks (as :mod:`tests.test_docs_examples` runs them: in order, one
namespace per page) are written out as one module and checked together in one mypy run, with
its cache in a temporary directory. A page's later block may define ``main`` again, as the
examples do, so only ``no-redef`` is not reported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_docs_examples import RUN_TAG, fenced_blocks

ROOT = Path(__file__).resolve().parent.parent
#: The pages whose examples are checked.
PAGES = ["README.md", "docs/tutorial.md"]
#: How ``act()``'s result is typed, checked in the same run.
ACT_TYPES = """
from typing import assert_type

from lionexec import ActionResponse, AlcallParams, Branch


async def typed(branch: Branch, flag: bool) -> None:
    call = {"function": "f", "arguments": {}}
    assert_type(await branch.act(call), list[ActionResponse])
    assert_type(await branch.act(call, call_params=None), list[ActionResponse])
    timeout = AlcallParams(timeout=5, max_concurrent=2)
    assert_type(await branch.act(call, call_params=timeout), list[ActionResponse])
    kept = await branch.act(call, call_params=AlcallParams(return_exceptions=False))
    assert_type(kept, list[ActionResponse])
    raised = AlcallParams(return_exceptions=True)
    assert_type(await branch.act(call, call_params=raised), list[ActionResponse | Exception])
    maybe = AlcallParams(return_exceptions=flag)
    assert_type(await branch.act(call, call_params=maybe), list[ActionResponse | Exception])
"""


def program(page: Path) -> str:
    """The page's runnable blocks, as one module (a blank line between blocks)."""
    blocks = fenced_blocks(page.read_text(encoding="utf-8"), str(page))
    return "\n\n".join(block.source for block in blocks if block.tag == RUN_TAG)


@pytest.mark.timeout(150)
def test_the_readme_examples_and_act_result_types_pass_mypy_strict(tmp_path: Path) -> None:
    files = []
    for name in PAGES:
        source = program(ROOT / name)
        assert source.count("\n") > 20, f"{name} has no examples to check"
        target = tmp_path / (Path(name).stem.lower().replace("-", "_") + "_examples.py")
        target.write_text(source, encoding="utf-8")
        files.append(str(target))
    (tmp_path / "act_types.py").write_text(ACT_TYPES, encoding="utf-8")
    files.append(str(tmp_path / "act_types.py"))
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # this checkout's lionexec, not an installed one
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--disable-error-code=no-redef",
            f"--cache-dir={tmp_path / 'mypy-cache'}",
            # the project's settings: its optional imports (re2) are known to be untyped
            f"--config-file={ROOT / 'pyproject.toml'}",
            *files,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=140,
    )
    assert done.returncode == 0, done.stdout + done.stderr
