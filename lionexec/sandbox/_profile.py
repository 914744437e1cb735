"""``Profile``: what a sandboxed command may touch, and the errors of the sandbox."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

import attrs

from lionexec.errors import ConfigurationError, LionexecError

__all__ = [
    "CONFINEMENTS",
    "DEFAULT_ENV",
    "DEFAULT_PROTECTED",
    "CommandFailedError",
    "Confinement",
    "Profile",
    "SandboxUnavailableError",
]

#: How a command is confined: ``"bubblewrap"`` (the default) or ``"none"`` (the explicit
#: opt-out: the command runs unconfined, with only the limits, the reduced environment, the
#: timeout and the output cap).
Confinement: TypeAlias = Literal["bubblewrap", "none"]
#: Every confinement, the confining one first.
CONFINEMENTS: Final[tuple[Confinement, ...]] = ("bubblewrap", "none")

#: The environment a sandboxed command gets unless its profile says otherwise: a search path,
#: a UTF-8 locale, and a home and temporary directory in the private ``/tmp``.
DEFAULT_ENV: Final[Mapping[str, str]] = MappingProxyType(
    {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
    }
)

#: Paths inside each writable directory that stay read-only when they exist: a repository's
#: ``.git`` holds code that git runs later, unconfined (hooks, ``core.*`` commands of its
#: config). The whole directory, not only ``hooks`` and ``config``: a mount point cannot be
#: moved away, a directory holding one can (and be replaced by a copy with new hooks). Git
#: commands that write the repository fail inside; ``protected=()`` allows them.
DEFAULT_PROTECTED: Final[tuple[str, ...]] = (".git",)


class SandboxUnavailableError(LionexecError, RuntimeError):
    """The sandbox cannot be set up here (bubblewrap is missing, or the kernel refuses the
    namespaces it needs): nothing ran. The message names what is missing and what to do."""


class CommandFailedError(LionexecError):
    """A sandboxed command did not succeed: a non-zero exit, a signal (a resource limit hit,
    say), or its timeout. The message gives the status and the ends of its output.

    Attributes:
        result: the :class:`~lionexec.sandbox.SandboxResult` of the run.
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


def _absolute_paths(what: str, value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes):
        raise ConfigurationError(f"{what} is a list of paths, not the string {value!r}")
    paths = []
    for path in value:
        if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
            raise ConfigurationError(
                f"{what} holds {path!r}: each must be an absolute path (without NUL)"
            )
        paths.append(os.path.normpath(path))
    return tuple(dict.fromkeys(paths))


def _writable(value: Iterable[str]) -> tuple[str, ...]:
    return _absolute_paths("writable", value)


def _hidden(value: Iterable[str]) -> tuple[str, ...]:
    return _absolute_paths("hidden", value)


def _relative_paths(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes):
        raise ConfigurationError(f"protected is a list of relative paths, not {value!r}")
    paths = []
    for path in value:
        normal = os.path.normpath(path) if isinstance(path, str) else ""
        outside = not normal or os.path.isabs(normal) or normal.split(os.sep)[0] == ".."
        if outside or "\x00" in normal:
            raise ConfigurationError(
                f"protected holds {path!r}: each is a path relative to a writable directory "
                "(such as '.git/hooks'), inside it"
            )
        paths.append(normal)
    return tuple(dict.fromkeys(paths))


