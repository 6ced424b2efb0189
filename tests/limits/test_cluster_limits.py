"""Tenants' limits, stored responses and backends' leases in a Redis Cluster
(``[state] store = "redis+cluster://..."``), served by real ``flatgate
gateway`` processes over the real clusters of ``tests.redisfixtures``.

On the session's cluster (never killed), one pair of gateways of two workers
each, one seeded with every node and one with a single replica (it finds the
masters itself): one GCRA count per tenant for three tenants whose keys are
on three different masters, each tenant's keys found on its master alone; a
stored response chained across the pair; and (two routers in this process)
a backend's ``max_outstanding`` counted once. On a cluster of the test's own:
a master killed mid-count under either ``on_store_error`` policy, its replica
taking over, and the count going on from what the replica held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from benchmarks.inmemory import FakeTransport
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.errors import ProxyError
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.wire.request import build_request
from tests.limits.test_shared_limits import (
    ACME,
    Shot,
    gateway_config,
    gcra_bounds,
    post,
    rate_headers,
    stub,
    worker_connections,
)
from tests.redisserver import unique_prefix
from tests.redistopology import HOST, ClusterNode, ClusterTopology, Role, command, key_slot
from tests.servers import Server, running
from tests.stacks import QUIET, Fields, write_stack

__all__ = [
    "assert_policy",
    "keys_on",
    "stub",
    "until_limited",
]

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RPM = 60  # each of the pair's three tenants' requests_per_minute
STEMS = ("acme", "globex", "initech")  # one tenant on each master
SCRIBE = "sk-cluster-scribe"  # a tenant with no limits, for stored responses
FAILOVER_RPM = 3  # acme's in the failover test: 20 s per request refilled
BODY = build_request("m", [("user", "hi")])


def addresses(nodes: Sequence[tuple[str, int]]) -> str:
    return ",".join(f"{host}:{port}" for host, port in nodes)


def limit_key(prefix: str, tenant: str) -> str:
    """A key of ``tenant``'s limits: its slot is the tenant's (the hash tag)."""
    return f"{prefix}:{{{tenant}}}:rpm"


def tenant_on(master: ClusterNode, prefix: str, stem: str) -> str:
    """The first ``<stem>-<n>`` whose limits' keys are in a slot ``master`` holds."""
    n = 0
    while not master.holds(key_slot(limit_key(prefix, f"{stem}-{n}"))):
        n += 1
    return f"{stem}-{n}"


def keys_on(port: int, match: str, password: str | None = None) -> set[str]:
    """The keys one node holds (``SCAN`` asks that node alone) matching ``match``."""
    with redis.Redis(host=HOST, port=port, password=password, decode_responses=True) as client:
        return {str(k) for k in client.scan_iter(match=match, count=1000)}


def replica_port(port: int) -> bool:
    """Whether the node on ``port`` says it is a replica."""
    role = command(port, "ROLE")
    return isinstance(role, list) and role[0] == "slave"


def assert_policy(shot: Shot, policy: str) -> None:
    """``shot`` is what ``on_store_error = policy`` answers while the store is out."""
    if policy == "open":
        assert (shot.status, rate_headers(shot)) == (200, {}), (shot.status, shot.code)
    else:
        assert (shot.status, shot.code) == (503, "limits_unavailable"), (shot.status, shot.code)
        assert int(shot.headers["retry-after"]) >= 1


async def until_limited(
    client: httpx.AsyncClient,
    url: str,
    key: str,
    policy: str,
    *,
    gap: list[Shot],
    seconds: float,
) -> Shot:
    """Post until an answer carries the limits' headers again (the store is
    back), each earlier answer the policy's (appended to ``gap``); fails
    after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        shot = await post(client, url, key)
        if rate_headers(shot):
            return shot
        assert_policy(shot, policy)
        gap.append(shot)
        assert time.monotonic() < deadline, f"no limits within {seconds} s ({len(gap)} answers)"
        await asyncio.sleep(0.1)


@dataclass
class ClusterPair:
    """Two gateways of two workers each over the session's cluster."""

    a: Server  # seeded with every node
    b: Server  # seeded with one replica
    cluster: ClusterTopology
    prefix: str
    tenants: dict[int, str]  # a master's port -> the tenant whose keys it holds


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, stub: Server, redis_cluster: ClusterTopology
) -> Iterator[ClusterPair]:
    d = tmp_path_factory.mktemp("cluster-pair")
    prefix = unique_prefix()
    masters = redis_cluster.masters()
    tenants = {m.port: tenant_on(m, prefix, stem) for m, stem in zip(masters, STEMS, strict=True)}
    # A replica, by its own word (ROLE): another node's CLUSTER NODES may
    # not have heard of its role yet (gossip, under a long node timeout).
    seed = next(p for p in redis_cluster.live_ports() if replica_port(p))
    stores = {
        "a": "redis+cluster://" + addresses(redis_cluster.startup_nodes),
        "b": f"redis+cluster://{HOST}:{seed}",
    }
    limits = [{"tenant": t, "requests_per_minute": RPM} for t in tenants.values()]
    keys: dict[str, str] = {f"sk-{t}": t for t in tenants.values()}
    configs = {}
    for name, store in stores.items():
        # "closed", and a generous timeout: a slow store must show as 503s,
        # never let requests through uncounted.
        state = {
            "store": store,
            "key_prefix": prefix,
            "on_store_error": "closed",
            "timeout_ms": 5000,
        }
        configs[name] = write_stack(
            d / f"{name}.toml",
            proxy=QUIET,
            backends={"fbs": stub.url},
            routes={"echo": "fbs"},
            edge=QUIET,
            models={"echo": "SelfHosted"},
            keys={**keys, SCRIBE: "scribe"},
            state=state,
            limits=limits,
        )
    with (
        running("gateway", ["--config", configs["a"], "--workers", "2"], d) as a,
        running("gateway", ["--config", configs["b"], "--workers", "2"], d) as b,
    ):
        yield ClusterPair(a, b, redis_cluster, prefix, tenants)


