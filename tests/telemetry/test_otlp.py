"""``plumbing.otlp`` and ``OtlpExporter``: OTLP written straight to bytes.

The encoder is checked against an implementation we did not write: the
OpenTelemetry SDK's own OTLP encoder (``encode_spans`` of
``opentelemetry-exporter-otlp-proto-common``), serialized by protobuf. The
same spans must give the same bytes, for every kind of attribute value, a
remote parent and a trace state, events, links, statuses, several scopes and
resources. The exporter is checked against Elastic's mock OTLP server (its
spans come back whole) and a loopback collector that refuses (retried, then
counted as failed).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AnyValue

from flatgate.proxy.plumbing import otlp
from flatgate.proxy.plumbing.otlp import encode_spans
from flatgate.proxy.plumbing.telemetry import OtlpExporter, traces_url
from tests.otlp import OtlpReceiver

CALLER = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "vendor=1,other=two",
}
VALUES: dict[str, AnyValue] = {
    "text": "acme",
    "empty": "",
    "small": 12,
    "zero": 0,
    "big": 2**62 + 1,
    "negative": -5,
    "ratio": 0.25,
    "no": False,
    "yes": True,
    "words": ["stop", "length"],
    "numbers": [1, 2, 3],
    "long": "x" * 300,  # a length over one varint byte
}


def _spans(resource: Resource | None = None) -> list[ReadableSpan]:
    """A caller's request: a SERVER span continuing a remote parent, a CLIENT
    child of another scope with events, a link and an error, an INTERNAL one."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource or Resource.create({"service.name": "gw"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("flatgate")
    other = provider.get_tracer("other", "1.2", schema_url="https://example.com/schema")
    parent = TraceContextTextMapPropagator().extract(CALLER)
    with tracer.start_as_current_span(
        "chat gpt-4o", parent, SpanKind.SERVER, attributes=VALUES
    ) as server:
        with other.start_as_current_span(
            "openai b1", kind=SpanKind.CLIENT, links=[Link(server.get_span_context(), {"k": 1})]
        ) as client:
            client.add_event("gen_ai.first_token", {"index": 0})
            client.add_event("done")
            client.set_status(Status(StatusCode.ERROR, "upstream 502"))
        with tracer.start_as_current_span("translate"):
            pass
        server.set_status(Status(StatusCode.OK))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_the_bytes_are_the_sdks_encoders() -> None:
    spans = _spans()
    assert encode_spans(spans) == sdk_encode(spans).SerializePartialToString()


def test_two_resources_and_a_batch_in_several_groups_are_the_sdks_too() -> None:
    spans = _spans() + _spans(Resource.create({"service.name": "edge", "n": 3}))
    assert encode_spans(spans) == sdk_encode(spans).SerializePartialToString()
    assert encode_spans([]) == sdk_encode([]).SerializePartialToString() == b""


def test_the_cache_of_encoded_attributes_is_bounded() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("flatgate")
    for i in range(otlp._MOST_PAIRS + 10):
        with tracer.start_as_current_span("s", attributes={"flatgate.request_id": f"r-{i}"}):
            pass
    spans = list(exporter.get_finished_spans())
    assert encode_spans(spans) == sdk_encode(spans).SerializePartialToString()
    assert len(otlp._PAIRS) <= otlp._MOST_PAIRS


def test_an_unknown_value_type_is_named() -> None:
    with pytest.raises(TypeError, match="of type object"):
        otlp._value(object())


def test_the_url_comes_from_the_section_else_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("") == "http://localhost:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318")
    assert traces_url("") == "http://base:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://full:9/traces")
    assert traces_url("") == "http://full:9/traces"


def test_the_exporters_spans_reach_a_collector_whole(otlp_receiver: OtlpReceiver) -> None:
    exporter = OtlpExporter(otlp_receiver.endpoint + "/v1/traces", {"x-key": "k"})
    spans = _spans()
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    got = {s.name: s for s in otlp_receiver.wait_for(lambda s: len(s) >= 3)}
    server, client = got["chat gpt-4o"], got["openai b1"]
    assert server.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert server.parent_span_id == "b7ad6b7169203331"
    assert client.parent_span_id == server.span_id
    assert (server.kind, client.kind, got["translate"].kind) == ("SERVER", "CLIENT", "INTERNAL")
    assert server.attributes == VALUES
    assert [name for name, _ in client.events] == ["gen_ai.first_token", "done"]
    assert (server.status, client.status) == ("OK", "ERROR")
    assert server.service_name == "gw"
    exporter.shutdown()


class _Collector(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next of ``statuses``, keeping what it got."""

    statuses: list[int]
    got: list[tuple[str, bytes, str]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.got.append((self.path, body, self.headers.get("x-key", "")))
        self.send_response(self.statuses.pop(0))
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[type[_Collector]]:
    handler = type("Handler", (_Collector,), {"statuses": [], "got": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_busy_collector_is_tried_again_and_a_refusal_counted(
    collector: type[_Collector], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("flatgate.proxy.plumbing.telemetry.time.sleep", lambda s: None)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-key=from%20env,broken")
    exporter = OtlpExporter(collector.url, {})  # type: ignore[attr-defined]
    spans = _spans()
    collector.statuses[:] = [503, 200]
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert [(p, key) for p, _, key in collector.got] == [("/v1/traces", "from env")] * 2
    assert collector.got[0][1] == encode_spans(spans)
    collector.statuses[:] = [400]
    assert exporter.export(spans) is SpanExportResult.FAILURE
    collector.statuses[:] = [503, 503, 503]
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert exporter.failed == 2 and len(collector.got) == 6
    exporter.shutdown()


def test_no_collector_fails_the_batch_without_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flatgate.proxy.plumbing.telemetry.time.sleep", lambda s: None)
    exporter = OtlpExporter("http://127.0.0.1:9/v1/traces", {})
    exporter._client.timeout = 1.0
    assert exporter.export(_spans()) is SpanExportResult.FAILURE
    assert exporter.failed == 1
