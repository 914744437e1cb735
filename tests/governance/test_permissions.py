"""PermissionPolicy: rules, presets, records, and the decide() phase."""

from __future__ import annotations

import fnmatch
import itertools
import json
import pathlib
import shlex
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from lionexec.errors import ConfigurationError
from lionexec.governance import (
    IGNORE_CASE,
    CallContext,
    PermissionDecision,
    PermissionPolicy,
    ignoring_case,
    subject_kind_of,
)
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


BASH = Tool.from_function(bash, subject="command")


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


def test_matching_is_case_sensitive_unless_a_pattern_opts_in() -> None:
    # Changed: matching used to fall back to ignoring case, and tool names ignored
    # case; both were bypasses. The opt-in is the IGNORE_CASE mark on one pattern.
    policy = PermissionPolicy(mode="rules", allow={"bash": ["git *", ignoring_case("HG *")]})
    assert ignoring_case("HG *") == IGNORE_CASE + "HG *" == "(?i)HG *"
    assert behavior(policy, "bash", "git status") == "allow"
    assert behavior(policy, "bash", "GIT status") == "deny"
    assert behavior(policy, "bash", "hg status") == "allow"
    assert behavior(policy, "bash", "Hg Status") == "allow"
    assert behavior(policy, "BASH", "git status") == "deny"
    assert PermissionPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


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


def test_a_decision_is_made_once_per_tool_subject_and_kind() -> None:
    policy = PermissionPolicy(mode="rules", allow={"reader": ["/data/*"]})
    first = policy.check("reader", "/data/a", {}, kind="path")
    assert first.behavior == "allow"
    assert policy.check("reader", "/data/a", {"other": 1}, kind="path") is first
    # the kind is part of what decides: the same subject, read two ways
    assert policy.check("reader", "/data/../etc", {}, kind="path").behavior == "deny"
    assert policy.check("reader", "/data/../etc", {}, kind="text").behavior == "allow"
    assert policy.check("other", "/data/a", {}, kind="path").behavior == "deny"
    # what was decided is no part of the policy's value or record
    assert policy == PermissionPolicy(mode="rules", allow={"reader": ["/data/*"]})
    assert set(converter.unstructure(policy)) == {"mode", "allow", "deny", "escalate"}
    assert "decided" not in repr(policy)