async def test_one_count_per_tenant_with_tenants_on_three_masters(pair: ClusterPair) -> None:
    """For each of three tenants at once, 200 requests round-robin over both
    instances (four workers) get exactly what one GCRA count allows in the
    run's time; instance b, which knew one replica, found all three masters.
    Each master holds its own tenant's keys and no other's."""
    total, concurrency, spread = 200, 24, 3.0
    urls = [pair.a.url, pair.b.url]
    keys = [f"sk-{t}" for t in pair.tenants.values()]
    shots: dict[str, list[Shot]] = {k: [] for k in keys}
    turns = {k: iter(range(total)) for k in keys}

    async def client_loop(client: httpx.AsyncClient, key: str, start: float) -> None:
        for i in turns[key]:  # shared by the key's loops: each request is taken once
            await asyncio.sleep(start + i * spread / total - time.monotonic())
            shots[key].append(await post(client, urls[i % 2], key))

    clients = [httpx.AsyncClient(timeout=60) for _ in range(concurrency * len(keys))]
    try:
        start = time.monotonic()
        loops = (client_loop(c, keys[i % len(keys)], start) for i, c in enumerate(clients))
        await asyncio.gather(*loops)
        held = [worker_connections(pair.a), worker_connections(pair.b)]
    finally:
        for c in clients:
            await c.aclose()
    assert all(len(h) == 2 and min(h) > 0 for h in held), held  # all four answered

    for key, answered in shots.items():
        ok = [s for s in answered if s.status == 200]
        others = [(s.status, s.code) for s in answered if s.status not in (200, 429)]
        assert len(answered) == total and not others, (key, others[:5])
        for s in answered:
            if s.status == 429:
                assert (s.code, s.type) == ("tenant_rate_limited", "rate_limit_error")
            else:
                assert s.headers["x-ratelimit-limit-requests"] == str(RPM)
        low, high = gcra_bounds(answered, RPM)
        print(f"{key}: allowed {len(ok)}, bound [{low}, {high}]")
        assert low <= len(ok) <= high, key

    masters = pair.cluster.masters()
    assert {m.port for m in masters} == set(pair.tenants), "the session's cluster failed over"
    for master in masters:
        found = keys_on(master.port, f"{pair.prefix}:{{*")
        mine = f"{pair.prefix}:{{{pair.tenants[master.port]}}}:"
        assert found and all(k.startswith(mine) for k in found), (master.port, mine, found)


def blobs(pair: ClusterPair) -> int:
    """The stored-response blobs (``<key_prefix>:blob:...``) on every master."""
    match = f"{pair.prefix}:blob:*"
    return sum(len(keys_on(m.port, match)) for m in pair.cluster.masters())


