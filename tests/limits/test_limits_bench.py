"""``benchmarks.limits_bench`` runs (a few requests per row)."""

from __future__ import annotations

from benchmarks import limits_bench
from benchmarks.limits_topology import running_cluster, running_sentinel
from tests.redisserver import RedisServer


def test_memory_rows() -> None:
    rows = limits_bench.memory_rows(100, 1)
    assert len(rows) == 3 * 3 + 1 and all(us > 0 for _, _, us in rows)


def test_redis_rows(shared_redis: RedisServer) -> None:
    rows = limits_bench.redis_rows(shared_redis.url, 20)
    assert [op for _, op, _, _ in rows] == ["acquire", "settle"] * 2
    assert all(0 < p50 <= p99 for _, _, p50, p99 in rows)


def test_store_rows_and_failover_gap_on_a_cluster() -> None:
    with running_cluster() as cluster:
        (row,) = limits_bench.store_rows({"cluster": cluster.url}, 20)
        assert row.kind == "cluster" and row.cpu > 0
        assert [op for _, op, _, _ in row.times] == ["acquire", "settle"] * 2
        assert all(0 < p50 <= p99 for _, _, p50, p99 in row.times)
        master = cluster.master_of(limits_bench.tenant_slot())
        gap, what = limits_bench.cluster_gap(cluster)
        # The limiter's map named the killed master: its acquires failed
        # (allowed: on_store_error = open) until the replica's slots were asked.
        assert gap.seconds > 0 and f"master {master} killed" in what
        assert set(gap.outcomes) == {"store_unavailable (allowed)"}
        assert gap.reasons.total() >= gap.outcomes.total() >= 1
        assert cluster.master_of(limits_bench.tenant_slot()) != master


def test_failover_gap_on_sentinel() -> None:
    with running_sentinel(sentinels=1) as sentinels:
        primary = sentinels.primary()
        gap, what = limits_bench.sentinel_gap(sentinels, on_store_error="closed")
        assert gap.seconds > 0 and f"primary {primary} killed" in what and "quorum 1" in what
        assert set(gap.outcomes) == {"store_unavailable (refused)"}
        assert sentinels.primary() != primary
