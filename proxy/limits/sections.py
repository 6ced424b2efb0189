"""The ``[state]``, ``[[limits]]`` and ``[[tenants]]`` sections: one frozen
typed object, and every problem of a document, each naming its key.

``[state]`` says where shared state lives: ``store = "memory"`` (each worker
process counts on its own) or a Redis URL (``redisurl``: one Redis, a
Cluster, or Sentinel; every worker of every instance shares one count); the
passwords come from the environment variables ``password_env`` and
``sentinel_password_env`` name, never from the file or the URL. It holds
the Responses API's stored responses too: for how long, how large each may
be, and (a memory store) how many and how many bytes a worker keeps. A
``[[limits]]`` entry caps one tenant (or, with ``tenant = "*"``, each tenant
that has no entry of its own) on the models its ``model`` glob matches; a
``[[tenants]]`` entry lists the models a tenant may call.

No I/O beyond reading the environment it is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from flatgate.proxy.limits.algorithms import KINDS
from flatgate.proxy.limits.blobs import BlobBounds
from flatgate.proxy.limits.redisurl import Kind, parse_store_url
from flatgate.proxy.plumbing.config import (
    ConfigError,
    Problems,
    convert_entries,
    convert_section,
    overlay_checked,
)

__all__ = [
    "BLOBS_PER_RESPONSE",
    "STATE_OVERLAY",
    "LimitRule",
    "LimitsConfig",
    "StateSection",
    "TenantConfig",
    "limits_problems",
    "parse_limits",
    "sentinel_password",
    "store_password",
]

# A stored response is this many blobs in the store: its input items and its
# output (a memory store's memory_max_responses bounds twice as many blobs).
BLOBS_PER_RESPONSE = 2
_MIB = 1024 * 1024


class StateSection(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # "memory" (per worker process), redis://host[:port][/db],
    # redis+cluster://host:port,... or redis+sentinel://host:port,.../service
    # (rediss... for TLS; see redisurl).
    store: str = "memory"
    # The environment variable holding the Redis password ("": none): every
    # node's of a cluster, the primary's and replicas' behind Sentinel.
    password_env: str = ""
    # The environment variable holding the sentinels' own password ("": none;
    # redis+sentinel:// only).
    sentinel_password_env: str = ""
    # Longest wait for one store operation (a pooled connection, the
    # connect, the round trip), in milliseconds.
    timeout_ms: float = 50.0
    # Connections to the store, per worker process.
    pool_size: int = 32
    # The store unreachable or too slow: "open" lets requests through
    # (unlimited, no rate headers), "closed" refuses them (503).
    on_store_error: Literal["open", "closed"] = "open"
    # Every key the store writes starts with "<key_prefix>:".
    key_prefix: str = "flatgate"
    # Completion tokens reserved against tokens_per_minute / tokens_per_day
    # for a request that sets no max_tokens (settled to the usage reported).
    default_max_tokens: int = 4096
    # Longest wait for one operation on a stored response (a blob of up to
    # max_stored_response_bytes, on connections of its own), in milliseconds.
    blob_timeout_ms: float = 2000.0
    # Connections to the store for stored responses, per worker process.
    blob_pool_size: int = 4
    # How long a stored response (store: true) is kept: 30 days, as OpenAI's.
    responses_ttl_seconds: float = 2_592_000.0
    # The most bytes one stored response may take, its input items and its
    # output together; a larger one is not stored (the answer still goes out,
    # and a continuation of it is a 400 saying why). Above the edge's default
    # max_body_bytes and an answer: a request the edge admits, images and
    # all, can be stored (its chain is charged to that request's body).
    max_stored_response_bytes: int = 40 * _MIB
    # A memory store, per worker process: the most stored responses it keeps,
    # and their bytes in all; past either, the least recently used go first.
    memory_max_responses: int = 1000
    memory_max_response_bytes_total: int = 64 * _MIB
    # Each tenant's share of the stored responses, in any store (a memory
    # store's per worker process, a Redis store's in all): past either, that
    # tenant's own oldest go first (a memory store's least recently used).
    # A memory store's whole, full, lets go of the fullest tenant's.
    max_responses_per_tenant: int = 100
    max_response_bytes_per_tenant: int = 64 * _MIB

    @property
    def is_memory(self) -> bool:
        return self.store == "memory"

    def blob_bounds(self) -> BlobBounds:
        """The store's bounds on its blobs (a stored response is
        ``BLOBS_PER_RESPONSE`` of them; a tenant is a group)."""
        return BlobBounds(
            BLOBS_PER_RESPONSE * self.memory_max_responses,
            self.memory_max_response_bytes_total,
            BLOBS_PER_RESPONSE * self.max_responses_per_tenant,
            self.max_response_bytes_per_tenant,
        )

    def same_store(self, other: StateSection) -> bool:
        """Whether ``other`` names the same store, the same way (a reload
        that changes only the policy keys keeps the store and its counts)."""
        return (
            self.store,
            self.password_env,
            self.sentinel_password_env,
            self.timeout_ms,
            self.pool_size,
            self.key_prefix,
            self.blob_timeout_ms,
            self.blob_pool_size,
        ) == (
            other.store,
            other.password_env,
            other.sentinel_password_env,
            other.timeout_ms,
            other.pool_size,
            other.key_prefix,
            other.blob_timeout_ms,
            other.blob_pool_size,
        )


class LimitRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # An exact tenant, or "*": each tenant without rules of its own.
    tenant: str
    # Exact name or glob (fnmatch, case-sensitive); a glob counts every model
    # it matches together.
    model: str = "*"
    requests_per_minute: int | None = None
    # Prompt and completion tokens together.
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    # Per UTC day.
    tokens_per_day: int | None = None

    def limits(self) -> list[tuple[str, int]]:
        """``(kind, amount)`` for each limit set, in ``KINDS`` order."""
        return [(k, v) for k in KINDS if (v := getattr(self, k)) is not None]


class TenantConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    # Names or globs of the models the tenant may call (absent: every model;
    # empty: none).
    models: tuple[str, ...] | None = None


class LimitsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    state: StateSection = StateSection()
    limits: tuple[LimitRule, ...] = ()
    tenants: tuple[TenantConfig, ...] = ()

    def tenant_models(self) -> dict[str, tuple[str, ...] | None]:
        """Each ``[[tenants]]`` name to its ``models`` allow-list."""
        return {t.name: t.models for t in self.tenants}


# FLATGATE_STATE_<KEY> overlays, for plumbing.config.overlay_env.
STATE_OVERLAY: dict[str, tuple[str, ...]] = {"state": StateSection.__struct_fields__}
_SECTIONS = ("state", "limits", "tenants")


def _secret(name: str, environ: Mapping[str, str] | None) -> str | None:
    if not name:
        return None
    return (os.environ if environ is None else environ).get(name) or None


def store_password(state: StateSection, environ: Mapping[str, str] | None = None) -> str | None:
    """The store's password from ``password_env`` (``None``: none configured)."""
    return _secret(state.password_env, environ)


