"""OTLP's trace export, written straight to protobuf bytes: no message objects.

``encode_spans`` turns the SDK's finished spans (``ReadableSpan``) into the
body of an OTLP/HTTP ``ExportTraceServiceRequest``, the same bytes the
SDK's own encoder (``opentelemetry.exporter.otlp.proto.common``) serializes,
field for field and in the same order, at a fraction of its CPU: that
encoder builds a protobuf message object for every span, attribute and
value before serializing them, on the export thread of every traced
worker. Here each span is appended to one ``bytearray``; the resource and
the instrumentation scope, the same for a worker's every span, are encoded
once per batch, and attribute keys once per process.

The message layout is opentelemetry-proto's (``trace/v1/trace.proto``,
``common/v1/common.proto``, ``resource/v1/resource.proto``,
``collector/trace/v1/trace_service.proto``): proto3, so a scalar at its
default is left out, while a value of a ``oneof`` (``AnyValue``'s) and a
submessage that is set (``Span.status``, always) are written even when
empty. Pure: no I/O (``plumbing.telemetry`` sends the bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

from flatgate.proxy.plumbing.spans import Record

__all__ = ["encode_spans"]

_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_TIMES = struct.Struct("<BQBQ").pack  # Span.start and .end, each a one-byte tag
# Span.flags: the parent's "is remote" bit is known (0x100), and set (0x200).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
# Field tags, (number << 3) | wire type (0 varint, 1 fixed64, 2 length, 5 fixed32).
_T_START, _T_END, _T_FLAGS = b"\x39", b"\x41", b"\x85\x01"
_T_EVENT_TIME = b"\x09"
_T_ATTR = b"\x4a"  # Span.attributes
_U64 = (1 << 64) - 1
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]
# Attributes already encoded, as KeyValue fields, by (tag, key, type,
# value): a worker's spans repeat most of theirs (model, tenant, backend,
# status...). Emptied when full, so bounded whatever the values.
_PAIRS: dict[tuple[bytes, str, type | None, Any], bytes] = {}
_MOST_PAIRS = 4096
_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, data: bytes | bytearray) -> bytes:
    """A length-delimited field: ``tag``, the length, ``data``."""
    n = len(data)
    return tag + (_ONE_BYTE[n] if n < 0x80 else _varint(n)) + data


def _text(tag: bytes, text: str | None) -> bytes:
    """A string field, left out when empty (proto3's default)."""
    return _field(tag, text.encode()) if text else b""


def _value(value: Any) -> bytes:
    """An ``AnyValue``: its one member is written even at its default."""
    if value is None:
        return b""
    if value is True or value is False:
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + _varint(value & _U64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _value(v)) for v in value))
    if isinstance(value, Mapping):
        return _field(b"\x32", b"".join(_key_value(b"\x0a", str(k), v) for k, v in value.items()))
    raise TypeError(f"an attribute value of type {type(value).__name__}")


def _key_value(tag: bytes, key: str, value: Any) -> bytes:
    """A ``KeyValue`` as the field ``tag`` of its message."""
    if type(value) in _SCALARS:
        pair = (tag, key, type(value), value)
        encoded = _PAIRS.get(pair)
        if encoded is None:
            if len(_PAIRS) >= _MOST_PAIRS:
                _PAIRS.clear()
            encoded = _PAIRS[pair] = _field(tag, _pair(key, value))
        return encoded
    return _field(tag, _pair(key, value))


def _pair(key: str, value: Any) -> bytes:
    return _field(b"\x0a", key.encode()) + _field(b"\x12", _value(value))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    if not attributes:
        return b""
    return b"".join([_key_value(tag, k, v) for k, v in attributes.items()])


def _count(tag: bytes, n: int) -> bytes:
    return tag + _varint(n) if n else b""


def _flags(context: SpanContext | None) -> bytes:
    """A span's or a link's flags (fixed32): whether ``context`` is remote."""
    remote = context is not None and context.is_remote
    return _FIXED32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0))


def _trace_state(context: SpanContext) -> bytes:
    state = context.trace_state
    if not state:
        return b""
    return _text(b"\x1a", ",".join([f"{k}={v}" for k, v in state.items()]))


def _record(span: Record) -> bytes:
    """``_span`` for flatgate's own records, read straight from their
    fields: nothing is ever dropped from one and it has no links."""
    context = span.get_span_context()
    parent = span._parent
    parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08"]
    parts.append(context.span_id.to_bytes(8, "big"))
    if context.trace_state:
        parts.append(_trace_state(context))
    if parent is not None:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    if span._name:
        parts.append(_cached(b"\x2a", span._name))
    parts.append(_KINDS[span._kind._value_])
    parts.append(_TIMES(0x39, span._start_time or 0, 0x41, span._end_time or 0))
    attributes = span._attributes.items()
    known = _PAIRS.get
    try:  # each one encoded before, most often: looked up without a call
        parts += [
            known((_T_ATTR, k, type(v), v)) or _key_value(_T_ATTR, k, v) for k, v in attributes
        ]
    except TypeError:  # a value that does not hash (a sequence)
        parts += [_key_value(_T_ATTR, k, v) for k, v in attributes]
    for event in span._events:
        body = _T_EVENT_TIME + _FIXED64(event.timestamp) + _cached(b"\x12", event.name)
        parts.append(_field(b"\x5a", body + _attributes(b"\x1a", event.attributes)))
    status = span._status
    code = status.status_code._value_
    if status.description:
        parts.append(_field(b"\x7a", _text(b"\x12", status.description) + _count(b"\x18", code)))
    else:
        parts.append(_STATUSES[code])
    parts.append(_REMOTE_PARENT if parent is not None and parent.is_remote else _LOCAL_PARENT)
    return b"".join(parts)


