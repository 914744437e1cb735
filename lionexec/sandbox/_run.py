"""``run_command``: an argv under bubblewrap, limited, its output capped, its processes killed.

The command is started as ``bwrap <profile> -- python -I -S -c <shim> <fd> <limits> -- argv``.
The shim is a few lines of Python run by this interpreter inside the sandbox: it writes
``started`` to a pipe only this run holds (so a failure of bubblewrap itself, before anything
ran, is told apart from the command's own failure), forks, sets the resource limits in the
child and ``exec``\\ s the command there, waits for it and writes its exact wait status to the
pipe (so a limit's signal is reported as that signal, not as an exit code that a command could
also have chosen). Limits are set in the child only: nothing of the shim counts against them,
and no ``preexec_fn`` runs in this (threaded) process.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

import attrs
import trio

from lionexec.errors import ValidationError

from ._profile import Profile, SandboxUnavailableError
from ._seccomp import filter_program

__all__ = ["SandboxResult", "bwrap_arguments", "run_command"]

logger = logging.getLogger("lionexec.sandbox")

#: The most argv a command may be given, in bytes (the kernel's own limit is near 2 MiB).
MAX_ARGV_BYTES: Final = 256 << 10
#: The interpreter that runs the shim.
_INTERPRETER: Final = os.path.realpath(sys.executable)
#: How long killing a command's processes may take before cleanup gives up waiting.
_REAP_SECONDS: Final = 5.0

_SHIM: Final = """\
import os, resource, signal, sys
status = int(sys.argv[1])
os.set_inheritable(status, False)
limits = [item.split("=") for item in sys.argv[2].split(",") if item]
argv = sys.argv[4:]  # after "--"
os.write(status, b"started\\n")
pid = os.fork()
if pid == 0:
    try:
        os.close(status)
        # Python ignores these, and exec keeps an ignored signal ignored: a command would
        # not stop at its file size limit or a closed pipe as it does everywhere else.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        for name, value in limits:
            kind = getattr(resource, "RLIMIT_" + name)
            hard = resource.getrlimit(kind)[1]
            soft = int(value)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            # CPU: SIGXCPU at the soft limit, SIGKILL a second later if it is caught
            top = soft + 1 if name == "CPU" else soft
            if hard != resource.RLIM_INFINITY:
                top = min(top, hard)
            resource.setrlimit(kind, (soft, top))
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"lionexec sandbox: cannot run {argv[0]!r}: {exc.strerror}\\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    except BaseException as exc:
        os.write(2, f"lionexec sandbox: {exc!r}\\n".encode())
        os._exit(126)
_, raw = os.waitpid(pid, 0)
os.write(status, b"status %d\\n" % raw)
if os.WIFSIGNALED(raw):
    os._exit(128 + os.WTERMSIG(raw))
os._exit(os.waitstatus_to_exitcode(raw))
"""

#: Where bubblewrap's report names the sandbox's first process.
_CHILD_PID: Final = re.compile(rb'"child-pid"\s*:\s*(\d+)')
#: The signals a resource limit sends, and the profile field that set it.
_LIMIT_SIGNALS: Final[dict[int, str]] = {
    signal.SIGXCPU: "cpu_seconds",
    signal.SIGXFSZ: "file_size_bytes",
}


@attrs.frozen(kw_only=True)
class SandboxResult:
    """What one sandboxed run did.

    Attributes:
        argv: the command as run.
        exit_code: its exit status, or ``None`` if a signal ended it (or it was killed).
        signal: the signal that ended it, if one did (``SIGXCPU``: its CPU limit,
            ``SIGXFSZ``: its file size limit, ``SIGKILL``: the memory or CPU hard limit, or
            its timeout).
        stdout: the first :attr:`Profile.output_limit` bytes of its standard output.
        stderr: the same of its standard error.
        stdout_truncated: whether more standard output was written (and dropped).
        stderr_truncated: whether more standard error was written (and dropped).
        timed_out: whether its :attr:`Profile.timeout` ran out (it was killed then).
        confined: whether it ran under bubblewrap (``False`` only for ``confinement="none"``).
        duration: seconds of wall-clock time it ran.
    """

    argv: tuple[str, ...]
    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    confined: bool
    duration: float

    @property
    def ok(self) -> bool:
        """Whether it exited with status 0 in time."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def limit(self) -> str | None:
        """The :class:`Profile` field whose limit ended it, if one recognizably did
        (``"timeout"``, ``"cpu_seconds"``, ``"file_size_bytes"``)."""
        if self.timed_out:
            return "timeout"
        return None if self.signal is None else _LIMIT_SIGNALS.get(self.signal)

    def describe(self) -> str:
        """How it ended, in words: ``exited with status 1``, ``killed by SIGXCPU (its
        cpu_seconds limit)``, ``timed out``."""
        if self.timed_out:
            return "timed out (its timeout limit) and was killed"
        if self.signal is not None:
            name = _signal_name(self.signal)
            limit = self.limit
            return f"was killed by {name}" + (f" (its {limit} limit)" if limit else "")
        code = self.exit_code
        described = f"exited with status {code}"
        # a shell reports a child's death by signal N as status 128 + N
        if code is not None and (limit := _LIMIT_SIGNALS.get(code - 128)) is not None:
            name = _signal_name(code - 128)
            described += f" (128 + {name}: a process it ran hit its {limit} limit, it seems)"
        return described


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _checked_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        raise ValidationError(
            f"argv is a list of strings (program first), not {type(argv).__name__}; "
            "a shell line is run as ['/bin/sh', '-c', line], only when asked",
            field="argv",
        )
    items = tuple(argv)
    if not items:
        raise ValidationError("argv is empty: name the program to run first", field="argv")
    size = 0
    for item in items:
        if not isinstance(item, str) or "\x00" in item:
            raise ValidationError(
                f"argv holds {item!r:.80}: each item is a string without NUL", field="argv"
            )
        size += len(item.encode("utf-8", "surrogateescape")) + 1
    if size > MAX_ARGV_BYTES:
        raise ValidationError(
            f"argv is {size} bytes long: at most {MAX_ARGV_BYTES}; pass large input in a file "
            "inside a writable directory",
            field="argv",
        )
    if not items[0]:
        raise ValidationError("argv[0] is empty: name the program to run", field="argv")
    return items


