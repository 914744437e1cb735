"""Every error message quoted in ``docs/troubleshooting.md`` is produced for real, here.

The page quotes each message in a block of its own, tagged with an id::

    ```{code-block} text
    :name: ts-duplicate-tool

    DuplicateToolError: a tool named '<name>' is already registered; pass update=True to ...
    ```

A ``<word>`` (lowercase letters, digits, ``_`` and spaces) stands for any text. Each id has a
trigger (``@trigger("ts-...")``: below, or in ``tests/support/troubleshooting_commands.py``
for the commands and the sandbox) that makes lionexec produce the error as a user would (an
exception rendered ``Type: message``, or what a command printed), and the quoted message
must match one line of it, whole. Every quoted id has a trigger and every trigger is quoted.

To add an entry: write the trigger, run ``python tests/test_troubleshooting.py ts-your-id``
to see what it produces, and quote it (with placeholders for what varies) on the page.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import tests.support.troubleshooting_commands  # noqa: F401  (registers the commands' triggers)
from tests.support.troubleshooting import (
    PAGE,
    TRIGGERS,
    add,
    answered,
    araised,
    call,
    log_lines,
    logged,
    matches,
    pattern,
    quoted,
    raised,
    run_python,
    trigger,
)

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

    with logged() as records:
        branch = Branch(policy=PermissionPolicy(mode="rules", allow={"reed_file": ["*"]}))
        branch.register_tools(add)
        await branch.act(call("add", a=1, b=2))
    return log_lines(records)


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


async def _run_twice(tmp: Path, first: dict[str, Any], second: dict[str, Any]) -> str:
    """A journaled branch that ran *first*'s run (to its answer), then what *second* raises."""
    from lionexec.journal import MemoryJournal
    from lionexec.models import Endpoint, Model, run
    from lionexec.models.testing import LocalProvider, Reply

    provider = LocalProvider([Reply("done")])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(provider.serve)
        async with MemoryJournal() as journal, Model(endpoint=Endpoint(url), name="m") as model:
            branch = await journal.branch()
            async with branch:
                await run(branch, model, **first)
                text = await araised(lambda: run(branch, model, **second))
        nursery.cancel_scope.cancel()
    return text


@trigger("ts-run-id-instruction")
async def _run_id_instruction(tmp: Path) -> str:
    return await _run_twice(
        tmp,
        {"instruction": "one", "run_id": "r"},
        {"instruction": "two", "run_id": "r"},
    )


@trigger("ts-run-id-unknown")
async def _run_id_unknown(tmp: Path) -> str:
    return await _run_twice(
        tmp, {"instruction": "one", "run_id": "r"}, {"instruction": None, "run_id": "other"}
    )


@trigger("ts-run-id-followed")
async def _run_id_followed(tmp: Path) -> str:
    from lionexec.journal import MemoryJournal
    from lionexec.models import Endpoint, Model, run
    from lionexec.models.testing import LocalProvider, Reply

    provider = LocalProvider([Reply(tool_calls=[("add", {"a": 1, "b": 2})]), Reply("two")])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(provider.serve)
        async with MemoryJournal() as journal, Model(endpoint=Endpoint(url), name="m") as model:
            branch = await journal.branch()

            def add(a: int, b: int) -> int:
                """Add two integers."""
                return a + b

            branch.register_tools([add])
            async with branch:
                await run(branch, model, "one", run_id="r1", max_turns=1)
                await run(branch, model, "two", run_id="r2")
                text = await araised(lambda: run(branch, model, "one", run_id="r1"))
        nursery.cancel_scope.cancel()
    return text


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
