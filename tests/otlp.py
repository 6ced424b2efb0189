"""A real OTLP/HTTP receiver for tests: Elastic's mock OTLP server, and the spans it got.

``@elastic/mockotlpserver`` (npm) lives in its own pinned environment
(``.venv/clients/mockotlpserver``, from ``tests/telemetry/mockotlpserver/``'s
``package.json`` and ``package-lock.json``; ``make test`` installs it) and
runs under Node as a real server: OTLP/HTTP only, on a port of its own on
127.0.0.1 (``tests/telemetry/mockotlpserver/receiver.cjs`` starts it through
the package's module API: its CLI has fixed ports). It takes protobuf and JSON
exports at ``<endpoint>/v1/traces`` and appends each request, normalized by
the package, as one JSON line to a file; ``OtlpReceiver.spans`` reads that
file and decodes every span into a ``Span``.

Use ``running_otlp_receiver(directory)`` or the ``otlp_receiver`` fixture, point
the exporter under test at ``receiver.endpoint`` and ``receiver.wait_for`` the
spans it should have sent (exports are asynchronous: never assert on
``spans()`` right after a request).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["OtlpReceiver", "Span", "decode_export", "otlp_receiver", "running_otlp_receiver"]

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / ".venv" / "clients" / "mockotlpserver"
LAUNCHER = ROOT / "tests" / "telemetry" / "mockotlpserver" / "receiver.cjs"
_PACKAGE = INSTALL / "node_modules" / "@elastic" / "mockotlpserver"
_START_TIMEOUT = 30.0
_POLL = 0.05


@dataclass(frozen=True, slots=True)
class Span:
    """One received span. Ids are lower-case hex; ``parent_span_id`` is ``""``
    for a root; ``kind`` is the OTLP name without its prefix (``"SERVER"``,
    ``"CLIENT"``, ``"INTERNAL"``, ``"PRODUCER"``, ``"CONSUMER"``,
    ``"UNSPECIFIED"``), ``status`` likewise (``"UNSET"``, ``"OK"``, ``"ERROR"``);
    ``events`` are ``(name, attributes)`` in order; ``service_name`` is the
    resource's ``service.name`` (``""`` when it has none)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status: str
    service_name: str


