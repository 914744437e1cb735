"""The approvals console as a person uses it: a real headless Chromium (driven over the
DevTools protocol, ``tests/support/cdp.py``) signs in, watches the inbox fill while it is
open, approves one call and rejects another; the approved call runs exactly once (the tool
counts its runs outside the journal), the rejected one never.

With ``LIONEXEC_SCREENSHOTS=DIR`` it also saves the pages' screenshots there (``nox -s
screenshots`` writes the ones in ``docs/_static``). Without Chromium the test is skipped,
except under CI, where it fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from lionexec.journal import open_journal

from ..support.cdp import Page, chromium_or_skip, open_chromium
from .test_console import HOSTILE, TOKEN, api_client, console_server, park

BUDGET = 100.0
ROOT = Path(__file__).resolve().parents[2]
#: What a screenshot in the docs may weigh at most.
MAX_SCREENSHOT = 150_000


async def shot(page: Page, name: str) -> None:
    target = os.environ.get("LIONEXEC_SCREENSHOTS")
    if target:
        size = await page.screenshot(Path(target) / f"console-{name}.png")
        assert size < MAX_SCREENSHOT, f"console-{name}.png is {size} bytes"


def js(value: str) -> str:
    return json.dumps(value)


@pytest.mark.timeout(150)
async def test_a_person_approves_in_chromium_and_the_call_runs_once(tmp_path: Path) -> None:
    binary = chromium_or_skip()
    paid: list[str] = []
    with trio.fail_after(BUDGET):
        async with console_server(tmp_path, paid, token=TOKEN) as (app, url):
            async with api_client(url) as api, open_chromium(binary) as browser:
                first = await park(api, "call_pay_1", "INV-0042")
                page = await browser.new_page()
                await page.goto(f"{url}/console/")
                await page.wait_for("document.querySelector('input[name=token]')")
                assert "Sign in" in await page.text()
                await shot(page, "login")
                await page.evaluate(
                    f"document.querySelector('input[name=token]').value = {js(TOKEN)};"
                    "document.querySelector('main form button').click()"
                )
                await page.wait_for(f"document.querySelector('[data-approval={js(first)}]')")
                assert await page.evaluate("location.pathname") == "/console/approvals"
                assert "INV-0042" in await page.text()

                # A second call parks while the inbox is open: it appears without a reload.
                await page.evaluate("window.sameDocument = true")
                await page.wait_for("document.body.dataset.live === 'open'")
                second = await park(api, "call_pay_2", HOSTILE, cid="bills")
                await page.wait_for(f"document.querySelector('[data-approval={js(second)}]')")
                assert await page.evaluate("window.sameDocument") is True
                # The model's text is shown as text, and none of it ran.
                shown = await page.evaluate(
                    f"document.querySelector('[data-approval={js(second)}] pre').textContent"
                )
                assert "<script>window.pwned=1</script>" in shown
                assert await page.evaluate("typeof window.pwned") == "undefined"
                await shot(page, "approvals")

                await page.evaluate(
                    f"document.querySelector('[data-approval={js(first)}] button.approve').click()"
                )
                await page.wait_for("document.getElementById('decided')")
                assert "is now used" in await page.text()
                assert paid == ["INV-0042"]  # exactly once
                assert not await page.evaluate(
                    f"document.querySelector('[data-approval={js(first)}]')"
                )

                await page.evaluate(
                    f"const card = document.querySelector('[data-approval={js(second)}]');"
                    "card.querySelector('input[name=reason]').value = 'not a real invoice';"
                    "card.querySelector('button.reject').click()"
                )
                await page.wait_for(
                    "document.getElementById('decided') && "
                    "document.getElementById('decided').textContent.includes('rejected')"
                )
                assert "not a real invoice" in await page.text()
                assert await page.evaluate("typeof window.pwned") == "undefined"

                await page.goto(f"{url}/console/conversations")
                await page.wait_for("document.querySelector('main table a')")
                listed = await page.text()
                assert "1 completed" in listed and "1 denied" in listed, listed
                await shot(page, "conversations")
                await page.evaluate("document.querySelector('main table a').click()")
                await page.wait_for("document.querySelectorAll('[data-call]').length === 2")
                outcomes = await page.evaluate(
                    "Array.from(document.querySelectorAll('[data-call]'), c => c.dataset.outcome)"
                )
                assert outcomes == ["completed", "denied"]
                await shot(page, "calls")
                assert await page.evaluate("typeof window.pwned") == "undefined"

            assert app.journal is not None
            states = {a.approval_id: a.state for a in await app.journal.approvals(None, None)}
            assert states == {first: "used", second: "rejected"}
            async with httpx.AsyncClient(base_url=url) as anonymous:  # still behind the token
                assert (await anonymous.get("/console/approvals")).status_code == 401
    assert paid == ["INV-0042"]


TOOLS_MODULE = '''
import os


def pay(invoice: str, amount: int) -> str:
    """Pay an invoice (appends a line to $PAID: runs counted outside the journal)."""
    with open(os.environ["PAID"], "a") as paid:
        paid.write(invoice + "\\n")
    return f"paid {invoice}"


TOOLS = [pay]
'''


@pytest.mark.timeout(150)
async def test_lionexec_serve_shows_a_parked_call_that_chromium_approves_once(
    tmp_path: Path,
) -> None:
    """The command line, as README has it: ``serve`` with a journal and ``--approve``; the
    call appears in the console, is approved from the browser, and runs once. The server
    traces to a file (``--trace-file``): the call that ran is one ``execute_tool`` span."""
    binary = chromium_or_skip()
    (tmp_path / "served_tools.py").write_text(TOOLS_MODULE)
    paid, target, trace = tmp_path / "paid.txt", tmp_path / "serve.db", tmp_path / "trace.jsonl"
    env = dict(os.environ, PAID=str(paid), LIONEXEC_SERVER_TOKEN=TOKEN)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(tmp_path), str(ROOT), env.get("PYTHONPATH")])
    )
    command = [sys.executable, "-m", "lionexec", "serve", "--tools", "served_tools:TOOLS"]
    command += ["--approve", "pay", "--port", "0", "--journal", str(target)]
    command += ["--trace-file", str(trace)]
    with trio.fail_after(BUDGET):
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, env=env, cwd=tmp_path
        )
        try:
            printed = await printed_until(process, b"approvals console: ")
            match = re.search(rb"approvals console: (http://127\.0\.0\.1:\d+)/console/\n", printed)
            assert match is not None, printed
            url = match.group(1).decode()
            async with api_client(url) as api, open_chromium(binary) as browser:
                approval_id = await park(api, "call_1", "INV-7")
                page = await browser.new_page()
                await page.goto(f"{url}/console/approvals")
                await page.evaluate(
                    f"document.querySelector('input[name=token]').value = {js(TOKEN)};"
                    "document.querySelector('main form button').click()"
                )
                card = f"[data-approval={js(approval_id)}]"
                await page.wait_for(f"document.querySelector('{card} button.approve')")
                await page.evaluate(f"document.querySelector('{card} button.approve').click()")
                await page.wait_for("document.getElementById('decided')")
                assert "is now used" in await page.text()
        finally:
            process.send_signal(signal.SIGINT)
            with trio.move_on_after(BUDGET):
                await process.wait()
            if process.returncode is None:
                process.kill()
        assert process.returncode == 0
    assert paid.read_text() == "INV-7\n"
    async with open_journal(str(target)) as journal:
        [approval] = await journal.approvals(None, None)
        assert (approval.approval_id, approval.state) == (approval_id, "used")
        assert approval.decided_by == "console (127.0.0.1)"
    # and the command line says so, as README's operator would check it
    listed = await trio.run_process(
        [sys.executable, "-m", "lionexec", "journal", "approvals", str(target), "--json"],
        capture_stdout=True,
        env=env,
    )
    [row] = [json.loads(line) for line in listed.stdout.decode().splitlines()]
    assert (row["approval_id"], row["state"]) == (approval_id, "used"), row
    # the trace file the server wrote (and flushed as it stopped): strict JSON, one span a line
    spans = [json.loads(line, parse_constant=_refuse) for line in trace.read_text().splitlines()]
    [span] = [s for s in spans if s["attributes"].get("gen_ai.tool.call.id") == "call_1"]
    assert span["name"] == "execute_tool pay"
    assert span["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert span["attributes"]["lionexec.call.status"] == "completed"
    # a completed call leaves the status unset, as OpenTelemetry asks of instrumentation
    assert span["status"]["code"] == "UNSET"


def _refuse(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


async def printed_until(process: trio.Process, marker: bytes) -> bytes:
    """What the process printed, up to the end of the line holding *marker*."""
    assert process.stdout is not None
    text = b""
    while marker not in text or not text.split(marker, 1)[1].count(b"\n"):
        chunk = await process.stdout.receive_some()
        assert chunk, f"the server exited: {text!r}"
        text += chunk
    return text
