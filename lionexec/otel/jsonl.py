"""Spans written to a file as JSON lines (the ``otel`` extra, with the OpenTelemetry SDK).

:class:`JsonLinesSpanExporter` is an SDK span exporter that appends each finished span to a
file as one line of strict JSON (no ``NaN``, no lone surrogates; see :func:`span_record` for
its fields). :func:`open_trace_file` makes a tracer provider that exports through one, behind
a ``BatchSpanProcessor``: ending a span only queues it (a full queue drops it, it never
waits), and the processor's own thread writes the file. ``lionexec serve --trace-file PATH``
traces with one (see ``docs/tracing.md``).

Needs ``opentelemetry-sdk``, which the ``otel`` extra installs: without it, importing this
module raises :class:`ModuleNotFoundError` naming ``pip install 'lionexec[otel]'``.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Final

from lionexec._extras import missing_extra

try:
    from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
except ModuleNotFoundError as exc:
    raise missing_extra(exc, "otel", "lionexec.otel.jsonl (the OpenTelemetry SDK)") from exc

__all__ = ["MAX_ATTRIBUTE_LENGTH", "JsonLinesSpanExporter", "open_trace_file", "span_record"]

#: Characters an attribute string keeps (in :func:`open_trace_file`'s span limits, and when
#: written): a span that carries a huge value still makes a line of bounded size.
MAX_ATTRIBUTE_LENGTH: Final = 4096
#: Spans :func:`open_trace_file`'s processor queues before it drops new ones.
_MAX_QUEUE: Final = 2048

_AttributeValue = str | bool | int | float | list[str | bool | int | float | None] | None


def _string(value: str) -> str:
    if len(value) > MAX_ATTRIBUTE_LENGTH:
        value = value[: MAX_ATTRIBUTE_LENGTH - 3] + "..."
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 (nor strict JSON) can carry it
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _scalar(value: object) -> str | bool | int | float | None:
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        # strict JSON has no NaN nor infinities: OTLP's JSON spells them as strings
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, str):
        return _string(value)
    return None if value is None else _string(repr(value))


def _value(value: object) -> _AttributeValue:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_scalar(item) for item in value]
    return _scalar(value)


def _attributes(attributes: Mapping[str, object] | None) -> dict[str, _AttributeValue]:
    return {_string(str(key)): _value(value) for key, value in (attributes or {}).items()}


def _hex(number: int, width: int) -> str:
    return format(number, f"0{width}x")


def span_record(span: ReadableSpan) -> dict[str, object]:
    """The JSON object :class:`JsonLinesSpanExporter` writes for *span*.

    Its fields: ``name``; ``trace_id`` (32 hex digits), ``span_id`` (16) and
    ``parent_span_id`` (16, or ``null`` for a root span); ``kind`` (``"INTERNAL"``,
    ``"CLIENT"``, ...); ``start_time_unix_nano`` and ``end_time_unix_nano`` (integers);
    ``status``: ``{"code": "UNSET" | "OK" | "ERROR", "description": ...}``; ``attributes``;
    ``events`` (each ``name``, ``time_unix_nano``, ``attributes``); ``links`` (each
    ``trace_id``, ``span_id``, ``attributes``); ``resource`` (its attributes) and ``scope``
    (``name``, ``version``: the instrumentation, ``"lionexec"`` for the spans of
    :class:`~lionexec.otel.OtelSink`).

    Attribute values are JSON scalars or arrays; a non-finite float is written as OTLP's JSON
    writes it (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), and a string is cut to
    :data:`MAX_ATTRIBUTE_LENGTH` characters.
    """
    context = span.get_span_context()
    parent = span.parent
    scope = span.instrumentation_scope
    status = span.status
    return {
        "name": _string(span.name),
        "trace_id": _hex(context.trace_id, 32) if context is not None else None,
        "span_id": _hex(context.span_id, 16) if context is not None else None,
        "parent_span_id": _hex(parent.span_id, 16) if parent is not None else None,
        "kind": span.kind.name,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": {
            "code": status.status_code.name,
            "description": None if status.description is None else _string(status.description),
        },
        "attributes": _attributes(span.attributes),
        "events": [
            {
                "name": _string(event.name),
                "time_unix_nano": event.timestamp,
                "attributes": _attributes(event.attributes),
            }
            for event in span.events
        ],
        "links": [
            {
                "trace_id": _hex(link.context.trace_id, 32),
                "span_id": _hex(link.context.span_id, 16),
                "attributes": _attributes(link.attributes),
            }
            for link in span.links
        ],
        "resource": _attributes(span.resource.attributes),
        "scope": {
            "name": None if scope is None else _string(scope.name),
            "version": None if scope is None or scope.version is None else scope.version,
        },
    }


class JsonLinesSpanExporter(SpanExporter):
    """An OpenTelemetry SDK span exporter that appends each span to *path* as one line of
    strict JSON (:func:`span_record`), in UTF-8.

    The file is opened (created if missing, appended to otherwise) when the exporter is made:
    :class:`OSError` then names the path. :meth:`export` blocks while it writes and flushes
    one batch; call it from a span processor's thread (a ``BatchSpanProcessor``, as
    :func:`open_trace_file` does), never from the trio thread. It is thread-safe. A batch
    that cannot be written (a full disk) is reported ``FAILURE`` and counted in
    :attr:`failed`; so is a span that cannot be encoded, which does not stop the others.

    Args:
        path: the file to append to.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._file: IO[bytes] | None = open(self.path, "ab")  # noqa: SIM115 (closed by shutdown)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot open the trace file {self.path!r}: {exc.strerror}"
            ) from exc
        self._lock = threading.Lock()
        #: Spans that were not written (could not be encoded, or the write failed).
        self.failed = 0

    def __repr__(self) -> str:
        return f"JsonLinesSpanExporter({self.path!r})"

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append one line per span and flush the file. Blocks while it writes."""
        lines = []
        for span in spans:
            try:
                record = span_record(span)
                lines.append(
                    json.dumps(record, allow_nan=False, separators=(",", ":")).encode() + b"\n"
                )
            except (ValueError, TypeError):
                self.failed += 1
        with self._lock:
            if self._file is None:
                self.failed += len(lines)
                return SpanExportResult.FAILURE
            try:
                self._file.write(b"".join(lines))
                self._file.flush()
            except OSError:
                self.failed += len(lines)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if len(lines) == len(spans) else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered: every :meth:`export` flushes. Returns ``True``."""
        return True

    def shutdown(self) -> None:
        """Close the file; later exports fail. Idempotent."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def open_trace_file(path: str | os.PathLike[str]) -> TracerProvider:
    """A tracer provider that writes every finished span to *path* as a line of JSON.

    Its span processor is a ``BatchSpanProcessor`` around a :class:`JsonLinesSpanExporter`:
    ending a span puts it on a bounded queue (2,048 spans; when full, new spans are dropped,
    never waited for) and the processor's thread writes them. Attribute strings are limited
    to :data:`MAX_ATTRIBUTE_LENGTH` characters. Shut the provider down when done
    (``provider.shutdown()``, which blocks while the last spans are written: run it in a
    thread); it is not shut down at interpreter exit on its own.

    Blocks while it opens the file; :class:`OSError` naming *path* if it cannot.
    """
    exporter = JsonLinesSpanExporter(path)
    provider = TracerProvider(
        span_limits=SpanLimits(max_attribute_length=MAX_ATTRIBUTE_LENGTH),
        shutdown_on_exit=False,
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=_MAX_QUEUE))
    return provider
