"""The OTLP receiver harness (``tests.otlp``) against the real OpenTelemetry SDK.

Spans the Python SDK exports over OTLP/HTTP (protobuf) come back out of the
mock server as ``Span``s with the SDK's own ids, parent link, kinds, times,
attributes, events, status and service name; so does an OTLP/JSON export; two
receivers run side by side, each with only its own spans.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from tests.otlp import OtlpReceiver, Span, decode_export, running_otlp_receiver


@contextlib.contextmanager
def exporting_to(receiver: OtlpReceiver, service_name: str) -> Iterator[Tracer]:
    """A tracer of the real SDK whose every ended span is exported to ``receiver``."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = OTLPSpanExporter(endpoint=receiver.endpoint + "/v1/traces", timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("tests.telemetry")
    finally:
        provider.shutdown()


def _ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def _by_name(spans: list[Span]) -> dict[str, Span]:
    return {s.name: s for s in spans}


def _a_request(tracer: Tracer) -> tuple[ReadableSpan, ReadableSpan]:
    """A SERVER span with a CLIENT and an INTERNAL child: the SERVER and the CLIENT."""
    with tracer.start_as_current_span(
        "POST /v1/chat/completions",
        kind=SpanKind.SERVER,
        attributes={
            "flatgate.tenant": "acme",
            "gen_ai.usage.input_tokens": 12,
            "big": 2**62 + 1,
            "ratio": 0.25,
            "streamed": False,
            "gen_ai.response.finish_reasons": ["stop", "length"],
            "sizes": [1, 2, 3],
        },
    ) as server:
        with tracer.start_as_current_span("chat echo", kind=SpanKind.CLIENT) as client:
            client.set_attribute("flatgate.backend", "stub")
            client.add_event("gen_ai.first_token", {"index": 0, "model": "echo"})
            client.add_event("done")
            client.set_status(Status(StatusCode.ERROR, "upstream 502"))
        with tracer.start_as_current_span("translate"):
            pass
    assert isinstance(server, ReadableSpan)
    assert isinstance(client, ReadableSpan)
    return server, client


def test_the_sdks_spans_come_back_whole(otlp_receiver: OtlpReceiver) -> None:
    assert otlp_receiver.endpoint.startswith("http://127.0.0.1:")
    with exporting_to(otlp_receiver, "flatgate-test") as tracer:
        server, client = _a_request(tracer)

    spans = otlp_receiver.wait_for(lambda spans: len(spans) >= 3)
    assert len(spans) == 3
    got = _by_name(spans)
    parent, child, internal = (
        got["POST /v1/chat/completions"],
        got["chat echo"],
        got["translate"],
    )
    trace_id, parent_id = _ids(server)
    assert (parent.trace_id, parent.span_id, parent.parent_span_id) == (trace_id, parent_id, "")
    assert (child.trace_id, child.span_id) == (trace_id, _ids(client)[1])
    assert child.parent_span_id == parent_id
    assert internal.parent_span_id == parent_id
    assert len({parent.span_id, child.span_id, internal.span_id}) == 3
    assert (parent.kind, child.kind, internal.kind) == ("SERVER", "CLIENT", "INTERNAL")
    assert (parent.start_ns, parent.end_ns) == (server.start_time, server.end_time)
    assert (child.start_ns, child.end_ns) == (client.start_time, client.end_time)
    assert parent.start_ns <= child.start_ns <= child.end_ns <= parent.end_ns
    assert parent.attributes == {
        "flatgate.tenant": "acme",
        "gen_ai.usage.input_tokens": 12,
        "big": 2**62 + 1,
        "ratio": 0.25,
        "streamed": False,
        "gen_ai.response.finish_reasons": ["stop", "length"],
        "sizes": [1, 2, 3],
    }
    assert type(parent.attributes["gen_ai.usage.input_tokens"]) is int
    assert child.attributes == {"flatgate.backend": "stub"}
    assert internal.attributes == {}
    assert child.events == [("gen_ai.first_token", {"index": 0, "model": "echo"}), ("done", {})]
    assert parent.events == []
    assert (parent.status, child.status, internal.status) == ("UNSET", "ERROR", "UNSET")
    assert {s.service_name for s in spans} == {"flatgate-test"}


