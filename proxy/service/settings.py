"""The proxy's settings: its slice of the config document, checked.

Owns the validation of ``[proxy]``, ``[[backends]]`` (each entry its
protocol's config: ``backends.registry``) and ``[[routes]]``, with messages
that name the key (every problem of a document, not only the first:
``config_problems``), and the ``FLATGATE_PROXY_*`` overlay; with ``[state]``,
``[[limits]]`` and ``[[tenants]]`` (``limits.sections``) they make
``ProxySettings``, what the proxy runs with. The keys are declared in
``proxy.document``. The other services' sections in
the same file are theirs (``stub.settings``, ``edge_translator.settings``)
and not read here; the gateway checks the whole document
(``gateway.document``). ``unrouted_models`` says which of the edge's models
no route serves.

No I/O beyond reading the file it is given (``plumbing.config``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from flatgate.proxy.backends.registry import backend_config, backend_problems
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.document.root import ProxySettings
from flatgate.proxy.document.routing import RouteConfig
from flatgate.proxy.document.servers import ProxySection
from flatgate.proxy.limits import (
    limits_problems,
)
from flatgate.proxy.limits.sections import STATE_OVERLAY
from flatgate.proxy.plumbing.config import (
    ConfigError,
    Problems,
    convert_at,
    convert_entry,
    convert_section,
    entries,
    overlay_checked,
    overlay_env,
    read_document,
)
from flatgate.proxy.plumbing.server_section import (
    intake_problems,
    lifecycle_problems,
    server_problems,
)
from flatgate.proxy.plumbing.telemetry import telemetry_problems
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.wire.schema import PROVIDERS

__all__ = [
    "PROXY_OVERLAY",
    "ProxySection",
    "ProxySettings",
    "RouteConfig",
    "config_problems",
    "load_config",
    "parse_config",
    "proxy_problems",
    "routing_problems",
    "unrouted_models",
]


# FLATGATE_PROXY_<KEY> overlays, for plumbing.config.overlay_env.
PROXY_OVERLAY: dict[str, tuple[str, ...]] = {"proxy": ProxySection.__struct_fields__}
# The sections ProxySettings is made of.
_OURS = ProxySettings.__struct_fields__


def _check(p: ProxySection, problems: Problems) -> None:
    server_problems("proxy", p, problems)
    intake_problems("proxy", p, problems)
    problems.at_least("proxy.cooldown_seconds", p.cooldown_seconds, 0)
    problems.at_least("proxy.pool_limit", p.pool_limit, 1)
    problems.above("proxy.pool_timeout", p.pool_timeout)
    problems.at_least("proxy.max_attempts", p.max_attempts, 0)
    problems.at_least("proxy.max_model_bytes", p.max_model_bytes, 1)
    if p.auth_token_sha256:
        problems.sha256("proxy.auth_token_sha256", p.auth_token_sha256, "the token")
    if p.require_auth and not p.auth_token_sha256:
        problems.append("proxy.require_auth: needs proxy.auth_token_sha256 (the token to require)")
    lifecycle_problems("proxy", p, problems)


def _route_problems(routes: list[RouteConfig | None], names: set[str], problems: Problems) -> None:
    if not routes:
        problems.append("routes: at least one [[routes]] entry is required")
    seen: dict[tuple[str, str | None], int] = {}
    for i, r in enumerate(routes):
        if r is None:  # did not convert: already reported
            continue
        where = f"routes[{i}]"
        if not r.model:
            problems.append(f"{where}.model: must not be empty")
        if not r.backends:
            problems.append(f"{where}.backends: at least one backend is required")
        if r.provider is not None and r.provider not in PROVIDERS:
            problems.append(
                f"{where}.provider: expected one of {', '.join(PROVIDERS)}, got {r.provider!r}"
            )
        for key in ("backends", "fallbacks"):
            for name in getattr(r, key):
                if name not in names:
                    problems.append(f"{where}.{key}: unknown backend {name!r}")
        first = seen.setdefault((r.model, r.provider), i)
        if first != i:
            provider = "any provider" if r.provider is None else f"provider {r.provider}"
            problems.append(
                f"{where}.model: duplicate route: routes[{first}] already routes "
                f"{r.model!r} for {provider}"
            )


def _section(data: Mapping[str, Any], problems: Problems) -> None:
    """``[proxy]`` (and ``[telemetry]``) of a document its variables are laid over."""
    convert_section(data, "proxy", ProxySection, problems, _check)
    telemetry_problems(data, problems)


def _routing(
    data: Mapping[str, Any], environ: Mapping[str, str], problems: Problems
) -> list[BackendConfig]:
    """``[[backends]]`` and ``[[routes]]``: each entry converted on its own, so
    that a problem in one does not hide those in the others; the backends,
    each its protocol's config (``backends.registry``)."""
    backends = [
        backend_config(entry, f"backends[{i}]", problems)
        for i, entry in enumerate(entries(data, "backends", problems))
    ]
    routes = [
        convert_entry(entry, RouteConfig, f"routes[{i}]", problems)
        for i, entry in enumerate(entries(data, "routes", problems))
    ]
    names: set[str] = set()
    for i, b in enumerate(backends):
        if b is None:  # its name still counts for the routes
            raw = data["backends"][i]
            if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
                names.add(raw["name"])
            continue
        where = f"backends[{i}]"
        if b.name in names:
            problems.append(f"{where}.name: duplicate backend name {b.name!r}")
        names.add(b.name)
        problems += backend_problems(b, where, environ)
    _route_problems(routes, names, problems)
    return [b for b in backends if b is not None]