def _environment(value: Mapping[str, str]) -> Mapping[str, str]:
    env = dict(value)
    for key, item in env.items():
        if (
            not isinstance(key, str)
            or not key
            or "=" in key
            or "\x00" in key
            or not isinstance(item, str)
            or "\x00" in item
        ):
            raise ConfigurationError(
                f"env holds {key!r}: {item!r}: names and values are strings without NUL, "
                "names without '='"
            )
    return MappingProxyType(env)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes):
        raise ConfigurationError(f"inherit_env is a list of names, not the string {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
            raise ConfigurationError(f"inherit_env holds {name!r}: each is a variable name")
    return names


def _not_root(_: object, __: object, writable: tuple[str, ...]) -> None:
    if "/" in writable:
        raise ConfigurationError(
            "writable holds '/': a writable root confines no write; name the directories the "
            "tool writes to (or opt out by name with confinement='none')"
        )


def _positive_or_none(kind: type) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None:
            return
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not value > 0 or (kind is int and not isinstance(value, int)):  # type: ignore[operator]
            raise ConfigurationError(
                f"{attribute.name} must be a positive {kind.__name__} or None, not {value!r}"
            )
        if isinstance(value, float) and value == float("inf"):
            raise ConfigurationError(f"{attribute.name} must be finite (None for no limit)")

    return check


def _valid_confinement(_: object, __: object, value: object) -> None:
    if value not in CONFINEMENTS:
        raise ConfigurationError(
            f"confinement {value!r} must be one of {', '.join(map(repr, CONFINEMENTS))}"
        )


def _absolute_or_none(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _absolute(_, attribute, value)


def _absolute(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not os.path.isabs(value) or "\x00" in value:
        raise ConfigurationError(f"{attribute.name} must be an absolute path, not {value!r}")


@attrs.frozen(kw_only=True)
class Profile:
    """What a sandboxed command may touch and use (see :doc:`/sandbox`).

    Under bubblewrap the whole file system is visible read-only; only the *writable*
    directories can be changed (minus the *protected* paths inside them), ``/tmp`` is a
    private, empty, writable directory that disappears with the command, ``/dev`` holds only
    the basic devices, ``/proc`` shows only the command's own processes, there is no network
    unless *network* is true, and the environment is exactly *env* plus the *inherit_env*
    variables that are set. The limits apply to the command and each of its processes.

    Attributes:
        writable: absolute paths of the directories the command may write (each must exist
            when it runs; ``/`` is refused).
        protected: paths, relative to each writable directory, kept read-only inside it
            when they exist (:data:`DEFAULT_PROTECTED`).
        hidden: absolute paths the command may not read: a directory is replaced by an
            empty one, a file by an empty file (``~/.ssh``, say). Missing ones are skipped.
        network: whether the command may use the network (the host's, unfiltered);
            otherwise it has none at all, not even the loopback interface of the host.
        unix_sockets: whether the command may open Unix sockets. Otherwise a seccomp filter
            refuses ``socket(AF_UNIX)``: a socket file stays connectable on a read-only
            file system, and one (a container daemon's, say) could do work outside.
        env: the environment variables the command gets (:data:`DEFAULT_ENV`).
        inherit_env: names of variables copied from this process's environment when set
            (their values are not part of :meth:`digest`).
        cwd: the working directory; ``None``: the first writable directory, else ``/tmp``.
        cpu_seconds: CPU time per process (``RLIMIT_CPU``): the process gets ``SIGXCPU``.
        memory_bytes: address space per process (``RLIMIT_AS``).
        file_size_bytes: the largest file a process may write (``RLIMIT_FSIZE``): beyond it,
            ``SIGXFSZ``.
        processes: processes of the command's user (``RLIMIT_NPROC``; not enforced for
            root, see :doc:`/sandbox`).
        timeout: seconds of wall-clock time before the whole command is killed.
        output_limit: bytes of stdout and of stderr kept, each; the rest is read and
            dropped, and the result says it was truncated.
        confinement: ``"bubblewrap"``, or ``"none"`` to run without any confinement (named
            on purpose; every such run is logged as a warning and recorded).
        bwrap: the bubblewrap executable.
    """

    writable: tuple[str, ...] = attrs.field(default=(), converter=_writable, validator=_not_root)
    protected: tuple[str, ...] = attrs.field(default=DEFAULT_PROTECTED, converter=_relative_paths)
    hidden: tuple[str, ...] = attrs.field(default=(), converter=_hidden)
    network: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    unix_sockets: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    env: Mapping[str, str] = attrs.field(default=DEFAULT_ENV, converter=_environment, hash=False)
    inherit_env: tuple[str, ...] = attrs.field(default=(), converter=_names)
    cwd: str | None = attrs.field(default=None, validator=_absolute_or_none)
    cpu_seconds: int | None = attrs.field(default=60, validator=_positive_or_none(int))
    memory_bytes: int | None = attrs.field(default=2 << 30, validator=_positive_or_none(int))
    file_size_bytes: int | None = attrs.field(default=256 << 20, validator=_positive_or_none(int))
    processes: int | None = attrs.field(default=256, validator=_positive_or_none(int))
    timeout: float | None = attrs.field(default=120.0, validator=_positive_or_none(float))
    output_limit: int = attrs.field(default=256 << 10, validator=_positive_or_none(int))
    confinement: Confinement = attrs.field(default="bubblewrap", validator=_valid_confinement)
    bwrap: str = attrs.field(default="/usr/bin/bwrap", validator=_absolute)

    def to_dict(self) -> dict[str, Any]:
        """The profile as strict JSON values (what :meth:`digest` hashes)."""
        record = attrs.asdict(self, recurse=False)
        record["env"] = dict(sorted(self.env.items()))
        for name in ("writable", "protected", "hidden", "inherit_env"):
            record[name] = list(record[name])
        return record

    def digest(self) -> str:
        """The SHA-256 (hex) of the profile: what a sandboxed tool's approvals bind
        (:attr:`lionexec.tools.Tool.approval_binding`)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def working_directory(self) -> str:
        """The directory the command starts in (see :attr:`cwd`)."""
        if self.cwd is not None:
            return self.cwd
        return self.writable[0] if self.writable else "/tmp"
