"""``RedisStore`` on a real Redis Cluster (``redis+cluster://``): the slot
map found from one seed, each tenant's keys on the master of its slot,
``MOVED`` and ``ASK`` followed within the operation, commands batched per
node, and a killed master's slots reached again once its replica takes
over (only that master's tenants see the gap)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from flatgate.proxy.limits import RedisStore
from flatgate.proxy.limits.rediscluster import SLOTS, ClusterConnections, key_slot
from flatgate.proxy.limits.redisconn import encode
from flatgate.proxy.limits.rules import Plan, RuleSet
from flatgate.proxy.limits.sections import LimitRule
from flatgate.proxy.limits.store import Ask, StoreError
from tests.redisfixtures import running_cluster
from tests.redisserver import unique_prefix
from tests.redistopology import HOST, ClusterNode, ClusterTopology, command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RPM = 3


def cluster_url(cluster: ClusterTopology, seeds: int | None = None) -> str:
    nodes = cluster.startup_nodes[:seeds]
    return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in nodes)


def routed(store: RedisStore) -> ClusterConnections:
    conns = store._conns
    assert isinstance(conns, ClusterConnections)
    return conns


async def acquire(
    store: RedisStore, plan: Plan, lease: str = "l"
) -> tuple[int, float, list[float]]:
    ask = Ask(plan, plan.keys, 0.0, estimate=1, lease_id=lease, ttl=30.0, waits=plan.no_waits)
    return await store.acquire(ask)


def port_of(store: RedisStore, key: str) -> int | None:
    """The port of the node the store's map sends ``key`` to."""
    node = routed(store)._by_slot[key_slot(key)]
    return None if node is None else node.address[1]


def scan(port: int, prefix: str) -> set[str]:
    """The keys under ``prefix`` that this node holds."""
    found = command(port, "KEYS", f"{prefix}:*")
    assert isinstance(found, list)
    return {str(k) for k in found}


@pytest.fixture
async def store(redis_cluster: ClusterTopology) -> AsyncIterator[RedisStore]:
    # A generous bound: the first operation asks the map and connects.
    made = RedisStore(cluster_url(redis_cluster, seeds=1), key_prefix=unique_prefix())
    made._timeout = 5.0
    try:
        yield made
    finally:
        await made.aclose()


def rules_for(store: RedisStore) -> RuleSet:
    return RuleSet([LimitRule(tenant="*", requests_per_minute=RPM)], store._prefix)


async def test_one_seed_finds_every_master_and_each_tenant_counts_on_its_own(
    redis_cluster: ClusterTopology, store: RedisStore
) -> None:
    rules = rules_for(store)
    masters = redis_cluster.masters()
    for master in masters:
        plan = rules.plan(redis_cluster.tag_on_node(master), "m")
        answers = [(await acquire(store, plan, f"l{i}"))[0] for i in range(RPM + 1)]
        assert answers == [-1] * RPM + [0]  # RPM allowed, then refused on its own count
        assert scan(master.port, store._prefix) == set(plan.keys)
    mapped = {n.address for n in routed(store)._by_slot if n is not None}
    assert mapped == {(HOST, m.port) for m in masters}


async def test_a_moved_reply_is_followed_in_the_same_operation(
    redis_cluster: ClusterTopology, store: RedisStore
) -> None:
    rules = rules_for(store)
    first, second = redis_cluster.masters()[:2]
    plan = rules.plan(redis_cluster.tag_on_node(first), "m")
    await store.ping()
    conns = routed(store)
    wrong = conns._node(HOST, second.port)
    conns._by_slot = [wrong] * SLOTS  # as if every slot had moved
    assert (await acquire(store, plan))[0] == -1  # MOVED, followed
    assert scan(first.port, store._prefix) == set(plan.keys)
    assert not scan(second.port, store._prefix)
    # The slot is put right at once; the rest of the map by a refresh.
    assert port_of(store, plan.keys[0]) == first.port
    masters = redis_cluster.masters()
    holders = [next(m.port for m in masters if m.holds(s)) for s in range(SLOTS)]

    def refreshed() -> bool:
        return [n.address[1] if n else None for n in conns._by_slot] == holders

    deadline = asyncio.get_running_loop().time() + 10
    while not refreshed():
        assert asyncio.get_running_loop().time() < deadline, "the map was not refreshed"
        await asyncio.sleep(0.05)


def node_id(cluster: ClusterTopology, master: ClusterNode) -> str:
    return cluster.node(master.port).node_id


async def test_an_ask_reply_is_followed_with_asking(
    redis_cluster: ClusterTopology, store: RedisStore
) -> None:
    """A slot migrating from A to B: A answers ASK for keys it lacks, and the
    store sends the script to B after ASKING; the keys land on B."""
    rules = rules_for(store)
    a, b = redis_cluster.masters()[:2]
    tenant = redis_cluster.tag_on_node(a, start=1000)
    plan = rules.plan(tenant, "m")
    slot = key_slot(plan.keys[0])
    command(b.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(redis_cluster, a))
    command(a.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(redis_cluster, b))
    try:
        assert (await acquire(store, plan))[0] == -1
        assert not scan(a.port, store._prefix)
        assert command(b.port, "CLUSTER", "COUNTKEYSINSLOT", slot) == len(plan.keys)
        assert port_of(store, plan.keys[0]) == a.port  # ASK moves nothing
    finally:
        # Put the slot back as it was: B's keys deleted, both stable.
        with_asking = [encode("ASKING"), encode("DEL", *plan.keys)]
        await routed(store)._node(HOST, b.port).pipeline(with_asking)
        for port in (a.port, b.port):
            command(port, "CLUSTER", "SETSLOT", slot, "STABLE")
    assert command(b.port, "CLUSTER", "COUNTKEYSINSLOT", slot) == 0


