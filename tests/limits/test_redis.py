"""What only the Redis store has: outages (open and closed, logged once each
way, recovery without a restart), timeouts, scripts the server forgot, its
own clock, key expiry, a password, and many workers and instances at once."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from flatgate.proxy.limits import (
    Limiter,
    Outcome,
    RedisStore,
    SharedBackends,
    StoreError,
    parse_limits,
    scripts,
)
from tests.limits.conftest import Clock, build
from tests.redisserver import RedisServer, unique_prefix

pytestmark = pytest.mark.integration

RPM = [{"tenant": "*", "requests_per_minute": 1000}]


def limiter(server: RedisServer | str, policy: str, timeout_ms: float = 500) -> Limiter:
    url = server if isinstance(server, str) else server.url
    config = parse_limits(
        {
            "state": {"store": url, "on_store_error": policy, "timeout_ms": timeout_ms},
            "limits": RPM,
        },
        environ={},
    )
    return Limiter(config)


def store_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "flatgate.limits"]


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_outage_and_recovery(
    redis_server: RedisServer, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flatgate.limits")
    lim = limiter(redis_server, policy)
    try:
        d = await lim.acquire("acme", "m")
        assert d.outcome is Outcome.ALLOWED and d.headers()
        redis_server.kill()
        for _ in range(5):
            d = await lim.acquire("acme", "m")
            assert d.outcome is Outcome.STORE_UNAVAILABLE
            if policy == "open":
                assert d.allowed and d.headers() == [] and d.lease is None
            else:
                assert not d.allowed and d.limit == "store_unavailable"
                assert d.retry_after == 1.0 and d.headers() == [("retry-after", "1")]
        assert not lim.health.up and lim.health.errors == 5
        assert lim.refused["store_unavailable"] == (5 if policy == "closed" else 0)
        lines = store_lines(caplog)
        assert len(lines) == 1 and "unavailable" in lines[0] and redis_server.url in lines[0]
        assert ("allowing" if policy == "open" else "refusing") in lines[0]
        redis_server.start()  # the same port: the pool reconnects by itself
        for _ in range(3):
            d = await lim.acquire("acme", "m")
            assert d.outcome is Outcome.ALLOWED and d.headers()
        lines = store_lines(caplog)
        assert len(lines) == 2 and "answers again" in lines[1]
        metrics = {m.name: m.samples[0].value for m in lim.collect("flatgate")}
        assert metrics["flatgate_limits_store_up"] == 1.0
        assert metrics["flatgate_limits_store_errors"] == 5
    finally:
        await lim.aclose()


async def test_settle_during_an_outage_is_counted_not_raised(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_limits(
        {"state": {"store": redis_server.url}, "limits": [{"tenant": "*", "max_concurrent": 5}]},
        environ={},
    )
    lim = Limiter(config)
    try:
        d = await lim.acquire("acme", "m")
        redis_server.kill()
        lim.settle(d.lease, 10)
        await lim.flush()
        assert not lim.health.up and lim.health.errors == 1
        assert len(store_lines(caplog)) == 1
    finally:
        await lim.aclose()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_a_silent_store_times_out(silent_port: int, policy: str) -> None:
    lim = limiter(f"redis://127.0.0.1:{silent_port}/0", policy, timeout_ms=50)
    try:
        started = time.monotonic()
        d = await lim.acquire("acme", "m")
        elapsed = time.monotonic() - started
        assert d.outcome is Outcome.STORE_UNAVAILABLE and d.allowed is (policy == "open")
        assert elapsed < 1.0
        assert lim.health.errors == 1 and not lim.health.up
    finally:
        await lim.aclose()


async def test_an_unreachable_store_raises_store_error_only() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout_ms=200)
    try:
        with pytest.raises(StoreError):
            await store.ping()
        with pytest.raises(StoreError):
            await store.cooldowns(0.0)
    finally:
        await store.aclose()


async def test_a_forgotten_script_is_sent_again(shared_redis: RedisServer) -> None:
    lim = build("redis", shared_redis, Clock(), [{"tenant": "*", "requests_per_minute": 2}])
    admin = Redis.from_url(shared_redis.url)
    try:
        assert (await lim.acquire("acme", "m")).allowed
        await admin.script_flush()
        assert (await admin.script_exists(scripts.ACQUIRE.sha)) == [False]
        assert (await lim.acquire("acme", "m")).allowed  # NOSCRIPT, then EVAL
        assert (await admin.script_exists(scripts.ACQUIRE.sha)) == [True]
        assert not (await lim.acquire("acme", "m")).allowed
    finally:
        await admin.aclose()
        await lim.aclose()


async def test_server_time(shared_redis: RedisServer) -> None:
    """Production mode: the scripts read Redis' TIME, not the caller's clock."""
    prefix = unique_prefix()
    config = parse_limits(
        {
            "state": {"store": shared_redis.url, "key_prefix": prefix},
            "limits": [
                {"tenant": "*", "model": "a", "requests_per_minute": 6},
                {"tenant": "*", "model": "b", "max_concurrent": 2},
            ],
        },
        environ={},
    )
    wrong = Clock(0.0)  # the caller's clock is far off; only the date comes from it
    lim = Limiter(config, clock=wrong)
    assert isinstance(lim.store, RedisStore) and lim.store.server_time
    try:
        decisions = [await lim.acquire("acme", "a") for _ in range(7)]
        assert [d.allowed for d in decisions] == [True] * 6 + [False]
        assert 9.0 < decisions[-1].retry_after <= 10.0  # 6 a minute: one every 10 s
        assert decisions[-1].requests is not None
        assert 59.0 < decisions[-1].requests.reset <= 60.0
        held = [await lim.acquire("acme", "b", ttl=1.0) for _ in range(3)]
        assert [d.allowed for d in held] == [True, True, False]
        await asyncio.sleep(1.05)  # by Redis' clock, the leases have expired
        assert (await lim.acquire("acme", "b", ttl=1.0)).allowed
    finally:
        await lim.aclose()


async def test_keys_expire_with_their_state(shared_redis: RedisServer) -> None:
    prefix = unique_prefix()
    lim = build(
        "redis",
        shared_redis,
        Clock(),
        [
            {
                "tenant": "*",
                "requests_per_minute": 60,
                "tokens_per_day": 1000,
                "max_concurrent": 2,
            }
        ],
        prefix=prefix,
    )
    admin = Redis.from_url(shared_redis.url, decode_responses=True)
    try:
        await lim.acquire("ac:me", "m", estimate=10, ttl=30.0)
        keys = sorted(await admin.keys(f"{prefix}:*"))
        assert keys == [
            f"{prefix}:{{ac%3Ame}}:conc:*",
            f"{prefix}:{{ac%3Ame}}:rpm:*",
            f"{prefix}:{{ac%3Ame}}:tpd:*:20260301",
        ]
        ttls = [await admin.pttl(k) for k in keys]
        assert 30_000 < ttls[0] <= 31_000  # the lease's TTL, and a second
        assert 1_000 < ttls[1] <= 2_000  # one request at 60 a minute: 1 s, and a second
        assert 2 * 86_400_000 - 60_000 < ttls[2] <= 2 * 86_400_000
    finally:
        await admin.aclose()
        await lim.aclose()


async def test_password_from_the_environment(redis_server: RedisServer) -> None:
    redis_server.stop()
    redis_server.start("--requirepass", "s3cret")
    document = {
        "state": {"store": redis_server.url, "password_env": "FG_TEST_REDIS_PASSWORD"},
        "limits": RPM,
    }
    env = {"FG_TEST_REDIS_PASSWORD": "s3cret"}
    good = Limiter(parse_limits(document, env), environ=env)
    bad = RedisStore(redis_server.url, password="wrong", timeout_ms=500)
    try:
        assert (await good.acquire("acme", "m")).outcome is Outcome.ALLOWED
        with pytest.raises(StoreError) as caught:
            await bad.ping()
        assert "s3cret" not in str(caught.value)
    finally:
        await good.aclose()
        await bad.aclose()


async def test_two_instances_never_exceed_the_limits(shared_redis: RedisServer) -> None:
    """Many tasks on two stores (two "instances"): never more than
    max_concurrent slots held at once, never more than requests_per_minute
    allowed at once."""
    prefix = unique_prefix()
    clock = Clock()
    slots = [{"tenant": "*", "max_concurrent": 5}]
    a, b = (build("redis", shared_redis, clock, slots, prefix=prefix) for _ in range(2))
    holding = peak = allowed = 0

    async def worker(lim: Limiter, n: int) -> None:
        nonlocal holding, peak, allowed
        for _ in range(n):
            d = await lim.acquire("acme", "m", ttl=60.0)
            if not d.allowed:
                await asyncio.sleep(0)
                continue
            allowed += 1
            holding += 1
            peak = max(peak, holding)
            await asyncio.sleep(0.001)
            holding -= 1
            lim.release(d.lease)  # lands later: Redis holds it at least as long

    rates = [{"tenant": "*", "requests_per_minute": 120}]
    c, d = (build("redis", shared_redis, clock, rates, prefix=prefix) for _ in range(2))
    try:
        await asyncio.gather(*(worker(lim, 40) for lim in (a, b) for _ in range(8)))
        assert peak == 5 and allowed > 5
        burst = await asyncio.gather(*(lim.acquire("x", "m") for lim in (c, d) for _ in range(150)))
        assert sum(r.allowed for r in burst) == 120
    finally:
        for lim in (a, b, c, d):
            await lim.aclose()


async def test_shared_backends_without_the_store(redis_server: RedisServer) -> None:
    lim = limiter(redis_server, "open")
    shared = SharedBackends(lim)
    try:
        shared.set_cooldown("gpu-1", 1e12)
        await lim.flush()
        assert await shared.cooldowns() == {"gpu-1": 1e12}
        redis_server.kill()
        lease = await shared.acquire("gpu-1", limit=1, ttl=30.0)
        assert lease is not None and not lease.recorded  # the balancer's own count applies
        shared.release(lease)
        assert await shared.counts(["gpu-1"]) == {}
        shared._read_at = float("-inf")
        assert await shared.cooldowns() == {"gpu-1": 1e12}  # the last known
        await lim.flush()
        # The acquire, the give-back of the lease it may have taken, the
        # counts and the cooldowns: each failed.
        assert lim.health.errors == 4 and not lim.health.up
    finally:
        await lim.aclose()


async def test_a_restart_between_requests_costs_no_request(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    lim = limiter(redis_server, "closed")
    try:
        first = await asyncio.gather(*(lim.acquire("acme", "m") for _ in range(4)))
        assert all(d.outcome is Outcome.ALLOWED for d in first)  # pooled connections
        redis_server.kill()
        redis_server.start()
        for _ in range(6):  # each pooled connection is dead: replaced at once
            assert (await lim.acquire("acme", "m")).outcome is Outcome.ALLOWED
        assert lim.health.errors == 0 and store_lines(caplog) == []
    finally:
        await lim.aclose()
