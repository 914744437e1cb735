"""``python -m lionexec demo``: run lionexec's demo."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "demo":
        print("usage: python -m lionexec demo", file=sys.stderr)
        return 2
    from .demo import main as demo_main

    return demo_main(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
