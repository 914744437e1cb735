"""What a committed transaction survives: the ``durability=`` setting of the SQL backends."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["Durability", "check_durability"]

#: ``"process"``: a committed call survives a crash of the process that wrote it (killed,
#: out of memory); a power loss or an OS crash may lose the last commits (never corrupt
#: the journal). ``"power"``: every commit is on disk (fsync'd) before it returns.
Durability = Literal["process", "power"]


def check_durability(value: object) -> Durability:
    """*value*, if it is a durability; else a :class:`ValueError` naming the choices."""
    if value not in get_args(Durability):
        raise ValueError(
            f"durability must be 'process' (survive a crash of the process) or 'power' "
            f"(survive a power loss: every commit fsync'd), not {value!r}"
        )
    return value  # type: ignore[return-value]
