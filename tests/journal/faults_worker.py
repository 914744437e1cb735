"""A journal writer for test_journal_faults.py, run as a subprocess.

Usage: ``python faults_worker.py MODE PATH [COUNT]``

* ``commit_then_die``: COUNT commits (an instruction each, in one branch), then SIGKILL
  itself: the write-ahead log stays as it was, none of it checkpointed;
* ``fill``: commits instructions of 4 KiB until the journal refuses one, then prints the
  error as one JSON line (``{"type": ..., "message": ...}``; ``{}`` if none came);
* ``write_until``: commits instructions of up to 5 KiB (one branch) until the file
  ``PATH.stop`` exists (a live write-ahead log, growing and restarting);
* ``open_full``: makes a journal at PATH and closes it, fills its filesystem (a file
  written until ``ENOSPC``), then opens the journal and prints how it went, the same way.

With ``LIONEXEC_TEST_FSIZE=N`` the process limits the files it writes to N bytes instead of
filling anything (``RLIMIT_FSIZE``; ``SIGXFSZ`` ignored, so a write past it fails with
``EFBIG``): after the journal was opened in ``fill``, before it is opened again in
``open_full``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys

import trio

from lionexec.conversation import Instruction
from lionexec.journal import SqliteJournal


def limit_files() -> None:
    size = os.environ.get("LIONEXEC_TEST_FSIZE")
    if size:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(size), int(size)))


def report(exc: BaseException | None) -> None:
    found = {} if exc is None else {"type": type(exc).__name__, "message": str(exc)}
    print(json.dumps(found), flush=True)


async def commit_then_die(path: str, count: int) -> None:
    journal = SqliteJournal(path, checkpoint_commits=1_000_000)  # (no checkpoint meanwhile)
    await journal.open()
    branch = await journal.branch()
    for i in range(count):
        branch.messages.add_message(Instruction(content=f"instruction {i} " + "x" * 200))
        await journal.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def fill(path: str) -> None:
    async with SqliteJournal(path) as journal:
        limit_files()
        branch = await journal.branch()
        try:
            for i in range(100_000):
                branch.messages.add_message(Instruction(content=f"{i} " + "y" * 4096))
                await journal.flush()
        except Exception as exc:
            report(exc)
            return
    report(None)


async def write_until(path: str) -> None:
    stop = trio.Path(path + ".stop")
    async with SqliteJournal(path, checkpoint_commits=20) as journal:
        branch = await journal.branch()
        i = 0
        while not await stop.exists():
            branch.messages.add_message(Instruction(content="w" * (100 + i % 5000)))
            await journal.flush()
            i += 1


async def open_full(path: str) -> None:
    async with SqliteJournal(path) as journal:
        branch = await journal.branch()
        async with branch:
            branch.messages.add_message(Instruction(content="kept"))
    if os.environ.get("LIONEXEC_TEST_FSIZE"):
        limit_files()
    else:
        filler = os.open(os.path.join(os.path.dirname(path), "filler"), os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(filler, b"f" * 512)
        except OSError:  # (ENOSPC: the disk is full now)
            pass
        finally:
            os.close(filler)
    try:
        async with SqliteJournal(path) as journal:
            await journal.branch_ids()
    except Exception as exc:
        report(exc)
        return
    report(None)


def main() -> None:
    mode, path = sys.argv[1:3]
    if mode == "commit_then_die":
        trio.run(commit_then_die, path, int(sys.argv[3]))
    elif mode == "fill":
        trio.run(fill, path)
    elif mode == "write_until":
        trio.run(write_until, path)
    else:
        trio.run(open_full, path)


if __name__ == "__main__":
    main()
