"""The edge's settings: its slice of the config document, checked.

Owns the validation of the ``[edge]`` section, ``[[models]]``, ``[[keys]]``
and ``[auth]``, whose keys are declared in ``proxy.document`` (and reads
``[state]``, ``[[limits]]`` and ``[[tenants]]`` through ``proxy.limits``;
the other services' sections in the same file are theirs and ignored
here). Values come, lowest precedence first, from the
file, from ``FLATGATE_EDGE_<KEY>`` environment variables (TOML syntax, bare
strings allowed; ``plumbing.config.overlay_env``) and from explicit
overrides. A bad config fails at start-up with an ``EdgeConfigError`` listing
every problem, each naming its key, e.g. ``models[1].provider: expected one
of OpenAI, Anthropic, SelfHosted`` (``edge_problems`` lists them without
raising).

No I/O beyond reading the file it is given (or the embedded default), and
``[auth.jwt] jwks_file``, which must load for the config to be good.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

from flatgate.proxy.document.callers import (
    JWT_ALGORITHMS,
    AuthConfig,
    JwtConfig,
    KeyConfig,
    ModelConfig,
)
from flatgate.proxy.document.root import EdgeSettings
from flatgate.proxy.document.servers import EdgeSection
from flatgate.proxy.limits import LimitsConfig, parse_limits
from flatgate.proxy.plumbing.config import (
    ConfigError,
    Problems,
    convert_at,
    entries,
    overlay_checked,
    read_document,
)
from flatgate.proxy.plumbing.server_section import (
    intake_problems,
    lifecycle_problems,
    server_problems,
)
from flatgate.proxy.plumbing.telemetry import TelemetrySection, telemetry_problems
from flatgate.proxy.wire.schema import Provider

__all__ = [
    "EDGE_OVERLAY",
    "JWT_ALGORITHMS",
    "AuthConfig",
    "EdgeConfigError",
    "EdgeSection",
    "EdgeSettings",
    "JwtConfig",
    "KeyConfig",
    "ModelConfig",
    "edge_problems",
    "load_edge_settings",
    "parse_edge_settings",
]


class EdgeConfigError(ConfigError):
    """A config the edge cannot start with; the message names the key."""


# FLATGATE_EDGE_<KEY> overlays, for plumbing.config.overlay_env.
EDGE_OVERLAY: dict[str, tuple[str, ...]] = {"edge": EdgeSection.__struct_fields__}


class _Document(msgspec.Struct, frozen=True):
    edge: EdgeSection = EdgeSection()
    models: tuple[ModelConfig, ...] = ()
    keys: tuple[KeyConfig, ...] = ()
    auth: AuthConfig = AuthConfig()


def _problems(s: _Document, problems: Problems) -> None:
    e = s.edge
    url = urlsplit(e.proxy_url)
    if url.scheme != "http" or not url.hostname:
        problems.append(f"edge.proxy_url: expected http://host[:port], got {e.proxy_url!r}")
    server_problems("edge", e, problems)
    intake_problems("edge", e, problems)
    problems.at_least("edge.pool_limit", e.pool_limit, 1)
    for key in ("connect_timeout", "read_timeout", "first_byte_timeout"):
        problems.above(f"edge.{key}", getattr(e, key))
    problems.at_least("edge.keepalive_seconds", e.keepalive_seconds, 0)
    problems.at_least("edge.total_timeout", e.total_timeout, 0)
    problems.above("edge.pool_timeout", e.pool_timeout)
    if e.metrics_token_sha256:
        problems.sha256("edge.metrics_token_sha256", e.metrics_token_sha256, "the token")
    if bool(e.tls_cert_file) != bool(e.tls_key_file):
        key = "tls_key_file" if e.tls_cert_file else "tls_cert_file"
        problems.append(f"edge.{key}: give tls_cert_file and tls_key_file together")
    elif e.tls_cert_file:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                e.tls_cert_file, e.tls_key_file
            )
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"edge.tls_cert_file: cannot load it with edge.tls_key_file: {exc}")
    lifecycle_problems("edge", e, problems)
    seen: dict[str, str] = {}
    for i, m in enumerate(s.models):
        where = f"models[{i}]"
        if m.provider not in Provider.__members__:
            problems.append(
                f"{where}.provider: expected one of {', '.join(Provider.__members__)}, "
                f"got {m.provider!r}"
            )
        for j, name in enumerate((m.name, *m.aliases)):
            key = f"{where}.name" if j == 0 else f"{where}.aliases[{j - 1}]"
            if not name:
                problems.append(f"{key}: must not be empty")
            elif name in seen:
                problems.append(f"{key}: {name!r} is already used by {seen[name]}")
            else:
                seen[name] = where
        if m.display_name is not None and not m.display_name.strip():
            problems.append(f"{where}.display_name: must not be empty (leave it out: the name)")
        if m.created_at is not None and m.created_at.utcoffset() is None:
            problems.append(
                f"{where}.created_at: give a time zone offset (e.g. 2025-02-19T00:00:00Z), "
                f"got {m.created_at.isoformat()}"
            )
    digests: set[str] = set()
    for i, k in enumerate(s.keys):
        where = f"keys[{i}]"
        if not k.tenant:
            problems.append(f"{where}.tenant: must not be empty")
        if problems.sha256(f"{where}.sha256", k.sha256, "the key") and k.sha256 in digests:
            problems.append(f"{where}.sha256: the same key is listed twice")
        digests.add(k.sha256)
    if s.auth.jwt is not None:
        _jwt_problems(s.auth.jwt, problems)


def _jwt_problems(j: JwtConfig, problems: Problems) -> None:
    where = "auth.jwt"
    if bool(j.jwks_url) == bool(j.jwks_file):
        problems.append(f"{where}.jwks_url: give exactly one of jwks_url and jwks_file")
    elif j.jwks_url:
        url = urlsplit(j.jwks_url)
        loopback = url.hostname in ("127.0.0.1", "::1", "localhost")
        if not url.hostname or not (url.scheme == "https" or (url.scheme == "http" and loopback)):
            problems.append(
                f"{where}.jwks_url: expected https://host/path (http only on loopback), "
                f"got {j.jwks_url!r}"
            )
    if not j.algorithms:
        problems.append(f"{where}.algorithms: at least one is required")
    for i, alg in enumerate(j.algorithms):
        if alg not in JWT_ALGORITHMS:
            never = " (never none or HS*: a published key set cannot hold a secret)"
            problems.append(
                f"{where}.algorithms[{i}]: expected one of {', '.join(JWT_ALGORITHMS)}, "
                f"got {alg!r}" + (never if alg.lower() == "none" or alg.startswith("HS") else "")
            )
    if not j.issuer:
        problems.append(f"{where}.issuer: must not be empty")
    audiences = (j.audience,) if isinstance(j.audience, str) else j.audience
    if not audiences or not all(audiences):
        problems.append(f"{where}.audience: one or more non-empty strings")
    if not j.tenant_claim:
        problems.append(f"{where}.tenant_claim: must not be empty")
    problems.at_least(f"{where}.leeway_seconds", j.leeway_seconds, 0)
    problems.at_least(f"{where}.cache_size", j.cache_size, 0)
    problems.above(f"{where}.cache_seconds", j.cache_seconds)
    problems.at_least(f"{where}.refresh_seconds", j.refresh_seconds, 0)
    problems.at_least(f"{where}.max_age_seconds", j.max_age_seconds, 0)
    problems.above(f"{where}.fetch_timeout", j.fetch_timeout)
    problems.at_least(f"{where}.max_token_bytes", j.max_token_bytes, 256)
    if j.jwks_file and all(alg in JWT_ALGORITHMS for alg in j.algorithms):
        from flatgate.edge_translator.jwks import KeySetError, read_key_file

        try:
            read_key_file(j.jwks_file, j.algorithms)
        except KeySetError as exc:
            problems.append(f"{where}.jwks_file: {exc}")


def _parse(
    data: Mapping[str, Any],
    overrides: Mapping[str, object] | None,
    environ: Mapping[str, str] | None,
) -> tuple[EdgeSettings | None, Problems]:
    """The settings and every problem found; the settings only when there are
    none. ``[edge]`` and each ``[[models]]`` / ``[[keys]]`` entry are converted
    on their own, so a problem in one does not hide those in the others."""
    problems = Problems()
    # environ None: no FLATGATE_EDGE_* variables (the loaders pass os.environ).
    overlaid = overlay_checked(data, environ or {}, EDGE_OVERLAY, problems)
    if overlaid is None:
        return None, problems
    merged = dict(overlaid.get("edge", {}))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in EdgeSection.__struct_fields__:
            problems.append(f"edge.{key}: unknown setting")
            continue
        merged[key] = value
    section = convert_at(merged, EdgeSection, "edge", problems)
    parts: dict[str, list[Any]] = {}
    for key, kind in (("models", ModelConfig), ("keys", KeyConfig)):
        found = entries(data, key, problems)
        parts[key] = [convert_at(e, kind, f"{key}[{i}]", problems) for i, e in enumerate(found)]
    auth = _auth(data.get("auth", {}), problems)
    telemetry_problems(data, problems)
    # What did not convert is reported already; check what did (the defaults
    # stand in for an [edge] that did not: they add no problem).
    doc = _Document(
        section or EdgeSection(),
        tuple(m for m in parts["models"] if m is not None),
        tuple(k for k in parts["keys"] if k is not None),
        auth,
    )
    _problems(doc, problems)
    limits = LimitsConfig()
    try:
        limits = parse_limits(data, os.environ if environ is None else environ)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        return None, problems
    settings = EdgeSettings(
        edge=doc.edge,
        models=doc.models,
        keys=doc.keys,
        auth=doc.auth,
        state=limits.state,
        limits=limits.limits,
        tenants=limits.tenants,
        telemetry=msgspec.convert(data.get("telemetry", {}), TelemetrySection),
    )
    return settings, problems


def _auth(table: Any, problems: Problems) -> AuthConfig:
    """``[auth]``, its ``[auth.jwt]`` converted on its own so that each of
    its problems is named (``AuthConfig()`` when it does not convert)."""
    if not isinstance(table, Mapping):
        problems.append("auth: expected a table")
        return AuthConfig()
    for key in table:
        if key not in AuthConfig.__struct_fields__:
            problems.append(f"auth.{key}: unknown section (expected [auth.jwt])")
    jwt = table.get("jwt")
    if jwt is None:
        return AuthConfig()
    if not isinstance(jwt, Mapping):
        problems.append("auth.jwt: expected a table")
        return AuthConfig()
    before = len(problems)
    converted = convert_at(jwt, JwtConfig, "auth.jwt", problems)
    # A table with a problem of its own is not checked further (a default
    # would stand in for the bad value).
    return AuthConfig(converted) if len(problems) == before else AuthConfig()


def edge_problems(
    data: Mapping[str, Any],
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Every problem of the edge's sections of a parsed TOML document, each
    naming its key (``[]``: good); arguments as ``parse_edge_settings``'s."""
    return _parse(data, overrides, environ)[1]


def parse_edge_settings(
    data: Mapping[str, Any],
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> EdgeSettings:
    """Validate a parsed TOML document, with ``FLATGATE_EDGE_*`` variables from
    ``environ`` and then ``overrides`` (``[edge]`` keys; ``None`` values skipped)
    laid over its ``[edge]`` table. Raises ``EdgeConfigError`` listing every
    problem."""
    settings, problems = _parse(data, overrides, environ)
    if settings is None:
        raise EdgeConfigError(*problems)
    return settings


def load_edge_settings(
    config_path: str | os.PathLike[str] | None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> EdgeSettings:
    """Read the config file (``None``: the embedded default ``proxy/default.toml``)
    and build the edge's settings; ``environ`` defaults to ``os.environ``."""
    env = os.environ if environ is None else environ
    try:
        data = read_document(config_path, env)
    except ConfigError as exc:
        raise EdgeConfigError(str(exc)) from exc
    return parse_edge_settings(data, overrides, env)
