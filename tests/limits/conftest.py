"""Limiters over either store, with a clock the test moves.

``make_limiter`` (parametrized: ``memory`` and ``redis``) builds limiters
from ``[[limits]]`` entries; the Redis ones share the session's
``redis-server`` under a key prefix of their own, and read the test's clock
(``server_time=False``), so both stores see the same times.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from flatgate.proxy.limits import Limiter, MemoryStore, RedisStore, parse_limits
from tests.redisfixtures import (
    healed_redis_cluster,
    module_redis_cluster,
    own_redis_cluster,
    redis_cluster,
    redis_sentinel,
)
from tests.redisserver import RedisServer, redis_server, shared_redis, unique_prefix

# The fixtures imported here are one per session (per module, per test) for
# every module below, not one per importing module.
__all__ = [
    "Clock",
    "MakeLimiter",
    "healed_redis_cluster",
    "module_redis_cluster",
    "own_redis_cluster",
    "redis_cluster",
    "redis_sentinel",
    "redis_server",
    "shared_redis",
]

# 2026-03-01T00:00:00Z, plus a quarter of a day.
START = 1_772_323_200.0 + 21_600.0


class Clock:
    """Unix time that moves only when told."""

    def __init__(self, t: float = START) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


MakeLimiter = Callable[..., Limiter]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def build(
    kind: str,
    redis: RedisServer | None,
    clock: Clock,
    limits: list[dict[str, Any]],
    *,
    tenants: list[dict[str, Any]] | None = None,
    state: dict[str, Any] | None = None,
    prefix: str | None = None,
) -> Limiter:
    prefix = prefix or unique_prefix()
    config = parse_limits(
        {
            "limits": limits,
            "tenants": tenants or [],
            "state": {"key_prefix": prefix, **(state or {})},
        },
        environ={},
    )
    if kind == "memory":
        store: MemoryStore | RedisStore = MemoryStore()
    else:
        assert redis is not None
        store = RedisStore(redis.url, key_prefix=prefix, server_time=False, timeout_ms=2000)
    return Limiter(config, store, clock=clock)


@pytest.fixture(params=["memory", "redis"])
async def make_limiter(
    request: pytest.FixtureRequest, shared_redis: RedisServer, clock: Clock
) -> AsyncIterator[MakeLimiter]:
    made: list[Limiter] = []

    def make(limits: list[dict[str, Any]], **options: Any) -> Limiter:
        limiter = build(request.param, shared_redis, clock, limits, **options)
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        await limiter.aclose()
