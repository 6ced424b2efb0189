"""Blobs with a TTL in both stores: the memory store's bounds (count, bytes,
least recently used out first, TTL on read), Redis' ``SET PX`` / ``GET`` /
``DEL`` under the store's prefix on connections of their own, shared by two
instances, and a store that does not answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from flatgate.proxy.limits import Limiter, MemoryStore, RedisStore, StoreError, parse_limits
from flatgate.proxy.limits.blobs import BlobBounds
from flatgate.proxy.limits.limiter import open_store
from tests.redisserver import RedisServer, unique_prefix
from tests.servers import free_port


class Monotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fresh(data: bytes) -> bytes:
    """``data`` as a bytes object of its own: a memory store holds and counts
    one object once, and equal literals are one object."""
    return bytes(bytearray(data))


def store(count: int = 10, size: int = 1000) -> tuple[MemoryStore, Monotonic]:
    clock = Monotonic()
    bounds = BlobBounds(count, size, count, size)
    return MemoryStore(blob_bounds=bounds, clock=clock), clock


# -- the memory store ---------------------------------------------------------


async def test_memory_put_get_delete() -> None:
    s, _ = store()
    assert await s.get_blob("a") is None
    assert await s.put_blob("a", fresh(b"one"), 60)
    assert await s.get_blob("a") == b"one"
    assert await s.put_blob("a", fresh(b"three"), 60)  # replaces, its bytes recounted
    assert await s.get_blob("a") == b"three"
    assert s.blobs.size == 5
    assert await s.delete_blob("a")
    assert not await s.delete_blob("a")
    assert await s.get_blob("a") is None
    assert s.blobs.size == 0


async def test_memory_ttl_is_honoured_on_read() -> None:
    s, clock = store()
    await s.put_blob("a", fresh(b"x"), 30)
    clock.t += 29.9
    assert await s.get_blob("a") == b"x"
    clock.t += 0.2
    assert await s.get_blob("a") is None
    assert not await s.delete_blob("a")  # expired is gone
    assert s.blobs.size == 0


async def test_memory_expired_blobs_go_as_later_puts_pass() -> None:
    s, clock = store()
    await s.put_blob("old", fresh(b"12345"), 10)
    clock.t += 11
    await s.put_blob("new", fresh(b"ab"), 10)
    assert list(s.blobs.items) == ["new"]
    assert s.blobs.size == 2
    assert s.blobs.evicted == 0  # expired, not evicted


async def test_memory_count_bound_least_recently_used_first() -> None:
    s, _ = store(count=3)
    for key in "abc":
        await s.put_blob(key, fresh(b"x"), 60)
    assert await s.get_blob("a") == b"x"  # a read is a use: b is now the oldest
    await s.put_blob("d", fresh(b"x"), 60)
    assert await s.get_blob("b") is None
    assert [await s.get_blob(k) for k in "acd"] == [b"x"] * 3
    assert s.blobs.evicted == 1
    assert len(s.blobs.items) == 3


async def test_memory_byte_bound() -> None:
    s, _ = store(count=100, size=10)
    await s.put_blob("a", fresh(b"1234"), 60)
    await s.put_blob("b", fresh(b"1234"), 60)
    await s.put_blob("c", fresh(b"1234"), 60)  # 12 bytes: a goes
    assert await s.get_blob("a") is None
    assert await s.get_blob("b") == b"1234"
    assert s.blobs.size == 8
    # One blob larger than the store holds in all: refused, nothing evicted.
    assert not await s.put_blob("big", fresh(b"x" * 11), 60)
    assert await s.get_blob("big") is None
    assert s.blobs.size == 8
    assert await s.put_blob("all", fresh(b"x" * 10), 60)  # exactly the bound: the rest goes
    assert list(s.blobs.items) == ["all"]


async def test_memory_new_bounds_evict_at_once() -> None:
    s, _ = store()
    for key in "abcd":
        await s.put_blob(key, fresh(b"xx"), 60)
    s.bound_blobs(BlobBounds(2, 1000, 2, 1000))
    assert list(s.blobs.items) == ["c", "d"]
    s.bound_blobs(BlobBounds(10, 2, 10, 2))
    assert list(s.blobs.items) == ["d"]


async def test_state_bounds_the_memory_store() -> None:
    config = parse_limits(
        {"state": {"memory_max_responses": 3, "memory_max_response_bytes_total": 4096,
                   "max_stored_response_bytes": 1024}},
        environ={},
    )  # fmt: skip
    s = open_store(config.state)
    assert isinstance(s, MemoryStore)
    # A stored response is two blobs: its input and its output.
    assert s.blobs.bounds[:2] == (6, 4096)


async def test_a_reload_keeps_the_blobs_and_applies_new_bounds() -> None:
    lim = Limiter(parse_limits({}, environ={}))
    for key in "abcd":
        await lim.store.put_blob(key, fresh(b"x"), 60)
    kept = lim.store
    lim.reload(parse_limits({"state": {"memory_max_responses": 1}}, environ={}))
    assert lim.store is kept
    assert [await kept.get_blob(k) for k in "abcd"] == [None, None, b"x", b"x"]


# -- Redis --------------------------------------------------------------------


@pytest.fixture
async def redis_pair(shared_redis: RedisServer) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    prefix = unique_prefix()
    # Two instances, and a limits bound no operation could meet: blobs have
    # their own.
    one = RedisStore(shared_redis.url, key_prefix=prefix, timeout_ms=0.001)
    two = RedisStore(shared_redis.url, key_prefix=prefix, timeout_ms=0.001)
    yield one, two
    await one.aclose()
    await two.aclose()


@pytest.mark.integration
async def test_redis_blobs_shared_by_two_instances(
    redis_pair: tuple[RedisStore, RedisStore],
) -> None:
    one, two = redis_pair
    assert await two.get_blob("k") is None
    assert await one.put_blob("k", fresh(b"\x00payload\r\n"), 60)
    assert await two.get_blob("k") == b"\x00payload\r\n"
    assert await two.delete_blob("k")
    assert await one.get_blob("k") is None
    assert not await one.delete_blob("k")


@pytest.mark.integration
async def test_redis_blob_key_ttl_and_size(
    shared_redis: RedisServer, redis_pair: tuple[RedisStore, RedisStore]
) -> None:
    one, _ = redis_pair
    big = bytes(range(256)) * (32 * 1024)  # 8 MiB, under a 50 ms-class limits bound
    assert await one.put_blob("big", big, 120.5)
    assert await one.get_blob("big") == big
    with pytest.raises(StoreError):  # the limits' own path keeps its bound
        await one.ping()
    client = Redis.from_url(shared_redis.url)
    try:
        key = f"{one._prefix}:blob:big"
        assert await client.exists(key) == 1
        assert 0 < await client.pttl(key) <= 120_500
        await one.put_blob("soon", fresh(b"x"), 0.001)  # PX is at least 1 ms
        assert await client.pttl(f"{one._prefix}:blob:soon") in (-2, 0, 1)
    finally:
        await client.aclose()


@pytest.mark.integration
async def test_redis_expiry(shared_redis: RedisServer) -> None:
    s = RedisStore(shared_redis.url, key_prefix=unique_prefix())
    client = Redis.from_url(shared_redis.url)
    try:
        await s.put_blob("k", fresh(b"v"), 60)
        await client.pexpire(f"{s._prefix}:blob:k", 1)
        for _ in range(200):  # polled, not timed: it expires within a few ms
            if await s.get_blob("k") is None:
                break
            await client.ping()
        assert await s.get_blob("k") is None
    finally:
        await s.aclose()
        await client.aclose()


@pytest.mark.integration
async def test_redis_not_answering_is_a_store_error() -> None:
    s = RedisStore(f"redis://127.0.0.1:{free_port()}/0", blob_timeout_ms=500)
    try:
        with pytest.raises(StoreError):
            await s.put_blob("k", fresh(b"v"), 60)
        with pytest.raises(StoreError):
            await s.get_blob("k")
        with pytest.raises(StoreError):
            await s.delete_blob("k")
    finally:
        await s.aclose()


@pytest.mark.integration
async def test_redis_refusing_a_blob_is_a_store_error(redis_server: RedisServer) -> None:
    redis_server.stop()
    redis_server.start("--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    s = RedisStore(redis_server.url)
    try:
        with pytest.raises(StoreError, match="maxmemory"):
            await s.put_blob("k", b"x" * (4 * 1024 * 1024), 60)
    finally:
        await s.aclose()


# -- groups: a tenant's share, and pieces shared ---------------------------------


def grouped(count: int, size: int, group_count: int, group_size: int) -> MemoryStore:
    return MemoryStore(blob_bounds=BlobBounds(count, size, group_count, group_size))


async def test_a_group_past_its_share_evicts_its_own() -> None:
    s = grouped(100, 10_000, 3, 100)
    assert await s.put_blob("b1", fresh(b"x" * 10), 60, "b")
    for i in range(5):  # past a's count of 3: a's own oldest go
        assert await s.put_blob(f"a{i}", fresh(b"y" * 10), 60, "a")
    assert [k for k in s.blobs.items if k.startswith("a")] == ["a2", "a3", "a4"]
    for i in range(3):  # past a's 100 bytes
        assert await s.put_blob(f"big{i}", fresh(b"z" * 40), 60, "a")
    assert await s.get_blob("b1") == b"x" * 10
    assert s.blobs.held("a")[1] <= 100 and s.blobs.held("b") == (1, 10)
    assert s.blobs_evicted >= 4
    # One blob larger than a group's share is refused, nothing evicted.
    before = dict(s.blobs.items)
    assert not await s.put_blob("huge", fresh(b"h" * 101), 60, "b")
    assert dict(s.blobs.items) == before


async def test_a_full_store_evicts_the_fullest_group() -> None:
    s = grouped(6, 10_000, 5, 10_000)
    await s.put_blob("b1", fresh(b"x"), 60, "b")
    for i in range(5):
        await s.put_blob(f"a{i}", fresh(b"y"), 60, "a")
    await s.put_blob("c1", fresh(b"z"), 60, "c")  # 7 blobs: a holds the most, a's oldest goes
    assert "a0" not in s.blobs.items and {"b1", "c1"} <= set(s.blobs.items)
    await s.get_blob("a1")  # a read is a use within a's own order
    await s.put_blob("c2", fresh(b"z"), 60, "c")
    assert "a2" not in s.blobs.items and "a1" in s.blobs.items
    # By bytes: the group holding the most bytes loses its least recent.
    t = grouped(100, 100, 100, 100)
    await t.put_blob("small", fresh(b"s" * 10), 60, "small")
    await t.put_blob("big1", fresh(b"b" * 45), 60, "big")
    await t.put_blob("big2", fresh(b"b" * 40), 60, "big")
    await t.put_blob("mid", fresh(b"m" * 30), 60, "mid")  # 125 bytes: big's oldest goes
    assert set(t.blobs.items) == {"small", "big2", "mid"}


async def test_shared_pieces_are_held_and_counted_once_per_group() -> None:
    s = grouped(100, 10_000, 100, 1_000)
    chain = b"c" * 600
    assert await s.put_blob("one", (b"[", chain, b"]"), 60, "t")
    assert await s.put_blob("two", (b"[", chain, b",", b"new", b"]"), 60, "t")
    assert s.blobs.held("t") == (2, 606)  # the 600 bytes once
    assert await s.get_blob("two") == b"[" + chain + b",new]"
    pieces = await s.get_pieces("two")
    assert pieces is not None and pieces[1] is chain  # by reference, not a copy
    await s.delete_blob("one")
    assert s.blobs.held("t") == (1, 606)  # "two" still holds the chain
    await s.delete_blob("two")
    assert s.blobs.held("t") == (0, 0) and s.blobs.size == 0
