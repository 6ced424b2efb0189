"""Tenants' limits and the shared store: ``[state]``, ``[[limits]]`` and
``[[tenants]]``, each key said once with its default and its comment. Their
checks and the environment overlay are ``limits.sections``'. No I/O.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

__all__ = [
    "BLOBS_PER_RESPONSE",
    "KINDS",
    "LimitRule",
    "LimitsConfig",
    "StateSection",
    "TenantConfig",
]

# The limits a [[limits]] entry may set, in the order they are checked (the
# one table of them: the config's keys, the metrics' labels; ``limits.algorithms``
# numbers them).
KINDS: Final = ("requests_per_minute", "tokens_per_minute", "max_concurrent", "tokens_per_day")
_MIB = 1024 * 1024

# A stored response is this many blobs in the store: its input items and its
# output (a memory store's memory_max_responses bounds twice as many blobs).
BLOBS_PER_RESPONSE = 2


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
