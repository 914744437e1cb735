"""Every error message quoted in ``docs/troubleshooting.md`` is produced for real, here.

The page quotes each message in a block of its own, tagged with an id::

    ```{code-block} text
    :name: ts-duplicate-tool

    DuplicateToolError: a tool named '<name>' is already registered; pass update=True to ...
    ```

A ``<word>`` (lowercase letters, digits, ``_`` and spaces) stands for any text. Each id has a
trigger below (``@trigger("ts-...")``) that makes lionexec produce the error as a user would
(an exception rendered ``Type: message``, or what a command printed), and the quoted message
must match one line of it, whole. Every quoted id has a trigger and every trigger is quoted.

To add an entry: write the trigger, run ``python tests/test_troubleshooting.py ts-your-id``
to see what it produces, and quote it (with placeholders for what varies) on the page.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import socket
import sqlite3
import subprocess
import sys
import traceback
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"

Trigger = Callable[[Path], "str | Awaitable[str]"]
TRIGGERS: dict[str, Trigger] = {}

_BLOCK = re.compile(
    r"^```\{code-block\} text\n:name: (?P<id>ts-[a-z0-9-]+)\n\n(?P<quote>.*?)\n```$",
    re.MULTILINE | re.DOTALL,
)
_PLACEHOLDER = re.compile(r"<[a-z][a-z0-9_ ]*>")


def trigger(entry: str) -> Callable[[Trigger], Trigger]:
    def register(func: Trigger) -> Trigger:
        assert entry not in TRIGGERS, f"two triggers for {entry}"
        TRIGGERS[entry] = func
        return func

    return register


def quoted() -> dict[str, str]:
    """The page's quoted messages by id."""
    found: dict[str, str] = {}
    for match in _BLOCK.finditer(PAGE.read_text(encoding="utf-8")):
        assert match["id"] not in found, f"{match['id']} is quoted twice"
        found[match["id"]] = match["quote"].strip()
    return found


def pattern(quote: str) -> re.Pattern[str]:
    """*quote* as a regular expression: literal, each ``<placeholder>`` any text."""
    parts = _PLACEHOLDER.split(quote)
    return re.compile(".+?".join(re.escape(part) for part in parts))


def matches(quote: str, produced: str) -> bool:
    regex = pattern(quote)
    return any(regex.fullmatch(line.strip()) for line in produced.splitlines())


def shown(exc: BaseException) -> str:
    """*exc* as the last line of its traceback shows it (``module.Type: message``)."""
    return "".join(traceback.format_exception_only(exc)).rstrip("\n")


def raised(func: Callable[[], object]) -> str:
    """Call *func*; the exception it raises, as its traceback ends."""
    try:
        func()
    except Exception as exc:
        return shown(exc)
    raise AssertionError(f"{func} raised nothing")


async def araised(func: Callable[[], Awaitable[object]]) -> str:
    """Await *func()*; the exception it raises, as its traceback ends."""
    try:
        await func()
    except Exception as exc:
        return shown(exc)
    raise AssertionError(f"{func} raised nothing")


def run_python(code: str, *args: str, cwd: Path | None = None) -> str:
    """Run *code* in a fresh interpreter (this checkout first on the path); its stderr and
    stdout together."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    return done.stderr + done.stdout


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(function: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = {"function": function, "arguments": arguments}
    if call_id is not None:
        envelope["call_id"] = call_id
    return envelope


def answered(response: Any) -> str:
    """A call's answer as the model (and the history) sees it: ``outcome Type: message``."""
    assert response.error is not None
    return f"{response.outcome.value} {response.error.type}: {response.error.message}"


# -- installing and running ---------------------------------------------------------------------


@trigger("ts-not-in-trio")
def _not_in_trio(tmp: Path) -> str:
    # (a process of its own: this test already runs inside trio)
    code = (
        "import asyncio\n"
        "from lionexec import Branch\n"
        "branch = Branch()\n"
        "branch.register_tools(print)\n"
        "asyncio.run(branch.act({'function': 'print', 'arguments': {}}))\n"
    )
    return run_python(code)


@trigger("ts-extra-server")
def _extra_server(tmp: Path) -> str:
    code = (
        "import sys; sys.modules['hypercorn'] = None\n"
        "from lionexec.__main__ import main\n"
        "sys.exit(main(['serve', '--port', '0']))\n"
    )
    return run_python(code, cwd=tmp)