def _cached(tag: bytes, text: str) -> bytes:
    """A string field that recurs (a span's or an event's name), encoded once."""
    pair = (tag, text, None, None)
    encoded = _PAIRS.get(pair)
    if encoded is None:
        if len(_PAIRS) >= _MOST_PAIRS:
            _PAIRS.clear()
        encoded = _PAIRS[pair] = _text(tag, text)
    return encoded


def _span(span: ReadableSpan) -> bytes:
    if type(span) is Record:
        return _record(span)
    context = span.get_span_context()
    assert context is not None  # a finished SDK span always has one
    parent = span.parent
    out = bytearray(b"\x0a\x10")
    out += context.trace_id.to_bytes(16, "big")
    out += b"\x12\x08"
    out += context.span_id.to_bytes(8, "big")
    out += _trace_state(context)
    if parent is not None:
        out += b"\x22\x08" + parent.span_id.to_bytes(8, "big")
    out += _text(b"\x2a", span.name)
    out += _KINDS[span.kind._value_]
    out += _T_START + _FIXED64(span.start_time or 0)
    out += _T_END + _FIXED64(span.end_time or 0)
    out += _attributes(b"\x4a", span.attributes)
    out += _count(b"\x50", span.dropped_attributes)
    for event in span.events:
        body = _T_EVENT_TIME + _FIXED64(event.timestamp) + _text(b"\x12", event.name)
        body += _attributes(b"\x1a", event.attributes) + _count(b"\x20", event.dropped_attributes)
        out += _field(b"\x5a", body)
    out += _count(b"\x60", span.dropped_events)
    for link in span.links:
        link_context = link.context
        body = b"\x0a\x10" + link_context.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + link_context.span_id.to_bytes(8, "big")
        body += _attributes(b"\x22", link.attributes) + _count(b"\x28", link.dropped_attributes)
        out += _field(b"\x6a", body + b"\x35" + _flags(link_context))
    out += _count(b"\x70", span.dropped_links)
    status = span.status
    code = status.status_code._value_
    if status.description:
        out += _field(b"\x7a", _text(b"\x12", status.description) + _count(b"\x18", code))
    else:
        out += _STATUSES[code]
    out += _REMOTE_PARENT if parent is not None and parent.is_remote else _LOCAL_PARENT
    return bytes(out)


# Span.kind, field and value: the SDK's INTERNAL is 0, OTLP's 1 (and so on).
_KINDS = {kind.value: b"\x30" + bytes((kind.value + 1,)) for kind in SpanKind}
# Span.status without a message, by code; Span.flags, by the parent's place.
_STATUSES = {code.value: _field(b"\x7a", _count(b"\x18", code.value)) for code in StatusCode}
_LOCAL_PARENT = _T_FLAGS + _flags(None)
_REMOTE_PARENT = _T_FLAGS + _FIXED32(_HAS_IS_REMOTE | _IS_REMOTE)


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return _field(b"\x0a", b"")
    body = _text(b"\x0a", scope.name) + _text(b"\x12", scope.version)
    return _field(b"\x0a", body + _attributes(b"\x1a", scope.attributes))


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The ``ExportTraceServiceRequest`` carrying ``spans``, grouped by
    resource, then by instrumentation scope, in the order first seen."""
    # By identity: a Resource hashes its attributes as JSON, and a worker's
    # spans share one (equal resources that are not one object stay apart,
    # as the collector reads them the same either way).
    groups: dict[int, tuple[Resource, dict[InstrumentationScope | None, list[bytes]]]] = {}
    last: tuple[Resource | None, InstrumentationScope | None] = (None, None)
    encoded: list[bytes] = []
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        if resource is not last[0] or scope is not last[1]:  # most often, the last span's
            last = (resource, scope)
            _, scopes = groups.setdefault(id(resource), (resource, {}))
            encoded = scopes.setdefault(scope, [])
        encoded.append(_span(span))
    out = bytearray()
    for resource, scopes in groups.values():
        body = bytearray(_field(b"\x0a", _attributes(b"\x0a", resource.attributes)))
        for scope, spans_encoded in scopes.items():
            spans_body = b"".join([_field(b"\x12", s) for s in spans_encoded])
            schema = _text(b"\x1a", scope.schema_url if scope is not None else None)
            body += _field(b"\x12", _scope(scope) + spans_body + schema)
        body += _text(b"\x1a", resource.schema_url)
        out += _field(b"\x0a", body)
    return bytes(out)
