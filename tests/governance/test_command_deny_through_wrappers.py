"""Deny rules see the program behind wrappers, assignments and command strings: each line
below ran ``rm`` (or would have) past a ``"rm *"`` deny rule and past
``PermissionPolicy.safe()`` before the command analysis read it.

Deny rules read the program position and the next few words as possible programs, so
misreading a wrapper's options (or its assignments) let padding push the real program out of
reach; other lines hid the program in a string, another case, or an unlisted wrapper.
"""

from __future__ import annotations

import pytest

from lionexec.governance import PermissionPolicy

#: A deny list as the docs write one: everything allowed but rm.
DENY_RM = PermissionPolicy(mode="rules", allow={"bash": ["*"]}, deny={"bash": ["rm", "rm *"]})
PAD = "A=1 B=2 C=3 D=4 E=5 F=6 G=7 H=8 I=9"
NUMBERS = " ".join(f"{n}={n}" for n in range(1, 10))


def assert_denied(command: str) -> None:
    deny_list = DENY_RM.check("bash", command, {})
    safe = PermissionPolicy.safe().check("bash", command, {})
    assert (deny_list.behavior, safe.behavior) == ("deny", "deny"), (
        f"{command!r}: deny list -> {deny_list.behavior} ({deny_list.reason}); "
        f"safe() -> {safe.behavior} ({safe.reason})"
    )


@pytest.mark.parametrize(
    "command",
    [
        f"env {NUMBERS} rm -rf /",  # env sets any word holding "=", not only NAME=
        "env " + "a.b=1 " * 9 + "rm -rf /",
        f"env -i {NUMBERS} /bin/rm -rf /",
        f"env -- {PAD} rm -rf /",  # and goes on after "--"
        f"sudo -- {NUMBERS} rm -rf /",
        f"env -S '{NUMBERS} rm -rf /'",  # env -S's words are env's arguments again
    ],
)
def test_env_assignments_are_any_word_holding_an_equals_sign(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize("command", [f"time {PAD} rm -rf /", f"time -p {PAD} rm", f"! {PAD} rm"])
def test_assignments_may_follow_the_time_and_bang_keywords(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "su -c'rm -rf /tmp/x'",  # a value attached to -c
        "su -lc'rm -rf /tmp/x'",
        "runuser -c'rm -rf /tmp/x'",
        "su --co 'rm -rf /tmp/x'",  # abbreviated long options, value in the next word
        "su --comm 'rm -rf /tmp/x'",
        "su root --comm 'rm -rf /tmp/x'",
        "su --sess 'rm -rf /tmp/x'",
        "sg root -c 'rm -rf /'",
        "sg root 'rm -rf /'",
        "script -qc 'rm -rf /' /dev/null",
        "script --command 'rm -rf /' /dev/null",
        "compgen -C 'rm -rf /' x",  # bash runs compgen's -C string at once
        "compgen -W 'a b' -C'rm -rf /' x",
        "complete -C 'rm -rf /' x",  # ... and complete's when completing
    ],
)
def test_command_strings_of_su_sg_script_and_compgen(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "watch -d 'rm -rf /tmp/x'",  # -d takes an optional value, attached only
        "watch --differences 'rm -rf /tmp/x'",
        "watch -q 3 'rm -rf /tmp/x'",  # -q takes one
    ],
)
def test_watch_options(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "chrt -d -T 1000000 -D 2000000 -P 3000000 -T 1000000 -D 2000000 0 rm -rf /tmp/x",
        "unshare -w /tmp -w /tmp -w /tmp -w /tmp -w /tmp rm -rf /tmp/x",
        "unshare -S 0 -S 0 -S 0 -S 0 -S 0 rm -rf /tmp/x",
        "unshare --setgroups deny --setgroups deny --setgroups deny --setgroups deny"
        " --setgroups deny rm -rf /tmp/x",
        "strace -P /x -P /x -P /x -P /x -P /x rm -rf /tmp/x",
        "strace -I 1 -I 1 -I 1 -I 1 -I 1 rm -rf /tmp/x",
        "ltrace -l x -l x -l x -l x -l x rm -rf /tmp/x",
        "flock --wait 1 --wait 1 --wait 1 --wait 1 --wait 1 /tmp/lk rm -rf /tmp/x",
        "runuser -u root --supp-group root --supp-group root --supp-group root "
        "--supp-group root -- rm -rf /tmp/x",
        "setpriv --ruid 0 --euid 0 --rgid 0 --egid 0 --keep-groups --pdeathsig clear rm -rf /x",
        "sudo -c x -c x -c x -c x -c x rm -rf /tmp/x",
    ],
)
def test_wrapper_options_that_take_a_value(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command", ["env -S 'rm\x0b-rf\x0b/'", "env -S 'rm\x0c-rf\x0c/'", "env -S'rm\x0b-rf /x'"]
)
def test_env_split_string_splits_at_vertical_tab_and_form_feed(command: str) -> None:
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    ["ENV rm -rf /", "Nohup rm -rf /", "BASH -c 'rm -rf /'", "Xargs rm -rf", "Sudo -u x rm"],
)
def test_wrappers_and_shells_in_another_case(command: str) -> None:
    # a case-insensitive file system (macOS's default) runs ENV as env
    assert_denied(command)


