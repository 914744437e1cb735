"""The triggers of ``docs/troubleshooting.md``'s entries about the commands (``lionexec
journal``, ``worker``, ``serve``) and the sandbox: each makes lionexec produce the message as
a user meets it (the commands as real subprocesses, the sandbox under the real bubblewrap).
Importing this module registers them (see ``tests/test_troubleshooting.py``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.troubleshooting import (
    ROOT,
    add,
    answered,
    araised,
    call,
    log_lines,
    logged,
    raised,
    run_python,
    trigger,
)

# -- the journal command and the worker ----------------------------------------------------------


def lionexec(*args: str, cwd: Path) -> str:
    """``lionexec ARGS`` in a fresh process (run from *cwd*): its stderr and stdout."""
    code = "import sys\nfrom lionexec.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    return run_python(code, *args, cwd=cwd)


ESCALATE = {"mode": "rules", "escalate": {"add": ["*"]}}


async def parked_journal(tmp: Path, *call_ids: str, branches: int = 1) -> tuple[Path, list[Any]]:
    """An SQLite journal where each of *branches* branches parked an ``add`` call per id."""
    from lionexec.governance import PermissionPolicy
    from lionexec.journal import SqliteJournal

    path = tmp / "journal.db"
    async with SqliteJournal(path) as journal:
        for _ in range(branches):
            branch = await journal.branch(policy=PermissionPolicy(**ESCALATE))
            branch.register_tools(add)
            async with branch:
                for call_id in call_ids:
                    await branch.act(call("add", call_id, a=1, b=2))
        return path, await journal.approvals()


@trigger("ts-cli-no-journal")
def _cli_no_journal(tmp: Path) -> str:
    return lionexec("journal", "show", str(tmp / "jurnal.db"), cwd=tmp)


@trigger("ts-cli-empty-journal")
def _cli_empty_journal(tmp: Path) -> str:
    (tmp / "empty.db").touch()
    return lionexec("journal", "calls", str(tmp / "empty.db"), cwd=tmp)


@trigger("ts-cli-journal-is-a-directory")
def _cli_journal_is_a_directory(tmp: Path) -> str:
    return lionexec("journal", "show", str(tmp), cwd=tmp)


@trigger("ts-cli-journal-scheme")
def _cli_journal_scheme(tmp: Path) -> str:
    return lionexec("journal", "show", "mysql://127.0.0.1/journal", cwd=tmp)


@trigger("ts-cli-journal-unreachable")
def _cli_journal_unreachable(tmp: Path) -> str:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return lionexec("journal", "show", f"postgresql://127.0.0.1:{port}/none", cwd=tmp)


@trigger("ts-cli-since")
async def _cli_since(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "calls", str(path), "--since", "yesterday", cwd=tmp)


@trigger("ts-cli-limit")
async def _cli_limit(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "approvals", str(path), "--limit", "ten", cwd=tmp)


@trigger("ts-cli-branch-id")
async def _cli_branch_id(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "approvals", str(path), "--branch", "conversation-1", cwd=tmp)


@trigger("ts-cli-approval-unknown-call")
async def _cli_approval_unknown_call(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "approve", str(path), "call_2", cwd=tmp)


@trigger("ts-cli-approval-unknown-id")
async def _cli_approval_unknown_id(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "approve", str(path), f"apr_{uuid.uuid4().hex}", cwd=tmp)


@trigger("ts-cli-approval-decided")
async def _cli_approval_decided(tmp: Path) -> str:
    path, [approval] = await parked_journal(tmp, "call_1")
    first = lionexec("journal", "reject", str(path), "call_1", "--reason", "not today", cwd=tmp)
    assert first.startswith("rejected "), first
    return lionexec("journal", "approve", str(path), approval.approval_id, cwd=tmp)


@trigger("ts-cli-approval-several-branches")
async def _cli_approval_several_branches(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1", branches=2)
    return lionexec("journal", "approve", str(path), "call_1", cwd=tmp)


@trigger("ts-cli-reject-reason")
async def _cli_reject_reason(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "reject", str(path), "call_1", cwd=tmp)


async def crashed(tmp: Path) -> Path:
    """A journal whose process died while a ``pure`` call (``safe``) and an ``unsafe`` one
    ran (their requests committed, no response)."""
    from tests.journal.test_cli import crashed_journal

    path = tmp / "crashed.db"
    await trio.to_thread.run_sync(crashed_journal, path)  # (it runs trio of its own)
    return path


@trigger("ts-cli-recover-needs-tools")
async def _cli_recover_needs_tools(tmp: Path) -> str:
    return lionexec("journal", "recover", str(await crashed(tmp)), cwd=tmp)


@trigger("ts-cli-recover-tool-missing")
async def _cli_recover_tool_missing(tmp: Path) -> str:
    (tmp / "mytools.py").write_text(
        "def other(text: str) -> str:\n    return text\n\nTOOLS = [other]\n"
    )
    return lionexec(
        "journal", "recover", str(await crashed(tmp)), "--tools", "mytools:TOOLS", cwd=tmp
    )


@trigger("ts-cli-recover-awaiting")
async def _cli_recover_awaiting(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "recover", str(path), cwd=tmp)


@trigger("ts-cli-tools-not-a-list")
async def _cli_tools_not_a_list(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    (tmp / "mytools.py").write_text("TOOLS = 'add'\n")
    return lionexec("journal", "recover", str(path), "--tools", "mytools:TOOLS", cwd=tmp)


@trigger("ts-cli-tools-attribute")
async def _cli_tools_attribute(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    (tmp / "mytools.py").write_text("TOOLS = []\n")
    return lionexec("journal", "recover", str(path), "--tools", "mytools:TOLS", cwd=tmp)


@trigger("ts-cli-limit-negative")
async def _cli_limit_negative(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "calls", str(path), "--limit", "-1", cwd=tmp)


@trigger("ts-cli-tools-spec")
async def _cli_tools_spec(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    (tmp / "mytools.py").write_text("TOOLS = []\n")
    return lionexec("journal", "recover", str(path), "--tools", "mytools", cwd=tmp)


@trigger("ts-cli-tools-no-module")
async def _cli_tools_no_module(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    return lionexec("journal", "recover", str(path), "--tools", "mytols:TOOLS", cwd=tmp)


@trigger("ts-cli-tools-import-failed")
async def _cli_tools_import_failed(tmp: Path) -> str:
    path, _ = await parked_journal(tmp, "call_1")
    (tmp / "mytools.py").write_text("import os\nTOOLS = [os.environ['MY_TOKEN']]\n")
    return lionexec("journal", "recover", str(path), "--tools", "mytools:TOOLS", cwd=tmp)


@trigger("ts-cli-not-a-number")
def _cli_not_a_number(tmp: Path) -> str:
    (tmp / "mytools.py").write_text("TOOLS = []\n")
    argv = ["--database", str(tmp / "journal.db"), "--tools", "mytools:TOOLS"]
    return lionexec("worker", *argv, "--concurrency", "eight", cwd=tmp)


@trigger("ts-worker-tools-required")
def _worker_tools_required(tmp: Path) -> str:
    return lionexec("worker", "--database", str(tmp / "journal.db"), cwd=tmp)


@trigger("ts-worker-limits")
def _worker_limits(tmp: Path) -> str:
    (tmp / "mytools.py").write_text("TOOLS = []\n")
    argv = ["--database", str(tmp / "journal.db"), "--tools", "mytools:TOOLS"]
    return lionexec("worker", *argv, "--limits", "mytools:LIMITS", cwd=tmp)


@trigger("ts-worker-concurrency")
def _worker_concurrency(tmp: Path) -> str:
    (tmp / "mytools.py").write_text("TOOLS = []\n")
    argv = ["--database", str(tmp / "journal.db"), "--tools", "mytools:TOOLS"]
    return lionexec("worker", *argv, "--concurrency", "0", cwd=tmp)


@trigger("ts-no-command")
def _no_command(tmp: Path) -> str:
    return lionexec(cwd=tmp)


@trigger("ts-serve-database")
def _serve_database(tmp: Path) -> str:
    return lionexec("serve", "--database", "journal.db", "--port", "0", cwd=tmp)


@trigger("ts-serve-workers")
def _serve_workers(tmp: Path) -> str:
    return lionexec("serve", "--workers", "--journal", ":memory:", "--port", "0", cwd=tmp)


@trigger("ts-serve-approve-journal")
def _serve_approve_journal(tmp: Path) -> str:
    (tmp / "served.py").write_text(
        "def shout(text: str) -> str:\n    return text\n\nTOOLS = [shout]\n"
    )
    argv = ["--tools", "served:TOOLS", "--approve", "shout", "--journal", ":memory:"]
    return lionexec("serve", *argv, "--port", "0", cwd=tmp)


@trigger("ts-serve-port-taken")
def _serve_port_taken(tmp: Path) -> str:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        return lionexec("serve", "--port", port, "--journal", ":memory:", cwd=tmp)


@trigger("ts-cli-interrupted")
def _cli_interrupted(tmp: Path) -> str:
    # Ctrl+C while the command waits (here for a database that refuses connections): the
    # terminal sends SIGINT to the command's process
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    target = f"postgresql://127.0.0.1:{port}/none"
    with subprocess.Popen(
        [sys.executable, "-m", "lionexec", "journal", "show", target],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp,
    ) as process:
        assert process.stderr is not None
        said = [process.stderr.readline()]  # the driver's first failed attempt: it waits
        process.send_signal(signal.SIGINT)
        said.append(process.stderr.read())
        process.wait(timeout=30)
    return "".join(said) + f"status {process.returncode}"


# -- the sandbox ----------------------------------------------------------------------------------


def bubblewrap() -> str:
    """The real bubblewrap; under CI its absence fails the entry, elsewhere skips it."""
    from tests.sandbox.conftest import BWRAP, bwrap_problem

    problem = bwrap_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI: the sandbox entries need a working bubblewrap: {problem}")
        pytest.skip(problem)
    return BWRAP


def sandboxed(tmp: Path, **options: Any) -> Any:
    from lionexec.sandbox import Profile

    return Profile(bwrap=options.pop("bwrap", None) or bubblewrap(), **options)


@trigger("ts-sandbox-missing")
async def _sandbox_missing(tmp: Path) -> str:
    from lionexec.sandbox import run_command

    profile = sandboxed(tmp, bwrap=str(tmp / "bin" / "bwrap"))
    return await araised(lambda: run_command(["true"], profile))


@trigger("ts-sandbox-refused")
async def _sandbox_refused(tmp: Path) -> str:
    from lionexec.sandbox import run_command

    # bubblewrap, real, given no time to set the sandbox up (as when the kernel refuses it,
    # the command never starts)
    return await araised(lambda: run_command(["true"], sandboxed(tmp, timeout=1e-9)))


@trigger("ts-sandbox-no-directory")
async def _sandbox_no_directory(tmp: Path) -> str:
    from lionexec.sandbox import run_command

    profile = sandboxed(tmp, writable=[str(tmp / "work")])
    return await araised(lambda: run_command(["true"], profile))


@trigger("ts-sandbox-writable-root")
def _sandbox_writable_root(tmp: Path) -> str:
    from lionexec.sandbox import Profile

    return raised(lambda: Profile(writable=["/"]))


@trigger("ts-sandbox-confinement")
def _sandbox_confinement(tmp: Path) -> str:
    from lionexec.sandbox import Profile

    return raised(lambda: Profile(confinement="off"))  # type: ignore[arg-type]


@trigger("ts-sandbox-argv")
async def _sandbox_argv(tmp: Path) -> str:
    from lionexec.sandbox import run_command

    profile = sandboxed(tmp)
    return await araised(lambda: run_command("ls -l /", profile))  # type: ignore[arg-type]


@trigger("ts-sandbox-unconfined")
async def _sandbox_unconfined(tmp: Path) -> str:
    from lionexec.sandbox import Profile, run_command

    with logged() as records:
        await run_command(["true"], Profile(confinement="none"))
    return log_lines(records)


async def sandboxed_call(tmp: Path, argv: list[str], **options: Any) -> str:
    from lionexec import Branch
    from lionexec.sandbox import command_tool

    branch = Branch()
    branch.register_tools(command_tool(sandboxed(tmp, **options)))
    [response] = await branch.act(call("run_command", argv=argv))
    return answered(response)


@trigger("ts-sandbox-exit-status")
async def _sandbox_exit_status(tmp: Path) -> str:
    return await sandboxed_call(tmp, ["ls", "/no/such/dir"])


@trigger("ts-sandbox-timeout")
async def _sandbox_timeout(tmp: Path) -> str:
    return await sandboxed_call(tmp, ["sleep", "30"], timeout=0.5)


@trigger("ts-sandbox-cpu")
async def _sandbox_cpu(tmp: Path) -> str:
    return await sandboxed_call(tmp, ["/bin/sh", "-c", "while :; do :; done"], cpu_seconds=1)


@trigger("ts-sandbox-output-cap")
async def _sandbox_output_cap(tmp: Path) -> str:
    flood = ["/bin/sh", "-c", "yes | head -c 100000; exit 3"]
    return await sandboxed_call(tmp, flood, output_limit=1000)


@trigger("ts-sandbox-profile-changed")
async def _sandbox_profile_changed(tmp: Path) -> str:
    from lionexec.governance import PermissionPolicy
    from lionexec.journal import SqliteJournal
    from lionexec.sandbox import command_tool

    policy = PermissionPolicy(mode="rules", escalate={"run_command": ["*"]})
    narrow = command_tool(sandboxed(tmp))
    wide = command_tool(sandboxed(tmp, network=True))
    path = tmp / "journal.db"
    async with SqliteJournal(path) as journal:
        branch = await journal.branch(policy=policy)
        branch.register_tools([narrow])
        async with branch:
            [parked] = await branch.act(call("run_command", "call_1", argv=["true"]))
        await journal.approve(parked.output["approval_id"])
    async with SqliteJournal(path) as journal:
        [resolution] = await journal.resume([wide], policy=policy)
        assert resolution.outcome.value == "denied"
        restored = await journal.branch(branch.name)
        request = restored.messages.request_for_call_id("call_1")
        assert request is not None
        return answered(restored.messages.response_for(request))
