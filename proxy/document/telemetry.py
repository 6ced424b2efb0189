"""``[telemetry]``: OpenTelemetry traces, the same section for every service,
each key said once with its default and its comment. What reads it:
``plumbing.telemetry``. No I/O.
"""

from __future__ import annotations

import msgspec

__all__ = ["TelemetrySection"]


class TelemetrySection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[telemetry]``: the same for every service of the file."""

    # Off by default: nothing is traced or exported.
    enabled: bool = False
    # The collector's OTLP/HTTP base URL (traces go to <it>/v1/traces);
    # "": the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables, else
    # http://localhost:4318.
    otlp_endpoint: str = ""
    # The resource's service.name; "": flatgate-edge, flatgate-proxy, or
    # flatgate for the one-process gateway.
    service_name: str = ""
    # The share of new traces recorded (a caller's sampled traceparent is
    # followed either way).
    sample_ratio: float = 1.0
    # Headers sent with every export (a collector's key, say).
    headers: dict[str, str] = {}
    # Prompt and completion text in spans: never recorded; kept false.
    capture_content: bool = False
    # The most spans waiting for export; past it new ones are dropped (and
    # counted), so a collector that is down costs this much memory at most.
    max_queue_size: int = 2048
