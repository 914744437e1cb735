"""The exports are typed as the SDKs' request params: passing them needs no cast.

``typed/sdk_calls.py`` hands ``to_openai()``, ``to_responses()`` and ``to_anthropic()`` to the
real SDK clients; ``mypy --strict`` must accept it. (With ``list[dict[str, Any]]`` exports, as
before, mypy refuses every one of those calls.) A cold mypy run over the SDKs' types takes a
while, so this test has a longer budget; the cache in ``.mypy_cache`` makes later runs quick.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = Path(__file__).resolve().parent / "typed" / "sdk_calls.py"


@pytest.mark.timeout(600)
def test_exports_type_check_against_the_sdks_without_cast() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(CHECKED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=590,
    )
    assert result.returncode == 0, result.stdout + result.stderr
