"""What a profile grants and bounds: writable directories, the environment, output, CPU time,
file size, the timeout, cancellation, and a sandbox that cannot be set up."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
from pathlib import Path

import pytest
import trio

from lionexec.errors import ValidationError
from lionexec.sandbox import Profile, SandboxUnavailableError, run_command

from .conftest import Site

#: The checkout, for a child interpreter to import this lionexec.
PROJECT = str(Path(__file__).resolve().parents[2])


def profile(site: Site, bwrap: str, **options: object) -> Profile:
    return Profile(writable=[str(site.work)], bwrap=bwrap, **options)  # type: ignore[arg-type]


async def test_the_writable_directory_is_writable_and_the_working_directory(
    site: Site, bwrap: str
) -> None:
    result = await run_command(["sh", "-c", "pwd; echo made > made.txt"], profile(site, bwrap))
    assert result.ok, result
    assert result.stdout.decode().strip() == str(site.work.resolve())
    assert (site.work / "made.txt").read_text() == "made\n"


async def test_a_repository_at_the_top_of_a_writable_directory_stays_read_only(
    site: Site, bwrap: str
) -> None:
    hooks = site.work / ".git" / "hooks"
    hooks.mkdir(parents=True)
    attempts = [
        "echo 'rm -rf ~' > .git/hooks/pre-commit",
        "mv .git .git-aside && mkdir -p .git/hooks && echo x > .git/hooks/pre-commit",
        "rm -rf .git",
    ]
    for line in attempts:
        result = await run_command(["sh", "-c", line], profile(site, bwrap))
        assert result.exit_code != 0, (line, result)
    assert hooks.is_dir() and list(hooks.iterdir()) == []
    assert not (site.work / ".git-aside").exists()
    # protecting only the hooks directory can be walked around: its parent moves aside
    narrow = profile(site, bwrap, protected=[".git/hooks"])
    moved = await run_command(["sh", "-c", attempts[1]], narrow)
    assert moved.ok and (hooks / "pre-commit").exists()  # why the default is all of .git


async def test_the_environment_is_the_allowlist(
    site: Site, bwrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIONEXEC_TEST_SECRET", "hunter2")
    monkeypatch.setenv("LIONEXEC_TEST_SHARED", "shared-value")
    result = await run_command(
        ["env"], profile(site, bwrap, env={"ONLY": "this"}, inherit_env=["LIONEXEC_TEST_SHARED"])
    )
    assert result.ok
    lines = sorted(result.stdout.decode().splitlines())
    assert "ONLY=this" in lines and "LIONEXEC_TEST_SHARED=shared-value" in lines
    assert not [line for line in lines if "hunter2" in line or "SECRET" in line]
    default = await run_command(["env"], profile(site, bwrap))
    assert b"hunter2" not in default.stdout and b"PATH=" in default.stdout


async def test_output_is_capped_and_says_so(site: Site, bwrap: str) -> None:
    result = await run_command(
        ["sh", "-c", "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2"],
        profile(site, bwrap, output_limit=1000),
    )
    assert result.ok  # the rest was read and dropped: the command was not blocked
    assert (len(result.stdout), result.stdout_truncated) == (1000, True)
    assert (len(result.stderr), result.stderr_truncated) == (10, False)


async def test_the_cpu_limit_ends_the_command_with_sigxcpu(site: Site, bwrap: str) -> None:
    result = await run_command(
        ["python3", "-c", "while True: pass"], profile(site, bwrap, cpu_seconds=1)
    )
    assert (result.exit_code, result.signal, result.limit) == (None, signal.SIGXCPU, "cpu_seconds")
    assert "SIGXCPU" in result.describe() and not result.ok


async def test_the_file_size_limit_ends_the_command_with_sigxfsz(site: Site, bwrap: str) -> None:
    big = site.work / "big"
    result = await run_command(
        ["dd", "if=/dev/zero", f"of={big}", "bs=4096", "count=100"],
        profile(site, bwrap, file_size_bytes=8192),
    )
    assert (result.signal, result.limit) == (signal.SIGXFSZ, "file_size_bytes")
    assert big.stat().st_size <= 8192


async def test_the_memory_limit_refuses_a_large_allocation(site: Site, bwrap: str) -> None:
    argv = ["python3", "-c", "bytearray(1 << 30)"]
    refused = await run_command(argv, profile(site, bwrap, memory_bytes=256 << 20))
    assert refused.exit_code == 1 and b"MemoryError" in refused.stderr
    allowed = await run_command(argv, profile(site, bwrap, memory_bytes=None))  # the control
    assert allowed.ok, allowed


def unique_marker() -> str:
    """A ``sleep`` duration no other process (another run of these tests) is sleeping."""
    return f"{9000 + secrets.randbelow(1000)}.{secrets.randbelow(10**9)}"


def host_pids(marker: str) -> list[int]:
    """The host pids of the processes running ``sleep <marker>``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[:2] == [b"sleep", marker.encode()]:
                found.append(int(entry))
    return found


