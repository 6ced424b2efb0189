"""The checks of the config fields every server's section shares.

The fields are declared once, in ``document.servers``: ``ServerSection``
(what every granian server flatgate runs has) and ``ServiceSection`` (what
the two services a caller reaches have besides; built by
``plumbing.intake``). ``server_problems`` (address, workers), ``intake_problems`` and
``lifecycle_problems`` (drain, reload, GC) check the shared ones, naming
``section.key``; a section's own checks go between them. No I/O.
"""

from __future__ import annotations

from flatgate.proxy.document.servers import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    ServerSection,
    ServiceSection,
)
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
