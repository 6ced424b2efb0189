"""``benchmarks.limits_bench`` runs (a few requests per row)."""

from __future__ import annotations

from benchmarks import limits_bench
from tests.redisserver import RedisServer


def test_memory_rows() -> None:
    rows = limits_bench.memory_rows(100, 1)
    assert len(rows) == 3 * 3 + 1 and all(us > 0 for _, _, us in rows)


def test_redis_rows(shared_redis: RedisServer) -> None:
    rows = limits_bench.redis_rows(shared_redis.url, 20)
    assert [op for _, op, _, _ in rows] == ["acquire", "settle"] * 2
    assert all(0 < p50 <= p99 for _, _, p50, p99 in rows)