def test_decisions_kept_are_bounded_in_number_and_subject_length() -> None:
    policy = PermissionPolicy(mode="rules", allow={"t": ["a*"]})
    for i in range(3000):
        assert policy.check("t", f"a{i}", {}).behavior == "allow"
    assert 0 < len(policy._decided) <= 1024
    long = "a" * 5000
    assert policy.check("t", long, {}).behavior == "allow"
    assert policy.check("t", long, {}) is not policy.check("t", long, {})  # not kept
    assert policy.check("t", ["a"], {}).behavior == "deny"  # type: ignore[arg-type]
    for kind in ("bogus", ["text"]):  # refused, kept or not, hashable or not
        with pytest.raises(ValueError, match="kind must be"):
            policy.check("t", "a1", {}, kind=kind)  # type: ignore[arg-type]


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
    # Changed: safe() denies the bare names too, in any case.
    denied = ["rm", "rm *", "sudo", "sudo *", "chmod", "chmod *", "kill", "kill *", "mkfs"]
    assert data == {
        "mode": "rules",
        "allow": {"reader": ["*"], "editor": ["*"], "search": ["*"], "context": ["*"]},
        "deny": {"bash": [f"(?i){p}" for p in [*denied, "mkfs *", "mkfs.*"]]},
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
    tool = Tool.from_function(ping)
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
    tool = Tool.from_function(reader, subject="path")
    ctx = CallContext(function="reader", call_id="c", tool=tool)
    policy = PermissionPolicy(mode="rules", allow={"reader": ["*"]})
    assert (await policy.decide(ctx)).behavior == "deny"


async def test_a_policy_denial_is_a_decision_value_not_an_exception() -> None:
    # A permission error raised inside the tool event would be recorded as a failed call; the
    # policy phase returns a value instead.
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


def has_operator(subject: str) -> bool:
    """A control character, or a ``$`` that starts an expansion (name, special, ``(``, ``{``)."""
    if any(c in subject for c in ";&|`<>\n\r\x00"):
        return True
    return any(
        c == "$" and (nxt.isalnum() or nxt in "_({@*#?!$'\"-")
        for c, nxt in itertools.pairwise(subject)
    )


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
        own = list(table.get(tool, [])) if tool != "*" else []
        star = list(table.get("*", []))
        return [p for p in own + star if fnmatch.fnmatchcase(subject, p)]

    if hits("deny"):
        return "deny", hits("deny")[0]
    if has_operator(subject):
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
    st.sampled_from(
        ["a", "b", "A", " ", "x", ";", "&&", "&", "|", "`", "$(", "$", "${", ">", "\n", "\x00"]
    ),
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
    if mode != "rules" and any(any(t.values()) for t in (allow, deny, escalate)):
        with pytest.raises(ConfigurationError, match=f"mode={mode!r} ignores rules"):
            PermissionPolicy(mode=mode, allow=allow, deny=deny, escalate=escalate)
        return
    policy = PermissionPolicy(mode=mode, allow=allow, deny=deny, escalate=escalate)
    decision = policy.check(tool, subject, {}, kind="text")
    expected = reference(mode, {"allow": allow, "deny": deny, "escalate": escalate}, tool, subject)
    assert (decision.behavior, decision.matched_rule) == expected
    assert (decision.tool_name, decision.action) == (tool, subject)
    assert PermissionPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


# -- each bypass of the policy, one test each --------------------------------------------------


def read_file(path: str) -> str:
    """Read a file."""
    return path


READ_FILE = Tool.from_function(read_file, subject="path")
DATA_ONLY = PermissionPolicy(mode="rules", allow={"read_file": ["/data/*"]})


def read(path: object, tool: Tool = READ_FILE) -> CallContext:
    return CallContext(function=tool.name, arguments={"path": path}, call_id="c", tool=tool)


@pytest.mark.parametrize(
    "path",
    [
        "/data/../etc/passwd",  # fnmatch's * crossed "/" and ".."
        "/data/sub/../../etc/shadow",
        "/DATA/secret",  # allow rules fell back to ignoring case
        "/data/a.txt\x00/etc",  # NUL
        "/data/sub/secret",  # * crossed "/"
        "/data/../data/a.txt",  # ".." climbs out of the rule's base, then back in
        "data/../../etc/passwd",  # a relative path climbing above its start
        "",
    ],
)
async def test_a_path_rule_admits_nothing_outside_it(path: str) -> None:
    decision = await DATA_ONLY.decide(read(path))
    assert decision.behavior == "deny", decision
    assert DATA_ONLY.check("read_file", path, {}, kind="path").behavior == "deny"


@pytest.mark.parametrize("path", ["/data/a.txt", "//data/a.txt", "/data/./a.txt", "/data/a.txt/"])
async def test_a_path_rule_admits_normalised_spellings_of_a_path_inside_it(path: str) -> None:
    assert (await DATA_ONLY.decide(read(path))).allowed


def test_double_star_crosses_segments_single_star_does_not() -> None:
    policy = PermissionPolicy(mode="rules", allow={"read_file": ["/data/**", "/logs/*/app.log"]})
    for path in ("/data/a", "/data/a/b/c.txt", "/logs/2026/app.log", "/data/a/../b"):
        assert policy.check("read_file", path, {}, kind="path").allowed, path
    for path in ("/logs/2026/12/app.log", "/logs/app.log", "/etc/passwd", "/data/../etc"):
        assert not policy.check("read_file", path, {}, kind="path").allowed, path


def test_a_path_rule_can_opt_in_to_ignoring_case() -> None:
    policy = PermissionPolicy(mode="rules", allow={"read_file": [ignoring_case("/data/*")]})
    assert policy.check("read_file", "/DATA/Secret", {}, kind="path").allowed
    assert not policy.check("read_file", "/DATA/../etc/passwd", {}, kind="path").allowed


def test_a_deny_path_rule_sees_through_traversal() -> None:
    policy = PermissionPolicy(mode="rules", allow={"*": ["*"]}, deny={"read_file": ["/etc/**"]})
    for path in ("/data/../etc/passwd", "//etc/shadow", "/etc/./ssh/../passwd", "/../etc/x"):
        decision = policy.check("read_file", path, {}, kind="path")
        assert (decision.behavior, decision.matched_rule) == ("deny", "/etc/**"), path


async def test_an_ampersand_is_a_control_operator() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls *"]})
    decision = await policy.decide(call("ls x & touch pwned"))
    assert decision.behavior == "deny" and "control operator" in decision.reason
    assert behavior(policy, "bash", "ls x & touch pwned") == "deny"
    assert behavior(policy, "bash", "ls x &") == "deny"


SPELLINGS = [
    "rm\t-rf /",
    "/bin/rm -rf /",
    " rm -rf /",
    "rm${IFS}-rf${IFS}/",
    "command rm -rf /",
    "env rm -rf /",
    "sudo\tsh",
    "kill\t-9 1",
    "rm",
    "RM -rf /",
    "\\rm -rf /",
    "'rm' -rf /",
    "r''m -rf /",
    "X=1 rm -rf /",
    "env -i PATH=/bin rm -rf /",
    "sudo -u root -E rm -rf /",
    "nice -n 5 rm -rf /",
    "nohup rm -rf /",
    "time rm -rf /",
    "timeout 5 rm -rf /",
    "xargs rm -rf",
    "exec rm -rf /",
    "stdbuf -oL rm -rf /",
    "sh -c 'rm -rf /'",
    "bash -lc 'chmod 777 /etc'",
    "eval rm -rf /",
    "env -S 'rm -rf' /",
    "mkfs.ext4 /dev/sda",
    "/sbin/mkfs -t ext4 /dev/sda",
    "kill -9 1",
    "chmod 777 x",
    "busybox rm -rf /",
    "sh -c -- 'rm -rf /'",
    "bash -c -x 'kill 1'",
    "runuser -u root -- rm -rf /",
    "su -c 'rm -rf /' root",
    "flock /tmp/lock -c 'rm -rf /'",
    "strace -f -o /dev/null rm -rf /",
    # options of env, su, nice, xargs... read as getopt reads them
    "env -iS'/bin/rm -f /x'",  # -S inside a cluster of short options
    "env --split='/bin/rm -f /x'",  # an abbreviated long option
    "env -S 'rm\\_-f\\_/x'",  # env's own escape for a space
    "env -u A -u B -u C -u D - /bin/rm -f /x",  # a lone "-" is -i
    "su root --command='/bin/rm -f /x'",
    "su root --session-command='/bin/rm -f /x'",
    "nice -n 1 -n 1 -n 1 -n 1 --adj 1 /bin/rm -f /x",  # padding, then an abbreviation
    "xargs -P 1 -P 1 -P 1 -P 1 --replace /bin/rm -f /x",  # --replace takes no next word
    "stdbuf -o L -o L -o L -o L --ou L /bin/rm -f /x",
    "ionice -c 2 -c 2 -c 2 -c 2 --classd 1 /bin/rm -f /x",
    "timeout --sig KILL 5 /bin/rm -f /x",
    "X+=1 /bin/rm -f /x",  # bash's append assignment
    "trap '/bin/rm -f /x' EXIT",
    "rbash -c 'rm -f /x'",
    "watch -n 1 '/bin/rm -f /x'",
]


@pytest.mark.parametrize("command", SPELLINGS)
async def test_safe_denies_dangerous_commands_in_every_spelling(command: str) -> None:
    policy = PermissionPolicy.safe()
    assert behavior(policy, "bash", command) == "deny"
    approving = PermissionPolicy.from_dict(policy.to_dict(), on_escalate=lambda d, c: True)
    assert (await approving.decide(call(command))).behavior == "deny"  # denied, not escalated


def test_a_wrapper_with_endless_options_is_denied_not_read_at_length() -> None:
    # Every word a wrapper's options span is a suspect program, a copy of the rest of the
    # line each: bounded, so a 64 KiB line of options cannot cost gigabytes.
    policy = PermissionPolicy(mode="rules", allow={"bash": ["*"]}, deny={"bash": ["rm *"]})
    command = "sudo " + "-u x " * 1000 + "ls"
    decision = policy.check("bash", command, {})
    assert decision.behavior == "deny" and "more than 128 words of options" in decision.reason
    assert policy.check("bash", "sudo " + "-u x " * 50 + "ls", {}).behavior == "allow"


@pytest.mark.parametrize("command", ["echo if=~/.ssh/id_rsa", "cp a PATH=x:~/b", "echo ~"])
def test_a_tilde_bash_would_expand_is_denied_unless_named_exactly(command: str) -> None:
    decision = PermissionPolicy(mode="rules", allow={"bash": ["*"]}).check("bash", command, {})
    assert decision.behavior == "deny" and "tilde" in decision.reason
    assert behavior(PermissionPolicy(mode="rules", allow={"bash": ["*"]}), "bash", "a=b~") == (
        "allow"  # not after = or : (nor at a word's start): no expansion
    )


def test_ignoring_case_folds_as_the_file_system_may() -> None:
    policy = PermissionPolicy(
        mode="rules",
        allow={"read": ["/**"]},
        deny={"read": [ignoring_case("/data/keys/**")]},
    )
    for path in ("/data/KEYS/id_rsa", "/data/key\u017f/id_rsa"):  # ſ folds to s
        assert policy.check("read", path, {}, kind="path").behavior == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "git status",
        "env FOO=1 make",
        "grep x f",
        "A='x y' make",
        "time A=1 make",
        "env -S 'A=1 make'",
        "watch -n 1 -d -t -b -c -e -g -p -w ls -la /a /b /c /d /e /f",
        "perf stat -e cycles -e instructions -o out.txt make -j4 test",
        "perf record -g ./prog a b c d e f g h i j k l m n o p q r s t u v w x y z",
        "Make test",
    ],
)
def test_safe_still_escalates_ordinary_commands(command: str) -> None:
    assert behavior(PermissionPolicy.safe(), "bash", command) == "escalate"


