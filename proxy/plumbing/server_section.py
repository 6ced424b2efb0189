"""The config fields every server's section shares, each said once, and their checks.

Owns two bases, one comment per field:

- ``ServerSection``: what every granian server flatgate runs has (the stub's
  ``[stub]``, the proxy's ``[proxy]``, the edge's ``[edge]``): where it
  listens, its workers and interface, its graceful stop;
- ``ServiceSection``: what the two services a caller reaches have besides
  (``[proxy]`` and ``[edge]``): what a public port takes in from one caller
  (admission, bodies, HTTP/2 streams; built by ``plumbing.intake``), the
  largest answer they hold whole (``max_response_bytes``), their
  upstream client and pool, the access log, reloads and the GC.

Each section that derives from them sets its own ``port`` and adds its own
fields. ``server_problems`` (address, workers), ``intake_problems`` and
``lifecycle_problems`` (drain, reload, GC) check the shared ones, naming
``section.key``; a section's own checks go between them. No I/O.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from flatgate.proxy.plumbing.config import Problems

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ServerSection",
    "ServiceSection",
    "intake_problems",
    "lifecycle_problems",
    "server_problems",
]

# 32 MiB, one default for every client API's shape and for the proxy: what
# Anthropic's Messages API takes (32 MB requests, images of up to 5 MB of
# base64 each, PDFs of up to 32 MB), and OpenAI's file inputs (32 MB); of
# OpenAI's images (up to 50 MB of image bytes a request, 20 MB each) it admits
# 24 MiB, the most base64 a 32 MiB body carries: a deployment that wants more
# raises it (the shares below follow). The proxy's buffer of such a request is
# about 3/4 of it (raw bytes, not base64), so one default fits both.
DEFAULT_MAX_BODY_BYTES: Final = 32 << 20
# 32 MiB: 1,024 vectors of 8,192 float32 dimensions (the verifier's largest
# embeddings answer, 2,048 x 16,384, is 128 MiB: a deployment that wants it
# raises the cap).
DEFAULT_MAX_RESPONSE_BYTES: Final = 32 << 20


class ServerSection(msgspec.Struct, frozen=True, kw_only=True):
    # The listen address and port (each section sets its own default port).
    host: str = "127.0.0.1"
    port: int
    # granian worker processes.
    workers: int = 1
    # Server interface: "asgi" has backpressure on streamed responses in
    # granian (a client that stops reading bounds what is buffered for it:
    # the send waits), "rsgi" is leaner and has none (docs/design.md, "Slow readers").
    interface: Literal["asgi", "rsgi"] = "asgi"
    # Graceful stop on SIGTERM/SIGINT: 503 `draining` at once, the listener
    # closed after drain_grace_seconds, streams still running ended (an error
    # chunk) just before drain_seconds, counted from the signal
    # (docs/operations.md, "Graceful restarts").
    drain_grace_seconds: float = 5.0
    drain_seconds: float = 30.0


class ServiceSection(ServerSection, frozen=True, kw_only=True):
    # Upstream HTTP client (the proxy's to its backends, the edge's to the
    # proxy): "fast" (asyncio + llhttp keep-alive pool, default) or "httpx"
    # (reference).
    transport: Literal["fast", "httpx"] = "fast"
    # Connections kept per upstream host, per worker: sized for thousands of
    # concurrent streams (each holds one for its whole life).
    pool_limit: int = 4096
    # Longest wait for a free pooled connection; then 503 with Retry-After (a
    # full pool is not an upstream failure: no backend is cooled down).
    pool_timeout: float = 5.0
    # One line per request on stderr (plumbing.accesslog), as logfmt "text"
    # or "json".
    access_log: bool = True
    log_format: Literal["text", "json"] = "text"
    # Each worker looks at the config file this often and applies a good
    # change to what the service reloads (the proxy: [[backends]] and
    # [[routes]]; the edge: [[keys]], [auth], [[models]], [state], [[limits]]
    # and [[tenants]]; plumbing.reload, `flatgate reload`). 0: never.
    reload_seconds: float = 1.0
    # The cyclic GC (plumbing.gctune): thresholds per generation (CPython's
    # are 700, 10, 10: a young collection every few streams at token
    # cadence), and gc.freeze() once the app is built.
    gc_thresholds: tuple[int, int, int] = (50_000, 20, 100)
    gc_freeze: bool = True
    # Largest request body accepted (413 above it).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Largest answer held whole before it is passed on (an embeddings
    # answer: the proxy's from a backend, the edge's from the proxy); a larger
    # one is refused with a 502 (at the proxy `backend_response_too_large`),
    # not held.
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Admission control, per worker: requests in flight and request-body bytes
    # held (from Content-Length before the body is read; a chunked body counts
    # as max_body_bytes); above either, 503 `server_busy` with Retry-After.
    # 256 MiB: eight bodies of the largest default size (what translating them
    # holds besides, their decoded bytes and their FlatBuffer, is each no more
    # than the body; docs/security.md, "Bounds").
    max_in_flight: int = 10000
    max_buffered_bytes: int = 256 << 20
    # Of those bytes, what one caller (a tenant at the edge; at the proxy, an
    # address that did not present the caller token) and what one connection
    # (HTTP/2 carries many requests on one) may hold at once: 429
    # `caller_busy` with Retry-After above either. 0: derived, a quarter of
    # max_buffered_bytes per caller and two bodies per connection (never less
    # than max_body_bytes): by default 64 MiB each, two requests of the
    # largest size at once.
    max_buffered_bytes_per_caller: int = 0
    max_buffered_bytes_per_connection: int = 0
    # A request body that sends no byte for body_idle_timeout seconds, or is
    # not complete within body_timeout of its headers, is answered 408
    # `body_timeout` (0: no limit).
    body_idle_timeout: float = 15.0
    body_timeout: float = 60.0
    # HTTP/2 streams one connection may have open at once.
    http2_max_streams: int = 100


def server_problems(section: str, s: ServerSection, problems: Problems) -> None:
    """The problems of where ``[section]`` listens, and its workers."""
    problems.port(f"{section}.port", s.port)
    if not s.host:
        problems.append(f"{section}.host: must not be empty")
    problems.at_least(f"{section}.workers", s.workers, 1)


def intake_problems(section: str, s: ServiceSection, problems: Problems) -> None:
    """The problems of what ``[section]`` takes in: bodies, admission, streams."""
    for key in (
        "max_body_bytes",
        "max_response_bytes",
        "max_in_flight",
        "max_buffered_bytes",
        "http2_max_streams",
    ):
        problems.at_least(f"{section}.{key}", getattr(s, key), 1)
    for key in ("max_buffered_bytes_per_caller", "max_buffered_bytes_per_connection"):
        value = getattr(s, key)
        if value and value < s.max_body_bytes:
            problems.append(
                f"{section}.{key}: must be >= {section}.max_body_bytes ({s.max_body_bytes}), "
                f"got {value}: a body of the largest size could never be admitted"
            )
    problems.at_least(f"{section}.body_idle_timeout", s.body_idle_timeout, 0)
    problems.at_least(f"{section}.body_timeout", s.body_timeout, 0)


def lifecycle_problems(section: str, s: ServiceSection, problems: Problems) -> None:
    """The problems of ``[section]``'s drain, reload and GC fields."""
    problems.drain(section, s.drain_grace_seconds, s.drain_seconds)
    problems.at_least(f"{section}.reload_seconds", s.reload_seconds, 0)
    for i, threshold in enumerate(s.gc_thresholds):
        problems.at_least(f"{section}.gc_thresholds[{i}]", threshold, 0)
