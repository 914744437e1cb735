"""``lionexec demo`` (or ``python -m lionexec demo``): run lionexec's demo.

``python -m lionexec journal show|export|recover PATH_OR_URL``: read or recover a journal
(see :mod:`lionexec.journal._cli`).

``python -m lionexec worker --database URL --tools MODULE:ATTRIBUTE``: run a worker that
claims submitted calls (see :mod:`lionexec.journal.workers._cli`).

``python -m lionexec serve [--tools MODULE:ATTRIBUTE] [--port N] ...``: serve tool calls over
HTTP (see :func:`lionexec.server.main`; needs the ``server`` extra).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "journal":
        from .journal._cli import main as journal_main

        return journal_main(args[1:])
    if args and args[0] == "worker":
        from .journal.workers._cli import main as worker_main

        return worker_main(args[1:])
    if args and args[0] == "serve":
        from .server import main as serve_main

        return serve_main(args[1:], prog="python -m lionexec serve")
    if not args or args[0] != "demo":
        print(
            "usage: python -m lionexec demo | journal show|export|recover PATH_OR_URL | "
            "worker --database URL --tools MODULE:ATTRIBUTE | serve [--tools MODULE:ATTRIBUTE]",
            file=sys.stderr,
        )
        return 2
    from .demo import main as demo_main

    return demo_main(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