@pytest.mark.parametrize(
    "command", ["ls $HOME", "ls ${HOME}", "echo $'\\x72m'", "ls (x)", "echo {a,b}", "ls `id`"]
)
def test_a_command_with_an_expansion_is_denied_unless_named_exactly(command: str) -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["*", command]})
    assert policy.check("bash", command, {}).matched_rule == command
    decision = PermissionPolicy(mode="rules", allow={"bash": ["*"]}).check("bash", command, {})
    assert decision.behavior == "deny"


@pytest.mark.parametrize("command", ["/bin/r? x", "/bin/r[m] x", "sudo /bin/r* x", "* x"])
def test_a_glob_in_place_of_a_program_name_is_denied(command: str) -> None:
    decision = PermissionPolicy(mode="rules", allow={"bash": ["*"]}).check("bash", command, {})
    assert decision.behavior == "deny" and "glob in place of a program name" in decision.reason


@pytest.mark.parametrize(
    ("command", "expansion"),
    [
        ("tar cf out.tar *", "unquoted glob"),  # a file named --checkpoint-action=... is an option
        ("ls *.py", "unquoted glob"),
        ("ls [ab]", "unquoted glob"),
        ("ls ?", "unquoted glob"),
        ("ls ~", "tilde expansion"),
        ("cat ~root/.ssh/id_rsa", "tilde expansion"),
    ],
)
def test_pathname_and_tilde_expansion_are_denied_unless_named_exactly(
    command: str, expansion: str
) -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls *", "tar *", "cat *"]})
    decision = policy.check("bash", command, {})
    assert decision.behavior == "deny" and expansion in decision.reason
    exact = PermissionPolicy(mode="rules", allow={"bash": ["ls *", command]})
    if not any(c in command for c in "*?["):
        assert exact.check("bash", command, {}).matched_rule == command


