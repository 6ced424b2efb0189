"""Every algorithm, on both stores (``make_limiter`` is parametrized), with a
clock the test moves: GCRA rates and their headers, token reservations and
their settlement, leased concurrency, day budgets, all or nothing."""

from __future__ import annotations

import asyncio

import pytest
from pytest import approx

from flatgate.proxy.limits import Decision, Outcome
from tests.limits.conftest import Clock, MakeLimiter

pytestmark = pytest.mark.integration


async def test_requests_burst_then_refill(make_limiter: MakeLimiter, clock: Clock) -> None:
    lim = make_limiter([{"tenant": "*", "requests_per_minute": 60}])
    for i in range(60):
        d = await lim.acquire("acme", "m")
        assert d.allowed and d.outcome is Outcome.ALLOWED, i
        assert d.requests == approx((60, 59 - i, i + 1.0))
    d = await lim.acquire("acme", "m")
    assert not d.allowed and d.outcome is Outcome.LIMITED
    assert d.limit == "requests_per_minute"
    assert d.message == "requests_per_minute (60) for tenant acme"
    assert d.retry_after == pytest.approx(1.0)
    assert d.requests == approx((60, 0, 60.0))  # a refusal charges nothing
    clock.advance(1.0)
    assert (await lim.acquire("acme", "m")).allowed
    assert not (await lim.acquire("acme", "m")).allowed
    clock.advance(30.0)  # half a minute: 30 more
    assert sum([(await lim.acquire("acme", "m")).allowed for _ in range(31)]) == 30


async def test_tenants_count_apart(make_limiter: MakeLimiter) -> None:
    lim = make_limiter([{"tenant": "*", "requests_per_minute": 1}])
    assert (await lim.acquire("a", "m")).allowed
    assert (await lim.acquire("b", "m")).allowed
    assert not (await lim.acquire("a", "m")).allowed


async def test_headers(make_limiter: MakeLimiter, clock: Clock) -> None:
    lim = make_limiter([{"tenant": "acme", "requests_per_minute": 10, "tokens_per_minute": 6000}])
    d = await lim.acquire("acme", "m", estimate=1500)
    assert d.headers() == [
        ("x-ratelimit-limit-requests", "10"),
        ("x-ratelimit-remaining-requests", "9"),
        ("x-ratelimit-reset-requests", "6s"),
        ("x-ratelimit-limit-tokens", "6000"),
        ("x-ratelimit-remaining-tokens", "4500"),
        ("x-ratelimit-reset-tokens", "15s"),
    ]
    for _ in range(3):
        await lim.acquire("acme", "m", estimate=1500)
    clock.advance(0.5)
    d = await lim.acquire("acme", "m", estimate=1500)
    assert not d.allowed and d.limit == "tokens_per_minute"
    assert d.message == "tokens_per_minute (6000) for tenant acme"
    assert d.retry_after == pytest.approx(14.5)  # 1500 tokens are 15 s of the rate
    assert dict(d.headers()) == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "6",  # the refused request took nothing
        "x-ratelimit-reset-requests": "23.5s",
        "x-ratelimit-limit-tokens": "6000",
        "x-ratelimit-remaining-tokens": "50",
        "x-ratelimit-reset-tokens": "59.5s",
        "retry-after": "15",
    }


async def test_no_rule_no_headers(make_limiter: MakeLimiter) -> None:
    lim = make_limiter([{"tenant": "acme", "max_concurrent": 1}])
    d = await lim.acquire("other", "m")
    assert d.allowed and d.lease is None and d.headers() == []
    d = await lim.acquire("acme", "m")
    assert d.allowed and d.lease is not None and d.headers() == []


async def test_tokens_settle_gives_back_and_charges(
    make_limiter: MakeLimiter, clock: Clock
) -> None:
    lim = make_limiter([{"tenant": "*", "tokens_per_minute": 1000}])
    d = await lim.acquire("acme", "m", estimate=800)
    assert d.allowed and d.tokens == approx((1000, 200, 48.0))
    assert not (await lim.acquire("acme", "m", estimate=300)).allowed
    lim.settle(d.lease, 100)  # used 100 of the 800 reserved: 700 back
    await lim.flush()
    d = await lim.acquire("acme", "m", estimate=300)
    assert d.allowed and d.tokens == approx((1000, 600, 24.0))
    lim.settle(d.lease, 1500)  # used more than reserved: the rate is in debt
    await lim.flush()
    d = await lim.acquire("acme", "m", estimate=0)
    assert not d.allowed and d.limit == "tokens_per_minute"
    assert d.retry_after == pytest.approx(36.0)
    clock.advance(36.0)
    assert (await lim.acquire("acme", "m", estimate=0)).allowed