def gone(pid: int, marker: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return pid not in host_pids(marker)  # (reused by another process)


async def grandchild(site: Site, marker: str) -> int:
    """The host pid of the sleeping grandchild, once it runs (its namespace pid is in a
    pid file in the writable directory)."""
    with trio.fail_after(20):
        while not (site.work / "pid").exists() or not host_pids(marker):  # noqa: ASYNC110
            await trio.sleep(0.02)  # (a process outside trio: polled)
    [pid] = host_pids(marker)
    return pid


def sleeper(site: Site, marker: str) -> list[str]:
    # a grandchild in its own process group and session: only the sandbox's end takes it
    return ["sh", "-c", f"setsid sleep {marker} & echo $! > {site.work}/pid; wait"]


async def test_the_timeout_kills_every_process_of_the_command(site: Site, bwrap: str) -> None:
    marker = unique_marker()
    pids: list[int] = []

    async def watch() -> None:
        pids.append(await grandchild(site, marker))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        result = await run_command(sleeper(site, marker), profile(site, bwrap, timeout=3))
    assert result.timed_out and result.limit == "timeout" and result.exit_code is None
    [pid] = pids
    assert gone(pid, marker)


async def test_cancellation_kills_every_process_and_propagates(site: Site, bwrap: str) -> None:
    marker = unique_marker()
    pids: list[int] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_when_running() -> None:
                pids.append(await grandchild(site, marker))
                scope.cancel()

            nursery.start_soon(cancel_when_running)
            await run_command(sleeper(site, marker), profile(site, bwrap, timeout=None))
            pytest.fail("run returned although it was cancelled")
    assert scope.cancelled_caught
    [pid] = pids
    assert gone(pid, marker)  # gone before the cancellation left run()


async def test_a_missing_bwrap_is_a_clear_error_and_nothing_runs(
    site: Site, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-bwrap")
    with pytest.raises(SandboxUnavailableError) as info:
        await run_command(["touch", str(site.work / "ran")], profile(site, missing))
    message = str(info.value)
    assert missing in message and "bubblewrap" in message and "confinement='none'" in message
    assert not (site.work / "ran").exists()


async def test_a_bwrap_that_cannot_set_up_the_sandbox_is_a_clear_error(site: Site) -> None:
    # /bin/false stands where bubblewrap should be: it exits 1 before anything ran, as
    # bubblewrap does when the kernel refuses its namespaces
    with pytest.raises(SandboxUnavailableError, match="could not set the sandbox up"):
        await run_command(["touch", str(site.work / "ran")], profile(site, "/bin/false"))
    assert not (site.work / "ran").exists()


async def test_a_failing_command_is_not_mistaken_for_a_missing_sandbox(
    site: Site, bwrap: str
) -> None:
    failed = await run_command(["sh", "-c", "echo bwrap: oops >&2; exit 1"], profile(site, bwrap))
    assert failed.exit_code == 1 and failed.stderr == b"bwrap: oops\n"
    missing = await run_command(["no-such-program-here"], profile(site, bwrap))
    assert missing.exit_code == 127 and b"no-such-program-here" in missing.stderr


async def test_unconfined_runs_only_when_named_and_says_so(
    site: Site, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "written"
    with caplog.at_level(logging.WARNING, logger="lionexec.sandbox"):
        result = await run_command(
            ["sh", "-c", f"echo x > {target}"],
            Profile(confinement="none", bwrap="/nonexistent/bwrap"),
        )
    assert result.ok and not result.confined
    assert target.read_text() == "x\n"  # it could write where the sandbox would not let it
    assert any("UNCONFINED" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "argv",
    [[], "rm -rf /", ["a\x00b"], [""], ["x" * (300 << 10)], [1]],
    ids=["empty", "a string", "NUL", "empty program", "too long", "not a string"],
)
async def test_a_bad_argv_is_refused_before_anything_runs(argv: object) -> None:
    with pytest.raises(ValidationError, match="argv"):
        await run_command(argv, Profile(bwrap="/nonexistent/bwrap"))  # type: ignore[arg-type]


async def test_a_missing_writable_directory_is_named(site: Site, bwrap: str) -> None:
    missing = site.work / "not-made"
    with pytest.raises(ValidationError, match="not-made"):
        await run_command(["true"], Profile(writable=[str(missing)], bwrap=bwrap))


async def test_a_limit_hit_behind_a_shell_is_named_from_its_status(site: Site, bwrap: str) -> None:
    result = await run_command(
        ["sh", "-c", f"dd if=/dev/zero of={site.work}/big bs=4096 count=100 2>/dev/null"],
        profile(site, bwrap, file_size_bytes=8192),
    )
    assert result.exit_code == 128 + signal.SIGXFSZ and result.signal is None
    assert "SIGXFSZ" in result.describe() and "file_size_bytes" in result.describe()


async def test_a_command_outlives_the_threads_trio_retires(site: Site, bwrap: str) -> None:
    # bubblewrap dies with the thread that started it: a command started from one of trio's
    # worker threads was killed when that thread retired, after ten idle seconds
    result = await run_command(["sh", "-c", "sleep 11; echo done"], profile(site, bwrap))
    assert result.ok and result.stdout == b"done\n", result


async def test_the_sandbox_dies_with_the_process_that_ran_it(site: Site, bwrap: str) -> None:
    marker = unique_marker()
    script = (
        "import sys, trio\n"
        "from lionexec.sandbox import Profile, run_command\n"
        f"argv = ['sh', '-c', 'setsid sleep {marker} & echo $! > {site.work}/pid; wait']\n"
        f"trio.run(run_command, argv, Profile(writable=[{str(site.work)!r}], bwrap={bwrap!r}))\n"
    )
    parent = await trio.lowlevel.open_process(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": PROJECT}
    )
    try:
        pid = await grandchild(site, marker)
    finally:
        parent.kill()  # SIGKILL: no cleanup of its own runs
        await parent.wait()
    with trio.fail_after(10):
        while not gone(pid, marker):  # noqa: ASYNC110
            await trio.sleep(0.02)  # (the kernel's doing, after the parent is gone)
