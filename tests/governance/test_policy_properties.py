"""Property tests: no subject a rule does not cover gets past the permission policy.

Hypothesis builds subjects *around* each rule (traversals, repeated and trailing separators,
case variants, NUL, percent-encoded and Unicode look-alikes, whitespace variants, wrappers,
shell operators) and each decision is compared with a reference evaluation written here from
the documented semantics, independently of the implementation (different algorithms:
``posixpath.normpath`` on prefixes, per-segment ``fnmatch``, ``shlex.split``). A second,
semantic oracle states what "inside the rule" means without globs at all; no admitted subject
may fall outside it.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from collections.abc import Callable
from pathlib import PurePosixPath

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lionexec.governance import PermissionPolicy

from .test_case_folding import ref_matches

# -- paths ------------------------------------------------------------------------------------

SEGMENTS = [
    "data", "DATA", "Data", "sub", "etc", "passwd", "a.txt", "A.TXT", "x", "..", ".", "",
    "...", ". .", " ", "\t", "data ", " data", "a b", "%2e%2e", "%2f", "..%2f", "\u2025",
    "\uff0e\uff0e", "\uff0f", "\u0430.txt", "da\u0074a", "d\u0430ta", "a\x00", "*", "[ab]",
    "\\", "..\\..", "~", "$HOME", "docs", "DOCS",
]  # fmt: skip
SEPARATORS = ["/", "//", "/./", "/../", "///"]


@st.composite
def paths(draw: st.DrawFn) -> str:
    """A path near ``/data`` and ``docs``: segments joined by separator variants."""
    segments = draw(st.lists(st.sampled_from(SEGMENTS), min_size=0, max_size=6))
    out = draw(st.sampled_from(["/", "", "//", "./", "/data/", "docs/", "/data/../"]))
    for i, segment in enumerate(segments):
        if i:
            out += draw(st.sampled_from(SEPARATORS))
        out += segment
    return out + draw(st.sampled_from(["", "/", "/.", "/..", "//"]))


def ref_depths(subject: str) -> tuple[PurePosixPath | None, list[int]]:
    """The normalised path (``None`` if refused) and, for each ``..``, the depth it left.

    Written with ``posixpath.normpath`` applied to every prefix, not with a stack.
    """
    if not isinstance(subject, str) or subject == "" or "\x00" in subject:
        return None, []
    collapsed = re.sub("/+", "/", subject)  # POSIX: "//x" is "/x" on Linux
    parts = collapsed.split("/")
    left: list[int] = []
    for k, part in enumerate(parts):
        if part != "..":
            continue
        before = posixpath.normpath("/".join(parts[:k]) or ("/" if collapsed[:1] == "/" else "."))
        if before == ".." or before.startswith("../"):
            return None, []
        left.append(
            0 if before in ("/", ".") else len(PurePosixPath(before).parts) - (before[0] == "/")
        )
    normalized = posixpath.normpath(collapsed)
    if normalized == ".." or normalized.startswith("../"):
        return None, []
    return PurePosixPath(normalized), left


def ref_path_match(path: PurePosixPath, pattern: str) -> bool:
    ignore = pattern.startswith("(?i)")
    body = pattern[4:] if ignore else pattern
    if body in ("*", "**"):
        return True
    if body.startswith("/") != path.is_absolute():
        return False
    want = [p for p in body.split("/") if p not in ("", ".")]
    have = [p for p in path.parts if p != "/"]
    if ignore:
        want = [p if p == "**" else p.lower() for p in want]
        have = [p.lower() for p in have]

    def match(w: list[str], h: list[str]) -> bool:
        if not w:
            return not h
        if w[0] == "**":
            return any(match(w[1:], h[i:]) for i in range(len(h) + 1))
        return bool(h) and fnmatch.fnmatchcase(h[0], w[0]) and match(w[1:], h[1:])

    return match(want, have)


def ref_base(pattern: str) -> int:
    body = pattern[4:] if pattern.startswith("(?i)") else pattern
    base = 0
    for part in (p for p in body.split("/") if p not in ("", ".")):
        if any(c in part for c in "*?["):
            break
        base += 1
    return base


def ref_path_admits(pattern: str, subject: str) -> bool:
    """Whether an allow rule *pattern* admits *subject*: the documented semantics."""
    path, left = ref_depths(subject)
    if path is None or not ref_path_match(path, pattern):
        return False
    return all(depth > ref_base(pattern) for depth in left)


def under(base: str, *, ignore_case: bool = False) -> Callable[[PurePosixPath], bool]:
    def inside(p: PurePosixPath) -> bool:
        b = PurePosixPath(base)
        if ignore_case:
            return str(p).lower() == str(b).lower() or any(
                str(q).lower() == str(b).lower() for q in p.parents
            )
        return p == b or b in p.parents

    return inside


#: rule -> what "inside the rule" means, stated without globs
PATH_RULES: dict[str, Callable[[PurePosixPath], bool]] = {
    "/data/*": lambda p: p.parent == PurePosixPath("/data"),
    "/data/**": under("/data"),
    "/data/*.txt": lambda p: p.parent == PurePosixPath("/data") and p.name.endswith(".txt"),
    "/data/*/x": lambda p: p.parent.parent == PurePosixPath("/data") and p.name == "x",
    "/data/[ab]*": lambda p: p.parent == PurePosixPath("/data") and p.name[:1] in "ab",
    "(?i)/data/*": lambda p: str(p.parent).lower() == "/data",
    "docs/*": lambda p: not p.is_absolute() and p.parent == PurePosixPath("docs"),
    "/data/a.txt": lambda p: p == PurePosixPath("/data/a.txt"),
}


def stays_inside(subject: str, base: str, ignore_case: bool) -> bool:
    """No ``..`` in *subject* walks back out of *base* once the walk is in it."""
    collapsed = re.sub("/+", "/", subject)
    parts = collapsed.split("/")
    entered = False
    for k in range(1, len(parts) + 1):
        prefix = posixpath.normpath("/".join(parts[:k]) or "/")
        now = under(base, ignore_case=ignore_case)(PurePosixPath(prefix))
        if entered and not now:
            return False
        entered = entered or now
    return True


@pytest.mark.parametrize("rule", sorted(PATH_RULES))
@given(subject=paths())
@example(subject="/data/../etc/passwd")
@example(subject="/data/sub/../../etc/shadow")
@example(subject="/DATA/secret")
@example(subject="/data/a.txt\x00/etc")
@example(subject="/data/../data/a.txt")
@example(subject="//data//a.txt/")
def test_a_path_rule_admits_exactly_its_reference_and_nothing_outside(
    rule: str, subject: str
) -> None:
    policy = PermissionPolicy(mode="rules", allow={"read_file": [rule]})
    admitted = policy.check("read_file", subject, {}, kind="path").allowed
    assert admitted == ref_path_admits(rule, subject), (rule, subject)
    if admitted:
        normalized = PurePosixPath(posixpath.normpath(re.sub("/+", "/", subject)))
        assert PATH_RULES[rule](normalized), (rule, subject, normalized)
        body = rule.removeprefix("(?i)")
        base = "/".join(body.split("/")[: ref_base(rule) + body.startswith("/")]) or "/"
        assert stays_inside(subject, base, rule != body), (rule, subject)


@given(subject=paths())
def test_a_deny_path_rule_catches_every_spelling_of_what_it_names(subject: str) -> None:
    policy = PermissionPolicy(mode="rules", allow={"*": ["*"]}, deny={"read_file": ["/etc/**"]})
    decision = policy.check("read_file", subject, {}, kind="path")
    path, left = ref_depths(subject)
    if path is not None and under("/etc")(path):
        assert decision.behavior == "deny" and decision.matched_rule == "/etc/**", subject
    if decision.allowed:
        assert path is not None and not under("/etc")(path), subject
        assert all(depth > 0 for depth in left)


# -- commands ---------------------------------------------------------------------------------

WORDS = [
    "ls", "/bin/ls", "./ls", "LS", "l's'", "x", "-la", "a b", "'a b'", '"q"', "touch", "pwned",
    "rm", "sudo", "env", "X=1", "command", "nice", "*", "?", "~", "\\ls", "#", "--", "-c",
    "&", "&&", ";", "|", "||", "`id`", "$(id)", "${IFS}", "$HOME", "$", ">", "<", "2>&1",
    "\n", "\r", "\x00", "(", ")", "{a,b}", "'", '"', "\\", "ｌｓ", "l\u0455", "\u00a0",
]  # fmt: skip
SPACES = [" ", "\t", "  ", " \t", "\u00a0", "\x0b", "\x0c"]


@st.composite
def command_lines(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=6))
    out = draw(st.sampled_from(["", " ", "\t"]))
    for i, word in enumerate(words):
        if i:
            out += draw(st.sampled_from(SPACES))
        out += word
    return out + draw(st.sampled_from(["", " ", "\t", "\n"]))


CONTROL = set(";&|`$<>(){}\n\r\x00")
#: An escaped character, a single-quoted or a double-quoted string (left to right).
QUOTED = re.compile(r"\\.|'[^']*'|" + r'"(?:\\.|[^"\\])*"')


def ref_command_argv(command: str) -> list[str] | None:
    """The argv a shell would run for a *plain* command line, or ``None`` if it is not one."""
    if any(c in CONTROL for c in command):
        return None
    try:
        argv = shlex.split(command, comments=False, posix=True)
    except ValueError:
        return None
    if not argv or any(c in argv[0] for c in "*?["):
        return None
    # pathname and tilde expansion: outside quotes and escapes only
    bare = QUOTED.sub("Q", command)
    if any(c in bare for c in "*?[") or re.search(r"(^|[ \t])~", bare):
        return None
    return argv


@given(command=command_lines())
@example(command="ls x & touch pwned")
@example(command="ls x&touch pwned")
@example(command="/bin/ls x")
@example(command="ls\t-la")
def test_an_ls_rule_admits_exactly_plain_ls_commands(command: str) -> None:
    policy = PermissionPolicy(mode="rules", allow={"bash": ["ls *"]})
    admitted = policy.check("bash", command, {}).allowed
    argv = ref_command_argv(command)
    expected = argv is not None and argv[0] == "ls" and len(argv) >= 2
    assert admitted == expected, (command, argv)
    if admitted:  # semantic oracle: the shell runs ls, and only ls
        assert argv is not None and argv[0] == "ls"
        assert not CONTROL & set(command)


DANGEROUS = ["rm", "sudo", "chmod", "kill", "mkfs"]
SPELLED = [
    "{}", "/bin/{}", "/usr/bin/{}", "/usr/local/sbin/{}", "\\{}", "'{}'", '"{}"', "{}''",
    "./{}", "{U}", "/BIN/{U}", "{}/",
]  # fmt: skip
WRAPPERS = [
    "", "command ", "command -p ", "builtin ", "env ", "env -i ", "env A=1 B=2 ", "env -u X ",
    "env -- ", "sudo ", "sudo -u root ", "sudo -E -u root ", "sudo -uroot ", "sudo -- ",
    "doas ", "nice ", "nice -n 5 ", "nice -5 ", "nohup ", "time ", "time -p ", "timeout 5 ",
    "timeout -s KILL 5 ", "timeout --kill-after=1 5 ", "xargs ", "xargs -0 ", "xargs -n 1 ",
    "xargs -I {} ", "exec ", "exec -a name ", "stdbuf -oL ", "stdbuf -o L ", "setsid ",
    "ionice -c 3 ", "chroot / ", "X=1 ", "A=1 B=2 ", "! ", "coproc ", "watch -n 1 ",
    "busybox ", "strace -f ", "flock /tmp/l ", "runuser -u root -- ", "pkexec ",
]  # fmt: skip


@st.composite
def dangerous_commands(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(DANGEROUS))
    if name == "mkfs" and draw(st.booleans()):
        name += ".ext4"
    program = draw(st.sampled_from(SPELLED)).replace("{U}", name.upper()).replace("{}", name)
    wrappers = "".join(draw(st.lists(st.sampled_from(WRAPPERS), max_size=3)))
    args = draw(st.sampled_from(["", " -rf /", " -9 1", " 777 /etc", " /dev/sda", "\t-rf\t/"]))
    line = wrappers + program + args
    if draw(st.booleans()):
        inner = shlex.quote(line)
        # (env -S reads a backslash by its own rules: '\\rm' is "\\r" "m", '\\chmod' ends
        # at "\\c"; neither runs the program the shell spelling names)
        runners = ["sh -c ", "bash -lc ", "eval "] + ([] if "\\" in line else ["env -S "])
        line = draw(st.sampled_from(runners)) + inner
    space = draw(st.sampled_from(["", " ", "\t", "  "]))
    return (space + line).replace(" ", draw(st.sampled_from([" ", "\t", " \t"])))


@given(command=dangerous_commands())
@example(command="rm\t-rf /")
@example(command="rm${IFS}-rf${IFS}/")
@example(command="sudo\tsh")
@example(command="kill\t-9 1")
def test_safe_never_admits_or_escalates_a_dangerous_command(command: str) -> None:
    decision = PermissionPolicy.safe().check("bash", command, {})
    assert decision.behavior == "deny", (command, decision)


BENIGN = ["ls", "cat", "git", "make", "/usr/bin/grep", "echo"]


@given(
    program=st.sampled_from(BENIGN),
    wrapper=st.sampled_from(["", "nice ", "time ", "timeout 5 ", "env A=1 "]),
    args=st.lists(st.sampled_from(["-l", "x", "README.md", "'a b'", "--", "src/"]), max_size=3),
    command_word=st.sampled_from(WORDS),
)
def test_safe_escalates_what_it_does_not_deny_and_denies_every_operator(
    program: str, wrapper: str, args: list[str], command_word: str
) -> None:
    safe = PermissionPolicy.safe()
    plain = " ".join([wrapper + program, *args])
    assert safe.check("bash", plain, {}).behavior == "escalate", plain
    mixed = f"{plain} {command_word}"
    decision = safe.check("bash", mixed, {})
    if CONTROL & set(mixed) or ref_command_argv(mixed) is None:
        assert decision.behavior == "deny", mixed
    else:
        assert decision.behavior in ("deny", "escalate"), mixed


# -- text and tool names ----------------------------------------------------------------------

TEXT = ["a", "A", "b", " ", "*", "/", "..", ";", "&", "$", "$x", "\x00", "\u0430", "ß", "SS"]


@given(
    subject=st.lists(st.sampled_from(TEXT), max_size=6).map("".join),
    tokens=st.lists(st.sampled_from(["a", "A", "*", "?", "[a]", "b", "/", "ß", "s"]), max_size=4),
    ignore_case=st.booleans(),
)
@example(subject="STRASSE", tokens=["*", "ß", "*"], ignore_case=True)
@example(subject="ß", tokens=["?"], ignore_case=True)
def test_text_rules_are_case_sensitive_globs_unless_marked(
    subject: str, tokens: list[str], ignore_case: bool
) -> None:
    # ignoring case, a text rule matches as a case-ignoring path segment does: by case
    # folding (ß is ss), ? and [...] one character of the subject as written
    pattern = "".join(tokens)
    rule = f"(?i){pattern}" if ignore_case else pattern
    policy = PermissionPolicy(mode="rules", allow={"note": [rule]})
    admitted = policy.check("note", subject, {}, kind="text").allowed
    operator = (
        any(c in subject for c in ";&\x00")
        or re.search(r"\$[\w({@*#?!$'\"-]", subject) is not None
    )
    if ignore_case:
        glob = ref_matches(tokens, subject) if subject else pattern.strip("*") == ""
    else:
        glob = fnmatch.fnmatchcase(subject, pattern)
    literal = not any(c in pattern for c in "*?[")
    named = literal and (
        subject.casefold() == pattern.casefold() if ignore_case else subject == pattern
    )
    assert admitted == (named if operator else glob), (rule, subject)


@given(
    name=st.sampled_from(["read", "READ", "Read", "read_", "rea", "re*d", "*"]),
    rule_name=st.sampled_from(["read", "READ", "*x"]),
)
def test_tool_names_match_exactly(name: str, rule_name: str) -> None:
    policy = PermissionPolicy(mode="rules", allow={rule_name: ["*"]})
    assert policy.check(name, "x", {}, kind="text").allowed == (name == rule_name)
