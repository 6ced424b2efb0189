"""``plumbing.telemetry``: spans made with the OpenTelemetry SDK, read back
from its in-memory exporter: a caller's ``traceparent`` continued, an
attempt's span the child of the request's and named in the headers sent
on, the GenAI attributes of what the request left, sampling, the bounded
export queue, and ``[telemetry]``'s checks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flatgate.proxy.plumbing.accesslog import AccessLog, Entry
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.plumbing.telemetry import (
    TelemetrySection,
    Tracing,
    attempt_attributes,
    headers,
    telemetry_problems,
)

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


def tracing(**section: object) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    made = Tracing(TelemetrySection(enabled=True, **section), "flatgate-test", exporter=exporter)  # type: ignore[arg-type]
    return made, exporter


def finished(t: Tracing, exporter: InMemorySpanExporter) -> list[Any]:
    """The exported spans (``ReadableSpan``: typed loosely, for brevity)."""
    assert t.processor.force_flush(5000)
    return list(exporter.get_finished_spans())


def no_headers(name: str) -> str | None:
    return None


def entry() -> Entry:
    e = Entry()
    e.api, e.model, e.provider, e.backend = "openai-chat", "gpt-4o", "OpenAI", "b1"
    e.request_id, e.tenant, e.tokens, e.status = "r-1", "acme", 7, 200
    e.prompt_tokens = 12
    e.ttfb = 0.001
    return e


def test_a_callers_trace_is_continued_and_an_attempt_is_its_child() -> None:
    t, exporter = tracing()
    left = entry()  # made as a request begins, before its span
    asked = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    server = t.server(asked.get, "chat")
    assert trace.get_current_span() is server.span  # the task's, until it ends
    attempt = t.client("openai b1", attempt_attributes("b1", "openai", "http://b/v1/chat"))
    sent = dict(headers(attempt))
    server_ctx, attempt_ctx = server.span.get_span_context(), attempt.span.get_span_context()
    assert sent["traceparent"] == f"00-{CALLER_TRACE}-{attempt_ctx.span_id:016x}-01"
    assert sent["tracestate"] == "vendor=1"
    assert dict(headers())["traceparent"].split("-")[2] == f"{server_ctx.span_id:016x}"
    attempt.fail("UpstreamConnectError")
    attempt.end()
    time.sleep(0.005)  # past the first token (1 ms in)
    server.note(left)
    server.end()
    server.end()  # a second end does nothing
    assert trace.get_current_span() is not server.span
    spans = {s.name: s for s in finished(t, exporter)}
    s, a = spans["chat gpt-4o"], spans["openai b1"]
    assert f"{s.context.trace_id:032x}" == CALLER_TRACE
    assert f"{s.parent.span_id:016x}" == CALLER_SPAN
    assert a.parent.span_id == s.context.span_id
    assert (s.kind, a.kind) == (trace.SpanKind.SERVER, trace.SpanKind.CLIENT)
    assert dict(s.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o",
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 7,
        "flatgate.request_id": "r-1",
        "flatgate.tenant": "acme",
        "flatgate.backend": "b1",
        "flatgate.client_api": "openai-chat",
        "http.response.status_code": 200,
    }
    assert [e.name for e in s.events] == ["gen_ai.first_token"]
    assert s.start_time <= s.events[0].timestamp <= s.end_time
    assert a.attributes["error.type"] == "UpstreamConnectError"
    assert a.status.status_code == trace.StatusCode.ERROR
    assert s.resource.attributes["service.name"] == "flatgate-test"


def test_a_new_trace_without_a_traceparent_and_no_event_without_a_first_token() -> None:
    t, exporter = tracing(service_name="gw")
    server = t.server(no_headers, "chat")
    e = entry()
    e.ttfb, e.status, e.error = None, 503, "backends_unavailable"
    server.note(e)
    server.end()
    (s,) = finished(t, exporter)
    assert s.parent is None and not s.events
    assert s.status.status_code == trace.StatusCode.ERROR
    assert s.attributes["error.type"] == "backends_unavailable"
    assert s.resource.attributes["service.name"] == "gw"


def test_sampled_out_traces_record_nothing_but_carry_their_flag() -> None:
    t, exporter = tracing(sample_ratio=0.0)
    server = t.server(no_headers, "chat")
    assert not server.span.is_recording()
    flags = int(dict(headers())["traceparent"].rsplit("-", 1)[1], 16)
    assert not flags & 1  # not sampled
    server.note(entry())
    server.end()
    # A caller's sampled trace is followed whatever the ratio.
    followed = t.server({"traceparent": TRACEPARENT}.get, "chat")
    assert followed.span.is_recording()
    followed.end()
    assert [f"{s.context.trace_id:032x}" for s in finished(t, exporter)] == [CALLER_TRACE]


def test_a_full_export_queue_drops_and_counts() -> None:
    class Stuck(InMemorySpanExporter):
        def export(self, spans: object) -> object:  # type: ignore[override]
            time.sleep(0.5)  # a collector that does not answer
            return super().export(spans)  # type: ignore[arg-type]

    exporter = Stuck()
    t = Tracing(
        TelemetrySection(enabled=True, max_queue_size=4), "flatgate-test", exporter=exporter
    )
    for _ in range(50):
        t.server(no_headers, "chat").end()
    # At most the queue (4) and one batch of 4 being exported were kept.
    assert t.dropped >= 50 - 8
    assert len(t.processor._batch_processor._queue) <= 4
    t.shutdown()


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"sample_ratio": 1.5}, "telemetry.sample_ratio: expected 0.0 to 1.0"),
        ({"max_queue_size": 0}, "telemetry.max_queue_size"),
        ({"otlp_endpoint": "collector:4318"}, "telemetry.otlp_endpoint: expected an http(s)://"),
        ({"capture_content": True}, "telemetry.capture_content"),
        ({"sampel_ratio": 1.0}, "telemetry: Object contains unknown field `sampel_ratio`"),
    ],
)
def test_telemetry_problems_name_their_key(table: dict[str, object], problem: str) -> None:
    problems = Problems()
    telemetry_problems({"telemetry": table}, problems)
    assert len(problems) == 1 and problems[0].startswith(problem), problems
    fine = Problems()
    telemetry_problems({"telemetry": {"enabled": True, "otlp_endpoint": "http://c:4318"}}, fine)
    assert not fine


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_access_log_names_a_traced_requests_trace(fmt: str) -> None:
    lines: list[bytes] = []
    log = AccessLog("edge", fmt, write=lines.append)  # type: ignore[arg-type]
    traced, untraced = entry(), entry()
    traced.trace_id = CALLER_TRACE
    log.write(traced)
    log.write(untraced)
    log.flush()
    first, second = b"".join(lines).decode().splitlines()
    if fmt == "text":
        assert first.endswith(f" trace={CALLER_TRACE}") and "trace=" not in second
    else:
        assert json.loads(first)["trace_id"] == CALLER_TRACE
        assert "trace_id" not in json.loads(second)