@trigger("ts-extra-otel")
def _extra_otel(tmp: Path) -> str:
    return run_python("import sys; sys.modules['opentelemetry'] = None\nimport lionexec.otel\n")


@trigger("ts-extra-postgres")
def _extra_postgres(tmp: Path) -> str:
    code = (
        "import sys\n"
        "for name in ('psycopg', 'psycopg_pool'): sys.modules[name] = None\n"
        "from lionexec.journal import PostgresJournal\n"
        "PostgresJournal('postgresql://127.0.0.1:1/none')\n"
    )
    return run_python(code)


@trigger("ts-extra-re2")
def _extra_re2(tmp: Path) -> str:
    code = (
        "import sys; sys.modules['re2'] = None\n"
        "from lionexec.tools import Tool\n"
        "def find(text: str) -> str:\n"
        "    '''Find.'''\n"
        "    return text\n"
        "Tool.from_function(find, schema={'type': 'object', 'properties': {'text': "
        "{'type': 'string', 'pattern': '^(a+)+$'}}, 'required': ['text']})\n"
    )
    return run_python(code)


# -- tools ----------------------------------------------------------------------------------------


@trigger("ts-duplicate-tool")
def _duplicate_tool(tmp: Path) -> str:
    from lionexec import Branch

    branch = Branch()
    branch.register_tools(add)
    return raised(lambda: branch.register_tools(add))


@trigger("ts-tool-not-found")
def _tool_not_found(tmp: Path) -> str:
    from lionexec.tools import ActionManager

    registry = ActionManager()
    registry.register_tools(add)
    return raised(lambda: registry.get("ad"))


@trigger("ts-schema")
def _schema(tmp: Path) -> str:
    from lionexec.tools import Tool

    class Opaque:
        pass

    def use(thing: Opaque) -> None:
        """Use a thing."""

    return raised(lambda: Tool.from_function(use))


# -- acting ---------------------------------------------------------------------------------------


@trigger("ts-branch-not-running")
async def _branch_not_running(tmp: Path) -> str:
    from lionexec.journal import MemoryJournal

    async with MemoryJournal() as journal:
        branch = await journal.branch()
        branch.register_tools(add)
        return await araised(lambda: branch.act(call("add", a=1, b=2)))


@trigger("ts-duplicate-call")
async def _duplicate_call(tmp: Path) -> str:
    from lionexec import Branch

    branch = Branch()
    branch.register_tools(add)
    await branch.act(call("add", "call_1", a=1, b=2))
    return await araised(lambda: branch.act(call("add", "call_1", a=1, b=2)))


@trigger("ts-duplicate-call-in-batch")
async def _duplicate_call_in_batch(tmp: Path) -> str:
    from lionexec import Branch

    branch = Branch()
    branch.register_tools(add)
    batch = [call("add", "call_1", a=1, b=2), call("add", "call_1", a=3, b=4)]
    return await araised(lambda: branch.act(batch))


@trigger("ts-unreadable-call")
async def _unreadable_call(tmp: Path) -> str:
    from lionexec import Branch

    return await araised(lambda: Branch().act(42))  # type: ignore[arg-type]


@trigger("ts-not-durable")
async def _not_durable(tmp: Path) -> str:
    from lionexec import Branch

    class Failing:
        durable = True

        async def write_ahead(self, entry: Any) -> None:
            await trio.lowlevel.checkpoint()

        async def write(self, records: Sequence[Any]) -> None:
            await trio.lowlevel.checkpoint()
            raise OSError("disk full")

        async def aclose(self) -> None:
            await trio.lowlevel.checkpoint()

        def __repr__(self) -> str:
            return "Failing()"

    branch = Branch(sinks=[Failing()])
    branch.register_tools(add)
    async with branch:
        return await araised(lambda: branch.act(call("add", a=1, b=2)))


@trigger("ts-strategy")
async def _strategy(tmp: Path) -> str:
    from lionexec import Branch

    return await araised(lambda: Branch().act(call("add"), strategy="parallel"))  # type: ignore[arg-type]


@trigger("ts-call-params")
def _call_params(tmp: Path) -> str:
    from lionexec.act import AlcallParams

    return raised(lambda: AlcallParams(timeout=-1))


