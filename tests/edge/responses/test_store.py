"""``StoredResponses`` over both stores: a tenant reads only its own, the size
cap (input and output together), delete, ids that cannot be ours, the TTL,
a store that does not answer (saves answer False, reads a 503), a limiter's
reloads, and two instances on one Redis chaining each other's responses."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from flatgate.edge_translator.responses.store import (
    MAX_ID_CHARS,
    ResponsesUnavailable,
    StoredResponses,
    Turn,
    list_pieces,
    runs_of,
)
from flatgate.proxy.limits import Limiter, MemoryStore, RedisStore, StateSection, parse_limits
from flatgate.proxy.limits.blobs import BlobBounds
from flatgate.proxy.limits.sections import blob_bounds
from flatgate.proxy.limits.store import Store
from tests.redisserver import RedisServer, redis_server, shared_redis, unique_prefix
from tests.servers import free_port

__all__ = ["redis_server", "shared_redis"]

INPUT = b'[{"type":"message","role":"user","content":"hi"}]'
OUTPUT = b'{"id":"resp_1","object":"response","output":[]}'
CAP = 1000


class Monotonic:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


MakeStore = Callable[[], Store]


def pair(turn: Turn | None) -> tuple[bytes, bytes] | None:
    """A turn's input items and response, as JSON."""
    return None if turn is None else (turn.items, turn.response)


@pytest.fixture(params=["memory", "redis"])
async def make_store(
    request: pytest.FixtureRequest, shared_redis: RedisServer
) -> AsyncIterator[MakeStore]:
    """Stores of one kind; the Redis ones share one prefix (instances of one
    deployment)."""
    made: list[Store] = []
    prefix = unique_prefix()

    def make() -> Store:
        s: Store
        if request.param == "memory":
            s = MemoryStore()
        else:
            s = RedisStore(shared_redis.url, key_prefix=prefix)
        made.append(s)
        return s

    yield make
    for s in made:
        await s.aclose()


def state(**keys: float) -> StateSection:
    return StateSection(**{"max_stored_response_bytes": CAP, **keys})  # type: ignore[arg-type]


async def test_saved_in_two_steps_and_read(make_store: MakeStore) -> None:
    r = StoredResponses(make_store(), state())
    assert await r.save_input("acme", "resp_1", INPUT)
    assert await r.input_items("acme", "resp_1") == INPUT
    assert await r.response("acme", "resp_1") is None  # no output yet
    assert await r.turn("acme", "resp_1") is None  # half a response is none
    assert await r.save_response("acme", "resp_1", OUTPUT)
    assert await r.response("acme", "resp_1") == OUTPUT
    assert pair(await r.turn("acme", "resp_1")) == (INPUT, OUTPUT)
    assert (r.stored, r.refused_too_large) == (1, 0)


async def test_saved_at_once(make_store: MakeStore) -> None:
    r = StoredResponses(make_store(), state())
    assert await r.save("acme", "resp_1", INPUT, OUTPUT)
    assert pair(await r.turn("acme", "resp_1")) == (INPUT, OUTPUT)


@pytest.mark.parametrize(
    ("owner", "other"),
    [
        ("acme", "globex"),
        ("a:b", "a%3Ab"),  # escaping could confuse these; a digest does not
        ("", " "),
        ("t\u00e9nant\ud800", "t\u00e9nant"),
    ],
)
async def test_another_tenant_reads_none(make_store: MakeStore, owner: str, other: str) -> None:
    r = StoredResponses(make_store(), state())
    assert await r.save(owner, "resp_1", INPUT, OUTPUT)
    assert await r.response(other, "resp_1") is None
    assert await r.input_items(other, "resp_1") is None
    assert await r.turn(other, "resp_1") is None
    assert not await r.delete(other, "resp_1")
    assert pair(await r.turn(owner, "resp_1")) == (INPUT, OUTPUT)  # its delete took nothing


async def test_ids_are_their_own_keys(make_store: MakeStore) -> None:
    r = StoredResponses(make_store(), state())
    await r.save("acme", "resp:1", INPUT, OUTPUT)
    await r.save("acme", "resp", b"[]", b"{}")
    assert await r.response("acme", "resp:1") == OUTPUT
    assert await r.response("acme", "resp") == b"{}"
    assert await r.response("acme", "resp%3A1") is None


async def test_ids_that_cannot_be_ours(make_store: MakeStore) -> None:
    r = StoredResponses(make_store(), state())
    long = "r" * (MAX_ID_CHARS + 1)
    for bad in ("", long):
        assert await r.response("acme", bad) is None
        assert await r.input_items("acme", bad) is None
        assert await r.turn("acme", bad) is None
        assert not await r.delete("acme", bad)
        with pytest.raises(ValueError, match="response id"):
            await r.save("acme", bad, INPUT, OUTPUT)
    assert await r.save("acme", "r" * MAX_ID_CHARS, INPUT, OUTPUT)


