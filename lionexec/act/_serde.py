"""cattrs hooks for the act layer, registered by :func:`lionexec.serialization.make_converter`."""

from __future__ import annotations

from cattrs.preconf.json import JsonConverter


def configure(converter: JsonConverter) -> None:
    """Register this layer's (un)structure hooks on *converter*."""
