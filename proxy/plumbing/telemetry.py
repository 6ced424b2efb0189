"""OpenTelemetry traces (``[telemetry]``, declared in ``document.telemetry``;
its checks here), for the edge and the proxy alike.

Off by default, and then nothing but a ``None`` check per request. On, a
worker has one ``Tracing``: lean spans (``plumbing.spans``: the SDK's
sampling and records, without its per-span machinery; the resource's
``service.name`` the section's, else the service's own), sampled
``ParentBased(TraceIdRatioBased(sample_ratio))``, exported over
OTLP/HTTP (protobuf) by the SDK's ``BatchSpanProcessor``: from a background thread,
in batches, out of a queue of at most ``max_queue_size`` spans. A collector
that is down or slow costs that queue and the ``dropped`` count (spans
refused because the queue was full), never a request's time. The batches
are encoded by ``plumbing.otlp`` (the bytes the SDK's OTLP exporter sends,
without its message objects) and posted by ``OtlpExporter``.

What is traced: a ``SERVER`` span per request on a client API at the edge,
and on the proxy's HTTP surface (split: the edge's hop arrives as a request
of its own); a ``CLIENT`` span per backend attempt, so a failover shows as
several. The span in hand is the task's current OpenTelemetry context
(``contextvars``), so the edge's hop to the proxy and the proxy's request to
a backend carry it in ``traceparent`` / ``tracestate`` headers
(``headers``), with the ``.fbs`` body untouched. The client's own
``traceparent`` is continued.

Attributes follow OpenTelemetry's GenAI semantic conventions
(``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.usage.output_tokens``), with ``flatgate.request_id``,
``flatgate.tenant`` and ``flatgate.backend``; the first token is an event
(``gen_ai.first_token``) at its time. No prompt or completion text is ever
recorded: ``capture_content`` is accepted for the day it is, and documented
as doing nothing yet.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import httpx
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client.core import CounterMetricFamily, Metric

from flatgate.proxy.document.telemetry import TelemetrySection
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.config import Problems, convert_at
from flatgate.proxy.plumbing.otlp import encode_spans
from flatgate.proxy.plumbing.spans import NO_STATE, Spans

__all__ = [
    "OtlpExporter",
    "Span",
    "TelemetrySection",
    "Tracing",
    "attempt_attributes",
    "headers",
    "open_tracing",
    "telemetry_problems",
    "traces_url",
]

_PROPAGATOR = TraceContextTextMapPropagator()
# What the client APIs are, as gen_ai.operation.name says it.
_OPERATIONS = {
    "openai-chat": "chat",
    "anthropic-messages": "chat",
    "openai-responses": "chat",
    "fbs": "chat",
    "openai-embeddings": "embeddings",
    "fbs-embeddings": "embeddings",
}


def telemetry_problems(data: Mapping[str, Any], problems: Problems) -> None:
    """The problems of ``[telemetry]`` in a parsed document, each naming its key."""
    section = convert_at(data.get("telemetry", {}), TelemetrySection, "telemetry", problems)
    if section is None:
        return
    if not 0.0 <= section.sample_ratio <= 1.0:
        problems.append(
            f"telemetry.sample_ratio: expected 0.0 to 1.0, got {section.sample_ratio!r}"
        )
    problems.at_least("telemetry.max_queue_size", section.max_queue_size, 1)
    endpoint = section.otlp_endpoint
    if endpoint and not endpoint.startswith(("http://", "https://")):
        problems.append(f"telemetry.otlp_endpoint: expected an http(s):// URL, got {endpoint!r}")
    if section.capture_content:
        problems.append(
            "telemetry.capture_content: prompt and completion text is never exported "
            "(true is not supported yet)"
        )


# The standard variables read when ``otlp_endpoint`` is "" (and, for the
# headers, when ``headers`` is empty), as the SDK's exporter reads them.
_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
_DEFAULT_ENDPOINT = "http://localhost:4318"
_EXPORT_SECONDS = 10.0
_ATTEMPTS = 3  # a collector's 429, 502, 503 or 504, or no connection: tried again
_RETRIED = frozenset({429, 502, 503, 504})


def traces_url(endpoint: str) -> str:
    """Where spans are posted: ``<endpoint>/v1/traces``; for "", the
    standard variables' (the traces' full URL, else the base's), else
    ``http://localhost:4318/v1/traces``."""
    if not endpoint:
        full = os.environ.get(_TRACES_ENDPOINT)
        if full:
            return full
        endpoint = os.environ.get(_ENDPOINT) or _DEFAULT_ENDPOINT
    return f"{endpoint.rstrip('/')}/v1/traces"