async def test_batched_commands_go_in_one_pipeline_per_node(
    redis_cluster: ClusterTopology, store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    masters = redis_cluster.masters()
    keys = [f"{store._prefix}:{{{redis_cluster.tag_on_node(m)}}}:n" for m in masters]
    await store.ping()
    conns = routed(store)
    for key in keys:  # every master's node in the map
        await conns.call(encode("DEL", key), key)
    sent: list[tuple[int, int]] = []
    for node in {n for n in conns._by_slot if n is not None}:
        original = node.pipeline

        async def spy(
            commands: Sequence[bytes], port: int = node.address[1], o: Any = original
        ) -> Any:
            sent.append((port, len(commands)))
            return await o(commands)

        monkeypatch.setattr(node, "pipeline", spy)
    replies = await asyncio.gather(*(conns.batch(encode("INCR", k), k) for k in keys * 2))
    assert sorted(replies) == [1, 1, 1, 2, 2, 2]
    assert sorted(sent) == sorted((m.port, 2) for m in masters)


async def test_blobs_backends_and_usage_live_on_the_cluster(
    redis_cluster: ClusterTopology, store: RedisStore
) -> None:
    for n in range(6):  # blob keys spread over the masters
        assert await store.put_blob(f"chain-{n}", b"x" * n, 30.0)
    assert [await store.get_blob(f"chain-{n}") for n in range(6)] == [b"x" * n for n in range(6)]
    assert await store.delete_blob("chain-0") and await store.get_blob("chain-0") is None
    assert await store.backend_acquire("vllm", "lease-1", 30.0, 2, 0.0) == 1
    assert await store.backend_acquire("vllm", "lease-2", 30.0, 2, 0.0) == 2
    assert await store.backend_counts(["vllm", "other"], 0.0) == [2, 0]
    await store.backend_release("vllm", "lease-1")
    assert await store.backend_counts(["vllm"], 0.0) == [1]
    await store.add_usage("20261201", [("acme:m:requests", 2)])
    assert await store.usage("20261201") == {"acme:m:requests": 2}


async def test_a_killed_masters_tenants_are_served_again_once_its_replica_takes_over(
    own_redis_cluster: ClusterTopology,
) -> None:
    cluster = own_redis_cluster
    victim, other = cluster.masters()[:2]
    replica = cluster.replica_of(victim)
    # Seeded with another master only: the victim is known from the map.
    url = f"redis+cluster://{HOST}:{other.port}"
    store = RedisStore(url, key_prefix=unique_prefix(), timeout_ms=1000)
    try:
        rules = rules_for(store)
        hit = rules.plan(cluster.tag_on_node(victim), "m")
        spared = rules.plan(cluster.tag_on_node(other), "m")
        assert (await acquire(store, hit, "a"))[0] == -1
        assert command(victim.port, "WAIT", 1, 5000) == 1  # the replica holds the count
        cluster.kill(victim)
        with pytest.raises(StoreError):
            await acquire(store, hit, "b")
        assert (await acquire(store, spared, "c"))[0] == -1  # another master's tenant
        cluster.failover(replica)
        cluster.wait_promoted(replica, timeout=30)

        async def served() -> tuple[int, float, list[float]] | None:
            try:
                return await acquire(store, hit, "d")
            except StoreError:
                return None

        deadline = asyncio.get_running_loop().time() + 30
        while (found := await served()) is None:
            assert asyncio.get_running_loop().time() < deadline, routed(store)._problem
            await asyncio.sleep(0.1)
        # The count went on from what the replica held: GCRA's level is two
        # requests' worth (40 s at 3 a minute) less the time since, where a
        # fresh count would be one request's (20 s).
        assert found[0] == -1 and 25.0 < found[2][0] <= 40.0, found
        assert port_of(store, hit.keys[0]) == replica.port
        mapped = {n.address[1] for n in routed(store)._by_slot if n is not None}
        assert victim.port not in mapped and replica.port in mapped
        assert (HOST, victim.port) not in routed(store)._nodes  # its connections closed
    finally:
        await store.aclose()


async def test_a_cluster_with_a_password(tmp_path: Path) -> None:
    """``password_env``'s password on every node: the store reaches each
    master with it, and without it is refused (``NOAUTH``), not hung."""
    with running_cluster(tmp_path, password="cluster-secret") as cluster:
        url = cluster_url(cluster, seeds=1)
        store = RedisStore(url, password="cluster-secret", key_prefix=unique_prefix())
        store._timeout = 5.0
        try:
            rules = rules_for(store)
            for master in cluster.masters():
                assert (await acquire(store, rules.plan(cluster.tag_on_node(master), "m")))[0] == -1
        finally:
            await store.aclose()
        bare = RedisStore(url, key_prefix=unique_prefix())
        bare._timeout = 5.0
        try:
            with pytest.raises(StoreError, match=r"NOAUTH|Authentication"):
                await bare.ping()
        finally:
            await bare.aclose()
