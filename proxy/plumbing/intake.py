"""What a public port takes in from one caller: the config fields the edge's
and the proxy's sections share for it, their checks, and what they build.

Owns ``IntakeSection``, the base of ``[edge]`` and ``[proxy]`` for:

- admission control per worker (``max_in_flight``, ``max_buffered_bytes``)
  and the shares of those bytes one caller and one connection may hold;
- how long a request body may take to arrive (``serve.BodyPolicy``);
- how many HTTP/2 streams one connection may have open (granian's setting).

``admission`` (with ``shares``) and ``body_policy`` build the per-worker objects from a
section; ``intake_problems`` checks the fields, naming the key. No I/O.
"""

from __future__ import annotations

from typing import Final

import msgspec

from flatgate.proxy.plumbing.admission import Admission
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.plumbing.serve import BodyPolicy

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "IntakeSection",
    "admission",
    "body_policy",
    "intake_problems",
    "shares",
]

DEFAULT_MAX_BODY_BYTES: Final = 8 << 20


class IntakeSection(msgspec.Struct, frozen=True, kw_only=True):
    # Largest request body accepted (413 above it).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Admission control, per worker: requests in flight and request-body bytes
    # held (from Content-Length before the body is read; a chunked body counts
    # as max_body_bytes); above either, 503 `server_busy` with Retry-After.
    max_in_flight: int = 10000
    max_buffered_bytes: int = 256 << 20
    # Of those bytes, what one caller (a tenant at the edge; at the proxy, an
    # address that did not present the caller token) and what one connection
    # (HTTP/2 carries many requests on one) may hold at once: 429
    # `caller_busy` with Retry-After above either. 0: derived, a quarter of
    # max_buffered_bytes per caller and two bodies per connection (never less
    # than max_body_bytes).
    max_buffered_bytes_per_caller: int = 0
    max_buffered_bytes_per_connection: int = 0
    # A request body that sends no byte for body_idle_timeout seconds, or is
    # not complete within body_timeout of its headers, is answered 408
    # `body_timeout` (0: no limit).
    body_idle_timeout: float = 15.0
    body_timeout: float = 60.0
    # HTTP/2 streams one connection may have open at once.
    http2_max_streams: int = 100


def shares(s: IntakeSection) -> tuple[int, int]:
    """``(per caller, per connection)`` bytes under ``s``, the derived
    defaults resolved."""
    caller = s.max_buffered_bytes_per_caller or max(s.max_buffered_bytes // 4, s.max_body_bytes)
    connection = s.max_buffered_bytes_per_connection or 2 * s.max_body_bytes
    return caller, connection


def admission(s: IntakeSection) -> Admission:
    """A worker's admission control under ``s``."""
    caller, connection = shares(s)
    return Admission(
        s.max_in_flight, s.max_buffered_bytes, caller_bytes=caller, connection_bytes=connection
    )


def body_policy(s: IntakeSection) -> BodyPolicy:
    """How the worker reads request bodies under ``s``."""
    return BodyPolicy(s.max_body_bytes, s.body_idle_timeout, s.body_timeout)


def intake_problems(section: str, s: IntakeSection, problems: Problems) -> None:
    """The problems of ``s``'s intake fields, named ``section.key``."""
    for key in ("max_body_bytes", "max_in_flight", "max_buffered_bytes", "http2_max_streams"):
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
