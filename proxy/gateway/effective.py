"""The effective configuration a service starts with, for its start-up log line.

Owns ``effective_config``: the sections a service reads of the document
(``gateway.document``: file, environment and flags merged, defaults filled
in), as plain data with every secret masked:
API keys, the proxy token, key and token digests, and header values that carry
credentials become ``"***"`` when set. No I/O beyond reading the config.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flatgate.proxy.gateway.document import SERVICE_SCOPES, GatewayDocument, load_document

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


# The sections each service runs with, in the file's order.
_SHOWN: dict[str, tuple[str, ...]] = {
    "proxy": ("proxy", "backends", "routes", "state", "limits", "tenants"),
    "stub": ("stub",),
    "edge": ("edge", "models", "keys", "auth", "state", "limits", "tenants"),
    "gateway": (
        "proxy",
        "backends",
        "routes",
        "edge",
        "models",
        "keys",
        "auth",
        "state",
        "limits",
        "tenants",
    ),
}


def effective_config(service: str, document: GatewayDocument | None = None) -> dict[str, Any]:
    """What ``service`` (proxy, stub, edge or gateway) runs with, secrets
    masked: its sections of ``document`` (``None``: read from
    ``$FLATGATE_CONFIG`` and the ``FLATGATE_*`` variables)."""
    doc = load_document(None, scope=SERVICE_SCOPES[service]) if document is None else document
    data = {key: msgspec.to_builtins(getattr(doc, key)) for key in _SHOWN[service]}
    masked: dict[str, Any] = _mask(data)
    return masked
