"""The whole config file, read once, checked, and handed out in parts.

The document is ``proxy.document``'s ``GatewayDocument`` (a field per
section; any other section is refused). Each section is checked by the
service that reads it (``[proxy]``, ``[[backends]]`` and ``[[routes]]`` by
``service.settings``; ``[stub]`` by ``stub.settings``; ``[edge]``,
``[[models]]``, ``[[keys]]`` and ``[auth]`` by ``edge_translator.settings``;
``[state]``, ``[[limits]]`` and ``[[tenants]]`` by ``limits.sections``).
This module is the composition root's: the services below it never import
each other, and each reads only its own sections when it runs alone.

``side_problems`` puts the services' own checks together, in one order, for
a ``Scope``: one service's start-up reads its sections (and only the shape of
the edge's, for the proxy and the stub), ``up``, ``split`` and ``all`` read
them all. ``parse_document`` / ``load_document`` give the document (the
sections a scope does not read at their defaults; ``as_document`` once it is
checked), and ``proxy_settings`` / ``edge_settings`` each service's part. Checks across services
(models against routes, ports on one host) are ``gateway.check``'s.

No I/O beyond reading the file it is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from flatgate.edge_translator.settings import (
    EDGE_OVERLAY,
    edge_problems,
)
from flatgate.proxy.backends.registry import backends_of
from flatgate.proxy.document.root import EdgeSettings, GatewayDocument, ProxySettings
from flatgate.proxy.limits import (
    limits_problems,
)
from flatgate.proxy.limits.sections import STATE_OVERLAY
from flatgate.proxy.plumbing.config import (
    ConfigError,
    Problems,
    convert_at,
    overlay_env,
    read_document,
)
from flatgate.proxy.service.settings import (
    PROXY_OVERLAY,
    proxy_problems,
    routing_problems,
)
from flatgate.proxy.stub.settings import STUB_OVERLAY, stub_problems

__all__ = [
    "SECTIONS",
    "SERVICE_SCOPES",
    "GatewayDocument",
    "Scope",
    "as_document",
    "load_document",
    "parse_document",
    "side_problems",
]

# What a check reads: one service's start-up (the stub's reads what the
# proxy's does), flatgate up's (all of it), or all of it (flatgate check,
# the one-process gateway).
Scope = Literal["proxy", "stub", "edge", "up", "split", "all"]
# What each service's start-up reads (the one-process gateway: all of it).
SERVICE_SCOPES: dict[str, Scope] = {
    "proxy": "proxy",
    "stub": "stub",
    "edge": "edge",
    "gateway": "all",
}


# The file's sections, in order.
SECTIONS: tuple[str, ...] = GatewayDocument.__struct_fields__
# What each side reads: its slice of the document (the stub's [stub] beside the proxy's).
_PROXY_SIDE = frozenset((*ProxySettings.__struct_fields__, "stub"))
_EDGE_SIDE = frozenset(EdgeSettings.__struct_fields__)
_READS: dict[str, frozenset[str]] = {
    "proxy": _PROXY_SIDE,
    "stub": _PROXY_SIDE,
    "edge": _EDGE_SIDE,
    "up": frozenset(SECTIONS),
    "split": frozenset(SECTIONS),
    "all": frozenset(SECTIONS),
}
_OVERLAYS = {**PROXY_OVERLAY, **STUB_OVERLAY, **EDGE_OVERLAY, **STATE_OVERLAY}
# The edge's sections as the proxy and the stub see them when they run
# alone: their shape only (the edge checks the rest when it runs).
_SHAPES: dict[str, Any] = {
    "edge": dict[str, Any],
    "models": list[dict[str, Any]],
    "keys": list[dict[str, Any]],
    "auth": dict[str, Any],
}


def _proxy_side(data: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """Every problem of the proxy's and the stub's sections (a section that
    is not a table is the only one reported), the limits' and the file's own
    (unknown sections, the edge's sections' shape)."""
    try:
        overlay_env(data, environ, {**PROXY_OVERLAY, **STUB_OVERLAY})
    except ConfigError as exc:
        return list(exc.problems)
    problems = Problems()
    for key in data:
        if key not in SECTIONS:
            problems.append(f"{key}: unknown section (expected one of {', '.join(SECTIONS)})")
    for key, value in data.items():
        if key in _SHAPES:
            convert_at(value, _SHAPES[key], key, problems)
    problems += proxy_problems(data, environ)
    problems += limits_problems(data, environ)
    problems += stub_problems(data, environ)
    problems += routing_problems(data, environ)
    return problems


def side_problems(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None, scope: Scope = "all"
) -> tuple[list[str], list[str]]:
    """Every problem of a parsed TOML document's sections that ``scope``
    reads, with the ``FLATGATE_*`` variables of ``environ`` (``None``:
    ``os.environ``) laid over them: ``(the proxy's and the stub's, the
    edge's)``, each ``[]`` when good or not read. The limits' sections are
    read by both: their problems may be in both lists."""
    env = os.environ if environ is None else environ
    proxy = _proxy_side(data, env) if scope != "edge" else []
    edge = edge_problems(data, environ=env) if scope not in ("proxy", "stub") else []
    return proxy, edge


def as_document(
    data: Mapping[str, Any], environ: Mapping[str, str], scope: Scope = "all"
) -> GatewayDocument:
    """The document from a parsed TOML document whose problems for ``scope``
    are checked already (``side_problems`` found none): its sections that
    ``scope`` reads, the ``FLATGATE_*`` variables of ``environ`` laid over
    them, converted without checking again."""
    reads = _READS[scope]
    overlays = {k: v for k, v in _OVERLAYS.items() if k in reads}
    overlaid = overlay_env(data, environ, overlays)
    ours = {k: v for k, v in overlaid.items() if k in reads and k != "backends"}
    document = msgspec.convert(ours, GatewayDocument)
    if "backends" not in reads:
        return document
    # Each backend its protocol's config class (checked already).
    return msgspec.structs.replace(document, backends=backends_of(overlaid))


def parse_document(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None, scope: Scope = "all"
) -> GatewayDocument:
    """The document from a parsed TOML document, the ``FLATGATE_*`` variables
    of ``environ`` (``None``: ``os.environ``) laid over it, the sections
    ``scope`` does not read left at their defaults; raises ``ConfigError``
    listing every problem, each naming its key, once."""
    env = os.environ if environ is None else environ
    proxy, edge = side_problems(data, env, scope)
    if proxy or edge:
        raise ConfigError(*dict.fromkeys(proxy + edge))
    return as_document(data, env, scope)


def load_document(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    scope: Scope = "all",
) -> GatewayDocument:
    """Read the config file once (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default) and validate it as ``parse_document`` does."""
    env = os.environ if environ is None else environ
    return parse_document(read_document(path, env), env, scope)
