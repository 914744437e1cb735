"""The command analysis costs a bounded amount of work per line, counted in steps (tokens read,
words visited) and characters (parsed, and given to deny rules): never a timing.

The analysis runs on the trio thread, so its work must grow linearly with the line and stop at
a budget; a line over the budget is denied (the most restrictive answer: deny rules are hints,
and a line too costly to read is not one they have read), never allowed.
"""

from __future__ import annotations

import contextlib
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionexec.governance import IGNORE_CASE, PermissionPolicy
from lionexec.governance.subjects import _command
from lionexec.governance.subjects._command import _analyse, _Command, _Refused, _words

LIMIT = 65_536


def fit(unit: str, suffix: str = "") -> str:
    """*unit* repeated to fill a 64 KiB line ending in *suffix*."""
    return unit * ((LIMIT - len(suffix)) // len(unit)) + suffix


def nested_sh(depth: int) -> str:
    line = "echo hi"
    for _ in range(depth):
        line = "sh -c " + shlex.quote(line)
    return line


#: Lines built to make the analysis work: long, nested, wrapped, or all three.
WORST = {
    "words": fit("a "),
    "commands": fit("a b; "),
    "single-quoted": "echo '" + "a" * (LIMIT - 8) + "'",
    "double-quoted": 'echo "' + "a\\\\" * ((LIMIT - 8) // 3) + '"',
    "env chain": fit("env ", "rm x"),
    "nice chain": fit("nice -n 1 ", "rm x"),
    "timeout chain": fit("timeout 1 ", "rm x"),
    "assignments": "env " + "A=1 " * ((LIMIT - 5) // 4),
    "pager assignments": fit("PAGER=less ", "rm x"),
    "git -c": "git " + "-c core.pager=x " * ((LIMIT - 4) // 16),
    "watch": "watch " + "a " * ((LIMIT - 7) // 2),
    "eval": "eval " + "a " * ((LIMIT - 6) // 2),
    "sh -c long": "sh -c '" + "a " * ((LIMIT - 10) // 2) + "'",
    "sh -c nested": nested_sh(8),
    "wrappers then a long word": "sudo -u root nice -n 5 ionice -c3 timeout 5 ls " + "y" * 65_000,
    "busybox": "busybox " + "x " * 120 + "ls " + "y" * 65_000,
    "options then a long word": "nohup " + "-x " * 100 + "ls " + "y" * 65_000,
    "substitutions": ("echo $(" * 3000 + ")" * 3000)[:LIMIT],
}


def analysed(line: str) -> _Command | None:
    """The analysis of *line*, or ``None`` if it was refused."""
    try:
        return _analyse(line)
    except _Refused:
        return None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(WORST))
def test_the_work_on_a_hostile_line_stays_within_the_budget(name: str) -> None:
    line = WORST[name]
    assert len(line) <= LIMIT
    work = _Command()
    with contextlib.suppress(_Refused):
        _analyse(line, work)
    # (the counters stop at the first step over a budget)
    assert work.steps <= _command._MAX_STEPS + 1
    assert work.parsed <= _command._MAX_PARSED + LIMIT
    assert work.formed <= _command._MAX_FORMS + LIMIT
    assert len(work.denied_forms) <= work.steps + _command._MAX_LAYERS


@pytest.mark.parametrize(
    ("program", "unit"),
    [("", "a "), ("", "A=1 "), ("", "'q' "), ("nice -n 1 ls ", "-n 1 "), ("eval ", "a "),
     ("git ", "-c a=b "), ("echo ", '"a b" '), ("sh -c 'ls' ", "-x ")],
)  # fmt: skip
def test_steps_grow_linearly_with_the_line(program: str, unit: str) -> None:
    # Each token is read once, each word visited a bounded number of times: doubling the
    # line doubles the steps, not more.
    def steps(count: int) -> int:
        work = _Command()
        _analyse(program + unit * count + "ls", work)
        return work.steps

    small, large = steps(200), steps(400)
    assert small >= 200 and large <= 2 * small + 2


def test_a_program_read_by_two_wrappers_is_given_to_deny_rules_once() -> None:
    # sudo's suspects and the programs found after its options are the same words: each is a
    # copy of the rest of the line, made once.
    work = _analyse("sudo -u root nice -n 5 ionice -c3 timeout 5 ls " + "y" * 1000)
    assert len(work.denied_forms) == len(set(work.denied_forms))


DENY = {"bash": ["rm", "rm *", "curl *", "*sudo*", IGNORE_CASE + "wget *"]}
OVER_BUDGET = [
    "a " * 5000 + "rm -rf /",
    "echo x; " * 1500 + "rm -rf /",
    "env " * 5000 + "rm -rf /",
    "sudo " + "-u x " * 100 + "ls",
    "nohup " + "-x " * 100 + "ls " + "y" * 60_000,
    "eval " * 10 + "ls " + "y" * 60_000,
]


@pytest.mark.parametrize("line", OVER_BUDGET, ids=range(len(OVER_BUDGET)))
def test_a_line_over_the_budget_is_denied_never_allowed(line: str) -> None:
    assert analysed(line) is None  # (over a budget: not read)
    allowing = PermissionPolicy(mode="rules", allow={"bash": ["*"]}, deny=DENY)
    decision = allowing.check("bash", line, {})
    assert decision.behavior == "deny", decision.reason
    escalating = PermissionPolicy(mode="rules", escalate={"bash": ["*"]}, deny=DENY)
    assert escalating.check("bash", line, {}).behavior == "deny"
    exactly = PermissionPolicy(mode="rules", allow={"bash": [line]}, deny=DENY)
    assert exactly.check("bash", line, {}).behavior == "deny"


def test_a_long_line_under_the_budget_is_still_read_by_deny_rules() -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["*"]}, deny=DENY)
    long_word = "y" * 60_000
    assert policy.check("bash", f"nice -n 5 ls {long_word}", {}).behavior == "allow"
    assert policy.check("bash", f"nice -n 5 rm {long_word}", {}).behavior == "deny"
    assert policy.check("bash", f"sh -c 'rm {long_word}'", {}).behavior == "deny"
    assert policy.check("bash", f"echo SUDO {long_word}", {}).behavior == "allow"
    assert policy.check("bash", f"echo sudo {long_word}", {}).behavior == "deny"  # *sudo*
    assert policy.check("bash", f"env WGET {long_word}", {}).behavior == "deny"  # ignoring case


# -- the tokeniser reads lines as shlex does ---------------------------------------------------

PIECES = ["a", "b", " ", "  ", "\t", "\n", "'x y'", '"p q"', '"a\\"b"', '"a\\\\"', '"a\\b"']
PIECES += ["\\ ", "\\'", "\\x", "''", '""', ";", "|", "&&", "(", ")", "<", ">", "=", "A=1"]
PIECES += ["'", '"', "\\", "~", "*", "é", "\r"]


def shlex_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_the_tokeniser_reads_a_line_as_shlex_does(line: str) -> None:
    try:
        expected = shlex_words(line)
    except ValueError:
        with pytest.raises(_Refused, match="cannot be parsed"):
            list(_words(line, _Command()))
        return
    assert [w for w, bare in _words(line, _Command()) if bare >= 0] == expected