@pytest.mark.parametrize("command", ["ls '*.py'", 'ls "~"', "grep 'a.*b' f", "ls a\\*b", "ls a~b"])
def test_quoted_or_escaped_glob_and_tilde_characters_are_plain(command: str) -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls *", "grep *"]})
    assert behavior(policy, "bash", command) == "allow"


def test_an_unparseable_command_is_denied() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["*"]})
    decision = policy.check("bash", "echo 'unbalanced", {})
    assert decision.behavior == "deny" and "cannot be parsed" in decision.reason
    assert policy.check("bash", "", {}).behavior == "deny"
    assert policy.check("bash", " \t", {}).behavior == "deny"


def test_command_rules_compare_words_deny_rules_by_basename() -> None:
    policy = PermissionPolicy(
        mode="rules", allow={"bash": ["git status", "/usr/bin/ls *"]}, deny={"bash": ["/bin/rm *"]}
    )
    for command in ("git status", "git\tstatus", "  git   status ", "git 'status'"):
        assert behavior(policy, "bash", command) == "allow", command
    assert behavior(policy, "bash", "/usr/bin/ls -l") == "allow"
    # allow rules match the line as written: a wrapper, an assignment or another program
    # path is not admitted
    for command in ("sudo git status", "env git status", "GIT_DIR=/x git status", "ls -l"):
        assert behavior(policy, "bash", command) == "deny", command
    assert policy.check("bash", "/tmp/x/git status", {}).reason == (
        "no rule matched; denied by default"
    )
    # deny rules match every program by its basename
    for command in ("rm -rf /", "/usr/bin/rm x", "nice /bin/rm x"):
        assert policy.check("bash", command, {}).matched_rule == "/bin/rm *", command


