"""OpenTelemetry traces of tool calls and model calls (the ``otel`` extra).

:class:`OtelSink` makes one span per tool call a branch records, and one per model call a
:class:`~lionexec.models.Model` makes, following the OpenTelemetry semantic conventions for
generative AI:

* a tool call is an ``execute_tool {tool}`` span (kind ``INTERNAL``) with
  ``gen_ai.operation.name`` ``"execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``
  and ``gen_ai.tool.type`` ``"function"``;
* a model call is a ``chat {model}`` span (kind ``CLIENT``) with ``gen_ai.operation.name``
  ``"chat"``, ``gen_ai.provider.name`` (``"openai"`` or ``"anthropic"``),
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.response.id``,
  ``gen_ai.response.finish_reasons``, ``gen_ai.usage.input_tokens`` and
  ``gen_ai.usage.output_tokens``, ``server.address`` and ``server.port``;
* the outcome is the span's status: left unset for a call that completed, ``ERROR`` with an
  ``error.type`` attribute otherwise (the exception's type name for a failed call, the
  outcome for one that was ``denied``, ``invalid``, ``timed_out`` or ``cancelled``), and the
  error's message as the status description;
* lionexec's own attributes: ``lionexec.call.status`` (the outcome), ``lionexec.call.attempts``,
  ``lionexec.event.status``, ``lionexec.branch.id`` (the branch's id) for a
  tool call; ``lionexec.model_call.status`` and ``lionexec.model_call.attempts`` for a model
  call.

Tool arguments, outputs and message contents are never put on spans: they may hold secrets.

Each span is a child of the span that was current in the caller when the call was recorded
(the caller of ``act()``; a call of a concurrent batch inherits its caller's context), and
its start and end are the recorded times (a tool call: its request's and its response's
``created_at``; a model call: the call's ``created_at``, and when its caller stopped waiting).

The sink is fed from the evidence seam: give it to a branch (``Branch(sinks=[sink])``) and,
for model calls, to a model (``Model(..., observers=[sink.observe_model_call])``). It never
blocks the trio thread: spans are built and ended (so handed to the tracer provider's span
processors and exporters) in a worker thread of its own, started when there is work and
ended when there is none for a while.

Only this package imports ``opentelemetry``; install it with ``pip install 'lionexec[otel]'``
(the API, and the SDK to configure a tracer provider and an exporter with). This module needs
the API only; :mod:`lionexec.otel.jsonl` (spans written to a file as JSON lines) needs the SDK.
"""

from .._public import publish as _publish
from ._sink import INSTRUMENTATION_NAME as INSTRUMENTATION_NAME
from ._sink import OtelSink as OtelSink

__all__ = ["INSTRUMENTATION_NAME", "OtelSink"]

_publish(__name__, globals())
