"""The ``[state]``, ``[[limits]]`` and ``[[tenants]]`` sections (declared in
``document.limits``): every problem of a document, each naming its key, the
``FLATGATE_STATE_*`` overlay, and the store's bounds on its blobs.

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
from typing import Any

import msgspec

from flatgate.proxy.document.limits import (
    BLOBS_PER_RESPONSE,
    KINDS,
    LimitRule,
    LimitsConfig,
    StateSection,
    TenantConfig,
)
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
    "blob_bounds",
    "limits_problems",
    "parse_limits",
    "sentinel_password",
    "store_password",
]

# FLATGATE_STATE_<KEY> overlays, for plumbing.config.overlay_env.
STATE_OVERLAY: dict[str, tuple[str, ...]] = {"state": StateSection.__struct_fields__}
_SECTIONS = ("state", "limits", "tenants")


def blob_bounds(state: StateSection) -> BlobBounds:
    """The store's bounds on its blobs (a stored response is
    ``BLOBS_PER_RESPONSE`` of them; a tenant is a group)."""
    return BlobBounds(
        BLOBS_PER_RESPONSE * state.memory_max_responses,
        state.memory_max_response_bytes_total,
        BLOBS_PER_RESPONSE * state.max_responses_per_tenant,
        state.max_response_bytes_per_tenant,
    )


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
