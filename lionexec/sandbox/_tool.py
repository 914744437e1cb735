"""``command_tool``: a lionexec :class:`~lionexec.tools.Tool` that runs commands sandboxed."""

from __future__ import annotations

from typing import Any, Final

import attrs

from lionexec.tools import Effect, Tool

from ._profile import CommandFailedError, Profile
from ._run import SandboxResult, run_command

__all__ = ["command_tool"]

#: How much of each output stream a failure's message quotes (its end: where errors are).
_QUOTED: Final = 2000
#: The most argv items a model may send (the byte bound is :data:`MAX_ARGV_BYTES`).
_MAX_ITEMS: Final = 4096


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _answer(result: SandboxResult) -> dict[str, Any]:
    return {
        "exit_code": result.exit_code,
        "stdout": _text(result.stdout),
        "stderr": _text(result.stderr),
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
        "confined": result.confined,
    }


def _failure(result: SandboxResult) -> CommandFailedError:
    parts = [f"command {result.argv[0]!r} {result.describe()}"]
    for name, data, truncated in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        text = _text(data)
        if text.strip():
            cut = len(text) > _QUOTED
            shown = text[-_QUOTED:] if cut else text
            note = " (its end)" if cut or truncated else ""
            parts.append(f"{name}{note}:\n{shown}")
    if not result.confined:
        parts.append("(it ran UNCONFINED: confinement='none')")
    return CommandFailedError("\n".join(parts), result)


def command_tool(
    profile: Profile,
    *,
    name: str = "run_command",
    description: str | None = None,
    shell: bool = False,
    check: bool = True,
    effect: Effect = "unsafe",
) -> Tool:
    """A tool that runs the command a model gives under *profile* (see :func:`run_command`).

    The model passes ``argv``, a list of strings, program first; no shell is involved. With
    *shell* it passes ``command``, one line, run as ``["/bin/sh", "-c", command]`` inside the
    same sandbox (the tool's subject is then that line, of kind ``"command"``, for permission
    rules; they remain hints, the sandbox is the confinement).

    A call that exits with status 0 completes with ``{"exit_code", "stdout", "stderr",
    "stdout_truncated", "stderr_truncated", "confined"}`` (the output decoded as UTF-8, bad
    bytes replaced). Any other ending fails the call with
    :class:`~lionexec.sandbox.CommandFailedError` naming it (exit status, the signal of a
    limit, the timeout) and quoting the ends of the output; with ``check=False`` a non-zero
    exit completes like status 0 (a signal or the timeout still fails). Where the sandbox
    cannot be set up the call fails with :class:`~lionexec.sandbox.SandboxUnavailableError`
    and nothing ran.

    The tool's :attr:`~lionexec.tools.Tool.approval_binding` is ``profile.digest()``: an
    approval of a call binds the profile together with the arguments, so approving a command
    under one profile does not approve it under another.

    Args:
        profile: what the commands may touch (a :class:`Profile`).
        name: the tool's name.
        description: what the model is told; by default a summary of the profile.
        shell: take one shell line (``command``) instead of an argv.
        check: a non-zero exit status fails the call.
        effect: the tool's effect class (see :data:`lionexec.tools.EFFECTS`).
    """
    if description is None:
        description = _describe(profile, shell)
    prefix: tuple[str, ...] = ("/bin/sh", "-c") if shell else ()
    parameter = "command" if shell else "argv"
    item: dict[str, Any] = (
        {"type": "string", "minLength": 1, "description": "the shell line to run"}
        if shell
        else {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "maxItems": _MAX_ITEMS,
            "description": "the program and its arguments (no shell)",
        }
    )

    async def call(**arguments: Any) -> dict[str, Any]:
        value = arguments[parameter]
        argv = [*prefix, value] if shell else value
        result = await run_command(argv, profile)
        if result.timed_out or result.exit_code is None or (check and result.exit_code != 0):
            raise _failure(result)
        return _answer(result)

    tool = Tool.from_function(
        call,
        name=name,
        description=description,
        schema={
            "type": "object",
            "properties": {parameter: item},
            "required": [parameter],
            "additionalProperties": False,
        },
        effect=effect,
        subject="command" if shell else None,
        subject_kind="command" if shell else None,
    )
    return attrs.evolve(tool, approval_binding=profile.digest())


def _describe(profile: Profile, shell: bool) -> str:
    how = "a shell line (/bin/sh -c)" if shell else "a program with its arguments (no shell)"
    writable = ", ".join(profile.writable) or "nothing but a private /tmp"
    network = "with network access" if profile.network else "without network access"
    return (
        f"Run {how} in a sandbox: it may write only to {writable}, {network}; "
        "the rest of the file system is read-only."
    )
