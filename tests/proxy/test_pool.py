"""The builder pool: bounded, capacity kept, reset before reuse, poison in debug."""

from __future__ import annotations

import asyncio
import random

import pytest

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.proxy.wire.builders import POISON, BuilderPool, finish_bytes
from flatgate.proxy.wire.chunk.frames import unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk


def test_reuses_and_counts() -> None:
    pool = BuilderPool(size=2)
    a = pool.acquire()
    pool.release(a)
    b = pool.acquire()
    assert b is a
    s = pool.stats()
    assert (s.hits, s.misses, s.idle) == (1, 1, 0)
    pool.release(b)
    assert pool.leased == 0


def test_bounded_and_drops_oversized() -> None:
    pool = BuilderPool(size=1, initial_capacity=64, max_retained=128)
    a, b = pool.acquire(), pool.acquire()
    pool.release(a)
    pool.release(b)
    assert pool.stats().idle == 1
    assert pool.stats().dropped == 1
    big = pool.acquire()
    big.CreateString(b"x" * 1000)  # grows the buffer past max_retained
    pool.release(big)
    assert pool.stats().dropped == 2


def test_double_release_is_an_error() -> None:
    pool = BuilderPool()
    a = pool.acquire()
    pool.release(a)
    with pytest.raises(ValueError, match="released twice"):
        pool.release(a)


def test_capacity_is_retained_and_state_reset() -> None:
    pool = BuilderPool(initial_capacity=16)
    with pool.lease() as b:
        s = b.CreateString(b"y" * 5000)
        b.Finish(s)
        grown = len(b.Bytes)
    with pool.lease() as b2:
        assert b2 is b
        assert len(b2.Bytes) == grown
        assert b2.Head() == grown and not b2.finished


def test_debug_poisons_released_buffer() -> None:
    pool = BuilderPool(debug=True)
    with pool.lease() as b:
        b.Finish(b.CreateString(b"secret prompt"))
        leaked = memoryview(b.Bytes)[b.Head() :]
        copied = finish_bytes(b)
    assert b"secret" not in bytes(leaked)
    assert set(bytes(leaked)) == {POISON}
    assert b"secret prompt" in copied


def test_frames_do_not_alias_the_pool() -> None:
    pool = BuilderPool(size=1, debug=True)
    first = build_chunk(pool, request_id="a", content="first")
    second = build_chunk(pool, request_id="b", content="second")
    assert decode_chunk(unprefix(first)).content == "first"
    assert decode_chunk(unprefix(second)).content == "second"


async def test_concurrent_streams_never_see_each_others_bytes() -> None:
    pool = BuilderPool(size=8, debug=True)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    words = {i: [f"s{i}w{j}-" + "x" * rng.randrange(0, 300) for j in range(40)] for i in range(64)}

    async def stream(i: int) -> list[bytes]:
        held: list[bytes] = []
        for word in words[i]:
            held.append(build_chunk(pool, request_id=f"req-{i}", content=word))
            await asyncio.sleep(0)  # interleave with every other stream
        return held

    results = await asyncio.gather(*(stream(i) for i in range(64)))
    for i, frames in enumerate(results):
        chunks = [decode_chunk(unprefix(f)) for f in frames]
        assert [c.request_id for c in chunks] == [f"req-{i}"] * 40, f"seed={seed}"
        assert [c.content for c in chunks] == words[i], f"seed={seed}"
    assert pool.leased == 0
    assert pool.stats().hits > 0
