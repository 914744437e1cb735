"""Journal faults are journal errors: a write-ahead log that SQLite would replay only in part
is refused at open, naming it and what would be lost; a full disk is reported as a full
disk, at open and while writing. Real processes, a real SIGKILL, a real small filesystem
(or, where none can be mounted, a real file size limit)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trio

from lionexec.journal import JournalError, NotAJournalError, SqliteJournal

WORKER = Path(__file__).with_name("faults_worker.py")
COMMITS = 30
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def worker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env or ENV,
    )


@pytest.fixture(scope="module")
def killed_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal whose writer was SIGKILLed after :data:`COMMITS` commits: its WAL stays."""
    path = tmp_path_factory.mktemp("killed") / "journal.db"
    died = worker("commit_then_die", str(path), str(COMMITS))
    assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
    assert Path(f"{path}-wal").stat().st_size > 32 * 4096  # (the commits are in the log)
    return path


def copy_of(journal: Path, folder: Path) -> Path:
    folder.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{journal}{suffix}", folder / f"journal.db{suffix}")
    return folder / "journal.db"


def damage(path: Path, at: int) -> None:
    wal = Path(f"{path}-wal")
    data = bytearray(wal.read_bytes())
    data[at] ^= 0xFF
    wal.write_bytes(bytes(data))


def frame_at(path: Path, frame: int, offset: int) -> int:
    """The offset in the WAL of byte *offset* of frame *frame* (from 1)."""
    page_size = int.from_bytes(Path(f"{path}-wal").read_bytes()[8:12], "big")
    return 32 + (frame - 1) * (24 + page_size) + offset


def wal_bytes(path: Path) -> bytes:
    return Path(f"{path}-wal").read_bytes()


def move(source: Path, to: Path) -> None:
    source.rename(to)


def frames(path: Path) -> int:
    wal = Path(f"{path}-wal").read_bytes()
    return (len(wal) - 32) // (24 + int.from_bytes(wal[8:12], "big"))


async def instructions(path: Path) -> int:
    async with SqliteJournal(path) as journal:
        [branch_id] = await journal.branch_ids()
        return len(await journal.history(branch_id))


async def test_a_clean_wal_left_by_a_kill_opens_with_every_commit(
    killed_journal: Path, tmp_path: Path
) -> None:
    path = copy_of(killed_journal, tmp_path / "clean")
    assert await instructions(path) == COMMITS


@pytest.mark.parametrize(
    ("where", "bad"),
    [("page", "frame {mid}"), ("checksum", "frame {mid}"), ("header", "its header")],
)
async def test_a_wal_with_commits_after_a_damaged_frame_is_refused_naming_it(
    killed_journal: Path, tmp_path: Path, where: str, bad: str
) -> None:
    path = copy_of(killed_journal, tmp_path / where)
    mid = frames(path) // 2
    at = {
        "page": frame_at(path, mid, 24 + 100),  # a byte of the page it holds
        "checksum": frame_at(path, mid, 17),  # a byte of its stored checksum
        "header": 17,  # a byte of the log's salt, in its header
    }[where]
    damage(path, at)
    # what SQLite alone makes of it (on a copy): it opens, without the later commits
    probe = copy_of(path, tmp_path / "probe")
    with sqlite3.connect(probe) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        seen = sum(  # (messages not yet folded are still in the log)
            conn.execute(f"SELECT count(*) FROM {table}{where}").fetchone()[0]
            for table, where in [
                ("lionexec_messages", ""),
                ("lionexec_log", " WHERE event = 0"),
            ]
            if table in tables
        )
    assert seen < COMMITS - 2
    before = wal_bytes(path)
    with pytest.raises(NotAJournalError) as info:
        async with SqliteJournal(path):
            pass
    message = str(info.value)
    assert info.value.target == str(path)
    assert f"{path}-wal" in message
    assert bad.format(mid=mid) in message
    found = re.search(r"(\d+) frame\(s\) from there on hold (\d+) committed transaction", message)
    assert found is not None, message
    assert int(found[2]) >= COMMITS - seen - 1
    assert wal_bytes(path) == before  # nothing was touched
    move(Path(f"{path}-wal"), tmp_path / "aside")  # as the error says: moved aside, it opens
    async with SqliteJournal(path) as journal:
        assert len(await journal.branch_ids()) <= 1


async def test_a_torn_last_frame_is_what_a_crash_leaves_and_opens(
    killed_journal: Path, tmp_path: Path
) -> None:
    path = copy_of(killed_journal, tmp_path / "torn")
    damage(path, frame_at(path, frames(path), 24 + 100))
    assert await instructions(path) == COMMITS - 1  # the last commit is lost, as SQLite does


@pytest.mark.timeout(120)
async def test_a_log_another_process_is_writing_is_not_mistaken_for_a_damaged_one(
    tmp_path: Path,
) -> None:
    """Read while it is written (appended to, restarted by checkpoints), a live log looks
    like one with a damaged frame followed by commits; it is only SQLite's to replay when no
    connection has it open."""
    path = tmp_path / "journal.db"
    writer = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), "write_until", str(path)], env=ENV
    )
    try:
        with trio.fail_after(60):
            # (another process makes the file: no trio.Event reaches across processes)
            while not await trio.Path(f"{path}-wal").exists():  # noqa: ASYNC110
                await trio.sleep(0.01)
            for _ in range(40):
                async with SqliteJournal(path) as journal:  # never NotAJournalError
                    assert len(await journal.branch_ids()) <= 1
        assert writer.returncode is None  # (it was writing all along)
    finally:
        await trio.Path(f"{path}.stop").touch()
        with trio.fail_after(60):
            await writer.wait()
    assert writer.returncode == 0


