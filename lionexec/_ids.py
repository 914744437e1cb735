"""Random (version 4) UUIDs, made without :class:`uuid.UUID`'s checking constructor.

``uuid.uuid4()`` spends more time in ``UUID.__init__`` validating its argument than in
drawing the random bytes; lionexec makes three ids per tool call, so it builds them directly:
the same ``os.urandom`` bytes, the same RFC 4122 version and variant bits, the same immutable
``UUID`` object (set the way ``UUID.__init__`` itself sets it).
"""

from __future__ import annotations

import os
import uuid
from typing import Final

__all__ = ["uuid4"]

_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48))
_SET: Final = (4 << 76) | (0x8000 << 48)  # version 4; variant RFC 4122
_new = object.__new__
_set = object.__setattr__
_from_bytes = int.from_bytes
_urandom = os.urandom
_UUID = uuid.UUID
_UNKNOWN = uuid.SafeUUID.unknown


def uuid4() -> uuid.UUID:
    """A random UUID, equal in every respect to one from :func:`uuid.uuid4`."""
    value = _new(_UUID)
    _set(value, "int", (_from_bytes(_urandom(16)) & _CLEAR) | _SET)
    _set(value, "is_safe", _UNKNOWN)
    return value
