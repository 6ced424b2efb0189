"""The proxy's and the stub's settings: one frozen typed object from the config file.

Owns the ``[proxy]``, ``[stub]``, ``[[backends]]`` (entries: ``backends.config``)
and ``[[routes]]`` sections, their validation with messages that name the key
(every problem of a document, not only the first: ``config_problems``), and
their ``FLATGATE_PROXY_*`` / ``FLATGATE_STUB_*`` overlays. The edge's sections
in the same file belong to ``edge_translator.config``; here they pass through
unread, except that ``unrouted_models`` says which of the edge's models no
route serves.

No I/O beyond reading the file it is given (``plumbing.config``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args

import msgspec

from flatgate.proxy.backends.section import BackendConfig, backend_problems
from flatgate.proxy.limits import (
    LimitRule,
    LimitsConfig,
    StateSection,
    TenantConfig,
    limits_problems,
)
from flatgate.proxy.plumbing.config import (
    ConfigError,
    Problems,
    convert_at,
    overlay_env,
    read_document,
)
from flatgate.proxy.plumbing.intake import IntakeSection, intake_problems
from flatgate.proxy.service.routes import Route, RouteTable
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
    "config_problems",
    "load_config",
    "parse_config",
    "unrouted_models",
]


T = TypeVar("T")

# Faults the stub injects on request (tests); see service.stub.
Fault = Literal[
    "fail", "stall", "die", "hang", "error", "rate_limit", "overloaded", "auth", "reject"
]
FAULTS: tuple[str, ...] = get_args(Fault)
# The wire protocols the stub speaks, one per process.
StubProtocol = Literal["fbs", "openai", "anthropic"]
STUB_PROTOCOLS: tuple[str, ...] = get_args(StubProtocol)


class ProxySection(IntakeSection, frozen=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8081
    workers: int = 1
    # Upstream HTTP client: "fast" (asyncio + llhttp pool, default) or "httpx" (reference).
    transport: Literal["fast", "httpx"] = "fast"
    # Server interface: "asgi" has backpressure on streamed responses in
    # granian, "rsgi" does not (see README, "Slow readers").
    interface: Literal["asgi", "rsgi"] = "asgi"
    # Seconds a backend that failed before its first byte is skipped.
    cooldown_seconds: float = 5.0
    # Graceful stop on SIGTERM/SIGINT: 503 `draining` at once, the listener
    # closed after drain_grace_seconds, streams still running ended (an error
    # chunk) just before drain_seconds, counted from the signal (README,
    # "Graceful restarts").
    drain_grace_seconds: float = 5.0
    drain_seconds: float = 30.0
    # Each worker looks at the config file this often and applies a good
    # change to [[backends]] and [[routes]] (plumbing.reload; `flatgate
    # reload`). 0: never.
    reload_seconds: float = 1.0
    # The cyclic GC (plumbing.gctune): thresholds per generation (CPython's
    # are 700, 10, 10: a young collection every few streams at token
    # cadence), and gc.freeze() once the app is built.
    gc_thresholds: tuple[int, int, int] = (50_000, 20, 100)
    gc_freeze: bool = True
    # Connections kept per upstream host, per worker: sized for thousands of
    # concurrent streams (each holds one for its whole life).
    pool_limit: int = 4096
    # Longest wait for a free pooled connection; then 503 with Retry-After (a
    # full pool is not a backend failure: the backend is not cooled down).
    pool_timeout: float = 5.0
    # Backends tried per request, failover and fallbacks included (0: all).
    max_attempts: int = 3
    # Longest model name routed (400 above it): bounds what the route cache keeps.
    max_model_bytes: int = 256
    # Callers must present `Authorization: Bearer <token>` to set a tenant or
    # read /metrics; this is the token's hex SHA-256 ("": no authentication).
    auth_token_sha256: str = ""
    # With a token configured: every request must present it (401 otherwise),
    # not only those that set a tenant.
    require_auth: bool = False
    # One line per request on stderr (see plumbing.accesslog), as logfmt
    # "text" or "json".
    access_log: bool = True
    log_format: Literal["text", "json"] = "text"


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
    # Cadence mode (load benchmarks): every request is answered as a stream of
    # cadence_tokens fixed deltas and a final frame with the usage, from frames
    # built once, the body not read; one timer per worker paces every stream
    # (first delta after ttft_ms, then one every itl_ms). See service.stub.cadence.
    cadence: bool = False
    cadence_tokens: int = 128
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
    # Graceful stop, as [proxy]'s.
    drain_grace_seconds: float = 5.0
    drain_seconds: float = 30.0


class GatewayConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    proxy: ProxySection = ProxySection()
    stub: StubSection = StubSection()
    backends: list[BackendConfig] = []
    routes: list[RouteConfig] = []
    # The edge's sections, validated by edge_translator.config.
    edge: dict[str, Any] = {}
    models: list[dict[str, Any]] = []
    keys: list[dict[str, Any]] = []
    auth: dict[str, Any] = {}
    # Tenants' limits and where their counts live (plumbing.limits).
    state: StateSection = StateSection()
    limits: tuple[LimitRule, ...] = ()
    tenants: tuple[TenantConfig, ...] = ()

    def limits_config(self) -> LimitsConfig:
        """``[state]``, ``[[limits]]`` and ``[[tenants]]`` together."""
        return LimitsConfig(self.state, self.limits, self.tenants)

    def backend(self, name: str) -> BackendConfig:
        for b in self.backends:
            if b.name == name:
                return b
        raise KeyError(name)


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _proxy_problems(p: ProxySection, problems: Problems) -> None:
    problems.port("proxy.port", p.port)
    if not p.host:
        problems.append("proxy.host: must not be empty")
    problems.at_least("proxy.workers", p.workers, 1)
    intake_problems("proxy", p, problems)
    problems.at_least("proxy.cooldown_seconds", p.cooldown_seconds, 0)
    problems.at_least("proxy.pool_limit", p.pool_limit, 1)
    problems.above("proxy.pool_timeout", p.pool_timeout)
    problems.at_least("proxy.max_attempts", p.max_attempts, 0)
    problems.at_least("proxy.max_model_bytes", p.max_model_bytes, 1)
    if p.auth_token_sha256 and not _HEX64.match(p.auth_token_sha256):
        problems.append(
            "proxy.auth_token_sha256: expected 64 lower-case hex digits (the SHA-256 of the token)"
        )
    if p.require_auth and not p.auth_token_sha256:
        problems.append("proxy.require_auth: needs proxy.auth_token_sha256 (the token to require)")
    problems.drain("proxy", p.drain_grace_seconds, p.drain_seconds)
    problems.at_least("proxy.reload_seconds", p.reload_seconds, 0)
    for i, threshold in enumerate(p.gc_thresholds):
        problems.at_least(f"proxy.gc_thresholds[{i}]", threshold, 0)


def _stub_problems(s: StubSection, problems: Problems) -> None:
    problems.port("stub.port", s.port)
    if s.up and 1 <= s.port <= 65535 and s.port + len(s.up) - 1 > 65535:
        problems.append(f"stub.port: {s.port} leaves no room for {len(s.up)} stubs (stub.up)")
    if not s.host:
        problems.append("stub.host: must not be empty")
    problems.at_least("stub.workers", s.workers, 1)
    problems.at_least("stub.ttft_ms", s.ttft_ms, 0)
    problems.at_least("stub.itl_ms", s.itl_ms, 0)
    problems.at_least("stub.canned", s.canned, 0)
    problems.at_least("stub.cadence_tokens", s.cadence_tokens, 1)
    if s.cadence and s.canned:
        problems.append("stub.cadence: not with stub.canned (choose one)")
    if not s.up or len(set(s.up)) != len(s.up):
        problems.append("stub.up: one or more protocols, each once")
    problems.drain("stub", s.drain_grace_seconds, s.drain_seconds)


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


def _entries(data: Mapping[str, Any], key: str, problems: Problems) -> list[Any]:
    """The ``[[key]]`` array of tables (``[]`` when it is not one: reported)."""
    entries = data.get(key, [])
    if isinstance(entries, list):
        return entries
    problems.append(f"{key}: expected an array of tables ([[{key}]])")
    return []


def _whole(entry: Any, kind: type[T], where: str, problems: Problems) -> T | None:
    """One ``[[...]]`` entry, or ``None`` if it has a problem (added)."""
    before = len(problems)
    value = convert_at(entry, kind, where, problems)
    return value if len(problems) == before else None


def _parse(
    data: Mapping[str, Any], environ: Mapping[str, str] | None
) -> tuple[GatewayConfig | None, Problems]:
    """The config and every problem found; the config only when there are none.

    Each section and each ``[[backends]]`` / ``[[routes]]`` entry is converted
    on its own, so a problem in one does not hide those in the others."""
    problems = Problems()
    known = GatewayConfig.__struct_fields__
    for key in data:
        if key not in known:
            problems.append(f"{key}: unknown section (expected one of {', '.join(known)})")
    edge_parts = {k: v for k, v in data.items() if k in ("edge", "models", "keys", "auth")}
    convert_at(edge_parts, GatewayConfig, "", problems)  # their shape; the edge checks the rest
    proxy = convert_at(data.get("proxy", {}), ProxySection, "proxy", problems)
    if proxy is not None:
        _proxy_problems(proxy, problems)
    problems += limits_problems(data, environ)
    stub = convert_at(data.get("stub", {}), StubSection, "stub", problems)
    if stub is not None:
        _stub_problems(stub, problems)
    # An entry with a problem of its own is not checked further (its other
    # keys' checks could be about a default standing in for a bad value).
    backends = [
        _whole(entry, BackendConfig, f"backends[{i}]", problems)
        for i, entry in enumerate(_entries(data, "backends", problems))
    ]
    routes = [
        _whole(entry, RouteConfig, f"routes[{i}]", problems)
        for i, entry in enumerate(_entries(data, "routes", problems))
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
    if problems:
        return None, problems
    return msgspec.convert(data, GatewayConfig), problems


def unrouted_models(data: Mapping[str, Any], models: Sequence[tuple[str, str]]) -> list[str]:
    """The edge's ``[[models]]`` (``(name, provider)`` each, in order) that no
    ``[[routes]]`` entry of the same document serves, by the route table's own
    precedence (exact name with the provider, exact for any provider, the
    first matching pattern, the default). A document without routes (an edge
    whose proxy reads another file) has none to check: ``[]``."""
    entries = data.get("routes")
    if not isinstance(entries, list) or not entries:
        return []
    table_routes: list[Route[int]] = []
    seen: set[tuple[str, int | None]] = set()
    for i, entry in enumerate(entries):
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


_SECTIONS = {
    "proxy": ProxySection.__struct_fields__,
    "stub": StubSection.__struct_fields__,
}


def config_problems(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of the proxy's and the stub's sections of a parsed TOML
    document, with the ``FLATGATE_PROXY_*`` / ``FLATGATE_STUB_*`` variables of
    ``environ`` laid over it (``None``: ``os.environ``); ``[]`` when it is good."""
    env = os.environ if environ is None else environ
    try:
        data = overlay_env(data, env, _SECTIONS)
    except ConfigError as exc:
        return list(exc.problems)
    return _parse(data, env)[1]


def parse_config(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Validate a parsed TOML document; raises ``ConfigError`` listing every
    problem, each naming its key."""
    config, problems = _parse(data, environ)
    if config is None:
        raise ConfigError(*problems)
    return config


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read and validate a config file (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default), with ``FLATGATE_PROXY_*`` / ``FLATGATE_STUB_*`` overrides."""
    env = os.environ if environ is None else environ
    return parse_config(overlay_env(read_document(path, env), env, _SECTIONS), env)
