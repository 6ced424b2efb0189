"""``RedisStore`` behind real Redis Sentinel (``redis+sentinel://``): a
demoted primary (``READONLY``) left for the one the sentinels name now (the
count it held kept), and passwords on the data nodes and the sentinels
alike. ``test_sentinel_limits`` kills a primary under gateways."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from flatgate.proxy.limits import RedisStore
from flatgate.proxy.limits.redissentinel import SentinelConnections
from flatgate.proxy.limits.rules import Plan, RuleSet
from flatgate.proxy.limits.sections import LimitRule
from flatgate.proxy.limits.store import Ask, Raw, StoreError
from tests.redisfixtures import running_sentinel
from tests.redisserver import unique_prefix
from tests.redistopology import SentinelTopology, command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RPM = 3  # 20 s of GCRA level per request


def sentinel_store(topology: SentinelTopology, **options: str | None) -> RedisStore:
    sentinels = ",".join(f"{h}:{p}" for h, p in topology.sentinel_addresses)
    url = f"redis+sentinel://{sentinels}/{topology.master_name}"
    return RedisStore(url, key_prefix=unique_prefix(), timeout_ms=1000, **options)  # type: ignore[arg-type]


def primary_of(store: RedisStore) -> tuple[str, int] | None:
    conns = store._conns
    assert isinstance(conns, SentinelConnections)
    return conns.primary_address


async def acquire(store: RedisStore, plan: Plan, lease: str) -> Raw:
    ask = Ask(plan, plan.keys, 0.0, estimate=1, lease_id=lease, ttl=30.0, waits=plan.no_waits)
    return await store.acquire(ask)


async def served_again(store: RedisStore, plan: Plan, lease: str) -> Raw:
    """The first acquire that the store answers, polling up to 30 s."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await acquire(store, plan, lease)
        except StoreError:
            assert asyncio.get_running_loop().time() < deadline, "never served again"
            await asyncio.sleep(0.1)


def plan_of(store: RedisStore) -> Plan:
    rules = RuleSet([LimitRule(tenant="*", requests_per_minute=RPM)], store._prefix)
    return rules.plan("acme", "m")


async def test_a_demoted_primary_answers_readonly_and_the_store_moves_on(
    redis_sentinel: SentinelTopology,
) -> None:
    """A coordinated failover (``SENTINEL FAILOVER``): the old primary lives
    on as a replica, and a write there is ``READONLY``. Sentinel turns it
    into a replica when it next looks at it (up to 10 s on); the test does
    what Sentinel will (``REPLICAOF`` the new primary) as soon as the
    sentinels name the new one."""
    store = sentinel_store(redis_sentinel)
    try:
        plan = plan_of(store)
        old, replica = redis_sentinel.primary(), redis_sentinel.replica()
        assert (await acquire(store, plan, "a"))[0] == -1
        sentinel = redis_sentinel.sentinels[0].port
        command(sentinel, "SENTINEL", "FAILOVER", redis_sentinel.master_name)
        deadline = asyncio.get_running_loop().time() + 30
        while redis_sentinel.primary() != replica:
            assert asyncio.get_running_loop().time() < deadline, "no failover"
            await asyncio.sleep(0.1)
        command(old[1], "REPLICAOF", *map(str, replica))
        role = command(old[1], "ROLE")
        assert isinstance(role, list) and role[0] == "slave"
        assert redis_sentinel.wait_failover(timeout=30) == replica
        assert primary_of(store) == old
        with pytest.raises(StoreError, match="ReadOnlyError"):
            await acquire(store, plan, "b")
        found = await served_again(store, plan, "c")
        assert found[0] == -1 and primary_of(store) == replica
        # Two requests' level (40 s at 3 a minute) less the time since: the
        # count the new primary took over, not a fresh one (20 s).
        assert 25.0 < found[2][0] <= 40.0, found
    finally:
        await store.aclose()


async def test_passwords_on_the_data_nodes_and_the_sentinels(tmp_path: Path) -> None:
    with running_sentinel(tmp_path, password="data-pw", sentinel_password="sentinel-pw") as t:
        wrong = sentinel_store(t, password="data-pw")  # no sentinel password
        try:
            with pytest.raises(StoreError, match="no primary"):
                await wrong.ping()
        finally:
            await wrong.aclose()
        store = sentinel_store(t, password="data-pw", sentinel_password="sentinel-pw")
        try:
            # Failover with both passwords: test_sentinel_limits, through a gateway.
            assert (await acquire(store, plan_of(store), "a"))[0] == -1
            assert primary_of(store) == t.primary()
        finally:
            await store.aclose()