async def respond(client: httpx.AsyncClient, gateway: Server, **fields: Any) -> dict[str, Any]:
    """``POST /v1/responses`` as the scribe tenant; the answer's JSON."""
    r = await client.post(
        f"{gateway.url}/v1/responses",
        json={"model": "echo", **fields},
        headers={"authorization": f"Bearer {SCRIBE}"},
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def output_text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


async def test_a_stored_response_chains_across_instances(pair: ClusterPair) -> None:
    """Stored through one instance, chained on through the other: the second
    turn reaches the backend with the first's input and output before it."""
    before = blobs(pair)
    async with httpx.AsyncClient(timeout=30) as client:
        first = await respond(client, pair.a, input="first question asked", store=True)
        assert output_text(first) == "first question asked"
        second = await respond(
            client, pair.b, input="and a second one", store=True, previous_response_id=first["id"]
        )
        assert output_text(second) == "and a second one"
        assert (first["usage"]["input_tokens"], second["usage"]["input_tokens"]) == (3, 3 + 3 + 4)
        r = await client.get(
            f"{pair.a.url}/v1/responses/{second['id']}",
            headers={"authorization": f"Bearer {SCRIBE}"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["previous_response_id"] == first["id"]
    assert blobs(pair) == before + 4  # each turn's input and output, in the cluster


@dataclass
class Routers:
    """Two routers (instances) in this process over the session's cluster."""

    one: ProxyServer
    two: ProxyServer
    prefix: str


@pytest.fixture
async def routers(redis_cluster: ClusterTopology) -> AsyncIterator[Routers]:
    """Backend ``a`` with ``max_outstanding = 1``, its only route's."""
    prefix = unique_prefix()
    config = {
        "proxy": {"access_log": False},
        "state": {
            "store": "redis+cluster://" + addresses(redis_cluster.startup_nodes),
            "key_prefix": prefix,
            "timeout_ms": 2000.0,
        },
        "backends": [{"name": "a", "url": "http://127.0.0.1:9", "max_outstanding": 1}],
        "routes": [{"model": "*", "backends": ["a"]}],
    }
    cfg = parse_config(config, environ={})
    one, two = ProxyServer(cfg, worker="w1"), ProxyServer(cfg, worker="w2")
    try:
        for s in (one, two):
            s._transport = FakeTransport()
        yield Routers(one, two, prefix)
    finally:
        for s in (one, two):
            assert s.quota is not None
            await s.quota.aclose()


async def test_a_backends_lease_is_one_count_across_instances(
    routers: Routers, redis_cluster: ClusterTopology
) -> None:
    """One instance holds backend a's only lease: the other is refused
    (``backends_busy``) until it is released; the lease is a key in the
    ``{backends}`` slot, on the master that holds that slot."""
    one, two = routers.one, routers.two
    target_one, target_two = one.routes.lookup(0, b"m"), two.routes.lookup(0, b"m")
    assert target_one is not None and target_two is not None
    opened = await one.dispatcher.open(target_one, BODY, "r1")
    with pytest.raises(ProxyError) as info:
        await two.dispatcher.open(target_two, BODY, "r2")
    assert info.value.code.code == "backends_busy"
    assert two.backends["a"].outstanding == 0  # nothing was sent

    slot = key_slot(f"{routers.prefix}:{{backends}}")
    for master in redis_cluster.masters():
        found = keys_on(master.port, f"{routers.prefix}:*")
        if master.holds(slot):
            assert found and all(k.startswith(f"{routers.prefix}:{{backends}}:") for k in found)
        else:
            assert not found, (master.port, found)

    await opened.close()
    assert one.quota is not None
    await one.quota.limiter.flush()  # the release is off the request's path
    again = await two.dispatcher.open(target_two, BODY, "r3")
    await again.close()


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_a_master_killed_mid_count_and_its_replica_taking_over(
    policy: str, stub: Server, own_redis_cluster: ClusterTopology, tmp_path: Path
) -> None:
    """acme's master killed after two of its three requests a minute (and
    WAIT: its replica holds them): requests pass unlimited ("open") or get
    503 ``limits_unavailable`` ("closed"); its replica taken over, the limits
    apply again by themselves, counting on from the replica's count."""
    cluster = own_redis_cluster
    prefix = unique_prefix()
    master = next(m for m in cluster.masters() if m.holds(key_slot(limit_key(prefix, "acme"))))
    replica = cluster.replica_of(master)
    state = {
        "store": "redis+cluster://" + addresses(cluster.startup_nodes),
        "key_prefix": prefix,
        "on_store_error": policy,
        "timeout_ms": 1000,
    }
    limits: list[Fields] = [{"tenant": "acme", "requests_per_minute": FAILOVER_RPM}]
    cfg = gateway_config(tmp_path / "g.toml", stub, state, limits)
    with running("gateway", ["--config", cfg, "--workers", "1"], tmp_path) as gw:
        async with httpx.AsyncClient(timeout=30) as client:
            spent = [await post(client, gw.url, ACME) for _ in range(2)]
            assert [(s.status, s.headers["x-ratelimit-remaining-requests"]) for s in spent] == [
                (200, "2"),
                (200, "1"),
            ]
            assert command(master.port, "WAIT", 1, 5000) == 1

            cluster.kill(master)
            killed = time.time()
            # Its slots are nobody's until a replica takes them (a node
            # timeout at least, a second): these see the store out.
            gap = [await post(client, gw.url, ACME) for _ in range(3)]
            for s in gap:
                assert_policy(s, policy)
            cluster.failover(replica)  # TAKEOVER: the master is dead
            back = await until_limited(client, gw.url, ACME, policy, gap=gap, seconds=30)
            print(
                f"{policy}: limits back {back.answered - killed:.2f} s after the kill "
                f"({len(gap)} answers in the gap), remaining "
                f"{back.headers['x-ratelimit-remaining-requests']}"
            )
            # A fresh count would say 2; the replica's says 0 (1 once 20 s
            # have passed since the first request: the deadline is 30 s).
            assert back.status == 200
            assert int(back.headers["x-ratelimit-remaining-requests"]) < FAILOVER_RPM - 1
            assert gw.proc.poll() is None

    promoted = cluster.node(replica.port)
    assert promoted.role is Role.MASTER and promoted.holds(key_slot(limit_key(prefix, "acme")))
    assert keys_on(replica.port, f"{prefix}:{{acme}}:*")
