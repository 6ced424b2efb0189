"""The effective configuration a service starts with, for its start-up log line.

Owns ``effective_config``: the sections a service reads (file, environment and
flags merged, defaults filled in), as plain data with every secret masked:
API keys, the proxy token, key and token digests, and header values that carry
credentials become ``"***"`` when set. No I/O beyond reading the config.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flatgate.edge_translator.settings import load_edge_settings
from flatgate.proxy.service.settings import load_config

__all__ = ["MASK", "effective_config"]

MASK = "***"
# Keys whose values are secrets (or digests of one), wherever they appear.
_SECRET_KEYS = frozenset(
    {"api_key", "proxy_token", "auth_token_sha256", "metrics_token_sha256", "sha256"}
)
# Header names whose values are credentials.
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
)


def _mask(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        if key == "headers":
            return {k: MASK if k.lower() in _SECRET_HEADERS and v else v for k, v in value.items()}
        return {k: _mask(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(v, key) for v in value]
    if key in _SECRET_KEYS and value:
        return MASK
    return value


def effective_config(service: str) -> dict[str, Any]:
    """What ``service`` (proxy, stub, edge or gateway) runs with, secrets masked."""
    data: dict[str, Any] = {}
    if service in ("proxy", "gateway"):
        c = load_config()
        data |= {
            "proxy": msgspec.to_builtins(c.proxy),
            "backends": msgspec.to_builtins(c.backends),
            "routes": msgspec.to_builtins(c.routes),
        }
    if service in ("edge", "gateway"):
        s = load_edge_settings(None)
        data |= {
            "edge": msgspec.to_builtins(s.edge),
            "models": msgspec.to_builtins(s.models),
            "keys": msgspec.to_builtins(s.keys),
            "auth": msgspec.to_builtins(s.auth),
        }
    if service in ("proxy", "edge", "gateway"):
        limits = load_config().limits_config() if service == "proxy" else s.limits
        data |= {
            "state": msgspec.to_builtins(limits.state),
            "limits": msgspec.to_builtins(limits.limits),
            "tenants": msgspec.to_builtins(limits.tenants),
        }
    if service == "stub":
        data = {"stub": msgspec.to_builtins(load_config().stub)}
    masked: dict[str, Any] = _mask(data)
    return masked
