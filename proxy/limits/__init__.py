"""Tenants' limits that hold across workers and instances: the limiter core.

``sections`` (the checks of the ``[state]``, ``[[limits]]`` and ``[[tenants]]``
sections, declared in ``document.limits``),
``rules`` (which limits apply, their keys; ``allowed``, the model
allow-lists), ``algorithms`` (GCRA rates, leased concurrency, day budgets,
and why), ``decision`` (``Decision``, ``Lease``), the stores (``store``'s
interface; ``memory``, per worker process; ``redisstore`` and its
``scripts``, shared), ``health`` (the store's state, logged once per
change), ``limiter`` (``Limiter``: acquire, settle, release) and ``shared``
(backends' outstanding counts and cooldowns, shared).

Knows nothing of HTTP: the apps turn a ``Decision`` into a 429 or 503 and
headers.
"""

from __future__ import annotations

from flatgate.proxy.limits.algorithms import Quota, go_duration
from flatgate.proxy.limits.decision import Decision, Lease, Outcome
from flatgate.proxy.limits.limiter import DEFAULT_LEASE_TTL, Limiter, open_store
from flatgate.proxy.limits.memory import MemoryStore
from flatgate.proxy.limits.redisstore import RedisStore
from flatgate.proxy.limits.rules import allowed
from flatgate.proxy.limits.sections import (
    LimitRule,
    LimitsConfig,
    StateSection,
    TenantConfig,
    limits_problems,
    parse_limits,
)
from flatgate.proxy.limits.shared import BackendLease, SharedBackends
from flatgate.proxy.limits.store import Store, StoreError

__all__ = [
    "DEFAULT_LEASE_TTL",
    "BackendLease",
    "Decision",
    "Lease",
    "LimitRule",
    "Limiter",
    "LimitsConfig",
    "MemoryStore",
    "Outcome",
    "Quota",
    "RedisStore",
    "SharedBackends",
    "StateSection",
    "Store",
    "StoreError",
    "TenantConfig",
    "allowed",
    "go_duration",
    "limits_problems",
    "open_store",
    "parse_limits",
]