async def test_settle_once(make_limiter: MakeLimiter) -> None:
    lim = make_limiter([{"tenant": "*", "tokens_per_minute": 1000}])
    d = await lim.acquire("acme", "m", estimate=500)
    lim.settle(d.lease, 0)
    lim.settle(d.lease, 0)  # ignored: a second refund would bank tokens
    await lim.flush()
    assert (await lim.acquire("acme", "m", estimate=1)).tokens == approx((1000, 999, 0.06))


async def test_estimate_above_the_rate_waits_for_a_full_bucket(
    make_limiter: MakeLimiter, clock: Clock
) -> None:
    lim = make_limiter([{"tenant": "*", "tokens_per_minute": 100, "tokens_per_day": 10_000}])
    d = await lim.acquire("acme", "m", estimate=5000)
    assert d.allowed and d.tokens == approx((100, 0, 60.0))
    d2 = await lim.acquire("acme", "m", estimate=5000)
    assert not d2.allowed and d2.retry_after == pytest.approx(60.0)
    # The minute reserved min(5000, 100): settled at 100, no change; the day
    # reserved 5000 and gets 4900 back.
    lim.settle(d.lease, 100)
    await lim.flush()
    clock.advance(60.0)
    assert (await lim.acquire("acme", "m", estimate=5000)).allowed
    clock.advance(60.0)
    assert (await lim.acquire("acme", "m", estimate=4900)).allowed  # the day: 10,000 used
    clock.advance(60.0)
    d3 = await lim.acquire("acme", "m", estimate=1)
    assert not d3.allowed and d3.limit == "tokens_per_day"


async def test_concurrency_release_and_ttl(make_limiter: MakeLimiter, clock: Clock) -> None:
    lim = make_limiter([{"tenant": "*", "max_concurrent": 2}])
    a = await lim.acquire("acme", "m", ttl=30.0)
    b = await lim.acquire("acme", "m", ttl=30.0)
    c = await lim.acquire("acme", "m", ttl=30.0)
    assert a.allowed and b.allowed and not c.allowed
    assert c.limit == "max_concurrent" and c.retry_after == 1.0
    assert c.message == "max_concurrent (2) for tenant acme"
    lim.release(a.lease)
    await lim.flush()
    assert (await lim.acquire("acme", "m", ttl=30.0)).allowed
    assert not (await lim.acquire("acme", "m")).allowed
    # Nobody releases (a worker died): the slots free at their TTL.
    clock.advance(29.9)
    assert not (await lim.acquire("acme", "m")).allowed
    clock.advance(0.1)
    assert (await lim.acquire("acme", "m", ttl=30.0)).allowed


async def test_renew_keeps_a_long_stream(make_limiter: MakeLimiter, clock: Clock) -> None:
    lim = make_limiter([{"tenant": "*", "max_concurrent": 1}])
    d = await lim.acquire("acme", "m", ttl=10.0)
    for _ in range(3):
        clock.advance(8.0)
        assert await lim.renew(d.lease, 10.0)
        assert not (await lim.acquire("acme", "m")).allowed
    clock.advance(10.0)
    assert not await lim.renew(d.lease, 10.0)  # expired: its slot may be gone
    assert (await lim.acquire("acme", "m")).allowed


async def test_day_budget(make_limiter: MakeLimiter, clock: Clock) -> None:
    lim = make_limiter([{"tenant": "*", "tokens_per_day": 1000}])
    d = await lim.acquire("acme", "m", estimate=600)
    assert d.allowed
    d2 = await lim.acquire("acme", "m", estimate=600)
    assert not d2.allowed and d2.limit == "tokens_per_day"
    assert d2.retry_after == pytest.approx(18 * 3600)  # to UTC midnight
    assert d2.message == "tokens_per_day (1000) for tenant acme"
    # Exhausted mid-way: the request used more than it reserved.
    lim.settle(d.lease, 1200)
    await lim.flush()
    assert not (await lim.acquire("acme", "m", estimate=1)).allowed
    assert not (await lim.acquire("acme", "m", estimate=0)).allowed
    clock.advance(18 * 3600)  # a new UTC day, a new budget
    assert (await lim.acquire("acme", "m", estimate=1000)).allowed