def unrouted_models(data: Mapping[str, Any], models: Sequence[tuple[str, str]]) -> list[str]:
    """The edge's ``[[models]]`` (``(name, provider)`` each, in order) that no
    ``[[routes]]`` entry of the same document serves, by the route table's own
    precedence (exact name with the provider, exact for any provider, the
    first matching pattern, the default). A document without routes (an edge
    whose proxy reads another file) has none to check: ``[]``."""
    found = data.get("routes")
    if not isinstance(found, list) or not found:
        return []
    table_routes: list[Route[int]] = []
    seen: set[tuple[str, int | None]] = set()
    for i, entry in enumerate(found):
        r = convert_at(entry, RouteConfig, f"routes[{i}]", [])
        if r is None or not r.model or (r.provider is not None and r.provider not in PROVIDERS):
            continue  # the proxy's own check reports it
        pinned = None if r.provider is None else PROVIDERS[r.provider]
        if (r.model, pinned) not in seen:
            seen.add((r.model, pinned))
            table_routes.append(Route(model=r.model, target=i, provider=pinned))
    table = RouteTable(table_routes, cache_size=0)
    problems = []
    for i, (name, provider) in enumerate(models):
        if provider in PROVIDERS and table.lookup(PROVIDERS[provider], name.encode()) is None:
            problems.append(
                f"models[{i}].name: no [[routes]] entry serves {name!r} (provider {provider}): "
                'add a route for it (its name, a pattern, or "*")'
            )
    return problems


def _overlaid(
    data: Mapping[str, Any], environ: Mapping[str, str] | None
) -> tuple[dict[str, Any] | None, Mapping[str, str], Problems]:
    """``data`` with the ``FLATGATE_PROXY_*`` variables of ``environ``
    (``None``: ``os.environ``) laid over ``[proxy]`` (``None`` and the
    problem when it is not a table), the environment, and the problems."""
    env = os.environ if environ is None else environ
    problems = Problems()
    return overlay_checked(data, env, PROXY_OVERLAY, problems), env, problems


def proxy_problems(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of ``[proxy]`` in a parsed TOML document, its
    ``FLATGATE_PROXY_*`` variables (``environ``; ``None``: ``os.environ``)
    laid over it."""
    overlaid, _, problems = _overlaid(data, environ)
    if overlaid is not None:
        _section(overlaid, problems)
    return problems


def routing_problems(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> list[str]:
    """Every problem of ``[[backends]]`` and ``[[routes]]`` in a parsed TOML
    document (``environ``, ``None``: ``os.environ``, holds the backends'
    ``api_key_env`` variables)."""
    problems = Problems()
    _routing(data, os.environ if environ is None else environ, problems)
    return problems


def _parse(
    data: Mapping[str, Any], environ: Mapping[str, str] | None
) -> tuple[ProxySettings | None, Problems]:
    """The settings and every problem found; the settings only when there are none."""
    overlaid, env, problems = _overlaid(data, environ)
    if overlaid is None:
        return None, problems
    _section(overlaid, problems)
    problems += limits_problems(overlaid, env)
    backends = _routing(overlaid, env, problems)
    if problems:
        return None, problems
    # [state]'s variables too (limits_problems checked them); the backends as
    # converted, each its protocol's class.
    overlaid = overlay_env(overlaid, env, STATE_OVERLAY)
    ours = {k: v for k, v in overlaid.items() if k in _OURS and k != "backends"}
    return msgspec.structs.replace(
        msgspec.convert(ours, ProxySettings), backends=backends
    ), problems


def config_problems(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of the proxy's sections of a parsed TOML document
    (``[proxy]``, ``[state]``, ``[[limits]]``, ``[[tenants]]``,
    ``[[backends]]``, ``[[routes]]``), with the ``FLATGATE_PROXY_*`` and
    ``FLATGATE_STATE_*`` variables of ``environ`` (``None``: ``os.environ``)
    laid over it; ``[]`` when they are good."""
    return _parse(data, environ)[1]


def parse_config(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> ProxySettings:
    """The proxy's settings from a parsed TOML document, with the
    ``FLATGATE_PROXY_*`` and ``FLATGATE_STATE_*`` variables of ``environ``
    (``None``: ``os.environ``) laid over it; raises ``ConfigError`` listing
    every problem, each naming its key."""
    config, problems = _parse(data, environ)
    if config is None:
        raise ConfigError(*problems)
    return config


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> ProxySettings:
    """Read and validate a config file (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default), with ``FLATGATE_PROXY_*`` / ``FLATGATE_STATE_*`` overrides."""
    env = os.environ if environ is None else environ
    return parse_config(read_document(path, env), env)
