"""``command_tool`` through ``Branch.act``, and the profile as part of what an approval binds."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from lionexec.act import Branch
from lionexec.conversation import ActionOutcome
from lionexec.errors import ConfigurationError
from lionexec.governance import PermissionDecision, PermissionPolicy
from lionexec.journal import SqliteJournal
from lionexec.journal._keys import policy_digest
from lionexec.sandbox import Profile, command_tool
from lionexec.tools import Tool

from .conftest import Site


def profile(site: Site, bwrap: str, **options: object) -> Profile:
    return Profile(writable=[str(site.work)], bwrap=bwrap, **options)  # type: ignore[arg-type]


def call(argv: list[str], call_id: str = "call_1") -> dict[str, object]:
    return {"function": "run_command", "arguments": {"argv": argv}, "call_id": call_id}


async def test_a_sandboxed_call_completes_or_fails_as_a_normal_call(
    site: Site, bwrap: str
) -> None:
    branch = Branch()
    branch.register_tools([command_tool(profile(site, bwrap, cpu_seconds=1))])
    async with branch:
        done, refused, limited = await branch.act(
            [
                call(["sh", "-c", "echo hello; echo note >&2"], "ok"),
                call(["rm", "-rf", str(site.outside)], "rm"),
                call(["python3", "-c", "while True: pass"], "cpu"),
            ],
            strategy="concurrent",
        )
    assert done.outcome is ActionOutcome.COMPLETED
    assert done.output == {
        "exit_code": 0,
        "stdout": "hello\n",
        "stderr": "note\n",
        "stdout_truncated": False,
        "stderr_truncated": False,
        "confined": True,
    }
    assert refused.outcome is ActionOutcome.FAILED and refused.error is not None
    assert refused.error.type == "CommandFailedError"
    assert "exited with status 1" in refused.error.message
    assert "Read-only file system" in refused.error.message
    assert site.intact()
    assert limited.outcome is ActionOutcome.FAILED and limited.error is not None
    assert "SIGXCPU" in limited.error.message and "cpu_seconds" in limited.error.message


async def test_a_missing_sandbox_fails_the_call_and_runs_nothing(
    site: Site, tmp_path: Path
) -> None:
    branch = Branch()
    branch.register_tools([command_tool(profile(site, str(tmp_path / "no-bwrap")))])
    async with branch:
        [response] = await branch.act(call(["touch", str(site.work / "ran")]))
    assert response.outcome is ActionOutcome.FAILED and response.error is not None
    assert response.error.type == "SandboxUnavailableError"
    assert not (site.work / "ran").exists()


async def test_the_shell_form_is_asked_for_and_still_confined(site: Site, bwrap: str) -> None:
    tool = command_tool(profile(site, bwrap), name="sh", shell=True, check=False)
    assert tool.parameters["required"] == ["command"] and tool.subject == "command"
    branch = Branch()
    branch.register_tools([tool])
    async with branch:
        [response] = await branch.act(
            {"function": "sh", "arguments": {"command": f"rm -rf {site.outside}; exit 4"}}
        )
    assert response.outcome is ActionOutcome.COMPLETED  # check=False: a status is an answer
    assert response.output["exit_code"] == 4
    assert site.intact()


async def test_an_argv_tool_takes_no_shell_line(site: Site, bwrap: str) -> None:
    branch = Branch()
    branch.register_tools([command_tool(profile(site, bwrap))])
    async with branch:
        [response] = await branch.act(
            {"function": "run_command", "arguments": {"argv": "rm -rf /"}}
        )
    assert response.outcome is ActionOutcome.INVALID


# -- approvals bind the profile -------------------------------------------------------------

POLICY = PermissionPolicy(mode="rules", escalate={"run_command": ["*"]})


async def park(journal_path: str, tool: Tool, argv: list[str]) -> tuple[str, str]:
    async with SqliteJournal(journal_path) as journal:
        branch = await journal.branch(policy=POLICY)
        branch.register_tools([tool])
        async with branch:
            [parked] = await branch.act(call(argv))
        assert parked.outcome is ActionOutcome.AWAITING_APPROVAL
        approval_id = parked.output["approval_id"]
        await journal.approve(approval_id, by="alice")
        return branch.name, approval_id


async def test_an_approval_under_one_profile_does_not_approve_another(
    site: Site, bwrap: str, tmp_path: Path
) -> None:
    target = site.work / "x"
    argv = ["rm", str(target)]
    narrow = command_tool(profile(site, bwrap))
    wide = command_tool(profile(site, bwrap, network=True))
    assert narrow.approval_binding != wide.approval_binding
    # approved under the narrow profile, resumed with the tool under the wide one: refused
    target.write_text("keep")
    path = str(tmp_path / "journal.db")
    await park(path, narrow, argv)
    async with SqliteJournal(path) as journal:
        [resolution] = await journal.resume([wide], policy=POLICY)
    assert resolution.outcome is ActionOutcome.DENIED
    assert target.exists()
    # the control: resumed under the profile it was approved under, it runs
    path = str(tmp_path / "journal2.db")
    await park(path, narrow, argv)
    async with SqliteJournal(path) as journal:
        [resolution] = await journal.resume([narrow], policy=POLICY)
    assert resolution.outcome is ActionOutcome.COMPLETED
    assert not target.exists()


def test_the_binding_joins_the_policy_digest_only_when_a_tool_has_one() -> None:
    def noop() -> None:
        """Do nothing."""

    plain = Tool.from_function(noop)
    decision = PermissionDecision(behavior="escalate", tool_name="noop", action="", reason="r")
    # a tool without a binding: the digest approvals were stored under before bindings
    assert policy_digest(POLICY, decision, plain) == policy_digest(POLICY, decision)
    bound = attrs.evolve(plain, approval_binding="a" * 64)
    other = attrs.evolve(plain, approval_binding="b" * 64)
    digests = {policy_digest(POLICY, decision, t) for t in (plain, bound, other)}
    assert len(digests) == 3
    with pytest.raises(ConfigurationError, match="approval_binding"):
        attrs.evolve(plain, approval_binding="")


# -- the profile ------------------------------------------------------------------------------


def test_the_profile_digest_changes_with_every_field() -> None:
    base = Profile(writable=["/srv/w"])
    changes = {
        "writable": ["/srv/v"],
        "protected": ["build"],
        "hidden": ["/root/.ssh"],
        "network": True,
        "unix_sockets": True,
        "env": {"PATH": "/bin"},
        "inherit_env": ["TERM"],
        "cwd": "/srv",
        "cpu_seconds": 5,
        "memory_bytes": None,
        "file_size_bytes": 1,
        "processes": 2,
        "timeout": 3.0,
        "output_limit": 10,
        "confinement": "none",
        "bwrap": "/opt/bwrap",
    }
    assert set(changes) == {f.name for f in attrs.fields(Profile)}
    digests = {base.digest()} | {attrs.evolve(base, **{k: v}).digest() for k, v in changes.items()}
    assert len(digests) == len(changes) + 1
    assert Profile(writable=["/srv/w"]).digest() == base.digest()  # stable


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"writable": ["relative"]}, "absolute"),
        ({"writable": "/srv"}, "list of paths"),
        ({"writable": ["/"]}, "writable root"),
        ({"protected": ["../up"]}, "relative"),
        ({"confinement": "off"}, "confinement"),
        ({"cpu_seconds": 0}, "cpu_seconds"),
        ({"timeout": float("inf")}, "finite"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"cwd": "here"}, "cwd"),
        ({"bwrap": None}, "bwrap"),
        ({"bwrap": "bwrap"}, "bwrap"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Profile(**options)  # type: ignore[arg-type]
