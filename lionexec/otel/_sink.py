"""The OpenTelemetry sink (:class:`OtelSink`); :mod:`lionexec.otel` is its public home."""

from __future__ import annotations

import contextvars
import queue
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import trio

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"{exc}: lionexec.otel needs the otel extra: pip install 'lionexec[otel]'",
        name=exc.name,
    ) from exc

from lionexec.act.sinks.base import EvidenceRecord, WriteAhead, WriteAheadReply
from lionexec.conversation import ActionOutcome
from lionexec.engine import TERMINAL_STATUSES, EventStatus
from lionexec.models import ModelResponse

if TYPE_CHECKING:  # (the http extra: only its type is needed here)
    from lionexec.models import ModelCall

__all__ = ["INSTRUMENTATION_NAME", "OtelSink"]

#: The instrumentation scope name of lionexec's tracer.
INSTRUMENTATION_NAME: Final = "lionexec"

#: Attribute strings longer than this (a hostile tool name, an error message) are cut.
_MAX_TEXT: Final = 1024
#: A tool or model name longer than this is cut in a span name.
_MAX_NAME: Final = 128
#: Seconds the worker thread waits for more work before it ends.
_IDLE: Final = 2.0

_PROVIDERS: Final = {"chat": "openai", "responses": "openai", "anthropic": "anthropic"}


def _text(value: object, limit: int = _MAX_TEXT) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class OtelSink:
    """An evidence sink and a model call observer that make OpenTelemetry spans (see the
    module docs for the spans and their attributes).

    One sink may serve several branches and models at once. Its :meth:`write` and
    :meth:`observe_model_call` only queue the work; a worker thread of the sink's own builds
    the spans, so a span processor that exports synchronously never holds up trio.
    :meth:`aclose` (the branch's close) and :meth:`flush` wait until what was queued has been
    handed to the tracer provider; the sink stays usable afterwards.

    Args:
        tracer_provider: the provider to trace with; ``None`` uses the global one
            (``opentelemetry.trace.set_tracer_provider``), looked up when a span is made.
    """

    #: Asks the branch for the recording task's context on each record (the caller's span).
    captures_context: Final = True

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=tracer_provider)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._pending = 0  # items queued and not yet handled (under the lock)
        #: Spans that could not be built (an exporter that raised is the SDK's to report).
        self.failed = 0

    def __repr__(self) -> str:
        return f"OtelSink(tracer={self._tracer!r})"

    # -- the evidence sink -------------------------------------------------------------------

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        """Nothing to do: a span is made when the call is recorded. A checkpoint."""
        await trio.lowlevel.checkpoint()
        return None

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        """Queue a span for each record; does not wait for them to be made. A checkpoint.

        The caller's current OpenTelemetry context is read here, on the trio thread, from
        each record's :attr:`~lionexec.act.sinks.base.EvidenceRecord.task_context`.
        """
        items = [(_parent(record.task_context), record) for record in records]
        self._put(("tools", items))
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Wait until every span queued so far has been made (the sink stays usable).

        Blocks in a worker thread; cancellation ends the wait only (the spans are still made).
        """
        await self.flush()

    # -- the model call observer -------------------------------------------------------------

    def observe_model_call(self, call: ModelCall, context: contextvars.Context) -> None:
        """A :data:`~lionexec.models.ModelCallObserver`: queue a ``chat`` span for *call*.

        Synchronous and cheap (the span is made in the sink's worker thread); the span ends
        now, when the caller's wait for the call ended.
        """
        end = time.time()
        self._put(("model", _parent(context), _ModelCallView.of(call), end))

    # -- flushing ------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Wait until every span queued before this call has been made and ended.

        Blocks in a worker thread; cancellation ends the wait only.
        """
        marker = threading.Event()
        self._put(("flush", marker))
        await trio.to_thread.run_sync(marker.wait, abandon_on_cancel=True)

    # -- the worker thread ---------------------------------------------------------------------

    def _put(self, item: tuple[Any, ...]) -> None:
        with self._lock:
            self._queue.put(item)
            self._pending += 1
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name="lionexec-otel", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=_IDLE)
            except queue.Empty:
                with self._lock:
                    if self._pending == 0:
                        self._worker = None
                        return
                continue
            try:
                self._handle(item)
            finally:
                with self._lock:
                    self._pending -= 1

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "flush":
            item[1].set()
            return
        try:
            if kind == "tools":
                for parent, record in item[1]:
                    self._tool_span(parent, record)
            else:
                self._model_span(item[1], item[2], item[3])
        except Exception:
            # A span that cannot be made must not stop the others (nor kill the thread).
            self.failed += 1

    def _tool_span(self, parent: otel_context.Context | None, record: EvidenceRecord) -> None:
        request, response = record.request, record.response
        content = response.content
        function = request.content.function
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": _text(function),
            "gen_ai.tool.call.id": _text(request.content.call_id),
            "gen_ai.tool.type": "function",
            "lionexec.call.status": content.outcome.value,
            "lionexec.call.attempts": content.attempts,
            "lionexec.event.status": content.status.value,
        }
        if isinstance(response.recipient, str):  # (a response is addressed to its branch)
            attributes["lionexec.branch.id"] = _text(response.recipient)
        span = self._tracer.start_span(
            f"execute_tool {_text(function, _MAX_NAME)}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(request.created_at),
        )
        error = content.error
        if content.outcome is not ActionOutcome.COMPLETED and error is not None:
            failed = content.outcome in (ActionOutcome.FAILED, ActionOutcome.INTERRUPTED)
            error_type = error.type if failed else content.outcome.value
            span.set_attribute("error.type", _text(error_type))
            span.set_status(Status(StatusCode.ERROR, _text(error.message)))
        span.end(end_time=max(_ns(response.created_at), _ns(request.created_at)))

    def _model_span(
        self, parent: otel_context.Context | None, view: _ModelCallView, end: float
    ) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": view.provider,
            "lionexec.model_call.status": view.status.value,
            "lionexec.model_call.attempts": view.attempts,
        }
        if view.model is not None:
            attributes["gen_ai.request.model"] = _text(view.model)
        if view.host is not None:
            attributes["server.address"] = _text(view.host)
        if view.port is not None:
            attributes["server.port"] = view.port
        response = view.response
        if response is not None:
            if response.model is not None:
                attributes["gen_ai.response.model"] = _text(response.model)
            if response.id is not None:
                attributes["gen_ai.response.id"] = _text(response.id)
            attributes["gen_ai.response.finish_reasons"] = (_text(response.finish_reason),)
            if response.usage is not None:
                attributes["gen_ai.usage.input_tokens"] = response.usage.input_tokens
                attributes["gen_ai.usage.output_tokens"] = response.usage.output_tokens
        name = "chat" if view.model is None else f"chat {_text(view.model, _MAX_NAME)}"
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(view.started),
        )
        if view.status is not EventStatus.COMPLETED:
            span.set_attribute("error.type", view.error_type)
            span.set_status(Status(StatusCode.ERROR, view.error_message))
        span.end(end_time=max(_ns(end), _ns(view.started)))