async def test_delete(make_store: MakeStore) -> None:
    r = StoredResponses(make_store(), state())
    await r.save("acme", "resp_1", INPUT, OUTPUT)
    assert await r.delete("acme", "resp_1")
    assert await r.response("acme", "resp_1") is None
    assert await r.input_items("acme", "resp_1") is None
    assert not await r.delete("acme", "resp_1")


async def test_over_the_cap_together_nothing_is_stored(make_store: MakeStore) -> None:
    r = StoredResponses(make_store(), state())
    half = b"x" * (CAP // 2)
    assert await r.save("acme", "exact", half, half)  # the cap itself fits
    assert not await r.save("acme", "over", half, half + b"x")
    assert await r.turn("acme", "over") is None
    assert r.refused_too_large == 1
    # In two steps: the input fits alone, the output makes it too large; the
    # input goes too.
    assert await r.save_input("acme", "two", half)
    assert not await r.save_response("acme", "two", half + b"x")
    assert await r.input_items("acme", "two") is None
    assert await r.response("acme", "two") is None
    assert r.refused_too_large == 2
    # An input too large alone: its output is refused too, counted once.
    assert not await r.save_input("acme", "big", b"x" * (CAP + 1))
    assert not await r.save_response("acme", "big", b"{}")
    assert await r.response("acme", "big") is None
    assert r.refused_too_large == 3
    assert r.stored == 1


@pytest.mark.integration
async def test_two_instances_chain_each_other_s_responses(shared_redis: RedisServer) -> None:
    prefix = unique_prefix()
    one_store = RedisStore(shared_redis.url, key_prefix=prefix)
    two_store = RedisStore(shared_redis.url, key_prefix=prefix)
    one = StoredResponses(one_store, state())
    two = StoredResponses(two_store, state())
    try:
        assert await one.save_input("acme", "resp_1", INPUT)
        assert await one.save_response("acme", "resp_1", OUTPUT)
        assert pair(await two.turn("acme", "resp_1")) == (INPUT, OUTPUT)
        assert await two.turn("globex", "resp_1") is None
        assert await two.save("acme", "resp_2", INPUT + b"more", b"{}")
        assert await one.input_items("acme", "resp_2") == INPUT + b"more"
        assert await one.delete("acme", "resp_2")
        assert await two.response("acme", "resp_2") is None
    finally:
        await one_store.aclose()
        await two_store.aclose()


@pytest.mark.integration
async def test_redis_keys_and_ttl(shared_redis: RedisServer) -> None:
    prefix = unique_prefix()
    store = RedisStore(shared_redis.url, key_prefix=prefix)
    r = StoredResponses(store, state(responses_ttl_seconds=3600))
    client = Redis.from_url(shared_redis.url)
    try:
        await r.save("secret-tenant", "resp_1", INPUT, OUTPUT)
        keys = sorted(
            k.decode() if isinstance(k, bytes) else k for k in await client.keys(f"{prefix}:*")
        )
        # The response's two halves, and its tenant's index and sizes (one
        # slot: the tenant's digest in braces).
        assert len(keys) == 4
        blobs = [k for k in keys if k.startswith(f"{prefix}:blob:responses:{{")]
        assert blobs[0].endswith(":resp_1:input") and blobs[1].endswith(":resp_1:output")
        group = blobs[0].split(":")[3]
        assert keys[2:] == [f"{prefix}:blobs:responses:{group}:{k}" for k in ("index", "sizes")]
        assert not any("secret" in k for k in keys)  # the tenant as a digest
        for k in keys:
            assert 3_590_000 < await client.pttl(k) <= 3_600_000
    finally:
        await store.aclose()
        await client.aclose()


async def test_memory_ttl_and_bounds() -> None:
    clock = Monotonic()
    bounds = BlobBounds(4, 1 << 20, 4, 1 << 20)  # room for two responses (four blobs)
    r = StoredResponses(
        MemoryStore(blob_bounds=bounds, clock=clock), state(responses_ttl_seconds=60)
    )
    await r.save("acme", "a", INPUT, OUTPUT)
    clock.t += 59
    assert pair(await r.turn("acme", "a")) == (INPUT, OUTPUT)
    clock.t += 1
    assert await r.turn("acme", "a") is None
    for rid in ("b", "c", "d"):
        await r.save("acme", rid, INPUT, OUTPUT)
    assert await r.turn("acme", "b") is None  # the least recently used went
    assert pair(await r.turn("acme", "c")) == (INPUT, OUTPUT)


async def test_memory_store_refusing_is_not_stored() -> None:
    r = StoredResponses(MemoryStore(blob_bounds=BlobBounds(10, 10, 10, 10)), state())
    assert not await r.save("acme", "a", b"[]", b"x" * 11)
    assert await r.turn("acme", "a") is None
    assert await r.input_items("acme", "a") is None  # the half that fit went too
    assert r.refused["store_bounds"] == 1
    assert r.refused_too_large == 0


@pytest.mark.integration
async def test_a_store_that_does_not_answer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="flatgate.edge")
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", blob_timeout_ms=500)
    r = StoredResponses(store, state())
    try:
        # Saves degrade: the answer goes out unstored.
        assert not await r.save("acme", "a", INPUT, OUTPUT)
        assert not await r.save_input("acme", "b", INPUT)
        assert not await r.save_response("acme", "b", OUTPUT)  # its input was not stored
        assert r.refused["store_error"] == 2
        # Reads cannot: a 503, never a 404.
        for read in (r.response, r.input_items, r.turn, r.delete):
            with pytest.raises(ResponsesUnavailable) as raised:
                await read("acme", "a")
            assert raised.value.status == 503 and raised.value.retry_after
            assert raised.value.code.code == "responses_unavailable"
        assert r.errors == 6 and not r.up
        lines = [rec.getMessage() for rec in caplog.records if rec.name == "flatgate.edge"]
        assert len(lines) == 1 and "unavailable" in lines[0]
    finally:
        await store.aclose()