async def test_tool_names_in_rules_match_the_registered_name_exactly() -> None:
    def READ(path: str) -> str:
        """Read differently."""
        return path

    policy = PermissionPolicy(mode="rules", allow={"read": ["*"]})
    tool = Tool.from_function(READ, subject="path")
    decision = await policy.decide(read("/x", tool))
    assert decision.behavior == "deny"
    assert policy.check("READ", "/x", {}).behavior == "deny"
    assert policy.check("read", "/x", {}).behavior == "allow"


def read_path(path: pathlib.Path) -> str:
    """Read a file given as a Path."""
    return str(path)


def read_optional(path: pathlib.Path | None = None) -> str:
    """Read a file given as an optional Path."""
    return str(path)


@pytest.mark.parametrize("function", [read_path, read_optional])
async def test_a_path_typed_subject_is_a_path(function: Any) -> None:
    tool = Tool.from_function(function, name="read_file", subject="path")
    assert subject_kind_of(tool) == "path"
    [value] = tool.validate({"path": "/data/a.txt"}).values()
    assert isinstance(value, pathlib.Path)
    assert (await DATA_ONLY.decide(read(value, tool))).allowed  # was always denied
    escaped = tool.validate({"path": "/data/../etc/passwd"})["path"]
    assert (await DATA_ONLY.decide(read(escaped, tool))).behavior == "deny"


def test_subject_kinds_are_declared_or_inferred() -> None:
    def run(command: str, path: str = "", note: str = "") -> str:
        """Run."""
        return command

    assert subject_kind_of(None) == "text"
    assert subject_kind_of(Tool.from_function(ping)) == "text"
    assert subject_kind_of(Tool.from_function(run, subject="command")) == "command"
    assert subject_kind_of(Tool.from_function(run, subject="path")) == "path"
    assert subject_kind_of(Tool.from_function(run, subject="note")) == "text"
    assert subject_kind_of(Tool.from_function(run, name="bash", subject="note")) == "command"
    assert (
        subject_kind_of(Tool.from_function(run, subject="command", subject_kind="text")) == "text"
    )
    assert subject_kind_of(Tool.from_function(run, subject="note", subject_kind="path")) == "path"
    # Any kind's name is accepted when the tool is defined (kinds register in governance);
    # an unregistered one is denied when a policy reads a call (test_subject_readers.py).
    assert subject_kind_of(Tool.from_function(run, subject="note", subject_kind="url")) == "url"
    with pytest.raises(ConfigurationError, match="subject_kind"):
        Tool.from_function(run, subject="note", subject_kind="")
    with pytest.raises(ConfigurationError, match="with a subject"):
        Tool.from_function(run, subject_kind="path")