async def test_settle_after_midnight_corrects_the_day_charged(
    make_limiter: MakeLimiter, clock: Clock
) -> None:
    lim = make_limiter([{"tenant": "*", "tokens_per_day": 1000}])
    d = await lim.acquire("acme", "m", estimate=900)
    clock.advance(18 * 3600)
    lim.settle(d.lease, 0)  # gives back to yesterday, not today
    await lim.flush()
    assert (await lim.acquire("acme", "m", estimate=1000)).allowed
    assert not (await lim.acquire("acme", "m", estimate=1)).allowed


async def test_all_or_nothing(make_limiter: MakeLimiter) -> None:
    lim = make_limiter(
        [
            {"tenant": "*", "requests_per_minute": 100, "tokens_per_minute": 10_000},
            {"tenant": "*", "model": "big-*", "max_concurrent": 1, "tokens_per_day": 10**6},
        ]
    )
    held = await lim.acquire("acme", "big-1", estimate=100)
    assert held.allowed
    for _ in range(5):  # the second rule refuses: the first is not charged
        d = await lim.acquire("acme", "big-2", estimate=100)
        assert not d.allowed and d.limit == "max_concurrent"
        assert d.message == "max_concurrent (1) for tenant acme, model big-*"
        assert d.requests == approx((100, 99, 0.6)) and d.tokens == approx((10_000, 9_900, 0.6))
    d = await lim.acquire("acme", "small", estimate=100)
    assert d.requests == approx((100, 98, 1.2)) and d.tokens == approx((10_000, 9_800, 1.2))


async def test_glob_rule_counts_its_models_together(make_limiter: MakeLimiter) -> None:
    lim = make_limiter(
        [
            {"tenant": "*", "model": "gpt-*", "requests_per_minute": 2},
            {"tenant": "*", "model": "claude-3", "requests_per_minute": 1},
            {"tenant": "vip", "requests_per_minute": 100},
        ]
    )
    assert (await lim.acquire("acme", "gpt-4o")).allowed
    assert (await lim.acquire("acme", "gpt-5")).allowed
    d = await lim.acquire("acme", "gpt-4o-mini")
    assert not d.allowed and d.message == "requests_per_minute (2) for tenant acme, model gpt-*"
    assert (await lim.acquire("acme", "claude-3")).allowed
    assert not (await lim.acquire("acme", "claude-3")).allowed
    assert (await lim.acquire("acme", "llama")).headers() == []  # no rule matches
    # A tenant with rules of its own is not under the "*" rules.
    assert all([(await lim.acquire("vip", "gpt-4o")).allowed for _ in range(50)])


async def test_reload_keeps_counts(make_limiter: MakeLimiter) -> None:
    lim = make_limiter([{"tenant": "*", "requests_per_minute": 2}])
    store = lim.store
    assert (await lim.acquire("acme", "m")).allowed
    config = lim.config
    lim.reload(
        type(config)(
            state=config.state,
            limits=(*config.limits, type(config.limits[0])(tenant="*", max_concurrent=5)),
        )
    )
    assert lim.store is store
    assert (await lim.acquire("acme", "m")).allowed
    d = await lim.acquire("acme", "m")
    assert not d.allowed and d.limit == "requests_per_minute"


async def test_decisions_compare_by_content(make_limiter: MakeLimiter) -> None:
    lim = make_limiter([{"tenant": "*", "requests_per_minute": 5}])
    a = await lim.acquire("acme", "m")
    assert isinstance(a, Decision) and a != await lim.acquire("acme", "m")
    assert "requests" in repr(a)


async def test_concurrent_tasks_never_exceed(make_limiter: MakeLimiter) -> None:
    lim = make_limiter([{"tenant": "*", "max_concurrent": 3, "requests_per_minute": 50}])
    first = await asyncio.gather(*(lim.acquire("acme", "m") for _ in range(20)))
    assert sum(d.allowed for d in first) == 3
    for d in first:
        lim.release(d.lease)
    await lim.flush()
    allowed = 0
    for _ in range(20):
        wave = await asyncio.gather(*(lim.acquire("acme", "m") for _ in range(10)))
        assert sum(d.allowed for d in wave) <= 3
        allowed += sum(d.allowed for d in wave)
        for d in wave:
            lim.release(d.lease)
        await lim.flush()
    assert allowed == 47  # the minute's 50, less the first 3 (20 waves could take 60)
