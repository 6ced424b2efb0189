"""One ``[[backends]]`` entry: where a backend is, what it speaks, its limits.

Owns the backend keys of the config file and their validation; the proxy's
settings (``service.settings``) hold a list of these. No I/O.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

import msgspec

from flatgate.proxy.plumbing.config import ConfigError

__all__ = ["PROTOCOLS", "BackendConfig", "check_backend"]

PROTOCOLS = ("fbs", "openai", "anthropic")


class BackendConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    url: str
    protocol: Literal["fbs", "openai", "anthropic"] = "fbs"
    weight: int = 1
    # Concurrent requests this backend takes (0: no limit).
    max_outstanding: int = 0
    connect_timeout: float = 2.0
    # Longest wait for the first byte, and between later bytes.
    read_timeout: float = 30.0
    # Longest whole exchange (0: none).
    total_timeout: float = 0.0
    # Forward the caller's Authorization header to this backend.
    forward_credentials: bool = False


def check_backend(b: BackendConfig, where: str) -> None:
    """Raise ``ConfigError`` naming ``where.<key>`` for a backend that cannot work."""
    url = urlsplit(b.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"{where}.url: expected http(s)://host[:port], got {b.url!r}")
    if b.protocol != "fbs":
        raise ConfigError(
            f"{where}.protocol: {b.protocol!r} adapters are not available in this "
            "version; only 'fbs' backends can be routed to"
        )
    if b.weight < 1:
        raise ConfigError(f"{where}.weight: must be >= 1, got {b.weight}")
    if b.max_outstanding < 0:
        raise ConfigError(f"{where}.max_outstanding: must be >= 0")
    for key in ("connect_timeout", "read_timeout"):
        if getattr(b, key) <= 0:
            raise ConfigError(f"{where}.{key}: must be > 0")
    if b.total_timeout < 0:
        raise ConfigError(f"{where}.total_timeout: must be >= 0")
