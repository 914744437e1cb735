"""Random (version 4) UUIDs, made without :class:`uuid.UUID`'s checking constructor.

``uuid.uuid4()`` spends more time in ``UUID.__init__`` validating its argument than in
drawing the random bytes; lionexec makes three ids per tool call, so it builds them directly:
``os.urandom`` bytes, the same RFC 4122 version and variant bits, the same immutable ``UUID``
object (set the way ``UUID.__init__`` itself sets it).

The random bytes are drawn :data:`BATCH` ids at a time (one ``os.urandom`` call, a system
call, instead of one per id) into a pool that ids are popped from. ``list.pop`` is atomic, so
threads never get the same id; a forked child empties its pool (it would otherwise repeat
its parent's next ids).
"""

from __future__ import annotations

import os
import uuid
from typing import Final

__all__ = ["BATCH", "uuid4"]

#: How many ids' worth of random bytes one ``os.urandom`` call draws.
BATCH: Final = 64

_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48))
_SET: Final = (4 << 76) | (0x8000 << 48)  # version 4; variant RFC 4122
_new = object.__new__
_set = object.__setattr__
_from_bytes = int.from_bytes
_urandom = os.urandom
_UUID = uuid.UUID
_UNKNOWN = uuid.SafeUUID.unknown

#: The next ids' 128-bit values, version and variant bits set: popped from the end.
_pool: list[int] = []
_pop = _pool.pop


def _refill() -> None:
    data = _urandom(16 * BATCH)
    _pool.extend((_from_bytes(data[i : i + 16]) & _CLEAR) | _SET for i in range(0, 16 * BATCH, 16))


os.register_at_fork(after_in_child=_pool.clear)


def uuid4() -> uuid.UUID:
    """A random UUID, equal in every respect to one from :func:`uuid.uuid4`."""
    try:
        bits = _pop()
    except IndexError:  # (another thread may refill too: each value is still popped once)
        _refill()
        bits = _pop()
    value = _new(_UUID)
    _set(value, "int", bits)
    _set(value, "is_safe", _UNKNOWN)
    return value
