"""The edge's settings: one frozen typed object from the shared TOML file.

Owns the ``[edge]``, ``[[models]]`` and ``[[keys]]`` sections of the config
file (the proxy's sections in the same file belong to ``proxy.config`` and are
ignored here). Values come, lowest precedence first, from the file, from
``FLATGATE_EDGE_<KEY>`` environment variables (TOML syntax, bare strings
allowed) and from explicit overrides (the CLI's flags). Every problem fails at
start-up with an ``EdgeConfigError`` naming the key, e.g.
``models[1].provider: expected one of OpenAI, Anthropic, SelfHosted``.

No I/O beyond reading the file it is given (or the embedded default).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from flatgate.proxy.plumbing.config import (
    ConfigError,
    env_name,
    env_value,
    key_path,
    read_document,
)
from flatgate.proxy.wire.schema import Provider

__all__ = [
    "EdgeConfigError",
    "EdgeSection",
    "EdgeSettings",
    "KeyConfig",
    "ModelConfig",
    "load_edge_settings",
    "parse_edge_settings",
]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class EdgeConfigError(ConfigError):
    """A config the edge cannot start with; the message names the key."""


class EdgeSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    # Where the FlatBuffers proxy listens (its POST /v1/completions).
    proxy_url: str = "http://127.0.0.1:8081"
    # Largest request body accepted (413 above it).
    max_body_bytes: int = 8 << 20
    connect_timeout: float = 2.0
    # Longest wait between the proxy's bytes once the answer has begun.
    read_timeout: float = 30.0
    # Longest wait for the proxy's answer to begin: a reasoning model behind it
    # may think for minutes before its first token.
    first_byte_timeout: float = 600.0
    # While a stream waits for its first token, an SSE comment goes to the
    # client this often (0: never), so that proxies in between keep the
    # connection; it commits the response to 200, so a later error is an event.
    keepalive_seconds: float = 15.0
    # Longest whole exchange with the proxy (0: none).
    total_timeout: float = 0.0
    # Client to the proxy: "fast" (proxy.upstream's keep-alive pool) or "httpx".
    transport: Literal["fast", "httpx"] = "fast"
    # Server interface: "asgi" bounds what a client that stops reading can make
    # the edge buffer (granian's ASGI send waits); "rsgi" is leaner, unbounded.
    interface: Literal["asgi", "rsgi"] = "asgi"
    # Connections kept to the proxy, per worker.
    pool_limit: int = 256


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    provider: str
    aliases: tuple[str, ...] = ()
    owned_by: str = "flatgate"

    @property
    def provider_id(self) -> Provider:
        return Provider[self.provider]


class KeyConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tenant: str
    # Hex SHA-256 of the API key; the key itself is never stored.
    sha256: str


class EdgeSettings(msgspec.Struct, frozen=True):
    edge: EdgeSection = EdgeSection()
    models: tuple[ModelConfig, ...] = ()
    keys: tuple[KeyConfig, ...] = ()

    def model_index(self) -> dict[str, ModelConfig]:
        """Every name and alias to its model entry."""
        out: dict[str, ModelConfig] = {}
        for m in self.models:
            out[m.name] = m
            for alias in m.aliases:
                out[alias] = m
        return out


class _Document(msgspec.Struct, frozen=True):
    edge: EdgeSection = EdgeSection()
    models: tuple[ModelConfig, ...] = ()
    keys: tuple[KeyConfig, ...] = ()


def _check(s: _Document) -> None:
    e = s.edge
    url = urlsplit(e.proxy_url)
    if url.scheme != "http" or not url.hostname:
        raise EdgeConfigError(f"edge.proxy_url: expected http://host[:port], got {e.proxy_url!r}")
    if not 0 <= e.port <= 65535:
        raise EdgeConfigError(f"edge.port: expected 0..65535, got {e.port}")
    for key in ("workers", "max_body_bytes", "pool_limit"):
        if getattr(e, key) < 1:
            raise EdgeConfigError(f"edge.{key}: must be >= 1, got {getattr(e, key)}")
    for key in ("connect_timeout", "read_timeout", "first_byte_timeout"):
        if getattr(e, key) <= 0:
            raise EdgeConfigError(f"edge.{key}: must be > 0, got {getattr(e, key)}")
    if e.keepalive_seconds < 0:
        raise EdgeConfigError(f"edge.keepalive_seconds: must be >= 0, got {e.keepalive_seconds}")
    if e.total_timeout < 0:
        raise EdgeConfigError(f"edge.total_timeout: must be >= 0, got {e.total_timeout}")
    seen: dict[str, str] = {}
    for i, m in enumerate(s.models):
        where = f"models[{i}]"
        if m.provider not in Provider.__members__:
            raise EdgeConfigError(
                f"{where}.provider: expected one of {', '.join(Provider.__members__)}, "
                f"got {m.provider!r}"
            )
        for j, name in enumerate((m.name, *m.aliases)):
            key = f"{where}.name" if j == 0 else f"{where}.aliases[{j - 1}]"
            if not name:
                raise EdgeConfigError(f"{key}: must not be empty")
            if name in seen:
                raise EdgeConfigError(f"{key}: {name!r} is already used by {seen[name]}")
            seen[name] = where
    digests: set[str] = set()
    for i, k in enumerate(s.keys):
        where = f"keys[{i}]"
        if not k.tenant:
            raise EdgeConfigError(f"{where}.tenant: must not be empty")
        if not _HEX64.match(k.sha256):
            raise EdgeConfigError(
                f"{where}.sha256: expected 64 lower-case hex digits (the SHA-256 of the key)"
            )
        if k.sha256 in digests:
            raise EdgeConfigError(f"{where}.sha256: the same key is listed twice")
        digests.add(k.sha256)


def parse_edge_settings(
    data: Mapping[str, Any],
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> EdgeSettings:
    """Validate a parsed TOML document, with ``FLATGATE_EDGE_*`` variables from
    ``environ`` and then ``overrides`` (``[edge]`` keys; ``None`` values skipped)
    laid over its ``[edge]`` table."""
    edge = data.get("edge", {})
    if not isinstance(edge, Mapping):
        raise EdgeConfigError("edge: expected a table")
    merged = dict(edge)
    for key in EdgeSection.__struct_fields__:
        raw = (environ or {}).get(env_name("edge", key))
        if raw is not None:
            merged[key] = env_value(raw)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in EdgeSection.__struct_fields__:
            raise EdgeConfigError(f"edge.{key}: unknown setting")
        merged[key] = value
    doc = {"edge": merged, "models": data.get("models", []), "keys": data.get("keys", [])}
    try:
        parsed = msgspec.convert(doc, _Document)
    except msgspec.ValidationError as exc:
        raise EdgeConfigError(key_path(str(exc))) from exc
    _check(parsed)
    return EdgeSettings(edge=parsed.edge, models=parsed.models, keys=parsed.keys)


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
