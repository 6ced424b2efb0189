"""A store's ``waits``: the per-check Retry-After it is given for the checks
whose state does not say when they free up (``algorithms.GIVEN_WAIT``), read
check by check and for no other; the store knows nothing of what they mean."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from flatgate.proxy.limits import MemoryStore, RedisStore
from flatgate.proxy.limits.algorithms import DAY, REQUESTS
from flatgate.proxy.limits.rules import Check, Plan
from flatgate.proxy.limits.store import Ask, Store
from tests.redisserver import RedisServer, unique_prefix


def plan_of(prefix: str, *checks: tuple[int, int]) -> Plan:
    return Plan(
        "acme",
        [
            Check(kind, amount, f"{prefix}:{{acme}}:{i}", f"check {i}")
            for i, (kind, amount) in enumerate(checks)
        ],
    )


def test_waits_on_fills_the_given_checks_only() -> None:
    plan = plan_of("p", (REQUESTS, 10), (DAY, 1000), (DAY, 50))
    assert plan.waits_at == (1, 2)
    assert plan.waits_on(42.5) == [0.0, 42.5, 42.5]
    assert plan.args[2::3] == ("0", "0", "0")  # placeholders, one per check
    rpm = plan_of("p", (REQUESTS, 10))
    assert rpm.waits_at == () and rpm.waits_on(42.5) is rpm.no_waits == (0.0,)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        made: Store = MemoryStore()
    else:
        redis: RedisServer = request.getfixturevalue("shared_redis")
        made = RedisStore(redis.url, key_prefix=unique_prefix(), server_time=False)
    yield made
    await made.aclose()


async def test_a_refusal_waits_its_own_checks_wait(store: Store) -> None:
    plan = plan_of(unique_prefix(), (DAY, 20), (DAY, 10))
    keys, now = plan.keys, 100.0

    async def acquire(estimate: int, waits: list[float]) -> tuple[int, float, list[float]]:
        ask = Ask(plan, keys, now, estimate=estimate, lease_id="", ttl=30.0, waits=waits)
        return await store.acquire(ask)

    assert await acquire(8, [100.0, 7.0]) == (-1, 0.0, [8.0, 8.0])
    # Check 1 alone refuses: its wait, not check 0's, is the Retry-After.
    assert await acquire(5, [100.0, 7.0]) == (1, 7.0, [8.0, 8.0])
    # Both refuse: the longer wait, and the check that set it.
    assert await acquire(15, [3.5, 7.0]) == (1, 7.0, [8.0, 8.0])
    assert await acquire(15, [9.25, 7.0]) == (0, 9.25, [8.0, 8.0])


async def test_a_wait_is_read_only_where_the_state_does_not_say(store: Store) -> None:
    plan = plan_of(unique_prefix(), (REQUESTS, 1), (DAY, 10))
    keys, now = plan.keys, 100.0
    waits = [999.0, 7.0]  # the rate's entry is never read
    ask = Ask(plan, keys, now, estimate=1, lease_id="", ttl=30.0, waits=waits)
    first = await store.acquire(ask)
    assert first == (-1, 0.0, [60.0, 1.0])
    # The rate refuses with its own wait (its state's: a minute), not 999.
    again = await store.acquire(ask)
    assert again == (0, 60.0, [60.0, 1.0])
