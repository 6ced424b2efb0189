"""Both stores decide alike: the same seeded sequence of acquires, settles,
renewals and clock moves, run against a ``MemoryStore`` and a ``RedisStore``
side by side, gives equal decisions (and equal rate headers) at every step."""

from __future__ import annotations

import random

import pytest

from tests.limits.conftest import Clock, build
from tests.redisserver import RedisServer

pytestmark = pytest.mark.integration

LIMITS = [
    {"tenant": "*", "requests_per_minute": 4, "tokens_per_minute": 3000},
    {"tenant": "*", "model": "big-*", "max_concurrent": 2, "tokens_per_day": 20_000},
    {"tenant": "acme", "requests_per_minute": 13},
    {"tenant": "acme", "model": "big-1", "tokens_per_minute": 1000, "max_concurrent": 3},
]
TENANTS = ["acme", "initech", "globex"]
MODELS = ["big-1", "big-2", "small"]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_memory_and_redis_decide_alike(shared_redis: RedisServer, seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    memory = build("memory", None, clock, LIMITS)
    redis = build("redis", shared_redis, clock, LIMITS)
    held = []
    allowed = 0
    kinds: set[str] = set()
    try:
        for step in range(600):
            where = f"seed {seed}, step {step}"
            op = rng.random()
            if op < 0.6:
                args = (rng.choice(TENANTS), rng.choice(MODELS), rng.choice([0, 1, 90, 700, 5000]))
                ttl = rng.choice([5.0, 40.0])
                a = await memory.acquire(*args, ttl=ttl)
                b = await redis.acquire(*args, ttl=ttl)
                assert a == b, f"{where}: {args}: {a} != {b}"
                assert a.headers() == b.headers(), where
                allowed += a.allowed
                kinds.add(a.limit)
                if a.lease is not None:
                    assert b.lease is not None
                    held.append((a.lease, b.lease))
            elif op < 0.8 and held:
                la, lb = held.pop(rng.randrange(len(held)))
                actual = rng.choice([0, 50, 700, 4000])
                memory.settle(la, actual)
                redis.settle(lb, actual)
                await redis.flush()
            elif op < 0.85 and held:
                la, lb = held[rng.randrange(len(held))]
                ttl = rng.choice([5.0, 40.0])
                assert await memory.renew(la, ttl) == await redis.renew(lb, ttl), where
            else:
                clock.advance(rng.choice([0.001, 0.3, 2.0, 9.0, 45.0, 7_200.0]))
    finally:
        await memory.aclose()
        await redis.aclose()
    # Every path exercised: allowed, and refused by each kind of limit.
    assert allowed > 50
    assert kinds == {
        "",
        "requests_per_minute",
        "tokens_per_minute",
        "max_concurrent",
        "tokens_per_day",
    }