def sentinel_password(state: StateSection, environ: Mapping[str, str] | None = None) -> str | None:
    """The sentinels' password from ``sentinel_password_env`` (``None``: none)."""
    return _secret(state.sentinel_password_env, environ)


def _state_problems(s: StateSection, environ: Mapping[str, str], problems: Problems) -> None:
    address = None
    if not s.is_memory:
        try:
            address = parse_store_url(s.store)
        except ValueError as exc:
            problems.append(f"state.store: {exc}")
    if s.password_env:
        if s.is_memory:
            problems.append('state.password_env: applies to a Redis store only (store = "memory")')
        elif not environ.get(s.password_env):
            problems.append(f"state.password_env: environment variable {s.password_env} is not set")
    if s.sentinel_password_env:
        if address is None or address.kind is not Kind.SENTINEL:
            problems.append(
                "state.sentinel_password_env: applies to a redis+sentinel:// store only"
            )
        elif not environ.get(s.sentinel_password_env):
            problems.append(
                "state.sentinel_password_env: environment variable "
                f"{s.sentinel_password_env} is not set"
            )
    problems.above("state.timeout_ms", s.timeout_ms)
    problems.at_least("state.pool_size", s.pool_size, 1)
    problems.at_least("state.default_max_tokens", s.default_max_tokens, 1)
    problems.above("state.blob_timeout_ms", s.blob_timeout_ms)
    problems.at_least("state.blob_pool_size", s.blob_pool_size, 1)
    problems.above("state.responses_ttl_seconds", s.responses_ttl_seconds)
    problems.at_least("state.max_stored_response_bytes", s.max_stored_response_bytes, 1)
    problems.at_least("state.memory_max_responses", s.memory_max_responses, 1)
    problems.at_least("state.memory_max_response_bytes_total", s.memory_max_response_bytes_total, 1)
    problems.at_least("state.max_responses_per_tenant", s.max_responses_per_tenant, 1)
    problems.at_least("state.max_response_bytes_per_tenant", s.max_response_bytes_per_tenant, 1)
    if s.is_memory and 1 <= s.memory_max_response_bytes_total < s.max_stored_response_bytes:
        problems.append(
            "state.max_stored_response_bytes: a memory store keeps at most "
            f"state.memory_max_response_bytes_total ({s.memory_max_response_bytes_total}) "
            f"in all, got {s.max_stored_response_bytes}"
        )
    if 1 <= s.max_response_bytes_per_tenant < s.max_stored_response_bytes:
        problems.append(
            "state.max_stored_response_bytes: a tenant keeps at most "
            f"state.max_response_bytes_per_tenant ({s.max_response_bytes_per_tenant}), "
            f"got {s.max_stored_response_bytes}"
        )
    if not s.key_prefix or any(c in s.key_prefix for c in "{}: "):
        problems.append(
            f"state.key_prefix: must be non-empty, without spaces, ':', '{{' or '}}', "
            f"got {s.key_prefix!r}"
        )


