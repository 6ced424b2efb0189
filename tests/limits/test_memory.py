"""The memory store stays bounded: spent keys go at the next sweep."""

from __future__ import annotations

from flatgate.proxy.limits import Limiter, MemoryStore, parse_limits
from flatgate.proxy.limits.memory import SWEEP_SECONDS, _Leases
from tests.limits.conftest import Clock


async def test_spent_keys_are_swept() -> None:
    clock = Clock()
    config = parse_limits(
        {
            "limits": [
                {
                    "tenant": "*",
                    "requests_per_minute": 1,
                    "max_concurrent": 1,
                    "tokens_per_day": 100,
                }
            ]
        },
        environ={},
    )
    store = MemoryStore()
    lim = Limiter(config, store, clock=clock)
    for i in range(100):
        d = await lim.acquire(f"t{i}", "m", estimate=1, ttl=30.0)
        assert d.allowed
        if i % 2:
            lim.release(d.lease)
    assert (len(store.rates), len(store.leases), len(store.days)) == (100, 100, 100)
    clock.advance(SWEEP_SECONDS)  # the released leases' sets are spent, nothing else
    assert (await lim.acquire("x", "m", estimate=1, ttl=30.0)).allowed
    assert (len(store.rates), len(store.leases), len(store.days)) == (101, 51, 101)
    clock.advance(60.0)  # rates back to full, leases expired; day counters stay two days
    assert (await lim.acquire("x", "m", estimate=1, ttl=30.0)).allowed
    assert (len(store.rates), len(store.leases), len(store.days)) == (1, 1, 101)
    clock.advance(2 * 86_400.0)
    assert (await lim.acquire("y", "m", estimate=1, ttl=30.0)).allowed
    assert len(store) == 3


def test_released_leases_do_not_pile_up() -> None:
    slots = _Leases()
    for i in range(10_000):
        slots.add(str(i), 1e9)
        slots.remove(str(i))
    assert not slots.live and len(slots.heap) <= 16
    slots.add("a", 5.0)
    slots.add("a", 10.0)  # renewed: the old expiry is stale
    slots.purge(6.0)
    assert slots.live == {"a": 10.0}
    slots.purge(10.0)
    assert not slots.live


async def test_reload_with_a_new_state_opens_a_new_store() -> None:
    document = {"limits": [{"tenant": "*", "requests_per_minute": 1}]}
    lim = Limiter(parse_limits(document, environ={}), clock=Clock())
    first = lim.store
    assert (await lim.acquire("acme", "m")).allowed
    lim.reload(parse_limits({**document, "state": {"key_prefix": "other"}}, environ={}))
    assert lim.store is not first and isinstance(lim.store, MemoryStore)
    assert (await lim.acquire("acme", "m")).allowed  # a new store: new counts
    await lim.aclose()


def test_reload_outside_a_loop() -> None:
    lim = Limiter(parse_limits({}, environ={}))
    lim.reload(parse_limits({"state": {"key_prefix": "other"}}, environ={}))
    assert lim.config.state.key_prefix == "other"


def test_model_allowed() -> None:
    config = parse_limits(
        {"tenants": [{"name": "acme", "models": ["gpt-*"]}, {"name": "none", "models": []}]},
        environ={},
    )
    lim = Limiter(config)
    assert lim.model_allowed("acme", "gpt-4o") and not lim.model_allowed("acme", "claude")
    assert lim.model_allowed("unlisted", "claude")
    assert not lim.model_allowed("none", "gpt-4o")
    assert not lim.model_allowed("acme", "gpt-4o", key_models=["gpt-5"])
    assert lim.model_allowed("unlisted", "gpt-5", key_models=("gpt-5",))