@pytest.mark.parametrize(
    "command",
    [
        "setarch x86_64 rm -rf /",
        "setarch x86_64 -R -R -R -R -R -R -R -R -R rm -rf /",  # options after the arch
        "linux64 rm -rf /",
        "prlimit --nofile=100 rm -rf /",
        "prlimit --pid 1 --pid 1 --pid 1 --pid 1 --pid 1 rm -rf /",
        "fakeroot rm -rf /",
        "ssh-agent rm -rf /",
        "dbus-run-session rm -rf /",
        "/lib64/ld-linux-x86-64.so.2 /bin/rm -rf /",
        "valgrind -q rm -rf /",
        "nsenter -t 1 -t 1 -t 1 -t 1 -t 1 rm -rf /",
        # options not modelled: every word after the wrapper is tried as the program
        "perf stat -o /dev/null rm -rf /",
        "perf stat -e x -e x -e x -e x -e x rm -rf /",
        f"perf stat -e x sh -c 'env {NUMBERS} rm -rf /'",
        "bwrap --bind / / --bind / / --bind / / --bind / / --bind / / rm -rf /",
        "ip netns exec blue rm -rf /",
        "start-stop-daemon --start --exec /bin/rm -- -rf /",
        "start-stop-daemon --start --exec=/bin/rm -- -rf /",
    ],
)
def test_more_programs_that_run_their_arguments(command: str) -> None:
    assert_denied(command)


def test_a_quoted_assignment_is_a_program() -> None:
    # bash runs 'A=/../bin/rm' as a relative path (given a directory named "A=")
    assert_denied("'A=/../../../../../../../../bin/rm' -rf /tmp/x")
    assert_denied("A\\=/../../bin/rm -rf /tmp/x")
    assert_denied(f"time {PAD} 'A=/../../bin/rm' -rf /tmp/x")


def test_an_allow_rule_compares_words_not_the_words_joined() -> None:
    # one word holding a space runs the program "ls /..." (a relative path), not ls
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls *"]})
    decision = policy.check("bash", "'ls /../../../../bin/rm' -rf /tmp/x", {})
    assert decision.behavior == "deny" and decision.reason == "no rule matched; denied by default"
    assert policy.check("bash", "ls 'a b' c", {}).behavior == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "eval -- rm -rf /",  # eval takes "--" as the end of its options
        "npm exec --call='rm x'",  # npm's and npx's --call is a command line, like -c
        "npm exec --call 'rm x'",
        "npx --call='rm -rf /'",
        "npm exec --ca='rm x'",  # abbreviated, as npm's option parser allows
    ],
)
def test_the_routes_the_docs_say_are_read_are_read(command: str) -> None:
    assert DENY_RM.check("bash", command, {}, kind="command").behavior == "deny", command


def test_eval_and_call_strings_still_allow_harmless_lines() -> None:
    for command in ("eval -- echo hi", "npm exec --call='echo hi'", "npx --call 'ls -la'"):
        assert DENY_RM.check("bash", command, {}, kind="command").behavior == "allow", command
