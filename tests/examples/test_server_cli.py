"""``python -m lionexec serve`` and the ``server`` extra.

The command runs as a real process on 127.0.0.1 (port 0), with tools named by
``--tools MODULE:ATTRIBUTE``; without hypercorn, serving fails naming the extra, and
:mod:`lionexec.server` itself still imports.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
import trio

import lionexec.__main__
from lionexec.otel import OtelSink

from .conftest import DEMO_TOOLS, announced_url, call, server

BUDGET = 30.0
ROOT = Path(__file__).resolve().parents[2]
EXTRA = "pip install 'lionexec[server]'"


def _env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [*map(str, paths), str(ROOT), env.get("PYTHONPATH")])
    )
    return env


async def test_python_m_lionexec_serve_serves_the_tools_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "served_tools.py").write_text(
        textwrap.dedent(
            '''
            def shout(text: str) -> str:
                """Upper-case a text."""
                return text.upper()

            TOOLS = [shout]
            '''
        )
    )
    target = tmp_path / "serve.db"
    command = [sys.executable, "-m", "lionexec", "serve", "--tools", "served_tools:TOOLS"]
    command += ["--port", "0", "--journal", str(target)]
    body = {"conversation_id": "cli-1", "tool_calls": [call("shout", {"text": "hi"}, "c1")]}
    with trio.fail_after(BUDGET):
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, env=_env(tmp_path), cwd=tmp_path
        )
        try:
            url = await announced_url(process)
            async with httpx.AsyncClient(base_url=url) as client:
                reply = await client.post("/v1/act", json=body)
                history = await client.get("/v1/conversations/cli-1")
            process.send_signal(signal.SIGINT)
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert reply.status_code == 200, reply.text
    [message] = reply.json()["messages"]
    assert (message["tool_call_id"], message["content"], message["status"]) == (
        "c1",
        "HI",
        "completed",
    )
    assert history.json()["total"] == 2
    assert process.returncode == 0
    assert target.exists()  # journaled, where --journal said


def test_serve_refuses_tools_it_cannot_load(capsys: pytest.CaptureFixture[str]) -> None:
    assert lionexec.__main__.main(["serve", "--tools", "no_such_module_here:TOOLS"]) == 2
    assert "--tools no_such_module_here:TOOLS" in capsys.readouterr().err
    assert lionexec.__main__.main(["serve", "--tools", "os:sep"]) == 2
    assert "expected a list of tools" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --approve names one of the tools served
        server.config_from_args(["--approve", "word_count"], {})
    config = server.config_from_args(["--approve", "word_count"], {}, tools=DEMO_TOOLS)
    assert config.approve == ("word_count",)


def test_trace_file_needs_a_journal_and_calls_run_here(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = server.config_from_args(["--trace-file", "t.jsonl"], {})
    assert (config.trace_file, config.journal) == ("t.jsonl", "lionexec.db")
    assert server.config_from_args([], {}).trace_file is None
    for argv in (["--journal", ":memory:"], ["--workers"], []):
        with pytest.raises(SystemExit):
            server.config_from_args([*argv, "--trace-file", ""], {})
    for argv in (["--journal", ":memory:"], ["--workers"]):
        with pytest.raises(SystemExit):
            server.config_from_args([*argv, "--trace-file", "t.jsonl"], {})
        assert "--trace-file needs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="trace_file needs a journal"):
        server.ServerConfig(trace_file="t.jsonl")
    with pytest.raises(ValueError, match="trace_file must be None or a file path"):
        server.ServerConfig(trace_file="a\0b", journal="j.db")
    with pytest.raises(ValueError, match="sinks need a journal"):
        server.App(sinks=[OtelSink()])


def test_without_the_otel_sdk_serve_trace_file_names_the_extra_and_opens_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if opentelemetry-sdk were not installed: its modules (and ours on it) unimportable.
    for name in [n for n in sys.modules if n.startswith("opentelemetry.sdk")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    monkeypatch.delitem(sys.modules, "lionexec.otel.jsonl", raising=False)
    monkeypatch.chdir(tmp_path)
    argv = ["serve", "--port", "0", "--trace-file", "trace.jsonl"]
    assert lionexec.__main__.main(argv) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "--trace-file" in line and "pip install 'lionexec[otel]'" in line
    assert list(tmp_path.iterdir()) == []  # neither the journal nor the trace file


def test_without_hypercorn_serve_names_the_extra_and_opens_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "hypercorn", None)
    monkeypatch.chdir(tmp_path)
    assert lionexec.__main__.main(["serve", "--port", "0"]) == 1
    assert EXTRA in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no journal was created


async def test_without_hypercorn_the_serve_function_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "hypercorn", None)
    app = server.App(server.ServerConfig(port=0))
    with pytest.raises(ImportError, match=re.escape(EXTRA)):
        await server.serve(app)


def test_lionexec_server_imports_without_hypercorn_and_lionexec_does_not_import_it() -> None:
    code = textwrap.dedent(
        """
        import sys
        import lionexec
        assert "lionexec.server" not in sys.modules
        sys.modules["hypercorn"] = None
        import lionexec.server
        assert lionexec.server.App.__module__ == "lionexec.server"
        assert not [m for m in sys.modules if m.startswith(("psycopg", "hypercorn."))]
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), timeout=BUDGET)