async def test_a_declared_text_subject_is_a_case_sensitive_glob() -> None:
    def search(query: str) -> str:
        """Search."""
        return query

    tool = Tool.from_function(search, subject="query", subject_kind="text")
    policy = PermissionPolicy(mode="rules", allow={"search": ["docs/*"]})
    ctx = CallContext(function="search", arguments={"query": "docs/a/b"}, call_id="c", tool=tool)
    assert (await policy.decide(ctx)).allowed  # text: * crosses "/"
    upper = ctx.with_arguments({"query": "DOCS/a"})
    assert (await policy.decide(upper)).behavior == "deny"


# -- decide() is a checkpoint on every path ---------------------------------


@pytest.mark.parametrize(
    ("policy", "ctx"),
    [
        (PermissionPolicy.allow_all(), call("ls")),
        (PermissionPolicy.deny_all(), call("ls")),
        (PermissionPolicy(mode="rules", allow={"bash": ["ls"]}), call("ls")),
        (PermissionPolicy(mode="rules"), call("ls")),
        (PermissionPolicy(mode="rules"), call(None)),
        (PermissionPolicy.from_dict(ESCALATING), call("make")),
        (PermissionPolicy.from_dict(ESCALATING, on_escalate=lambda d, c: True), call("make")),
        (DATA_ONLY, read("/data/a")),
        (DATA_ONLY, read("/data/\x00")),
    ],
)
async def test_decide_is_a_checkpoint_on_every_path(
    policy: PermissionPolicy, ctx: CallContext
) -> None:
    with trio.testing.assert_checkpoints():
        await policy.decide(ctx)


async def test_decide_raises_cancelled_when_cancelled_before_deciding() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await PermissionPolicy.allow_all().decide(call("ls"))
        pytest.fail("decide() did not check for cancellation")  # pragma: no cover
    assert scope.cancelled_caught


# -- end to end: Branch.act with a tool that really reads files -------------------------------


async def test_traversal_is_denied_end_to_end_through_branch_act(tmp_path: pathlib.Path) -> None:
    from lionexec import Branch

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("public")
    (tmp_path / "secret.txt").write_text("SECRET")
    (data / "sub").mkdir()

    def read_file(path: str) -> str:
        """Read a text file."""
        with open(path) as f:
            return f.read()

    base = data.as_posix()
    branch = Branch(policy=PermissionPolicy(mode="rules", allow={"read_file": [f"{base}/*"]}))
    branch.register_tools(Tool.from_function(read_file, subject="path"))
    attempts = [
        f"{base}/a.txt",
        f"{base}/../secret.txt",
        f"{base}/sub/../../secret.txt",
        f"{base.upper()}/../secret.txt",
        f"{base}/a.txt\x00/../../secret.txt",
    ]
    responses = await branch.act(
        [{"function": "read_file", "arguments": {"path": path}} for path in attempts]
    )
    outcomes = [r.outcome.value for r in responses]
    assert outcomes == ["completed"] + ["denied"] * (len(attempts) - 1)
    assert responses[0].output == "public"
    assert all("SECRET" not in repr(r.output) for r in responses)


# -- hostile sizes --------------------------------------------------------------------------


def test_a_long_hostile_segment_does_not_make_a_multi_star_rule_backtrack() -> None:
    # A naive translation ("[^/]*a[^/]*a...") would take effectively forever here.
    policy = PermissionPolicy(mode="rules", allow={"read_file": ["/d/a*a*a*a*a*a*b"]})
    decision = policy.check("read_file", "/d/" + "a" * 200_000, {}, kind="path")
    assert decision.behavior == "deny"
    assert policy.check("read_file", "/d/" + "a" * 1_000 + "b", {}, kind="path").allowed


def test_a_command_too_long_or_too_deeply_nested_is_denied() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["*"]})
    decision = policy.check("bash", "ls " + "x" * 70_000, {})
    assert decision.behavior == "deny" and "longer than" in decision.reason
    nested = "ls"
    for _ in range(6):
        nested = f"sh -c {shlex.quote(nested)}"
    assert behavior(policy, "bash", nested) == "allow"
    decision = policy.check("bash", "eval " * 40 + "ls", {})
    assert decision.behavior == "deny" and "too deeply" in decision.reason
    assert behavior(policy, "bash", "nice " * 40 + "ls") == "deny"


