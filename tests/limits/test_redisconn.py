"""``limits.redisconn``: the lean path to Redis under the ways it can fail:
background commands are never lost with a request that timed out, and a
server that stops answering cannot hold the connections (against a real
``redis-server``, or a silent one); and an acquire whose answer was lost
gives back the concurrency slot it may have taken."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from flatgate.proxy.limits import Lease, Limiter, RedisStore, StoreError, parse_limits
from flatgate.proxy.limits.redisconn import Connections, encode
from flatgate.proxy.limits.store import Ask, Raw
from tests.redisserver import RedisServer, unique_prefix


@pytest.fixture
async def client(shared_redis: RedisServer) -> AsyncIterator[Redis]:
    r = Redis.from_url(shared_redis.url, decode_responses=True)
    yield r
    await r.aclose()


async def test_background_commands_survive_a_call_that_timed_out(
    shared_redis: RedisServer, client: Redis
) -> None:
    key = unique_prefix()
    conns = Connections(shared_redis.url, 1, background_timeout=5.0)
    try:
        # The one connection is busy for 0.3 s.
        busy = asyncio.create_task(conns.call(encode("BLPOP", key + ":never", "0.3")))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(conns.batch(encode("INCR", key)))
        await asyncio.sleep(0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):  # a request's acquire, giving up
                await conns.call(encode("PING"))
        assert await queued == 1  # sent once the connection came free
        assert await client.get(key) == "1"
        await busy
    finally:
        await conns.aclose()


async def test_a_server_that_stops_answering_cannot_hold_the_connections() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(ConnectionError):
                while await reader.read(65536):
                    pass  # reads every command, answers none
        finally:
            writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conns = Connections(f"redis://127.0.0.1:{port}/0", 2, background_timeout=0.2)
    try:
        results = await asyncio.gather(
            conns.batch(encode("INCR", "a")),
            asyncio.sleep(0.01),
            return_exceptions=True,
        )
        assert isinstance(results[0], TimeoutError)
        # Both connections are free again (the stuck one was dropped and
        # reconnects on its next use): a later command gets one at once.
        assert conns._idle.qsize() == 2
    finally:
        await conns.aclose()
        server.close()
        await server.wait_closed()


class _LostAnswers(RedisStore):
    """Redis that runs every acquire and loses its answer (a timeout after the
    script ran): records the leases it took and what is given back."""

    def __init__(self) -> None:
        super().__init__("redis://127.0.0.1:9/0")
        self.taken: list[str] = []
        self.given_back: list[tuple[str, int]] = []

    async def acquire(self, ask: Ask) -> Raw:
        self.taken.append(ask.lease_id)
        raise StoreError("TimeoutError")

    async def settle(self, lease: Lease, actual: int, now: float) -> None:
        self.given_back.append((lease.id, actual))


@pytest.mark.parametrize("limits", [{"max_concurrent": 5}, {"requests_per_minute": 5}])
async def test_an_acquire_whose_answer_is_lost_gives_its_slot_back(
    limits: dict[str, int],
) -> None:
    store = _LostAnswers()
    config = parse_limits({"limits": [{"tenant": "acme", **limits}]}, environ={})
    lim = Limiter(config, store)
    decision = await lim.acquire("acme", "m")
    assert decision.lease is None  # the store did not answer: on_store_error decides
    await lim.flush()
    if "max_concurrent" in limits:
        # The slot it may have taken is given back, tokens untouched.
        assert store.given_back == [(store.taken[0], 0)]
    else:
        assert store.given_back == []  # nothing leased, nothing to give back


async def test_closed_connections_never_reconnect(shared_redis: RedisServer) -> None:
    """A command out when its connections close (a cluster node that left
    the map, a demoted primary) fails, and leaves no connection open; a
    command after the close fails at once."""
    key = unique_prefix()
    conns = Connections(shared_redis.url, 1)
    assert await conns.call(encode("PING")) == b"PONG"
    out = asyncio.create_task(conns.call(encode("BLPOP", key, "0.5")))
    await asyncio.sleep(0.05)
    await conns.aclose()
    with pytest.raises(RedisConnectionError):
        await out
    with pytest.raises(RedisConnectionError, match="closed"):
        await conns.call(encode("PING"))
    assert not any(c.is_connected for c in conns._all)