class OtlpReceiver:
    """A running mock OTLP server: its OTLP/HTTP base URL and what it received."""

    def __init__(self, endpoint: str, traces: Path, process: subprocess.Popen[bytes], log: Path):
        self.endpoint = endpoint
        self._traces = traces
        self._process = process
        self._log = log

    def spans(self) -> list[Span]:
        """Every span received so far, in the order the requests arrived."""
        try:
            text = self._traces.read_text()
        except FileNotFoundError:
            return []
        # A line is whole once its newline is written; anything after the last
        # one is a request still being written.
        lines = text.split("\n")[:-1]
        return [span for line in lines for span in decode_export(json.loads(line))]

    def wait_for(
        self, predicate: Callable[[list[Span]], bool], timeout: float = 15.0
    ) -> list[Span]:
        """The spans, once ``predicate`` holds for them; fails at ``timeout``
        seconds with the spans received by then."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if predicate(spans):
                return spans
            if self._process.poll() is not None:
                raise AssertionError(
                    f"the OTLP receiver exited ({self._process.returncode}) with "
                    f"{_describe(spans)}\n{_tail(self._log)}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"after {timeout} s the OTLP receiver has {_describe(spans)}")
            time.sleep(_POLL)


def _describe(spans: list[Span]) -> str:
    if not spans:
        return "no spans"
    rows = "\n".join(f"  {s!r}" for s in spans)
    return f"{len(spans)} span(s):\n{rows}"


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def running_otlp_receiver(directory: Path) -> Iterator[OtlpReceiver]:
    """A mock OTLP server on a free loopback port for the block, its files
    (the received requests, its log) in a new folder under ``directory``."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is missing: install Node.js 18+ (`make test` needs it)")
    if not _PACKAGE.is_dir():
        raise RuntimeError(f"{_PACKAGE} is missing: `make test` installs it")
    own = Path(tempfile.mkdtemp(prefix="otlp-", dir=directory))
    traces = own / "traces.jsonl"
    log = own / "mockotlpserver.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NODE_"))}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [node, str(LAUNCHER), str(INSTALL), str(traces)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        endpoint = _wait_listening(process, log)
        yield OtlpReceiver(endpoint, traces, process, log)
    finally:
        _stop(process)


def _wait_listening(process: subprocess.Popen[bytes], log: Path) -> str:
    """The base URL the server prints once it listens."""
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith('{"listening":'):
                url: str = json.loads(line)["listening"]
                return url
        if process.poll() is not None:
            raise RuntimeError(f"the mock OTLP server exited:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the mock OTLP server did not start:\n{_tail(log)}")
        time.sleep(_POLL)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def otlp_receiver(tmp_path: Path) -> Iterator[OtlpReceiver]:
    """A mock OTLP server for the test."""
    with running_otlp_receiver(tmp_path) as receiver:
        yield receiver


# Decoding: one export request (an ExportTraceServiceRequest as the package
# prints it, or as OTLP/JSON) into Spans.


def decode_export(request: dict[str, Any]) -> list[Span]:
    """The spans of one trace export request."""
    out = []
    for resource_spans in request.get("resourceSpans") or []:
        resource = _decode_attributes((resource_spans.get("resource") or {}).get("attributes"))
        service = resource.get("service.name")
        service_name = service if isinstance(service, str) else ""
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                out.append(_decode_span(span, service_name))
    return out


def _decode_span(span: dict[str, Any], service_name: str) -> Span:
    return Span(
        trace_id=_decode_id(span.get("traceId"), 16),
        span_id=_decode_id(span.get("spanId"), 8),
        parent_span_id=_decode_id(span.get("parentSpanId"), 8),
        name=span.get("name") or "",
        kind=_enum_name(span.get("kind"), "SPAN_KIND_", _KINDS),
        start_ns=int(span.get("startTimeUnixNano") or 0),
        end_ns=int(span.get("endTimeUnixNano") or 0),
        attributes=_decode_attributes(span.get("attributes")),
        events=[
            (event.get("name") or "", _decode_attributes(event.get("attributes")))
            for event in span.get("events") or []
        ],
        status=_enum_name((span.get("status") or {}).get("code"), "STATUS_CODE_", _STATUSES),
        service_name=service_name,
    )


# The OTLP enums by number (trace.proto), for a request that carries numbers.
_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUSES = ("UNSET", "OK", "ERROR")


def _enum_name(value: Any, prefix: str, names: tuple[str, ...]) -> str:
    if value is None:
        return names[0]
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else str(value)
    return str(value).removeprefix(prefix)


def _decode_id(value: Any, size: int) -> str:
    """A trace or span id (hex, base64 or a serialized Node Buffer) as hex;
    ``""`` when absent or empty."""
    if not value:
        return ""
    if isinstance(value, dict):
        raw = bytes(value.get("data") or [])
    elif isinstance(value, list):
        raw = bytes(value)
    elif len(value) == 2 * size and all(c in "0123456789abcdefABCDEF" for c in value):
        raw = bytes.fromhex(value)
    else:
        try:
            raw = base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"an id that is neither hex nor base64: {value!r}") from exc
    if raw and len(raw) != size:
        raise ValueError(f"an id of {len(raw)} bytes, not {size}: {value!r}")
    return raw.hex() if any(raw) else ""


def _decode_attributes(attributes: Any) -> dict[str, Any]:
    """OTLP attributes (a list of ``{key, value: AnyValue}``, or a mapping the
    package already flattened) as a dict of Python values."""
    if not attributes:
        return {}
    if isinstance(attributes, dict):
        return dict(attributes)
    return {kv["key"]: _decode_value(kv.get("value") or {}) for kv in attributes}


def _decode_value(value: dict[str, Any]) -> Any:
    """One OTLP AnyValue: str, bool, int, float, bytes, list, dict, or None
    when empty."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return _decode_int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_decode_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:
        return _decode_attributes((value["kvlistValue"] or {}).get("values"))
    if "bytesValue" in value:
        raw = value["bytesValue"]
        return bytes(raw.get("data") or []) if isinstance(raw, dict) else base64.b64decode(raw)
    return None


def _decode_int(value: Any) -> int:
    if isinstance(value, dict):
        # A protobufjs Long: two 32-bit halves.
        low, high = int(value["low"]) & 0xFFFFFFFF, int(value["high"]) & 0xFFFFFFFF
        n = (high << 32) | low
        return n - (1 << 64) if not value.get("unsigned") and n >= 1 << 63 else n
    return int(value)