# -- a full disk ------------------------------------------------------------------------------


def small_disk(folder: Path) -> list[str] | None:
    """A command prefix that runs its command with *folder* on a 512 KiB tmpfs of its own (a
    private mount in a new user and mount namespace), or ``None`` where none can be mounted."""
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if unshare is None or mount is None:
        return None
    prefix = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    probe = subprocess.run(
        [*prefix, f'{mount} -t tmpfs -o size=512k tmpfs "$0"', str(folder)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return None
    return [*prefix, f'{mount} -t tmpfs -o size=512k tmpfs "$0" && exec "$@"', str(folder)]


def run_full(mode: str, how: str, folder: Path) -> dict[str, str]:
    """Run the worker's *mode* on a full disk (*how*: ``small_disk``, falling back to the file
    size limit where no filesystem can be mounted; or ``file_size_limit``)."""
    folder.mkdir()
    path = str(folder / "journal.db")
    prefix = small_disk(folder) if how == "small_disk" else None
    env = dict(ENV)
    if prefix is None:
        env["LIONEXEC_TEST_FSIZE"] = str(256 * 1024 if mode == "fill" else 16 * 1024)
    done = subprocess.run(
        [*(prefix or []), sys.executable, str(WORKER), mode, path],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["small_disk", "file_size_limit"])
def test_writing_on_a_full_disk_says_the_disk_is_full(how: str, tmp_path: Path) -> None:
    folder = tmp_path / uuid.uuid4().hex[:8]
    error = run_full("fill", how, folder)
    assert error.get("type") in ("JournalError", "JournalConnectionError"), error
    assert "disk full" in error["message"], error
    assert str(folder / "journal.db") in error["message"]
    assert "not committed" in error["message"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["small_disk", "file_size_limit"])
def test_opening_a_journal_on_a_full_disk_says_the_disk_is_full(how: str, tmp_path: Path) -> None:
    folder = tmp_path / uuid.uuid4().hex[:8]
    error = run_full("open_full", how, folder)
    assert error.get("type") == "JournalError", error  # (not "not a lionexec journal")
    assert "disk full" in error["message"], error
    assert str(folder / "journal.db") in error["message"]
    assert issubclass(JournalError, Exception)


# -- damaged rows ------------------------------------------------------------------------------


def delete_messages(path: Path, *positions: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.executemany("DELETE FROM lionexec_messages WHERE seq = ?", [(p,) for p in positions])
    conn.close()


async def test_a_message_missing_from_a_branch_is_named(tmp_path: Path) -> None:
    """A position removed outside lionexec: recovery wrote its answer where a message already
    was, and failed with an error about "another writer" wrapped in an exception group."""
    from lionexec.conversation import Instruction
    from lionexec.tools import Tool

    def work(n: int) -> int:
        return n * 2

    path = tmp_path / "journal.db"
    async with SqliteJournal(path) as journal:
        branch = await journal.branch()
        branch.register_tools([Tool.from_function(work, effect="unsafe")])
        branch.messages.add_message(Instruction(content="hi"))
        async with branch:
            await branch.act([{"function": "work", "arguments": {"n": i}} for i in range(3)])
    delete_messages(path, 0, 4)  # the instruction, and the response of the first call
    async with SqliteJournal(path) as journal:
        with pytest.raises(
            JournalError, match=rf"branch {branch.id} has no message at position 0"
        ):
            await journal.history(branch.id)
        with pytest.raises(
            JournalError, match=r"no message at position 0 \(the next one stored is at 1\)"
        ):
            await journal.recover([Tool.from_function(work, effect="unsafe")])


async def test_a_branch_recovery_cannot_commit_fails_with_the_journal_error(
    tmp_path: Path,
) -> None:
    """Another writer took the branch's next position while recovery ran a reconcile hook: the
    journal's error, as itself (not an exception group)."""
    from lionexec.conversation import Instruction
    from lionexec.journal import Applied
    from lionexec.tools import Tool

    path = tmp_path / "journal.db"
    dying: list[SqliteJournal] = []
    intruder: list[SqliteJournal] = []

    async def work(n: int) -> int:
        if dying:
            await dying.pop().aclose()  # the process "dies" in the tool
        return n * 2

    async def reconcile(ctx: object) -> Applied:
        # a second writer of the branch, meanwhile
        other = intruder[0]
        branch = await other.branch(branch_id)
        branch.messages.add_message(Instruction(content="me too"))
        await other.flush()
        return Applied(14)

    def tool() -> Tool:
        return Tool.from_function(work, effect="unsafe", reconcile=reconcile)

    journal = SqliteJournal(path)
    await journal.open()
    dying.append(journal)
    branch = await journal.branch()
    branch_id = branch.id
    branch.register_tools([tool()])
    with pytest.raises(BaseException):  # noqa: B017 (the journal went away mid-call)
        async with branch:
            await branch.act({"function": "work", "arguments": {"n": 7}})
    async with SqliteJournal(path) as other, SqliteJournal(path) as recovering:
        intruder.append(other)
        with pytest.raises(JournalError, match="another writer holds this branch"):
            await recovering.recover([tool()])
