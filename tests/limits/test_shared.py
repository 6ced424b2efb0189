"""Backends' shared state, on both stores: leased outstanding counts and
cooldowns read at most every 100 ms."""

from __future__ import annotations

import pytest

from flatgate.proxy.limits import SharedBackends
from tests.limits.conftest import Clock, MakeLimiter

pytestmark = pytest.mark.integration


async def test_outstanding_counts(make_limiter: MakeLimiter, clock: Clock) -> None:
    shared = SharedBackends(make_limiter([]))
    a = await shared.acquire("gpu-1", limit=2, ttl=30.0)
    b = await shared.acquire("gpu-1", limit=2, ttl=30.0)
    assert a is not None and b is not None and (a.count, b.count) == (1, 2)
    assert await shared.acquire("gpu-1", limit=2, ttl=30.0) is None
    unlimited = await shared.acquire("gpu-1", limit=0, ttl=5.0)
    assert unlimited is not None and unlimited.count == 3
    assert await shared.counts(["gpu-1", "gpu-2"]) == {"gpu-1": 3, "gpu-2": 0}
    shared.release(a)
    shared.release(a)  # once only
    await shared._limiter.flush()
    assert await shared.counts(["gpu-1"]) == {"gpu-1": 2}
    clock.advance(5.0)  # unlimited's lease expires: nobody released it
    assert await shared.counts(["gpu-1"]) == {"gpu-1": 1}
    clock.advance(25.0)
    assert await shared.counts(["gpu-1"]) == {"gpu-1": 0}


async def test_cooldowns_are_shared_and_cached(make_limiter: MakeLimiter, clock: Clock) -> None:
    lim = make_limiter([])
    here = SharedBackends(lim)
    there = SharedBackends(lim)  # another worker: sees the store, through its cache
    assert await there.cooldowns() == {}
    until = clock() + 5.0
    here.set_cooldown("gpu-1", until)
    here.set_cooldown("gpu-1", clock() + 1.0)  # earlier: changes nothing
    assert here.cooling() == {"gpu-1": until}  # at once, here
    await lim.flush()
    assert await there.cooldowns() == {}  # read less than 100 ms ago
    clock.advance(0.101)
    assert await there.cooldowns() == {"gpu-1": until}
    assert there.cooling() == {"gpu-1": until}
    clock.advance(5.0)
    assert await there.cooldowns() == {}
