"""Where lower layers find the one converter, without importing the layer that builds it.

:mod:`lionexec.serialization` (an edge: it knows every layer's records) registers how to
build the converter when it is imported; ``lionexec/__init__.py`` imports it, so importing any
part of lionexec registers it. The converter itself is built on first use (generating every
hook takes tens of milliseconds, which ``import lionexec`` should not pay). Lower layers (an
event's :meth:`~lionexec.engine.Event.to_dict`, a tool's or a policy's record) read
:data:`converter` at call time, so serialization flows one way: the edge depends on the
layers, never the reverse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from cattrs.preconf.json import JsonConverter

__all__ = ["converter", "get", "register"]

_build: Callable[[], JsonConverter] | None = None
_built: JsonConverter | None = None
_lock = threading.Lock()


def register(build: Callable[[], JsonConverter]) -> None:
    """Make *build* the way to make the converter every layer uses (called once, by
    :mod:`lionexec.serialization`). The converter is built on first use."""
    global _build
    _build = build


def get() -> JsonConverter:
    """The shared converter, built on first use; thread-safe."""
    global _built, converter
    built = _built
    if built is not None:
        return built
    with _lock:
        if _built is None:
            if _build is None:
                raise RuntimeError(
                    "lionexec.serialization has not registered its converter (it is imported "
                    "by `import lionexec`; was a record serialized while lionexec itself was "
                    "still being imported?)"
                )
            _built = _build()
            converter = _built
        return _built


class _Lazy:
    """Stands in for the converter until it is built; builds it on first attribute access."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(get(), name)

    def __repr__(self) -> str:
        return "<lionexec converter, built on first use>"


#: The shared converter. Read it at call time (``_unstructure.converter``, or
#: ``from lionexec._unstructure import converter`` inside a function): until first use it is
#: a stand-in that builds the converter and forwards to it; afterwards it is the converter.
converter: JsonConverter = cast("JsonConverter", _Lazy())
