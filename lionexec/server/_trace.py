"""Tracing a server to a file: ``ServerConfig.trace_file`` (``serve --trace-file PATH``).

The OpenTelemetry parts (the ``otel`` extra) are imported here on first use only: the server
imports without them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from .._extras import missing_extra

if TYPE_CHECKING:
    from ..otel import OtelSink

__all__ = ["SHUTDOWN_TIMEOUT", "check_tracing", "open_trace"]

#: Seconds the server waits at shutdown for the last spans to be written.
SHUTDOWN_TIMEOUT: Final = 5.0


def check_tracing() -> None:
    """Import what tracing to a file needs: :class:`ModuleNotFoundError` naming
    ``pip install 'lionexec[otel]'`` if the OpenTelemetry SDK (or API) is missing."""
    try:
        import lionexec.otel
        import lionexec.otel.jsonl  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        raise missing_extra(exc, "otel", "tracing to a file (serve --trace-file)") from exc


@asynccontextmanager
async def open_trace(path: str) -> AsyncIterator[OtelSink]:
    """An :class:`~lionexec.otel.OtelSink` whose spans go to *path* as JSON lines, for the
    block; at its end, what was queued is written (for at most :data:`SHUTDOWN_TIMEOUT`
    seconds) and the file closed.

    Blocks (in a thread) while the file opens, and at the end while the last spans are
    written; cancellation does not cut that bounded end short (it is shielded).
    """
    from ..otel import OtelSink
    from ..otel.jsonl import open_trace_file

    provider = await trio.to_thread.run_sync(open_trace_file, path)
    sink = OtelSink(tracer_provider=provider)
    try:
        yield sink
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(SHUTDOWN_TIMEOUT):
            await sink.flush()  # the sink's queue into the provider, then the provider's
            await trio.to_thread.run_sync(provider.shutdown, abandon_on_cancel=True)