def _limit_problems(rules: list[tuple[int, LimitRule]], problems: Problems) -> None:
    seen: dict[tuple[str, str], int] = {}
    for i, r in rules:
        where = f"limits[{i}]"
        if not r.tenant:
            problems.append(f'{where}.tenant: must not be empty (a tenant, or "*")')
        if not r.model:
            problems.append(f'{where}.model: must not be empty (a name, a glob, or "*")')
        if not r.limits():
            problems.append(f"{where}: sets no limit (one or more of {', '.join(KINDS)})")
        for kind, amount in r.limits():
            problems.at_least(f"{where}.{kind}", amount, 1)
        first = seen.setdefault((r.tenant, r.model), i)
        if first != i:
            problems.append(
                f"{where}.model: limits[{first}] already limits tenant {r.tenant!r} on "
                f"{r.model!r}; put the limits in one entry"
            )


def _tenant_problems(tenants: list[tuple[int, TenantConfig]], problems: Problems) -> None:
    seen: dict[str, int] = {}
    for i, t in tenants:
        where = f"tenants[{i}]"
        if not t.name or t.name == "*":
            problems.append(f'{where}.name: must be a tenant\'s name (not empty, not "*")')
        first = seen.setdefault(t.name, i)
        if first != i:
            problems.append(f"{where}.name: tenants[{first}] already names {t.name!r}")
        for j, glob in enumerate(t.models or ()):
            if not glob:
                problems.append(f"{where}.models[{j}]: must not be empty")


def _parse(
    data: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[LimitsConfig | None, Problems]:
    problems = Problems()
    overlaid = overlay_checked(data, environ, STATE_OVERLAY, problems)
    if overlaid is None:
        return None, problems
    convert_section(
        overlaid, "state", StateSection, problems, lambda s, p: _state_problems(s, environ, p)
    )
    _limit_problems(convert_entries(overlaid, "limits", LimitRule, problems), problems)
    _tenant_problems(convert_entries(overlaid, "tenants", TenantConfig, problems), problems)
    if problems:
        return None, problems
    ours = {k: v for k, v in overlaid.items() if k in _SECTIONS}
    return msgspec.convert(ours, LimitsConfig), problems


def limits_problems(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of the ``[state]``, ``[[limits]]`` and ``[[tenants]]``
    sections of a parsed TOML document (other sections are not read), with
    ``FLATGATE_STATE_*`` variables of ``environ`` (``None``: ``os.environ``)
    laid over ``[state]``; ``[]`` when they are good."""
    return _parse(data, os.environ if environ is None else environ)[1]


def parse_limits(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> LimitsConfig:
    """The three sections of a parsed TOML document as one ``LimitsConfig``;
    raises ``ConfigError`` listing every problem, each naming its key."""
    config, problems = _parse(data, os.environ if environ is None else environ)
    if config is None:
        raise ConfigError(*problems)
    return config
