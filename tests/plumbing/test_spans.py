"""``plumbing.spans``: lean spans that decide and record what the SDK's do.

Checked against the SDK itself: the sampler's decision for the same trace
ids (``ParentBased(TraceIdRatioBased)``), the SDK's OTLP encoder's bytes for
the records (they are ``ReadableSpan``s to it), the SDK's batch processor
and in-memory exporter taking them as its own spans.
"""

from __future__ import annotations

import random

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from flatgate.proxy.plumbing.otlp import encode_spans
from flatgate.proxy.plumbing.spans import Record, Spans

REMOTE = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C,
    0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
    trace_state=TraceState([("vendor", "1")]),
)


def spans(ratio: float = 1.0) -> tuple[Spans, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    resource = Resource.create({"service.name": "gw"})
    return Spans(SimpleSpanProcessor(exporter), resource, ratio), exporter


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 1.0])
def test_a_new_trace_is_sampled_as_the_sdks_sampler_samples_it(
    ratio: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    made, _ = spans(ratio)
    sampler = ParentBased(TraceIdRatioBased(ratio))
    rng = random.Random(7)
    monkeypatch.setattr("flatgate.proxy.plumbing.spans.random.getrandbits", rng.getrandbits)
    for _ in range(200):
        span = made.start("chat", SpanKind.SERVER, None)
        context = span.get_span_context()
        wanted = sampler.should_sample(None, context.trace_id, "chat").decision
        assert span.is_recording() == (wanted is Decision.RECORD_AND_SAMPLE)
        assert context.trace_flags.sampled == span.is_recording()
        span.end()


def test_a_parent_decides_for_its_children_and_lends_its_trace() -> None:
    made, exporter = spans(ratio=0.0)
    child = made.start("openai b1", SpanKind.CLIENT, REMOTE, {"flatgate.backend": "b1"})
    assert isinstance(child, Record) and child.is_recording()
    context = child.get_span_context()
    assert (context.trace_id, context.trace_state) == (REMOTE.trace_id, REMOTE.trace_state)
    assert context.span_id != REMOTE.span_id and not context.is_remote
    unsampled = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT))
    assert not made.start("x", SpanKind.CLIENT, unsampled).is_recording()
    child.end()
    child.end()  # once
    (done,) = exporter.get_finished_spans()
    assert done is child and done.parent is REMOTE and not child.is_recording()
    assert dict(done.attributes or {}) == {"flatgate.backend": "b1"}


def test_records_encode_as_the_sdks_encoder_encodes_them() -> None:
    made, exporter = spans()
    server = made.start("POST", SpanKind.SERVER, REMOTE, {"n": 1})
    server.set_attributes({"gen_ai.request.model": "gpt-4o", "zero": 0, "no": False})
    server.update_name("chat gpt-4o")
    server.add_event("gen_ai.first_token", timestamp=1_700_000_000_000_000_000)
    server.add_event("done", {"index": 2})
    client = made.start("openai b1", SpanKind.CLIENT, server.get_span_context())
    client.set_attribute("error.type", "UpstreamConnectError")
    client.set_status(Status(StatusCode.ERROR, "UpstreamConnectError"))
    client.end()
    server.set_status(StatusCode.OK)
    server.end()
    finished: list[ReadableSpan] = list(exporter.get_finished_spans())
    assert [s.name for s in finished] == ["openai b1", "chat gpt-4o"]
    assert encode_spans(finished) == sdk_encode(finished).SerializePartialToString()


def test_a_record_is_the_current_span_the_api_hands_back() -> None:
    made, _ = spans()
    span = made.start("chat", SpanKind.SERVER, None)
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        assert trace.get_current_span() is span
    finally:
        otel_context.detach(token)
    span.record_exception(ValueError("bad"))
    assert isinstance(span, Record)
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("exception", {"exception.type": "ValueError", "exception.message": "bad"})
    ]