def _variable_headers() -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS``: ``key=value`` pairs, comma
    separated, URL-encoded; a pair without ``=`` is skipped."""
    for name in _HEADER_VARIABLES:
        text = os.environ.get(name)
        if text:
            pairs = (item.partition("=") for item in text.split(","))
            return {unquote(k).strip().lower(): unquote(v).strip() for k, eq, v in pairs if eq}
    return {}


class OtlpExporter(SpanExporter):
    """Posts each batch to an OTLP/HTTP collector as protobuf
    (``plumbing.otlp``), from the batch processor's thread; a refused or
    failed post is tried again, at most ``_ATTEMPTS`` times in all, backing
    off, and then the batch is dropped (``failed`` counts them)."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self.url = url
        sent = {"content-type": "application/x-protobuf", **(dict(headers) or _variable_headers())}
        self._client = httpx.Client(headers=sent, timeout=_EXPORT_SECONDS, trust_env=False)
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = encode_spans(spans)
        for attempt in range(_ATTEMPTS):
            if attempt:
                time.sleep(0.5 * 2**attempt)
            try:
                status = self._client.post(self.url, content=body).status_code
            except httpx.HTTPError:
                continue
            if 200 <= status < 300:
                return SpanExportResult.SUCCESS
            if status not in _RETRIED:
                break
        self.failed += 1
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._client.close()


