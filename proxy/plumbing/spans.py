"""The spans a request makes, lean: what the SDK's ``Span`` records, without its machinery.

The OpenTelemetry SDK's ``Tracer.start_span`` runs a sampler object, an id
generator, span limits and a ``BoundedAttributes`` that checks and copies
every attribute under a lock, and its ``Span.end`` copies the span into a
new ``ReadableSpan`` for the processors: on a traced request's path, that is
most of what tracing costs. ``Spans.start`` makes the same decisions with
plain code: ``ParentBased(TraceIdRatioBased(ratio))`` sampling (a parent's
sampled flag decides; a new trace is sampled when the low 64 bits of its id
fall under ``ratio`` of their range, as the SDK's sampler has it), random
ids (``random.getrandbits``, as the SDK's ``RandomIdGenerator``), the
parent's trace state kept. A sampled-out span is the API's
``NonRecordingSpan``: its context still travels, flagged not sampled.

``Record`` is a recording span: an ``opentelemetry.trace.Span`` (so the
API's context, propagator and ``get_current_span`` take it) that is also a
``ReadableSpan`` (so the SDK's span processors and exporters, flatgate's
``plumbing.otlp`` among them, read it as the SDK's own). Its attributes are
a plain dict: flatgate sets only strings and integers, from its own code.
``end`` hands it to the processor once. No I/O.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util import types

__all__ = ["NO_STATE", "Record", "Spans"]

_LOW_64 = (1 << 64) - 1  # TraceIdRatioBased compares these bits of a trace id
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
NO_STATE = TraceState()  # a new trace's (empty; tested by identity before its length)
_UNSET = Status(StatusCode.UNSET)
_SCOPE = InstrumentationScope("flatgate")  # what get_tracer("flatgate") names


class Record(trace.Span, ReadableSpan):
    """A recording span (see the module docstring)."""

    # Nothing is ever dropped from a record (ReadableSpan asks its bounded
    # collections, through an ABC's isinstance, on every export).
    dropped_attributes = dropped_events = dropped_links = 0

    # ReadableSpan's fields that a record starts with and most never change:
    # read from the class until set (its __init__ would build a resource).
    _instrumentation_info = None
    _instrumentation_scope = _SCOPE
    _links: Sequence[trace.Link] = ()
    _status = _UNSET
    _end_time: int | None = None

    def __init__(
        self,
        spans: Spans,
        name: str,
        kind: SpanKind,
        context: SpanContext,
        *,
        parent: SpanContext | None,
        attributes: dict[str, Any] | None,
    ) -> None:
        """``attributes``: the record's own dict from then on (not copied)."""
        self._processor = spans.processor
        self._resource = spans.resource
        self._name = name
        self._context = context
        self._kind = kind
        self._parent = parent
        self._attributes: dict[str, Any] = {} if attributes is None else attributes
        self._events: list[Event] = []
        self._start_time: int | None = time.time_ns()

    def get_span_context(self) -> SpanContext:
        context = self._context
        assert context is not None  # set at the start, never taken away
        return context

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._attributes.update(attributes)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._attributes[key] = value

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        at = time.time_ns() if timestamp is None else timestamp
        self._events.append(Event(name, attributes, at))

    def update_name(self, name: str) -> None:
        self._name = name

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        event = {"exception.type": type(exception).__name__, "exception.message": str(exception)}
        self.add_event("exception", {**event, **(attributes or {})}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """Ends it (once) and hands it to the processor."""
        if self._end_time is not None:
            return
        self._end_time = time.time_ns() if end_time is None else end_time
        self._processor.on_end(self)


class Spans:
    """Starts a worker's spans: sampled at ``ratio`` (a parent's flag decides
    for its children), recorded into ``processor``, under ``resource``."""

    def __init__(self, processor: SpanProcessor, resource: Resource, ratio: float) -> None:
        self.processor = processor
        self.resource = resource
        self._bound = round(ratio * (_LOW_64 + 1))

    def start(
        self,
        name: str,
        kind: SpanKind,
        parent: SpanContext | None,
        attributes: dict[str, Any] | None = None,
    ) -> trace.Span:
        """A span, the child of ``parent`` when it is valid, else a new trace's
        root; a ``Record`` (taking ``attributes`` as its own) when sampled,
        else a ``NonRecordingSpan``."""
        span_id = random.getrandbits(64)
        while not span_id:
            span_id = random.getrandbits(64)
        if parent is not None and parent.is_valid:
            trace_id, state = parent.trace_id, parent.trace_state
            sampled = parent.trace_flags.sampled
        else:
            parent = None
            trace_id = random.getrandbits(128)
            while not trace_id:
                trace_id = random.getrandbits(128)
            sampled, state = (trace_id & _LOW_64) < self._bound, NO_STATE
        flags = _SAMPLED if sampled else _NOT_SAMPLED
        # SpanContext's own fields, as its __new__ makes them: both ids are
        # nonzero and in range, so valid (its check, made again, costs a µs).
        context = tuple.__new__(SpanContext, (trace_id, span_id, False, flags, state, True))
        if not sampled:
            return trace.NonRecordingSpan(context)
        return Record(self, name, kind, context, parent=parent, attributes=attributes)
