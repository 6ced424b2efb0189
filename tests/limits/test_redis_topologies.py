"""The Redis Cluster and Sentinel harness (``tests.redistopology``), checked
with redis-py's own cluster and Sentinel clients against real servers.

These test the servers the cluster- and Sentinel-aware limits store will be
tested on: that the slot map is whole, that keys land where the harness says,
that replicas hold what WAIT promised, and that a killed master's replica
takes over and clients follow it. The session's cluster is only read here;
the tests that fail over or kill share the module's (``healed_redis_cluster``).
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator

import pytest
import redis
from redis.asyncio import cluster as aiocluster
from redis.asyncio.sentinel import Sentinel

from tests.redisserver import unique_prefix
from tests.redistopology import (
    HOST,
    SLOTS,
    ClusterTopology,
    Role,
    SentinelTopology,
    command,
    key_slot,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


async def cluster_client(
    cluster: ClusterTopology, password: str | None = None
) -> aiocluster.RedisCluster:
    client = aiocluster.RedisCluster(
        startup_nodes=[aiocluster.ClusterNode(h, p) for h, p in cluster.startup_nodes],
        password=password,
        decode_responses=True,
        socket_timeout=2,
        socket_connect_timeout=2,
    )
    await client.initialize()
    return client


def unauthenticated(port: int, line: str) -> bytes:
    """One inline command with no AUTH (redis-py would retry its HELLO for
    seconds before it gave up); the first line of the answer."""
    with socket.create_connection((HOST, port), timeout=2) as s:
        s.sendall(line.encode() + b"\r\n")
        with s.makefile("rb") as answer:
            return answer.readline()


@pytest.fixture
async def client(redis_cluster: ClusterTopology) -> AsyncIterator[aiocluster.RedisCluster]:
    made = await cluster_client(redis_cluster)
    try:
        yield made
    finally:
        await made.aclose()


def test_the_slot_map_covers_every_slot_over_three_masters(redis_cluster: ClusterTopology) -> None:
    masters = redis_cluster.masters()
    assert len(masters) == 3
    ranges = sorted(r for m in masters for r in m.slots)
    assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
    for (_, high), (low, _) in itertools.pairwise(ranges):
        assert low == high + 1, ranges  # no gap, no overlap
    assert sum(high - low + 1 for low, high in ranges) == SLOTS
    replicas = [redis_cluster.replica_of(m) for m in masters]
    assert all(r.role is Role.REPLICA and not r.slots for r in replicas)
    assert len({r.port for r in replicas} | {m.port for m in masters}) == 6
    # Every node knows each replica as such (a failover needs it), not only
    # the replica and its master.
    for port in redis_cluster.live_ports():
        seen = redis_cluster.nodes_seen_by(port)
        assert {(n.port, n.master_id) for n in seen if n.role is Role.REPLICA} == {
            (r.port, r.master_id) for r in replicas
        }
        assert not any(n.failed for n in seen)


@pytest.mark.parametrize("key", ["tenant-a", "{tenant-a}:rpm", "x{}y", "{}{b}", "a{b}{c}", "é{"])
def test_key_slot_is_the_servers(redis_cluster: ClusterTopology, key: str) -> None:
    port = redis_cluster.masters()[0].port
    assert key_slot(key) == command(port, "CLUSTER", "KEYSLOT", key)


async def test_a_tagged_key_lives_on_each_master(
    redis_cluster: ClusterTopology, client: aiocluster.RedisCluster
) -> None:
    name = unique_prefix()
    masters = redis_cluster.masters()
    keys = [redis_cluster.key_on_node(m, name) for m in masters]
    assert len({key_slot(k) for k in keys}) == 3
    for master, key in zip(masters, keys, strict=True):
        assert master.holds(key_slot(key))
        assert await client.set(key, master.port)
        # The master itself answers (no MOVED): the key is on it.
        assert command(master.port, "GET", key) == str(master.port)
        node = client.get_node_from_key(key)
        assert node is not None and node.port == master.port


def test_a_write_is_on_the_replica_after_wait(redis_cluster: ClusterTopology) -> None:
    master = redis_cluster.masters()[1]
    replica = redis_cluster.replica_of(master)
    key = redis_cluster.key_on_node(master, unique_prefix())
    with redis.Redis(host=HOST, port=master.port, decode_responses=True) as primary:
        primary.set(key, "42")
        assert primary.wait(1, 5000) == 1
    with redis.Redis(host=HOST, port=replica.port, decode_responses=True) as copy:
        copy.execute_command("READONLY")
        assert copy.get(key) == "42"


def test_a_dead_masters_replica_promotes_itself(healed_redis_cluster: ClusterTopology) -> None:
    """No one asks: after about two node timeouts the replica takes over,
    and a late ``failover`` is then a no-op. (The next test's ``heal``
    restarts the dead one.)"""
    cluster = healed_redis_cluster
    master = cluster.masters()[1]
    replica = cluster.replica_of(master)
    cluster.kill(master)
    promoted = cluster.wait_promoted(replica, timeout=20)
    assert promoted.slots == master.slots
    cluster.failover(replica)
    assert cluster.node(replica.port).role is Role.MASTER
    # A node down: waiting for the cluster fails at once, and says why.
    with pytest.raises(RuntimeError, match=rf"nodes \[{master.port}\] are down") as failed:
        cluster.wait_ready(timeout=10)
    assert f"-- {master.port} is down (exit -9); its log ends:" in str(failed.value)
    assert f"-- {replica.port} (bus " in str(failed.value)


async def test_the_sentinels_name_the_primary(redis_sentinel: SentinelTopology) -> None:
    primary = redis_sentinel.primary()
    assert primary == (HOST, redis_sentinel.data[0].port)
    assert redis_sentinel.replica() == (HOST, redis_sentinel.data[1].port)
    sentinel = Sentinel(redis_sentinel.sentinel_addresses, socket_timeout=2)
    assert await sentinel.discover_master(redis_sentinel.master_name) == primary
    master = sentinel.master_for(redis_sentinel.master_name, decode_responses=True)
    try:
        assert await master.set("k", "v")
        assert await master.wait(1, 5000) == 1
    finally:
        await master.aclose()
        for s in sentinel.sentinels:
            await s.aclose()
    assert command(redis_sentinel.data[1].port, "GET", "k") == "v"