class _Counted(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` that counts the spans its full queue drops."""

    def __init__(self, exporter: SpanExporter, max_queue_size: int) -> None:
        super().__init__(
            exporter, max_queue_size=max_queue_size, max_export_batch_size=min(512, max_queue_size)
        )
        self.max_queue_size = max_queue_size
        self._batch_size = min(512, max_queue_size)
        self.dropped = 0

    def on_end(self, span: ReadableSpan) -> None:
        # Every span ended here is sampled (``plumbing.spans`` hands on only
        # recording ones): straight to the queue, as the SDK's ``emit`` puts
        # it there (the worker woken for a full batch), past its checks of a
        # shutdown and a fork (its own fork hook remakes the worker). The
        # queue drops its oldest span when full, without a count: counted here.
        batches = self._batch_processor
        queue = batches._queue
        if len(queue) >= self.max_queue_size:
            self.dropped += 1
        queue.appendleft(span)
        if len(queue) >= self._batch_size and not batches._worker_awaken.is_set():
            batches._worker_awaken.set()


Header = tuple[str, str]


class Tracing:
    """One worker's traces (see the module docstring)."""

    def __init__(
        self,
        section: TelemetrySection,
        service: str,
        *,
        exporter: SpanExporter | None = None,
    ) -> None:
        """``service``: the service.name when the section names none;
        ``exporter``: the OTLP exporter (tests pass their own)."""
        if exporter is None:
            exporter = OtlpExporter(traces_url(section.otlp_endpoint), section.headers)
        self.processor = _Counted(exporter, section.max_queue_size)
        resource = Resource.create({SERVICE_NAME: section.service_name or service})
        self._spans = Spans(self.processor, resource, section.sample_ratio)
        # What the SDK's TracerProvider does at exit: the queued spans exported.
        atexit.register(self.shutdown)

    @property
    def dropped(self) -> int:
        """Spans dropped because the export queue was full."""
        return self.processor.dropped

    def server(self, header: Callable[[str], str | None], name: str) -> Span:
        """A request's ``SERVER`` span, continuing the caller's
        ``traceparent`` (``header``: the request's header by name), made the
        task's current span until ``Span.end``."""
        carrier = {}
        parent = header("traceparent")
        if parent is not None:
            carrier["traceparent"] = parent
            state = header("tracestate")
            if state is not None:
                carrier["tracestate"] = state
        ctx = _PROPAGATOR.extract(carrier) if carrier else None
        # No traceparent: the task's current span is the parent, if any (as
        # the SDK's tracer has it).
        span = self._spans.start(
            name, SpanKind.SERVER, trace.get_current_span(ctx).get_span_context()
        )
        return Span(span, otel_context.attach(trace.set_span_in_context(span, ctx)))

    def client(self, name: str, attributes: dict[str, Any]) -> Span:
        """A backend attempt's ``CLIENT`` span, a child of the task's current
        span; not made current (``headers`` takes it)."""
        parent = trace.get_current_span().get_span_context()
        return Span(self._spans.start(name, SpanKind.CLIENT, parent, attributes))

    def collect(self, prefix: str) -> Iterable[Metric]:
        """``<prefix>_telemetry_dropped_spans_total``, for ``/metrics``."""
        dropped = CounterMetricFamily(
            f"{prefix}_telemetry_dropped_spans",
            "Spans dropped because the OTLP export queue was full (a collector down or slow).",
        )
        dropped.add_metric([], self.dropped)
        yield dropped

    def shutdown(self) -> None:
        """Export what is queued (bounded by the exporter's timeout) and stop
        (once: a second call does nothing)."""
        self.processor.shutdown()  # type: ignore[no-untyped-call]  # the SDK's, unannotated


def headers(span: Span | None = None) -> list[Header]:
    """``traceparent`` (and ``tracestate``) naming ``span``, else the task's
    current span; ``[]`` when there is none to name. Written as the W3C
    propagator's ``inject`` writes them, without a context and a carrier."""
    context = (trace.get_current_span() if span is None else span.span).get_span_context()
    if not context.is_valid:
        return []
    parent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    state = context.trace_state
    if state is NO_STATE or not state:
        return [("traceparent", parent)]
    return [("traceparent", parent), ("tracestate", state.to_header())]


class Span:
    """A span in hand: ``note`` what a request left (its access-log entry),
    ``fail``, ``end`` (once; a second ``end`` does nothing)."""

    __slots__ = ("_ended", "_token", "span")

    def __init__(self, span: trace.Span, token: object | None = None) -> None:
        self.span = span
        self._token = token
        self._ended = False

    @property
    def trace_id(self) -> str:
        """The span's trace id, 32 hex digits (for the access log)."""
        return f"{self.span.get_span_context().trace_id:032x}"

    def note(self, entry: Entry, operation: str | None = None) -> None:
        """The GenAI and flatgate attributes of what ``entry`` holds, and the
        first token's event."""
        span = self.span
        if not span.is_recording():
            return
        op = operation or _OPERATIONS.get(entry.api or "", "chat")
        attributes: dict[str, Any] = {"gen_ai.operation.name": op}
        if entry.model is not None:
            attributes["gen_ai.request.model"] = attributes["gen_ai.response.model"] = entry.model
        if entry.provider:
            attributes["gen_ai.provider.name"] = entry.provider.lower()
        elif entry.provider is not None:
            attributes["gen_ai.provider.name"] = entry.provider
        for key, value in (
            ("gen_ai.usage.input_tokens", entry.prompt_tokens),
            ("gen_ai.usage.output_tokens", entry.tokens),
            ("flatgate.request_id", entry.request_id),
            ("flatgate.tenant", entry.tenant),
            ("flatgate.backend", entry.backend),
            ("flatgate.client_api", entry.api),
            ("http.response.status_code", entry.status),
            ("error.type", entry.error),
        ):
            if value is not None:
                attributes[key] = value
        span.set_attributes(attributes)
        if entry.model:
            span.update_name(f"{op} {entry.model}")
        if entry.ttfb is not None:
            at = time.time_ns() - int((time.perf_counter() - entry.started - entry.ttfb) * 1e9)
            span.add_event("gen_ai.first_token", timestamp=at)
        if entry.status is not None and entry.status >= 500:
            span.set_status(Status(StatusCode.ERROR, entry.error or str(entry.status)))

    def fail(self, kind: str) -> None:
        """The attempt failed (``error.type``)."""
        self.span.set_attribute("error.type", kind)
        self.span.set_status(Status(StatusCode.ERROR, kind))

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        self.span.end()


def attempt_attributes(backend: str, protocol: str, url: str) -> dict[str, Any]:
    """A backend attempt span's attributes."""
    return {"flatgate.backend": backend, "gen_ai.provider.name": protocol, "url.full": url}


def open_tracing(section: TelemetrySection, service: str) -> Tracing | None:
    """The worker's ``Tracing``, or ``None`` when ``[telemetry]`` is off."""
    return Tracing(section, service) if section.enabled else None
