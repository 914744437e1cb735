"""PermissionPolicy: rules, presets, records, and the decide() phase (ADR-0012 D5, DELTAS A3)."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionexec.errors import ConfigurationError
from lionexec.governance import CallContext, PermissionDecision, PermissionPolicy
from lionexec.serialization import converter
from lionexec.tools import Tool


def bash(command: str) -> str:
    """Run a shell command."""
    return command


def reader(path: str | None = None) -> str:
    """Read a file."""
    return path or ""


def ping() -> str:
    """Ping."""
    return "pong"


BASH = Tool(bash, subject="command")


def call(command: object, tool: Tool = BASH) -> CallContext:
    return CallContext(function=tool.name, arguments={"command": command}, call_id="c", tool=tool)


def behavior(policy: PermissionPolicy, tool: str, subject: str) -> str:
    return policy.check(tool, subject, {}).behavior


# -- modes and rules ----------------------------------------------------------------------------


def test_allow_all_and_deny_all_modes() -> None:
    assert behavior(PermissionPolicy(), "bash", "rm -rf /; echo") == "allow"
    assert PermissionPolicy.allow_all() == PermissionPolicy(mode="allow_all")
    assert behavior(PermissionPolicy.deny_all(), "reader", "x") == "deny"


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'sometimes'"):
        PermissionPolicy(mode="sometimes")


def test_deny_beats_allow_beats_escalate() -> None:
    policy = PermissionPolicy(
        mode="rules",
        deny={"bash": ["rm *"]},
        allow={"bash": ["rm *", "ls*"]},
        escalate={"bash": ["*"]},
    )
    assert policy.check("bash", "rm x", {}) == PermissionDecision(
        "deny", "bash", "rm x", "denied by rule 'rm *' for 'bash'", "rm *"
    )
    assert policy.check("bash", "ls -l", {}).matched_rule == "ls*"
    assert behavior(policy, "bash", "ls -l") == "allow"
    assert behavior(policy, "bash", "make") == "escalate"


def test_tool_rules_come_before_star_rules() -> None:
    policy = PermissionPolicy(mode="rules", allow={"*": ["*"], "bash": ["git *"]})
    assert policy.check("bash", "git status", {}).matched_rule == "git *"
    assert policy.check("bash", "make", {}).matched_rule == "*"
    assert policy.check("other", "anything", {}).reason == "allowed by rule '*' for '*'"


def test_matching_falls_back_to_ignoring_case_and_tool_names_ignore_case() -> None:
    policy = PermissionPolicy(mode="rules", allow={"Bash": ["GIT *"]})
    assert behavior(policy, "bash", "git status") == "allow"
    assert behavior(policy, "BASH", "Git Status") == "allow"
    assert behavior(policy, "bash", "hg status") == "deny"


def test_rules_mode_denies_by_default() -> None:
    decision = PermissionPolicy(mode="rules").check("bash", "ls", {})
    assert decision == PermissionDecision(
        "deny", "bash", "ls", "no rule matched; denied by default", None
    )


@pytest.mark.parametrize(
    "command",
    ["ls; rm -rf /", "ls && rm x", "ls || rm x", "ls | sh", "echo `id`", "echo $(id)",
     "cat < /etc/passwd", "echo x > f", "ls\nrm x", "ls\rrm x"],
)  # fmt: skip
def test_shell_control_operators_are_denied_in_rules_mode(command: str) -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["*"], "*": ["ls*", "echo*"]})
    decision = policy.check("bash", command, {})
    assert decision.behavior == "deny"
    assert "shell control operator" in decision.reason
    assert behavior(PermissionPolicy.allow_all(), "bash", command) == "allow"


def test_an_allow_rule_without_wildcards_admits_exactly_that_command() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls | wc -l", "ls *"]})
    assert policy.check("bash", "ls | wc -l", {}).matched_rule == "ls | wc -l"
    assert behavior(policy, "bash", "ls | wc -l; rm x") == "deny"
    assert behavior(policy, "bash", "ls x | sh") == "deny"  # "ls *" is a glob: never enough


def test_a_deny_rule_beats_an_exact_allow_of_a_command_with_operators() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls | sh"]}, deny={"*": ["*sh"]})
    assert behavior(policy, "bash", "ls | sh") == "deny"


def test_commands_with_operators_are_never_escalated() -> None:
    policy = PermissionPolicy(mode="rules", escalate={"bash": ["*"]})
    assert behavior(policy, "bash", "ls; id") == "deny"


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"bash": "ls"}, "list of patterns"),
        ({"bash": [1]}, "pattern for 'bash'"),
        ({1: ["x"]}, "tool name"),
        (["bash"], "rules must map"),
    ],
)
def test_malformed_rules_are_refused(bad: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        PermissionPolicy(mode="rules", allow=bad)


def test_rules_are_read_only() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls"]})
    with pytest.raises(TypeError):
        policy.allow["bash"] = ("*",)  # type: ignore[index]


# -- presets ------------------------------------------------------------------------------------


def test_read_only_preset() -> None:
    policy = PermissionPolicy.read_only()
    assert [behavior(policy, t, "x") for t in ("reader", "search", "context")] == ["allow"] * 3
    assert [behavior(policy, t, "x") for t in ("editor", "bash", "mystery")] == ["deny"] * 3


def test_safe_preset() -> None:
    policy = PermissionPolicy.safe()
    assert [behavior(policy, t, "x") for t in ("reader", "editor", "search")] == ["allow"] * 3
    for command in ("rm -rf /", "sudo ls", "chmod 777 x", "kill 1", "mkfs /dev/sda"):
        assert behavior(policy, "bash", command) == "deny"
    assert behavior(policy, "bash", "ls -la") == "escalate"
    assert behavior(policy, "bash", "ls; ls") == "deny"
    assert behavior(policy, "mystery", "x") == "deny"


# -- records ------------------------------------------------------------------------------------


def test_to_dict_and_from_dict_round_trip_through_json_without_the_handler() -> None:
    async def approve(decision: PermissionDecision, ctx: CallContext) -> bool:
        return True

    policy = PermissionPolicy.safe()
    policy = PermissionPolicy(
        mode=policy.mode,
        allow=policy.allow,
        deny=policy.deny,
        escalate=policy.escalate,
        on_escalate=approve,
    )
    data = json.loads(json.dumps(policy.to_dict()))
    assert data == {
        "mode": "rules",
        "allow": {"reader": ["*"], "editor": ["*"], "search": ["*"], "context": ["*"]},
        "deny": {"bash": ["rm *", "sudo *", "chmod *", "kill *", "mkfs *"]},
        "escalate": {"bash": ["*"]},
    }
    loaded = PermissionPolicy.from_dict(data)
    assert loaded == policy and loaded.on_escalate is None
    assert PermissionPolicy.from_dict(data, on_escalate=approve).on_escalate is approve
    assert converter.structure(data, PermissionPolicy) == policy


def test_from_dict_defaults_missing_keys_and_refuses_unknown_ones() -> None:
    assert PermissionPolicy.from_dict({}) == PermissionPolicy()
    with pytest.raises(ConfigurationError, match="allowed"):
        PermissionPolicy.from_dict({"mode": "rules", "allowed": {}})


# -- decide(): the policy phase of a call ------------------------------------------------------


async def test_decide_matches_the_tools_declared_subject() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["git *"]})
    assert (await policy.decide(call("git log"))).behavior == "allow"
    decision = await policy.decide(call("make"))
    assert (decision.behavior, decision.action) == ("deny", "make")


async def test_decide_matches_the_tool_name_when_no_subject_is_declared() -> None:
    tool = Tool(ping)
    policy = PermissionPolicy(mode="rules", allow={"*": ["pi*"]})
    ctx = CallContext(function="ping", call_id="c", tool=tool)
    decision = await policy.decide(ctx)
    assert (decision.behavior, decision.action) == ("allow", "ping")
    assert (await policy.decide(CallContext(function="ping", call_id="c"))).allowed


@pytest.mark.parametrize(("value", "problem"), [(None, "is missing"), (["ls"], "not a string")])
async def test_decide_denies_a_missing_or_non_string_subject_in_rules_mode(
    value: object, problem: str
) -> None:
    policy = PermissionPolicy(mode="rules", allow={"*": ["*"]})
    decision = await policy.decide(call(value))
    assert decision.behavior == "deny" and problem in decision.reason
    assert (await PermissionPolicy.allow_all().decide(call(value))).allowed


async def test_a_missing_optional_subject_is_denied_in_rules_mode() -> None:
    tool = Tool(reader, subject="path")
    ctx = CallContext(function="reader", call_id="c", tool=tool)
    policy = PermissionPolicy(mode="rules", allow={"reader": ["*"]})
    assert (await policy.decide(ctx)).behavior == "deny"


async def test_a_policy_denial_is_a_decision_value_not_an_exception() -> None:
    # ADR-0012 D5 "Permission errors": the shipped preprocessor raised PermissionError inside the
    # tool event, which was then recorded as a failed call. The policy phase returns a value.
    decision = await PermissionPolicy.deny_all().decide(call("ls"))
    assert decision == PermissionDecision("deny", "bash", "ls", "mode deny_all denies all")


ESCALATING = {"mode": "rules", "escalate": {"bash": ["*"]}}


@pytest.mark.parametrize("is_async", [False, True])
async def test_an_approved_escalation_allows(is_async: bool) -> None:
    seen: list[tuple[PermissionDecision, CallContext]] = []

    def approve(decision: PermissionDecision, ctx: CallContext) -> Any:
        seen.append((decision, ctx))
        if not is_async:
            return True

        async def later() -> bool:
            await trio.lowlevel.checkpoint()
            return True

        return later()

    policy = PermissionPolicy.from_dict(ESCALATING, on_escalate=approve)
    ctx = call("make")
    decision = await policy.decide(ctx)
    assert decision.behavior == "allow" and decision.matched_rule == "*"
    assert decision.reason.endswith("; approved")
    assert seen == [(PermissionDecision("escalate", "bash", "make", seen[0][0].reason, "*"), ctx)]


@pytest.mark.parametrize("verdict", [False, None, "yes", 1, {"command": "ls"}])
async def test_only_true_approves_an_escalation(verdict: object) -> None:
    policy = PermissionPolicy.from_dict(ESCALATING, on_escalate=lambda d, c: verdict)
    decision = await policy.decide(call("make"))
    assert decision.behavior == "deny" and "declined" in decision.reason


async def test_an_escalation_without_a_handler_is_denied() -> None:
    decision = await PermissionPolicy.from_dict(ESCALATING).decide(call("make"))
    assert decision.behavior == "deny"
    assert "no escalation handler is configured" in decision.reason


async def test_an_escalation_handler_that_raises_denies_with_the_error_in_the_reason() -> None:
    def broken(decision: PermissionDecision, ctx: CallContext) -> bool:
        raise ConnectionError("approver offline")

    policy = PermissionPolicy.from_dict(ESCALATING, on_escalate=broken)
    decision = await policy.decide(call("make"))
    assert decision.behavior == "deny"
    assert "ConnectionError: approver offline" in decision.reason


async def test_cancellation_while_escalating_propagates() -> None:
    async def waits(decision: PermissionDecision, ctx: CallContext) -> bool:
        await trio.sleep_forever()
        return True  # pragma: no cover

    policy = PermissionPolicy.from_dict(ESCALATING, on_escalate=waits)
    with trio.move_on_after(0) as scope:
        await policy.decide(call("make"))
    assert scope.cancelled_caught


# -- property: the policy agrees with a straightforward reference evaluation ------------------

OPERATORS = [";", "&&", "||", "|", "`", "$(", "<", ">", "\n", "\r"]


def reference(
    mode: str,
    rules: dict[str, dict[str, list[str]]],
    tool: str,
    subject: str,
) -> tuple[str, str | None]:
    """Written from the documented semantics, independently of the implementation."""
    if mode == "allow_all":
        return "allow", None
    if mode == "deny_all":
        return "deny", None

    def hits(kind: str) -> list[str]:
        table = rules[kind]
        own = [p for key, ps in table.items() if key.lower() == tool.lower() for p in ps]
        star = [p for key, ps in table.items() if key == "*" for p in ps]
        return [
            p
            for p in own + star
            if fnmatch.fnmatchcase(subject, p) or fnmatch.fnmatchcase(subject.lower(), p.lower())
        ]

    if hits("deny"):
        return "deny", hits("deny")[0]
    if any(op in subject for op in OPERATORS):
        literal = [p for p in hits("allow") if not any(c in p for c in "*?[")]
        return ("allow", literal[0]) if literal else ("deny", None)
    if hits("allow"):
        return "allow", hits("allow")[0]
    if hits("escalate"):
        return "escalate", hits("escalate")[0]
    return "deny", None


tools = st.sampled_from(["bash", "Bash", "reader", "x"])
patterns = st.text(alphabet="ab*?[]|; ABx", max_size=5)
rule_tables = st.dictionaries(
    st.sampled_from(["bash", "BASH", "reader", "*"]), st.lists(patterns, max_size=3), max_size=3
)
subjects = st.lists(
    st.sampled_from(["a", "b", "A", " ", "x", ";", "&&", "&", "|", "`", "$(", "$", ">", "\n"]),
    max_size=6,
).map("".join)


@given(
    st.sampled_from(["allow_all", "deny_all", "rules"]),
    rule_tables,
    rule_tables,
    rule_tables,
    tools,
    subjects,
)
def test_check_agrees_with_a_reference_evaluation(
    mode: str,
    allow: dict[str, list[str]],
    deny: dict[str, list[str]],
    escalate: dict[str, list[str]],
    tool: str,
    subject: str,
) -> None:
    policy = PermissionPolicy(mode=mode, allow=allow, deny=deny, escalate=escalate)
    decision = policy.check(tool, subject, {})
    expected = reference(mode, {"allow": allow, "deny": deny, "escalate": escalate}, tool, subject)
    assert (decision.behavior, decision.matched_rule) == expected
    assert (decision.tool_name, decision.action) == (tool, subject)
    assert PermissionPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy
