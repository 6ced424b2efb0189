"""The proxy's and the stub's settings: one frozen typed object from the config file.

Owns the ``[proxy]``, ``[stub]``, ``[[backends]]`` (entries: ``backends.config``)
and ``[[routes]]`` sections, their validation with messages that name the key,
and their ``FLATGATE_PROXY_*`` / ``FLATGATE_STUB_*`` overlays. The edge's
sections in the same file belong to ``edge_translator.config``; here they pass
through unread.

No I/O beyond reading the file it is given (``plumbing.config``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal, get_args

import msgspec

from flatgate.proxy.backends.config import BackendConfig, check_backend
from flatgate.proxy.plumbing.config import ConfigError, convert, overlay_env, read_document
from flatgate.proxy.wire.schema import PROVIDERS

__all__ = [
    "FAULTS",
    "STUB_PROTOCOLS",
    "Fault",
    "GatewayConfig",
    "ProxySection",
    "RouteConfig",
    "StubProtocol",
    "StubSection",
    "load_config",
    "parse_config",
]


# Faults the stub injects on request (tests); see service.stub.
Fault = Literal[
    "fail", "stall", "die", "hang", "error", "rate_limit", "overloaded", "auth", "reject"
]
FAULTS: tuple[str, ...] = get_args(Fault)
# The wire protocols the stub speaks, one per process.
StubProtocol = Literal["fbs", "openai", "anthropic"]
STUB_PROTOCOLS: tuple[str, ...] = get_args(StubProtocol)


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
    # A fault injected in every request (tests): one of FAULTS (see service.stub).
    fault: Fault | Literal[""] = ""
    # The API it serves: fbs (CompletionRequest), openai (Chat Completions) or
    # anthropic (Messages).
    protocol: StubProtocol = "fbs"
    # Non-empty: openai requests must carry `Authorization: Bearer <key>`,
    # anthropic requests `x-api-key: <key>` (fbs requests are not checked).
    api_key: str = ""
    # What `flatgate up` starts: one stub per protocol, on port, port + 1, ...
    # (`flatgate stub` alone serves `protocol`).
    up: tuple[StubProtocol, ...] = ("fbs",)


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
        check_backend(b, where)
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
    if not config.stub.up or len(set(config.stub.up)) != len(config.stub.up):
        raise ConfigError("stub.up: one or more protocols, each once")
    p = config.proxy
    if p.max_body_bytes < 1:
        raise ConfigError("proxy.max_body_bytes: must be >= 1")
    if p.workers < 1 or config.stub.workers < 1:
        raise ConfigError("workers: must be >= 1")
    if p.cooldown_seconds < 0:
        raise ConfigError("proxy.cooldown_seconds: must be >= 0")


_SECTIONS = {
    "proxy": ProxySection.__struct_fields__,
    "stub": StubSection.__struct_fields__,
}


def parse_config(data: Mapping[str, Any]) -> GatewayConfig:
    """Validate a parsed TOML document; raises ConfigError naming the key."""
    config = convert(data, GatewayConfig)
    _check(config)
    return config


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read and validate a config file (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default), with ``FLATGATE_PROXY_*`` / ``FLATGATE_STUB_*`` overrides."""
    env = os.environ if environ is None else environ
    return parse_config(overlay_env(read_document(path, env), env, _SECTIONS))