@trigger("ts-denied-by-default")
async def _denied_by_default(tmp: Path) -> str:
    from lionexec import Branch
    from lionexec.governance import PermissionPolicy

    branch = Branch(policy=PermissionPolicy(mode="rules", allow={"read": ["*"]}))
    branch.register_tools(add)
    [response] = await branch.act(call("add", a=1, b=2))
    return answered(response)


@trigger("ts-rules-for-unknown-tool")
async def _rules_for_unknown_tool(tmp: Path) -> str:
    from lionexec import Branch
    from lionexec.governance import PermissionPolicy

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("lionexec")
    logger.addHandler(handler)
    try:
        branch = Branch(policy=PermissionPolicy(mode="rules", allow={"reed_file": ["*"]}))
        branch.register_tools(add)
        await branch.act(call("add", a=1, b=2))
    finally:
        logger.removeHandler(handler)
    return "\n".join(f"{r.levelname}: {r.getMessage()}" for r in records)


@trigger("ts-invalid-arguments")
async def _invalid_arguments(tmp: Path) -> str:
    from lionexec import Branch

    branch = Branch()
    branch.register_tools(add)
    [response] = await branch.act(call("add", a="two", b=3))
    return answered(response)


@trigger("ts-unknown-tool-call")
async def _unknown_tool_call(tmp: Path) -> str:
    from lionexec import Branch

    branch = Branch()
    branch.register_tools(add)
    [response] = await branch.act(call("ad", a=1, b=2))
    return answered(response)


@trigger("ts-timed-out")
async def _timed_out(tmp: Path) -> str:
    from lionexec import Branch
    from lionexec.act import AlcallParams

    async def slow() -> None:
        """Take a while."""
        await trio.sleep(10)

    branch = Branch()
    branch.register_tools(slow)
    [response] = await branch.act(call("slow"), call_params=AlcallParams(timeout=0.01))
    return answered(response)


# -- governance -----------------------------------------------------------------------------------


@trigger("ts-policy-mode")
def _policy_mode(tmp: Path) -> str:
    from lionexec.governance import PermissionPolicy

    return raised(lambda: PermissionPolicy(mode="strict"))  # type: ignore[arg-type]


@trigger("ts-policy-rules")
def _policy_rules(tmp: Path) -> str:
    from lionexec.governance import PermissionPolicy

    return raised(lambda: PermissionPolicy(mode="rules", allow=["add"]))  # type: ignore[arg-type]


# -- history --------------------------------------------------------------------------------------


@trigger("ts-message-not-found")
def _message_not_found(tmp: Path) -> str:
    from lionexec import MessageManager

    return raised(lambda: MessageManager()[uuid.uuid4()])


# -- the journal ----------------------------------------------------------------------------------


@trigger("ts-not-a-journal")
async def _not_a_journal(tmp: Path) -> str:
    from lionexec.journal import SqliteJournal

    path = tmp / "notes.db"
    with sqlite3.connect(path) as db:
        db.execute("create table notes (text)")
    db.close()

    async def open_it() -> None:
        async with SqliteJournal(path):
            pass

    return await araised(open_it)


@trigger("ts-branch-id")
async def _branch_id(tmp: Path) -> str:
    from lionexec.journal import MemoryJournal

    async with MemoryJournal() as journal:
        return await araised(lambda: journal.branch("conversation-1"))


@trigger("ts-approval-not-found")
async def _approval_not_found(tmp: Path) -> str:
    from lionexec.journal import MemoryJournal

    async with MemoryJournal() as journal:
        return await araised(lambda: journal.approve(str(uuid.uuid4())))


@trigger("ts-approval-closed")
async def _approval_closed(tmp: Path) -> str:
    from lionexec.governance import PermissionPolicy
    from lionexec.journal import MemoryJournal

    async with MemoryJournal() as journal:
        policy = PermissionPolicy(mode="rules", escalate={"add": ["*"]})
        branch = await journal.branch(policy=policy)
        branch.register_tools(add)
        async with branch:
            [parked] = await branch.act(call("add", a=1, b=2))
        assert parked.outcome.value == "awaiting_approval"
        [approval] = await journal.approvals()
        await journal.reject(approval.approval_id, reason="not today")
        return await araised(lambda: journal.approve(approval.approval_id))


# -- models ---------------------------------------------------------------------------------------