def _limits(profile: Profile) -> str:
    pairs = (
        ("CPU", profile.cpu_seconds),
        ("AS", profile.memory_bytes),
        ("FSIZE", profile.file_size_bytes),
        ("NPROC", profile.processes),
    )
    return ",".join(f"{name}={value}" for name, value in pairs if value is not None)


def _environment(profile: Profile) -> dict[str, str]:
    env = dict(profile.env)
    for name in profile.inherit_env:
        value = os.environ.get(name)
        if value is not None:
            env[name] = value
    return env


def _unavailable(profile: Profile, what: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"the sandbox is unavailable: {what}; nothing ran. Install bubblewrap "
        "(Debian/Ubuntu: apt-get install bubblewrap) and allow unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; in a "
        "container, a seccomp/AppArmor profile that permits them), or point "
        f"Profile(bwrap=...) at it (now {profile.bwrap!r}). Running unconfined needs "
        "Profile(confinement='none'), named on purpose"
    )


def _existing_dirs(paths: tuple[str, ...], what: str) -> list[str]:
    found = []
    for path in paths:
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            raise ValidationError(
                f"the {what} directory {path!r} does not exist (or is not a directory): "
                "create it before the command runs, or leave it out of the profile",
                field=what,
            )
        found.append(real)
    return found


