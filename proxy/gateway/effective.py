"""The effective configuration: the start-up log line and ``flatgate check --effective``.

Owns ``startup_line``, the line or two a service logs when it starts (where
it listens, its routes, backends by name, the store kind, what is on), and
``effective_document``, the whole document (``gateway.document``: file,
environment and flags merged, defaults filled in) as plain data with every
secret masked: API keys, the proxy token, key and token digests, and header
values that carry credentials become ``"***"`` when set. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from flatgate.proxy.gateway.document import GatewayDocument

__all__ = ["MASK", "effective_document", "startup_line"]

MASK = "***"
# Keys whose values are secrets (or digests of one), wherever they appear.
_SECRET_KEYS = frozenset(
    {"api_key", "proxy_token", "auth_token_sha256", "metrics_token_sha256", "sha256"}
)
# Header names whose values are credentials.
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"}
)
# The most routes, backends or models the start-up line names (then "+N more").
_LISTED = 8


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


def effective_document(document: GatewayDocument) -> dict[str, Any]:
    """The whole document, every section in the file's order, secrets masked
    (what ``flatgate check --effective`` prints, as JSON)."""
    data = {key: msgspec.to_builtins(getattr(document, key)) for key in document.__struct_fields__}
    masked: dict[str, Any] = _mask(data)
    return masked


def _listed(items: Iterable[str]) -> str:
    found = list(items)
    shown = ", ".join(found[:_LISTED]) or "none"
    return shown if len(found) <= _LISTED else f"{shown}, +{len(found) - _LISTED} more"


def _store(doc: GatewayDocument) -> str:
    """The store's kind, never its address: ``memory``, ``redis``, ``redis+cluster``..."""
    return doc.state.store.split("://", 1)[0]


def _on(doc: GatewayDocument, service: str) -> list[str]:
    """What is switched on, of what a service reads."""
    on: list[str] = []
    if service in ("proxy", "gateway") and doc.proxy.auth_token_sha256:
        on.append("caller token" + (" (required)" if doc.proxy.require_auth else ""))
    if service in ("edge", "gateway"):
        if doc.keys:
            on.append(f"keys ({len(doc.keys)})")
        if doc.auth.jwt is not None:
            on.append("jwt")
        if doc.edge.tls_cert_file:
            on.append("tls")
        if doc.edge.proxy_token and service == "edge":
            on.append("proxy token")
    if service != "stub":
        if doc.limits:
            on.append(f"limits ({len(doc.limits)})")
        if doc.tenants:
            on.append(f"tenants ({len(doc.tenants)})")
        if doc.telemetry.enabled:
            on.append("telemetry")
    return on


def startup_line(service: str, doc: GatewayDocument) -> str:
    """What ``service`` (proxy, stub, edge or gateway) logs when it starts:
    one line, and a second of what it serves (not for the stub)."""
    if service == "stub":
        s = doc.stub
        extra = "".join(
            f"; {k}: {v}"
            for k, v in (("canned", s.canned), ("cadence", s.cadence), ("fault", s.fault))
            if v
        )
        return (
            f"flatgate stub: listening on {s.host}:{s.port} ({s.workers} workers, {s.interface}); "
            f"protocol: {s.protocol}{extra}"
        )
    section = doc.proxy if service == "proxy" else doc.edge
    scheme = "https" if service != "proxy" and doc.edge.tls_cert_file else "http"
    head = (
        f"flatgate {service}: listening on {scheme}://{section.host}:{section.port} "
        f"({section.workers} workers, {section.interface}); store: {_store(doc)}; "
        f"on: {', '.join(_on(doc, service)) or 'nothing optional'}"
    )
    parts: list[str] = []
    if service in ("proxy", "gateway"):
        routes = (
            f"{r.model}{'' if r.provider is None else f' ({r.provider})'} -> {'|'.join(r.backends)}"
            for r in doc.routes
        )
        parts.append(f"routes: {_listed(routes)}")
        parts.append(f"backends: {_listed(f'{b.name} ({b.protocol})' for b in doc.backends)}")
    if service in ("edge", "gateway"):
        parts.append(f"models: {_listed(m.name for m in doc.models)}")
    if service == "edge":
        parts.append(f"proxy: {doc.edge.proxy_url}")
    return f"{head}\n  {'; '.join(parts)}"