@trigger("ts-max-turns")
async def _max_turns(tmp: Path) -> str:
    from lionexec import Branch
    from lionexec.models import Endpoint, Model, run

    model = Model(endpoint=Endpoint("http://127.0.0.1:9/v1"), name="m")
    return await araised(lambda: run(Branch(), model, "hi", max_turns=0))


@trigger("ts-model-connection")
async def _model_connection(tmp: Path) -> str:
    from lionexec.models import Endpoint, Model

    with trio.socket.socket() as sock:  # a port nothing listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with Model(endpoint=Endpoint(f"http://127.0.0.1:{port}/v1"), name="m") as model:
        return await araised(lambda: model.complete([{"role": "user", "content": "hi"}]))


@trigger("ts-provider-error")
async def _provider_error(tmp: Path) -> str:
    from lionexec.models import Endpoint, Model
    from lionexec.models.testing import Fail, LocalProvider

    provider = LocalProvider([Fail(status=401, message="invalid api key")])
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        async with Model(endpoint=Endpoint(base_url), name="m") as model:
            text = await araised(lambda: model.complete([{"role": "user", "content": "hi"}]))
        nursery.cancel_scope.cancel()
    return text


@trigger("ts-budget")
async def _budget(tmp: Path) -> str:
    from lionexec.limits import RateLimiter

    limiter = RateLimiter(tokens=1000, token_burst=1000)
    return await araised(lambda: limiter.acquire(5000))


# -- the server -----------------------------------------------------------------------------------


@trigger("ts-serve-tools")
def _serve_tools(tmp: Path) -> str:
    code = "import sys\nfrom lionexec.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    return run_python(code, "serve", "--tools", "no_such_module:TOOLS", "--port", "0", cwd=tmp)


@trigger("ts-serve-approve")
def _serve_approve(tmp: Path) -> str:
    code = "import sys\nfrom lionexec.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    (tmp / "served.py").write_text(
        "def shout(text: str) -> str:\n    return text.upper()\n\nTOOLS = [shout]\n"
    )
    command = ["serve", "--tools", "served:TOOLS", "--approve", "shuot", "--port", "0"]
    return run_python(code, *command, cwd=tmp)


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

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("lionexec")
    logger.addHandler(handler)
    try:
        await run_command(["true"], Profile(confinement="none"))
    finally:
        logger.removeHandler(handler)
    return "\n".join(f"{r.levelname}: {r.getMessage()}" for r in records)


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


# -- the checks -----------------------------------------------------------------------------------


async def produce(entry: str, tmp: Path) -> str:
    result = TRIGGERS[entry](tmp)
    if inspect.isawaitable(result):
        result = await result
    assert isinstance(result, str)
    return result


def test_every_quoted_message_has_a_trigger_and_every_trigger_is_quoted() -> None:
    ids = set(quoted())
    assert len(ids) >= 20, f"only {len(ids)} messages quoted on {PAGE.name}"
    assert sorted(ids - TRIGGERS.keys()) == [], "quoted without a trigger"
    assert sorted(TRIGGERS.keys() - ids) == [], "a trigger the page does not quote"


def test_placeholders_stand_for_text_and_nothing_else() -> None:
    regex = pattern("a tool named '<name>' is already registered")
    assert regex.fullmatch("a tool named 'add' is already registered")
    assert not regex.fullmatch("a tool named 'add' is registered")
    assert not matches("x <y> z", "x  z")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("entry", sorted(TRIGGERS))
async def test_the_quoted_message_is_what_lionexec_says(entry: str, tmp_path: Path) -> None:
    quote = quoted().get(entry)
    assert quote is not None, f"{entry} is not quoted on {PAGE.name}"
    produced = await produce(entry, tmp_path)
    assert matches(quote, produced), f"{entry}: quoted\n  {quote}\nbut lionexec said\n{produced}"


if __name__ == "__main__":  # print what each trigger (or the ones named) produces
    import tempfile

    async def show(names: list[str]) -> None:
        for name in names or sorted(TRIGGERS):
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    text = await produce(name, Path(tmp))
                except BaseException as exc:  # (a broken trigger: shown, the others still run)
                    text = f"TRIGGER FAILED {exc!r}"
                print(json.dumps({name: text}))

    trio.run(show, sys.argv[1:])