@pytest.mark.integration
async def test_a_store_that_comes_back(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, blob_timeout_ms=1000)
    r = StoredResponses(store, state())
    try:
        assert await r.save("acme", "a", INPUT, OUTPUT)
        redis_server.kill()
        with pytest.raises(ResponsesUnavailable):
            await r.response("acme", "a")
        assert not r.up
        redis_server.start()
        assert await r.response("acme", "a") is None  # no persistence: gone, but answered
        assert r.up
    finally:
        await store.aclose()


async def test_following_a_limiter_s_reloads() -> None:
    lim = Limiter(parse_limits({"state": {"max_stored_response_bytes": CAP}}, environ={}))
    r = StoredResponses.following(lim)
    assert await r.save("acme", "a", INPUT, OUTPUT)
    # A smaller cap, same store: the response stays, a larger one is refused.
    lim.reload(parse_limits({"state": {"max_stored_response_bytes": 10}}, environ={}))
    assert await r.response("acme", "a") == OUTPUT
    assert not await r.save("acme", "b", INPUT, OUTPUT)
    # Another store: what the old one held is not there.
    lim.reload(parse_limits({"state": {"key_prefix": "other"}}, environ={}))
    assert await r.response("acme", "a") is None
    await lim.aclose()


def test_metrics() -> None:
    r = StoredResponses(MemoryStore(), state())
    r.stored, r.refused["too_large"], r.errors = 3, 2, 1
    families = {f.name: f for f in r.collect("flatgate_edge")}
    assert families["flatgate_edge_responses_stored"].samples[0].value == 3
    refused = {
        s.labels["reason"]: s.value for s in families["flatgate_edge_responses_not_stored"].samples
    }
    assert refused == {"too_large": 2, "store_bounds": 0, "store_error": 0}
    assert families["flatgate_edge_responses_store_errors"].samples[0].value == 1
    assert families["flatgate_edge_responses_store_up"].samples[0].value == 1.0


def test_list_pieces_and_runs_of() -> None:
    runs = (b'{"a":1}', b"", b'{"b":2},{"c":3}')
    pieces = list_pieces(runs)
    assert b"".join(pieces) == b'[{"a":1},{"b":2},{"c":3}]'
    assert runs_of(pieces) == (runs[0], runs[2])
    assert list_pieces(()) == (b"[", b"]") and runs_of((b"[", b"]")) == ()
    # A store that keeps bytes gives the list whole: its inside, one run.
    assert runs_of((b'[{"a":1}, {"b":2}]',)) == (b'{"a":1}, {"b":2}',)
    assert runs_of((b"[ ]",)) == ()


async def test_a_tenant_past_its_share_loses_only_its_own(make_store: MakeStore) -> None:
    limited = state(max_responses_per_tenant=2, max_response_bytes_per_tenant=CAP)
    store = make_store()
    store.bound_blobs(blob_bounds(limited))
    r = StoredResponses(store, limited)
    assert await r.save("victim", "v", INPUT, OUTPUT)
    for i in range(5):
        assert await r.save("flood", f"f{i}", INPUT, OUTPUT)
    assert pair(await r.turn("victim", "v")) == (INPUT, OUTPUT)
    assert await r.turn("flood", "f0") is None  # its own oldest went
    assert pair(await r.turn("flood", "f4")) == (INPUT, OUTPUT)
    assert store.blobs_evicted >= 6
