"""What a public port builds, per worker, from its section's intake fields.

The fields themselves (``max_in_flight``, ``max_buffered_bytes`` and the
shares of those bytes one caller and one connection may hold,
``max_body_bytes``, the body timeouts) are ``server_section.ServiceSection``'s,
the base of ``[edge]`` and ``[proxy]``, and checked there. Here: ``admission``
(with ``shares``) builds a worker's admission control, ``body_policy`` how it
reads request bodies (``body.BodyPolicy``). No I/O.
"""

from __future__ import annotations

from flatgate.proxy.plumbing.admission import Admission
from flatgate.proxy.plumbing.body import BodyPolicy
from flatgate.proxy.plumbing.server_section import ServiceSection

__all__ = ["admission", "body_policy", "shares"]


def shares(s: ServiceSection) -> tuple[int, int]:
    """``(per caller, per connection)`` bytes under ``s``, the derived
    defaults resolved."""
    caller = s.max_buffered_bytes_per_caller or max(s.max_buffered_bytes // 4, s.max_body_bytes)
    connection = s.max_buffered_bytes_per_connection or 2 * s.max_body_bytes
    return caller, connection


def admission(s: ServiceSection) -> Admission:
    """A worker's admission control under ``s``."""
    caller, connection = shares(s)
    return Admission(
        s.max_in_flight, s.max_buffered_bytes, caller_bytes=caller, connection_bytes=connection
    )


def body_policy(s: ServiceSection) -> BodyPolicy:
    """How the worker reads request bodies under ``s``."""
    return BodyPolicy(s.max_body_bytes, s.body_idle_timeout, s.body_timeout)