def bwrap_arguments(
    profile: Profile, status_fd: int, info_fd: int, seccomp_fd: int | None
) -> list[str]:
    """The bubblewrap command line of *profile*, up to and including ``--`` and the shim.

    Raises :class:`~lionexec.errors.ValidationError` naming a writable directory that does
    not exist. Reads the file system (which paths exist); does not run anything.
    """
    args = [
        profile.bwrap,
        "--die-with-parent",
        "--info-fd",
        str(info_fd),
        "--new-session",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    if not profile.network:
        args.append("--unshare-net")
    base = os.path.realpath(sys.base_prefix)
    if _within(base, "/tmp"):  # the shim's interpreter lives under /tmp: visible, read-only
        args += ["--ro-bind", base, base]
    writable = _existing_dirs(profile.writable, "writable")
    for path in writable:
        args += ["--bind", path, path]
    for path in writable:
        for relative in profile.protected:
            inside = os.path.join(path, relative)
            if os.path.lexists(inside):
                # resolved: a protected path that is a symlink protects what it points at
                real = os.path.realpath(inside)
                args += ["--ro-bind", real, real]
    for path in profile.hidden:
        real = os.path.realpath(path)
        if os.path.isdir(real):
            args += ["--tmpfs", real, "--remount-ro", real]
        elif os.path.exists(real):
            args += ["--ro-bind", "/dev/null", real]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", profile.working_directory(), "--clearenv"]
    for name, value in sorted(_environment(profile).items()):
        args += ["--setenv", name, value]
    return [*args, "--", *_shim(status_fd, profile)]


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _shim(status_fd: int, profile: Profile) -> list[str]:
    # The interpreter itself, not a virtual environment's link to it: the shim needs only the
    # standard library, and a link may live where the sandbox does not show it.
    return [_INTERPRETER, "-I", "-S", "-c", _SHIM, str(status_fd), _limits(profile), "--"]


async def run_command(argv: Sequence[str], profile: Profile) -> SandboxResult:
    """Run *argv* (no shell: ``["/bin/sh", "-c", line]`` when one is wanted) under *profile*.

    Blocks until the command exits, its timeout runs out or this task is cancelled. On a
    timeout the command's processes are killed and the result says ``timed_out``. On
    cancellation they are killed too (bubblewrap's process group is sent ``SIGKILL``; the
    sandbox's PID namespace ends with it, taking every descendant along), reaped within a
    bounded, shielded wait, and :class:`trio.Cancelled` propagates.

    Raises:
        ValidationError: *argv* is empty, not a list of strings, holds NUL or is too long;
            a writable directory does not exist.
        SandboxUnavailableError: bubblewrap is missing or could not set the sandbox up
            (nothing ran).
    """
    items = _checked_argv(argv)
    confined = profile.confinement == "bubblewrap"
    if confined and sys.platform != "linux":
        raise _unavailable(profile, f"bubblewrap needs Linux, this is {sys.platform}")
    if confined and not os.access(profile.bwrap, os.X_OK):
        raise _unavailable(profile, f"no bubblewrap executable at {profile.bwrap!r}")
    seccomp = None
    if confined and not profile.unix_sockets:
        seccomp = filter_program()
        if seccomp is None:
            raise _unavailable(
                profile,
                f"no seccomp filter is written for this machine ({platform.machine()}); "
                "Profile(unix_sockets=True) runs without one (Unix sockets reachable)",
            )
    pipe = _StatusPipe(seccomp)
    try:
        if confined:
            command = [*bwrap_arguments(profile, pipe.write_end, pipe.info_end, pipe.seccomp)]
            command += items
            env: dict[str, str] = {}
            cwd = None
        else:
            logger.warning(
                "running %r UNCONFINED (Profile(confinement='none')): it can read, write and "
                "reach whatever this process can",
                items[0],
            )
            command = [*_shim(pipe.write_end, profile), *items]
            env = _environment(profile)
            cwd = profile.working_directory()
        started = time.monotonic()
        run = await _supervise(command, env, cwd, pipe, profile, confined)
    finally:
        pipe.close()
    duration = time.monotonic() - started
    if "started" not in run.status:  # bubblewrap (or the shim) failed before the command
        said = bytes(run.stderr).decode("utf-8", "replace").strip()[:2000]
        why = said or f"exit status {run.returncode}"
        if run.timed_out:
            why = "it had not started the command when the timeout ran out"
        starter = "bubblewrap could not set the sandbox up" if confined else "the shim failed"
        raise _unavailable(profile, f"{starter} ({why})")
    exit_code, signum = _ending(run.status, run.returncode)
    return SandboxResult(
        argv=items,
        exit_code=None if run.timed_out else exit_code,
        signal=signal.SIGKILL if run.timed_out and signum is None else signum,
        stdout=bytes(run.stdout),
        stderr=bytes(run.stderr),
        stdout_truncated=run.stdout_truncated,
        stderr_truncated=run.stderr_truncated,
        timed_out=run.timed_out,
        confined=confined,
        duration=duration,
    )


def _ending(status: str, returncode: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) from the shim's report, else from the process's return code."""
    for line in status.splitlines():
        if line.startswith("status ") and line[7:].isdigit():
            raw = int(line[7:])
            if os.WIFSIGNALED(raw):
                return None, os.WTERMSIG(raw)
            return os.waitstatus_to_exitcode(raw), None
    if returncode is None:
        return None, signal.SIGKILL
    if returncode < 0:
        return None, -returncode
    return returncode, None


class _StatusPipe:
    """The pipe the shim and bubblewrap report on, and the seccomp filter bubblewrap reads;
    each descriptor closed exactly once (a second ``close`` of a number could close a
    descriptor another thread opened meanwhile)."""

    def __init__(self, seccomp: bytes | None) -> None:
        self.read_end, self.write_end = os.pipe()
        # bubblewrap's own end: it closes the descriptor it reports on before the command
        # starts, so the shim's must be another one
        self.info_end = os.dup(self.write_end)
        self._open = {self.read_end, self.write_end, self.info_end}
        self.seccomp: int | None = None
        if seccomp is not None:
            self.seccomp = os.memfd_create("lionexec-seccomp")
            self._open.add(self.seccomp)
            os.write(self.seccomp, seccomp)
            os.lseek(self.seccomp, 0, os.SEEK_SET)

    def passed(self, confined: bool) -> tuple[int, ...]:
        """The descriptors the started process needs."""
        if not confined:
            return (self.write_end,)
        extra = () if self.seccomp is None else (self.seccomp,)
        return (self.write_end, self.info_end, *extra)

    def close_write(self) -> None:
        self._close(self.write_end)
        self._close(self.info_end)
        if self.seccomp is not None:
            self._close(self.seccomp)

    def close(self) -> None:
        self.close_write()
        self._close(self.read_end)

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)


@attrs.define
class _Run:
    stdout: bytearray = attrs.Factory(bytearray)
    stderr: bytearray = attrs.Factory(bytearray)
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    status: str = ""
    returncode: int | None = None
    timed_out: bool = False


def _spawn(
    command: list[str], env: dict[str, str], cwd: str | None, fds: tuple[int, ...]
) -> subprocess.Popen[bytes]:
    """Start *command* on this thread, the trio thread.

    Not in a worker thread, as :func:`trio.lowlevel.open_process` does: bubblewrap's
    ``--die-with-parent`` follows the death of the parent *thread* (Linux's
    ``PR_SET_PDEATHSIG``), and trio retires idle worker threads after seconds, which would
    kill every command that outlived one. Forking takes milliseconds.
    """
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        env=env,
        cwd=cwd,
        pass_fds=fds,
        start_new_session=True,
    )


def _take(stream: Any) -> trio.lowlevel.FdStream:
    """A trio stream over a copy of *stream*'s descriptor; *stream* is closed."""
    copy = os.dup(stream.fileno())
    stream.close()
    return trio.lowlevel.FdStream(copy)


async def _supervise(
    command: list[str],
    env: dict[str, str],
    cwd: str | None,
    pipe: _StatusPipe,
    profile: Profile,
    confined: bool,
) -> _Run:
    try:
        process = _spawn(command, env, cwd, pipe.passed(confined))
    except OSError as exc:
        raise _unavailable(profile, f"{command[0]!r} could not be started: {exc}") from None
    pipe.close_write()  # only the process holds it now: end of file once it is gone
    # Waited for without reaping it, so that its id (its process group's) cannot be reused
    # while what is left of the group is killed.
    try:
        pidfd = os.pidfd_open(process.pid)
    except (OSError, AttributeError) as exc:  # before Linux 5.3, or not Linux
        _kill_group(process.pid)
        process.communicate()  # killed: at once; its pipes closed
        raise _unavailable(profile, f"no pidfd_open() here ({exc}): Linux 5.3 or newer") from None
    streams = {"stdout": _take(process.stdout), "stderr": _take(process.stderr)}
    # its own descriptor: the stream closes it, the pipe closes the original
    status_stream = trio.lowlevel.FdStream(os.dup(pipe.read_end))
    limit = profile.output_limit
    run = _Run()
    status = bytearray()
    # A descriptor of the sandbox's first process (bubblewrap's, pid 1 in the sandbox): it
    # ends only once every process of the sandbox has ended, which this waits for.
    inits: list[int | None] = []

    async def drain(name: str) -> None:
        kept: bytearray = getattr(run, name)
        while chunk := await streams[name].receive_some(65536):
            room = limit - len(kept)
            if len(chunk) > room:
                setattr(run, f"{name}_truncated", True)
            if room > 0:
                kept += chunk[:room]

    async def read_status() -> None:
        while chunk := await status_stream.receive_some(4096):
            if len(status) < 4096:  # bubblewrap's info and the shim's two short lines
                status.extend(chunk)
            if not inits and (found := _CHILD_PID.search(status)):
                inits.append(_pidfd(int(found[1])))

    def reap() -> None:
        # What is left of its group is the command's leftovers (none under bubblewrap,
        # whose PID namespace ends with it): killed, so that the pipes reach their end.
        _kill_group(process.pid)
        process.wait()  # it has exited: at once

    timeout = profile.timeout if profile.timeout is not None else math.inf
    try:
        with trio.move_on_after(timeout):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, "stdout")
                nursery.start_soon(drain, "stderr")
                nursery.start_soon(read_status)
                await trio.lowlevel.wait_readable(pidfd)
                reap()
        run.timed_out = process.returncode is None
    finally:
        if process.returncode is None:
            _kill_group(process.pid)  # not reaped yet: the group id is still this one's
        # bounded: SIGKILL cannot be caught; the waits only see the processes end
        with trio.move_on_after(_REAP_SECONDS) as cleanup:
            cleanup.shield = True
            if process.returncode is None:
                await trio.lowlevel.wait_readable(pidfd)
                reap()
            init = inits[0] if inits else None
            if init is not None:
                await trio.lowlevel.wait_readable(init)
        for fd in (pidfd, *(init for init in inits if init is not None)):
            os.close(fd)
        with trio.CancelScope(shield=True):
            for stream in (*streams.values(), status_stream):
                await stream.aclose()
    run.status = status.decode("ascii", "replace")
    run.returncode = process.returncode
    return run


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process *pid* ends, or ``None`` if it has
    ended already."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def _kill_group(pid: int) -> None:
    """``SIGKILL`` to the process group *pid* leads (bubblewrap's, or the shim's)."""
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pid, signal.SIGKILL)
