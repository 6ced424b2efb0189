"""The proxy's and the stub's settings: one frozen typed object from TOML.

Owns the config file format (README "Configuration"), its validation with
messages that name the key, and the embedded default (``proxy/default.toml``).
The edge's sections (``[edge]``, ``[[models]]``, ``[[keys]]``) live in the same
file and are validated by ``edge_translator.config``; here they pass through.

No I/O beyond reading the file it is given.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

__all__ = [
    "DEFAULT_CONFIG",
    "BackendConfig",
    "ConfigError",
    "GatewayConfig",
    "ProxySection",
    "RouteConfig",
    "StubSection",
    "apply_env",
    "env_value",
    "key_path",
    "load_config",
    "parse_config",
    "read_config_text",
]

ENV_CONFIG = "FLATGATE_CONFIG"
PROVIDERS: dict[str, int] = {"OpenAI": 0, "Anthropic": 1, "SelfHosted": 2}


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the key."""


class ProxySection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8081
    workers: int = 1
    # Largest request body accepted (413 above it).
    max_body_bytes: int = 8 << 20
    # Upstream HTTP client: "fast" (asyncio + llhttp pool, default) or "httpx" (reference).
    transport: Literal["fast", "httpx"] = "fast"
    # Server interface: "asgi" has backpressure on streamed responses in
    # granian, "rsgi" does not (see README, "Slow readers").
    interface: Literal["asgi", "rsgi"] = "asgi"
    # Seconds a backend that failed before its first byte is skipped.
    cooldown_seconds: float = 5.0
    # Connections kept per upstream host.
    pool_limit: int = 256


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


class RouteConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Exact name, glob ("llama-*"), or "*" for the default route.
    model: str
    backends: list[str]
    provider: str | None = None
    fallbacks: list[str] = []


class StubSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8082
    workers: int = 1
    interface: Literal["asgi", "rsgi"] = "asgi"
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    # > 0: answer every request with this many fixed deltas, built once, without
    # reading the body (a backend of fixed, minimal cost, for load benchmarks).
    canned: int = 0


class GatewayConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    proxy: ProxySection = ProxySection()
    stub: StubSection = StubSection()
    backends: list[BackendConfig] = []
    routes: list[RouteConfig] = []
    # The edge's sections, validated by edge_translator.config.
    edge: dict[str, Any] = {}
    models: list[dict[str, Any]] = []
    keys: list[dict[str, Any]] = []

    def backend(self, name: str) -> BackendConfig:
        for b in self.backends:
            if b.name == name:
                return b
        raise KeyError(name)


def _check(config: GatewayConfig) -> None:
    names: set[str] = set()
    for i, b in enumerate(config.backends):
        where = f"backends[{i}]"
        if b.name in names:
            raise ConfigError(f"{where}.name: duplicate backend name {b.name!r}")
        names.add(b.name)
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
    if not config.routes:
        raise ConfigError("routes: at least one [[routes]] entry is required")
    for i, r in enumerate(config.routes):
        where = f"routes[{i}]"
        if not r.model:
            raise ConfigError(f"{where}.model: must not be empty")
        if not r.backends:
            raise ConfigError(f"{where}.backends: at least one backend is required")
        if r.provider is not None and r.provider not in PROVIDERS:
            raise ConfigError(
                f"{where}.provider: expected one of {', '.join(PROVIDERS)}, got {r.provider!r}"
            )
        for key in ("backends", "fallbacks"):
            for name in getattr(r, key):
                if name not in names:
                    raise ConfigError(f"{where}.{key}: unknown backend {name!r}")
    p = config.proxy
    if p.max_body_bytes < 1:
        raise ConfigError("proxy.max_body_bytes: must be >= 1")
    if p.workers < 1 or config.stub.workers < 1:
        raise ConfigError("workers: must be >= 1")
    if p.cooldown_seconds < 0:
        raise ConfigError("proxy.cooldown_seconds: must be >= 0")


def key_path(message: str) -> str:
    """msgspec's ``... - at `$.backends[0].url` `` as ``backends[0].url: ...``
    (a missing required key: ``routes[0].model: required key is missing``)."""
    text, sep, path = message.rpartition(" - at `$")
    if not sep:
        return message
    path = path.rstrip("`").lstrip(".")
    missing = re.match(r"Object missing required field `([^`]+)`", text)
    if missing:
        key = f"{path}.{missing.group(1)}" if path else missing.group(1)
        return f"{key}: required key is missing"
    return f"{path}: {text}" if path else text


def env_value(raw: str) -> Any:
    """An environment value in TOML syntax (``8080``, ``true``, ``"x"``), or the bare string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def apply_env(data: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Overlay ``FLATGATE_PROXY_<KEY>`` and ``FLATGATE_STUB_<KEY>`` variables
    (values in TOML syntax, bare strings allowed) on the parsed file."""
    out = dict(data)
    for section, struct in (("proxy", ProxySection), ("stub", StubSection)):
        merged = dict(out.get(section, {}))
        for key in struct.__struct_fields__:
            raw = environ.get(f"FLATGATE_{section.upper()}_{key.upper()}")
            if raw is not None:
                merged[key] = env_value(raw)
        if merged:
            out[section] = merged
    return out


def parse_config(data: Mapping[str, Any]) -> GatewayConfig:
    """Validate a parsed TOML document; raises ConfigError naming the key."""
    try:
        config = msgspec.convert(data, GatewayConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(key_path(str(exc))) from exc
    _check(config)
    return config


DEFAULT_CONFIG = "default.toml"


def read_config_text(path: str | os.PathLike[str] | None) -> str:
    """The config file's text; ``None`` means the embedded default."""
    if path is None:
        return resources.files("flatgate.proxy").joinpath(DEFAULT_CONFIG).read_text()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config {os.fspath(path)!r}: {exc.strerror}") from exc


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read and validate a config file (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default), with ``FLATGATE_PROXY_*`` / ``FLATGATE_STUB_*`` overrides."""
    env = os.environ if environ is None else environ
    if path is None:
        path = env.get(ENV_CONFIG) or None
    text = read_config_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config is not valid TOML: {exc}") from exc
    return parse_config(apply_env(data, env))
