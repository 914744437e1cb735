"""Where lower layers find the one converter, without importing the layer that builds it.

:mod:`lionexec.serialization` (an edge: it knows every layer's records) builds the converter
and registers it here when it is imported; ``lionexec/__init__.py`` imports it, so importing
any part of lionexec registers it. Lower layers (an event's :meth:`~lionexec.engine.Event.to_dict`,
a tool's or a policy's record) read :data:`converter` at call time, so serialization flows one
way: the edge depends on the layers, never the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, cast

if TYPE_CHECKING:
    from cattrs.preconf.json import JsonConverter

__all__ = ["converter", "register"]


class _Unregistered:
    """Stands in for the converter until :mod:`lionexec.serialization` registers it."""

    __slots__ = ()

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(
            f"converter.{name}: lionexec.serialization has not registered its converter yet "
            "(it is imported by `import lionexec`; was a record serialized while lionexec "
            "itself was still being imported?)"
        )

    def __repr__(self) -> str:
        return "<lionexec converter: not registered yet>"


#: The converter :mod:`lionexec.serialization` registered. Read it at call time
#: (``from lionexec._unstructure import converter`` inside a function, or
#: ``_unstructure.converter``), never at import time.
converter: JsonConverter = cast("JsonConverter", _Unregistered())


def register(built: Any) -> None:
    """Make *built* the converter every layer uses (called by :mod:`lionexec.serialization`)."""
    global converter
    converter = built