# -- a policy that says what it does -----------------------------------------------------------


def test_rules_without_a_mode_are_rules_and_with_an_ignoring_mode_an_error() -> None:
    policy = PermissionPolicy(allow={"read_file": ["/data/*"]}, deny={"read_file": ["/etc/*"]})
    assert policy.mode == "rules"
    assert policy.check("read_file", "/etc/passwd", {}, kind="path").behavior == "deny"
    assert policy.check("read_file", "/home/u/.ssh/id_rsa", {}, kind="path").behavior == "deny"
    assert PermissionPolicy().mode == "allow_all"
    assert PermissionPolicy(allow={"x": []}).mode == "allow_all"  # no pattern: no rule
    for mode in ("allow_all", "deny_all"):
        with pytest.raises(ConfigurationError) as caught:
            PermissionPolicy(mode=mode, allow={"read_file": ["/data/*"]}, escalate={"rm": ["*"]})
        message = str(caught.value)
        assert f"mode={mode!r} ignores rules" in message
        assert "allow and escalate" in message and "'read_file', 'rm'" in message
    assert PermissionPolicy.from_dict(policy.to_dict()) == policy


def test_explain_names_the_rule_that_decided_and_act_records_the_same_reason() -> None:
    policy = PermissionPolicy(
        allow={"read_file": ["/data/*"]}, deny={"*": ["/data/secret*"]}, escalate={"x": ["*"]}
    )
    allowed = policy.explain(READ_FILE, {"path": "/data/a.txt"})
    assert (allowed.behavior, allowed.matched_rule) == ("allow", "/data/*")
    assert "'/data/*' for 'read_file'" in allowed.reason
    denied = policy.explain(READ_FILE, {"path": "/data/secret.txt"})
    assert (denied.behavior, denied.matched_rule) == ("deny", "/data/secret*")
    assert "for '*'" in denied.reason
    nothing = policy.explain(READ_FILE, {"path": "/etc/passwd"})
    assert nothing.behavior == "deny" and nothing.matched_rule is None
    assert "no rule matched" in nothing.reason
    assert policy.explain(READ_FILE, {}).reason == "subject argument 'path' is missing"
    assert policy.explain("x", {}).behavior == "escalate"  # a name: the subject is the name

    async def run() -> None:
        from lionexec import Branch

        branch = Branch(policy=policy)
        branch.register_tools(READ_FILE)
        (response,) = await branch.act(
            {"function": "read_file", "arguments": {"path": "/data/secret.txt"}}
        )
        assert response.outcome == "denied"
        assert denied.reason in response.error.message

    trio.run(run)


def test_a_rule_for_a_tool_never_registered_is_reported_when_the_branch_acts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lionexec import Branch

    policy = PermissionPolicy(allow={"read_fil": ["/data/*"], "*": ["/tmp/*"]})
    assert policy.unknown_tools(["read_file"]) == ["read_fil"]
    assert PermissionPolicy.safe().unknown_tools([]) == []  # presets name conventional tools

    async def run(policy: PermissionPolicy) -> None:
        branch = Branch(policy=policy)
        branch.register_tools(READ_FILE)
        await branch.act({"function": "read_file", "arguments": {"path": "/data/a"}})
        await branch.act({"function": "read_file", "arguments": {"path": "/data/b"}})

    with caplog.at_level("WARNING", logger="lionexec"):
        trio.run(run, policy)
    reports = [r.getMessage() for r in caplog.records if "not registered" in r.getMessage()]
    assert reports == [
        "the permission policy has rules for tool 'read_fil', which is not registered "
        "(did you mean 'read_file'?): they never apply"
    ]  # once, not once per act
    caplog.clear()
    with caplog.at_level("WARNING", logger="lionexec"):
        trio.run(run, PermissionPolicy(allow={"read_file": ["/data/*"]}))
        trio.run(run, PermissionPolicy.safe())
    assert [r for r in caplog.records if "not registered" in r.getMessage()] == []