def _parent(context: contextvars.Context | None) -> otel_context.Context | None:
    """The OpenTelemetry context current in *context* (a copy of a caller's contextvars)."""
    if context is None:
        return None
    return context.run(otel_context.get_current)


class _ModelCallView:
    """What a model span needs of a call, read on the trio thread (the call is not ours)."""

    __slots__ = (
        "attempts",
        "error_message",
        "error_type",
        "host",
        "model",
        "port",
        "provider",
        "response",
        "started",
        "status",
    )

    def __init__(self) -> None:
        self.model: str | None = None
        self.host: str | None = None
        self.port: int | None = None
        self.provider = "openai"
        self.response: ModelResponse | None = None
        self.started = 0.0
        self.status = EventStatus.PENDING
        self.attempts = 0
        self.error_type = ""
        self.error_message = ""

    @classmethod
    def of(cls, call: ModelCall) -> _ModelCallView:
        view = cls()
        model = call.payload.get("model")
        view.model = model if isinstance(model, str) else None
        endpoint = call.endpoint
        view.provider = _PROVIDERS.get(endpoint.api, endpoint.api)
        try:
            url = urllib.parse.urlsplit(endpoint.base_url)
            view.host, view.port = url.hostname, url.port
        except ValueError:  # a malformed URL: the call failed on it already
            pass
        execution = call.execution
        view.started = call.created_at
        view.status = execution.status
        view.attempts = call.attempts
        if isinstance(execution.response, ModelResponse):
            view.response = execution.response
        error = execution.error
        if isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[-1]
        if view.status is EventStatus.COMPLETED:
            pass
        elif isinstance(error, BaseException):
            view.error_type = type(error).__name__
            view.error_message = _text(_message(error))
        else:  # not terminal: its caller stopped waiting while it ran in a processor
            view.error_type = (
                view.status.value if view.status in TERMINAL_STATUSES else "abandoned"
            )
            view.error_message = f"the model call ended {view.status.value}"
        return view


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return f"<unprintable {type(error).__name__}>"
