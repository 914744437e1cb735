"""examples/agent.py runs the loop against the local provider by default."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lionexec.testing import assert_consistent

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lionexec_example_agent", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_the_agent_runs_against_the_local_provider(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_API"):
        monkeypatch.delenv(name, raising=False)
    agent = load()
    await agent.main([])
    out = capsys.readouterr().out
    assert "add -> completed: 42" in out
    assert "word_count -> completed: 4" in out
    assert "delete_file -> denied" in out
    assert "[done: answered after 3 turns]" in out


async def test_the_agent_on_a_given_endpoint() -> None:
    agent = load()
    import trio

    from lionexec.models import Endpoint, Model
    from lionexec.models.testing import LocalProvider

    provider = LocalProvider(agent.script())
    async with trio.open_nursery() as nursery:
        base = await nursery.start(provider.serve)
        out: list[str] = []
        async with Model(endpoint=Endpoint(base, api="responses"), name="m") as model:
            branch = await agent.agent(model, "q", out=out)
        nursery.cancel_scope.cancel()
    assert_consistent(branch)
    assert any("denied" in line for line in out)
