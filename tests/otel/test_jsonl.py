"""Spans written as JSON lines: ``lionexec.otel.jsonl`` with the real OpenTelemetry SDK.

A real branch feeds an :class:`OtelSink` whose tracer provider is
:func:`open_trace_file`'s (a ``BatchSpanProcessor`` and the JSON lines exporter); the file is
read back with a JSON parser that refuses anything but strict JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from lionexec.act import Branch
from lionexec.otel import INSTRUMENTATION_NAME, OtelSink
from lionexec.otel.jsonl import MAX_ATTRIBUTE_LENGTH, JsonLinesSpanExporter, open_trace_file

pytestmark = pytest.mark.timeout(30)


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def fail() -> None:
    """Always raise."""
    raise RuntimeError("kaput")


def _refuse(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Each line of *path* as a JSON object; NaN and infinities are refused."""
    text = path.read_bytes().decode("utf-8")  # strictly UTF-8 too
    assert text.endswith("\n")
    records = [json.loads(line, parse_constant=_refuse) for line in text.splitlines()]
    assert all(isinstance(record, dict) for record in records)
    return records


async def shut_down(provider: TracerProvider) -> None:
    await trio.to_thread.run_sync(provider.shutdown)


async def test_each_tool_call_is_one_line_with_the_genai_attributes(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    provider = open_trace_file(path)
    sink = OtelSink(tracer_provider=provider)
    tracer = provider.get_tracer("the-application")
    async with Branch(sinks=[sink]) as branch:
        branch.register_tools([add, fail])
        with tracer.start_as_current_span("handle request"):
            await branch.act(
                [
                    {"function": "add", "arguments": {"a": 2, "b": 3}, "call_id": "call_add"},
                    {"function": "fail", "arguments": {}, "call_id": "call_fail"},
                ]
            )
    await shut_down(provider)

    records = read_lines(path)
    assert len(records) == 3  # two calls and the application's span, one line each
    by_name = {record["name"]: record for record in records}
    root, added, failed = (
        by_name["handle request"],
        by_name["execute_tool add"],
        by_name["execute_tool fail"],
    )
    assert added["attributes"] == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_add",
        "gen_ai.tool.type": "function",
        "lionexec.call.status": "completed",
        "lionexec.call.attempts": 1,
        "lionexec.event.status": "completed",
        "lionexec.branch.id": str(branch.id),
    }
    assert added["kind"] == "INTERNAL"
    assert added["status"] == {"code": "UNSET", "description": None}
    assert added["scope"]["name"] == INSTRUMENTATION_NAME
    assert added["trace_id"] == root["trace_id"] and len(root["trace_id"]) == 32
    assert added["parent_span_id"] == root["span_id"] and len(root["span_id"]) == 16
    assert root["parent_span_id"] is None
    assert 0 < added["start_time_unix_nano"] <= added["end_time_unix_nano"]
    assert failed["status"] == {"code": "ERROR", "description": "kaput"}
    assert failed["attributes"]["error.type"] == "RuntimeError"
    assert failed["attributes"]["gen_ai.tool.call.id"] == "call_fail"
    assert "telemetry.sdk.name" in root["resource"]


async def test_hostile_attribute_values_still_make_strict_json_of_bounded_size(
    tmp_path: Path,
) -> None:
    path = tmp_path / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    tracer = provider.get_tracer("hostile")
    with tracer.start_as_current_span("\ud800 lone") as span:
        span.set_attribute("nan", math.nan)
        span.set_attribute("up", math.inf)
        span.set_attribute("down", [1.5, -math.inf])
        span.set_attribute("huge", "x" * 1_000_000)
        span.set_attribute("surrogate", "a\udfffb")
        span.add_event("seen", {"depth": 3})
        span.set_status(Status(StatusCode.OK))
    provider.shutdown()

    [record] = read_lines(path)
    attributes = record["attributes"]
    assert attributes["nan"] == "NaN"
    assert attributes["up"] == "Infinity"
    assert attributes["down"] == [1.5, "-Infinity"]
    assert len(attributes["huge"]) == MAX_ATTRIBUTE_LENGTH
    assert attributes["huge"].endswith("...")
    assert attributes["surrogate"] == "a\\udfffb"
    assert record["name"] == "\\ud800 lone"
    assert record["status"]["code"] == "OK"
    [event] = record["events"]
    assert (event["name"], event["attributes"]) == ("seen", {"depth": 3})
    assert len(path.read_bytes()) < 2 * MAX_ATTRIBUTE_LENGTH + 2000


def test_the_file_is_appended_to_and_closed_by_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"earlier": true}\n')
    exporter = JsonLinesSpanExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("t").start_span("one").end()
    provider.get_tracer("t").start_span("two").end()
    provider.shutdown()
    records = read_lines(path)
    assert [record.get("name") for record in records] == [None, "one", "two"]
    assert exporter.export([]) is SpanExportResult.FAILURE  # closed
    exporter.shutdown()  # idempotent


def test_a_trace_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no such directory" / "trace.jsonl"
    with pytest.raises(OSError, match=r"cannot open the trace file .*no such directory"):
        open_trace_file(missing)