def test_an_otlp_json_export_is_decoded_too(otlp_receiver: OtlpReceiver) -> None:
    """OTLP/JSON: hex ids, kinds and status codes as numbers, a 64-bit int as a string."""
    request = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "by-hand"},
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "EEE19B7EC3C1B174",
                                "parentSpanId": "EEE19B7EC3C1B173",
                                "name": "hand-made",
                                "kind": 3,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "attributes": [
                                    {"key": "n", "value": {"intValue": "9007199254740993"}},
                                    {"key": "d", "value": {"doubleValue": 2}},
                                    {"key": "none", "value": {}},
                                ],
                                "events": [{"name": "e", "timeUnixNano": "1544712660500000000"}],
                                "status": {"code": 2, "message": "no"},
                            }
                        ],
                    }
                ],
            }
        ]
    }
    response = httpx.post(f"{otlp_receiver.endpoint}/v1/traces", json=request, timeout=10)
    assert response.status_code == 200
    [span] = otlp_receiver.wait_for(lambda spans: len(spans) >= 1)
    assert span == Span(
        trace_id="5b8efff798038103d269b633813fc60c",
        span_id="eee19b7ec3c1b174",
        parent_span_id="eee19b7ec3c1b173",
        name="hand-made",
        kind="CLIENT",
        start_ns=1544712660000000000,
        end_ns=1544712661000000000,
        attributes={"n": 9007199254740993, "d": 2.0, "none": None},
        events=[("e", {})],
        status="ERROR",
        service_name="json-svc",
    )
    assert type(span.attributes["d"]) is float


def test_ids_in_base64_and_as_buffers_decode_to_hex() -> None:
    """The forms a trace id takes in the package's output across OTLP flavours."""
    trace_hex, span_hex = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"

    def request(trace_id: object, span_id: object) -> dict[str, object]:
        span = {"traceId": trace_id, "spanId": span_id, "name": "s", "kind": "SPAN_KIND_SERVER"}
        return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}

    as_base64 = request("CvdlGRbNQ92ESOshHIAxnA==", "t61rcWkgMzE=")
    as_buffers = request(
        {"type": "Buffer", "data": list(bytes.fromhex(trace_hex))},
        {"type": "Buffer", "data": list(bytes.fromhex(span_hex))},
    )
    for doc in (as_base64, as_buffers):
        [span] = decode_export(doc)
        assert (span.trace_id, span.span_id, span.parent_span_id) == (trace_hex, span_hex, "")
        assert (span.kind, span.status, span.service_name) == ("SERVER", "UNSET", "")


def test_two_receivers_at_once_each_get_their_own(tmp_path: Path) -> None:
    with running_otlp_receiver(tmp_path) as first, running_otlp_receiver(tmp_path) as second:
        assert first.endpoint != second.endpoint
        with exporting_to(first, "one") as one, exporting_to(second, "two") as two:
            with one.start_as_current_span("to the first"):
                pass
            with two.start_as_current_span("to the second"):
                pass
        got_first = first.wait_for(lambda spans: len(spans) >= 1)
        got_second = second.wait_for(lambda spans: len(spans) >= 1)
    assert [(s.name, s.service_name) for s in got_first] == [("to the first", "one")]
    assert [(s.name, s.service_name) for s in got_second] == [("to the second", "two")]


def test_wait_for_fails_with_the_spans_it_has(otlp_receiver: OtlpReceiver) -> None:
    with (
        exporting_to(otlp_receiver, "flatgate-test") as tracer,
        tracer.start_as_current_span("the only one"),
    ):
        pass
    otlp_receiver.wait_for(lambda spans: len(spans) >= 1)
    with pytest.raises(AssertionError, match=r"1 span\(s\):\n.*name='the only one'"):
        otlp_receiver.wait_for(lambda spans: len(spans) >= 2, timeout=0.5)
