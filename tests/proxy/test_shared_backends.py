"""Backends' ``max_outstanding`` and cooldowns counted in a shared Redis
store: two routers (two workers, or two instances) over one real
``redis-server`` see one count and one cooldown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from benchmarks.inmemory import FakeTransport
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.errors import ProxyError
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Upstream, UpstreamConnectError
from flatgate.proxy.wire.request import build_request
from tests.redisserver import RedisServer, shared_redis, unique_prefix

__all__ = ["shared_redis"]

BODY = build_request("m", [("user", "hi")])


class FailingFirst(FakeTransport):
    """Refuses connections to hosts in ``down``; answers the rest."""

    def __init__(self, down: set[str]) -> None:
        super().__init__()
        self.down = down
        self.hosts: list[str] = []

    async def request(self, req: Upstream) -> Any:
        host = req.url.split("//")[1].split("/", maxsplit=1)[0]
        self.hosts.append(host)
        if host in self.down:
            raise UpstreamConnectError(f"refused: {host}")
        return await super().request(req)


def config(redis: RedisServer, prefix: str, **backend: Any) -> dict[str, Any]:
    return {
        "proxy": {"access_log": False, "cooldown_seconds": 30.0},
        "state": {"store": redis.url, "key_prefix": prefix, "timeout_ms": 2000.0},
        "backends": [
            {"name": "a", "url": "http://127.0.0.1:9", **backend},
            {"name": "b", "url": "http://127.0.0.2:9"},
        ],
        "routes": [{"model": "*", "backends": ["a", "b"]}],
    }


@pytest.fixture
async def pair(shared_redis: RedisServer) -> AsyncIterator[tuple[ProxyServer, ProxyServer]]:
    prefix = unique_prefix()
    cfg = parse_config(config(shared_redis, prefix, max_outstanding=1), environ={})
    servers = (ProxyServer(cfg, worker="w1"), ProxyServer(cfg, worker="w2"))
    yield servers
    for s in servers:
        assert s.quota is not None
        await s.quota.aclose()


async def test_max_outstanding_is_counted_across_workers(
    pair: tuple[ProxyServer, ProxyServer],
) -> None:
    one, two = pair
    for s in pair:
        s._transport = FakeTransport()
    # Route "a" alone: b's weight cannot win.
    target = one.routes.lookup(0, b"m")
    assert target is not None
    only_a = type(target)(label="*", backends=(one.backends["a"],))
    opened = await one.dispatcher.open(only_a, BODY, "r1")
    only_a_two = type(target)(label="*", backends=(two.backends["a"],))
    with pytest.raises(ProxyError) as info:
        await two.dispatcher.open(only_a_two, BODY, "r2")
    assert info.value.code.code == "backends_busy"
    assert two.backends["a"].outstanding == 0  # nothing was sent
    await opened.close()
    assert one.quota is not None
    await one.quota.limiter.flush()  # the release is off the request's path
    again = await two.dispatcher.open(only_a_two, BODY, "r3")
    await again.close()


async def test_a_cooldown_seen_by_one_worker_steers_the_other(
    pair: tuple[ProxyServer, ProxyServer],
) -> None:
    one, two = pair
    one._transport = FailingFirst(down={"127.0.0.1:9"})
    watcher = FailingFirst(down=set())
    two._transport = watcher
    target_one = one.routes.lookup(0, b"m")
    assert target_one is not None
    # Worker one: a's connection is refused, it fails over to b, and cools a down.
    for _ in range(2):
        opened = await one.dispatcher.open(target_one, BODY, "r")
        await opened.close()
        if one.backends["a"].failures:
            break
    assert one.backends["a"].failures == 1
    assert one.quota is not None
    await one.quota.limiter.flush()
    # Worker two has seen no failure itself; once it has read the store, it
    # tries b first on every request.
    shared = two.balancer.shared
    assert shared is not None
    await shared.cooldowns()
    target_two = two.routes.lookup(0, b"m")
    assert target_two is not None
    for _ in range(4):
        opened = await two.dispatcher.open(target_two, BODY, "r")
        await opened.close()
    assert watcher.hosts == ["127.0.0.2:9"] * 4
    assert two.backends["a"].failures == 0
