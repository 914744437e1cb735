"""The seccomp filter a sandboxed command runs under: no new Unix sockets, no io_uring.

A read-only bind mount does not stop ``connect()`` on a Unix socket file (the kernel checks
write permission on the socket, not on the mount), so without this a command could talk to
the Docker daemon's socket, or any other, and have work done outside the sandbox. The filter
makes ``socket(AF_UNIX, ...)`` fail with ``EPERM``; ``socketpair`` (a private pair) still
works. ``io_uring_setup`` fails too: io_uring's operations (which can open sockets) bypass
seccomp. System calls of another ABI than the machine's own (32-bit x86, x32) kill the
process: their socket calls could not be inspected.

The program is classic BPF, written out here rather than compiled by libseccomp, so nothing
needs installing: eleven instructions, for x86-64 and AArch64.
"""

from __future__ import annotations

import platform
import struct
from typing import Final

__all__ = ["filter_program"]

_LD_W_ABS: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET: Final = 0x06  # BPF_RET | BPF_K

_ALLOW: Final = 0x7FFF0000  # SECCOMP_RET_ALLOW
_DENY: Final = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
_KILL: Final = 0x80000000  # SECCOMP_RET_KILL_PROCESS

_AF_UNIX: Final = 1
_IO_URING_SETUP: Final = 425  # the same on every architecture (a new system call)
_X32_BIT: Final = 0x40000000

#: machine -> (AUDIT_ARCH_*, the number of socket())
_ARCHES: Final = {
    "x86_64": (0xC000003E, 41),
    "aarch64": (0xC00000B7, 198),
}


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter for *machine* (this one by default) as ``struct sock_filter`` records, or
    ``None`` for a machine it is not written for."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, socket_nr = arch
    # offsets into struct seccomp_data: nr at 0, arch at 4, args[0] (low half) at 16
    program = [
        (_LD_W_ABS, 0, 0, 4),  # 0: the ABI
        (_JEQ, 0, 8, audit_arch),  # 1: another ABI -> kill (10)
        (_LD_W_ABS, 0, 0, 0),  # 2: the system call
        (_JGE, 6, 0, _X32_BIT),  # 3: x32 -> kill (10)
        (_JEQ, 4, 0, _IO_URING_SETUP),  # 4: -> deny (9)
        (_JEQ, 0, 2, socket_nr),  # 5: not socket() -> allow (8)
        (_LD_W_ABS, 0, 0, 16),  # 6: its domain
        (_JEQ, 1, 0, _AF_UNIX),  # 7: AF_UNIX -> deny (9), else allow (8)
        (_RET, 0, 0, _ALLOW),  # 8
        (_RET, 0, 0, _DENY),  # 9
        (_RET, 0, 0, _KILL),  # 10
    ]
    return b"".join(struct.pack("<HBBI", *instruction) for instruction in program)
