"""The cost of one permission check of a hostile command line of up to 64 KiB, on the thread.

Run: ``python -m benchmarks.command_check_cost``. Each line is checked five times (fresh
analysis each time: lines over 1,024 characters are never cached) and the least CPU time is
printed (the machine may be shared), with the decision. The deny list holds patterns of every
cost: literal prefixes, a substring (``*sudo*``), and case-ignoring ones with a leading
wildcard and a ``?``, which are read over each program the line may run.
"""

from __future__ import annotations

import shlex
import time

from lionexec.governance import IGNORE_CASE, PermissionPolicy

LIMIT = 65_536
POLICY = PermissionPolicy(
    mode="rules",
    allow={"bash": ["*"]},
    deny={
        "bash": [
            "rm *",
            "curl *",
            "sudo *",
            "*rm -rf*",
            IGNORE_CASE + "wget *",
            IGNORE_CASE + "*R?M*",
        ]
    },
)


def fit(unit: str, suffix: str = "") -> str:
    """*unit* repeated to fill a 64 KiB line ending in *suffix*."""
    return unit * ((LIMIT - len(suffix)) // len(unit)) + suffix


def nested_substitutions(depth: int) -> str:
    line = "x"
    for _ in range(depth):
        line = f"echo $({line})"
    return line[:LIMIT]


def nested_sh(depth: int) -> str:
    line = "echo hi"
    for _ in range(depth):
        line = "sh -c " + shlex.quote(line)
    return line


LINES = {
    "nested $(...) x2000": nested_substitutions(2000),
    "many ;-separated words": fit("a b; "),
    "many words": fit("a "),
    "long single-quoted": "echo '" + "a" * (LIMIT - 8) + "'",
    "long double-quoted": 'echo "' + "a" * (LIMIT - 8) + '"',
    "env chain": fit("env ", "rm x"),
    "nice chain": fit("nice ", "rm x"),
    "env nice mixed": fit("env nice -n 1 ", "rm x"),
    "env + 120 options + words": "env " + "-u X " * 60 + "a " * ((LIMIT - 400) // 2),
    "busybox (each word)": "busybox " + "a " * 120 + "b" * (LIMIT - 400),
    "sh -c nested x8": nested_sh(8),
    "sh -c 'long'": "sh -c '" + "a " * ((LIMIT - 10) // 2) + "'",
    "eval words": "eval " + "a " * ((LIMIT - 6) // 2),
    "command chain": fit("command ", "rm x"),
    "sudo chain": fit("sudo ", "rm x"),
    "watch words": "watch " + "a " * ((LIMIT - 7) // 2),
    "env assignments": "env " + "A=1 " * ((LIMIT - 5) // 4),
    "PAGER assignments": fit("PAGER=less ", "rm x"),
    "git -c many": "git " + "-c core.pager=x " * ((LIMIT - 4) // 16),
    "timeout chain": fit("timeout 1 ", "rm x"),
    "xargs words": "xargs " + "a " * ((LIMIT - 7) // 2),
    "unbalanced quote": "echo '" + "a" * (LIMIT - 8),
    "wrappers + long word": "sudo -u root nice -n 5 ionice -c3 timeout 5 ls " + "y" * 65_400,
    "nohup 100 options + long word": "nohup " + "-x " * 100 + "ls " + "y" * 65_000,
    "busybox 120 + long word": "busybox " + "x " * 120 + "ls " + "y" * 65_000,
}


def main() -> None:
    worst = 0.0
    for name, line in LINES.items():
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            decision = POLICY.check("bash", line, {})
            best = min(best, time.process_time() - started)
        worst = max(worst, best)
        print(f"{best * 1000:8.2f} ms  {len(line):6d}  {decision.behavior:5s}  {name}")
    print(f"worst {worst * 1000:.2f} ms")


if __name__ == "__main__":
    main()
