"""``[state]``'s keys for stored responses: defaults, overlays, each problem
naming its key, and which of them a reload may change without a new store."""

from __future__ import annotations

from typing import Any

import pytest

from flatgate.proxy.limits import RedisStore, StateSection, limits_problems, parse_limits
from flatgate.proxy.limits.limiter import open_store
from flatgate.proxy.limits.redisconn import Connections

MIB = 1024 * 1024


def test_defaults() -> None:
    s = parse_limits({}, environ={}).state
    assert s.responses_ttl_seconds == 30 * 86400  # OpenAI's
    assert s.max_stored_response_bytes == 40 * MIB
    assert (s.memory_max_responses, s.memory_max_response_bytes_total) == (1000, 64 * MIB)
    assert (s.blob_timeout_ms, s.blob_pool_size) == (2000.0, 4)


def test_set_in_the_file_and_the_environment() -> None:
    document = {"state": {"responses_ttl_seconds": 3600, "memory_max_responses": 50}}
    env = {"FLATGATE_STATE_MAX_STORED_RESPONSE_BYTES": "65536"}
    s = parse_limits(document, environ=env).state
    assert (s.responses_ttl_seconds, s.memory_max_responses) == (3600, 50)
    assert s.max_stored_response_bytes == 65536


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ({"responses_ttl_seconds": 0}, "state.responses_ttl_seconds: must be > 0, got 0"),
        ({"max_stored_response_bytes": 0}, "state.max_stored_response_bytes: must be >= 1"),
        ({"memory_max_responses": 0}, "state.memory_max_responses: must be >= 1, got 0"),
        (
            {"memory_max_response_bytes_total": -1},
            "state.memory_max_response_bytes_total: must be >= 1, got -1",
        ),
        ({"blob_timeout_ms": 0}, "state.blob_timeout_ms: must be > 0, got 0"),
        ({"blob_pool_size": 0}, "state.blob_pool_size: must be >= 1, got 0"),
        ({"memory_max_responses": "many"}, "state.memory_max_responses"),
        (
            {"max_stored_response_bytes": 2 * MIB, "memory_max_response_bytes_total": MIB},
            "state.max_stored_response_bytes: a memory store keeps at most "
            f"state.memory_max_response_bytes_total ({MIB}) in all, got {2 * MIB}",
        ),
    ],
)
def test_each_problem_names_its_key(state: dict[str, Any], problem: str) -> None:
    problems = limits_problems({"state": state}, environ={})
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_the_memory_bound_on_the_cap_is_a_memory_store_s_only() -> None:
    state = {
        "store": "redis://127.0.0.1:6379/0",
        "max_stored_response_bytes": 2 * MIB,
        "memory_max_response_bytes_total": MIB,
    }
    assert limits_problems({"state": state}, environ={}) == []


def test_which_keys_a_reload_keeps_the_store_through() -> None:
    s = StateSection(store="redis://127.0.0.1:6379/0")
    for kept in (
        {"responses_ttl_seconds": 60.0},
        {"max_stored_response_bytes": 1},
        {"memory_max_responses": 1},
        {"memory_max_response_bytes_total": 1},
    ):
        assert s.same_store(StateSection(store=s.store, **kept)), kept
    for changed in ({"blob_timeout_ms": 10.0}, {"blob_pool_size": 1}):
        assert not s.same_store(StateSection(store=s.store, **changed)), changed


async def test_a_redis_store_takes_the_blob_keys() -> None:
    s = open_store(
        StateSection(store="redis://127.0.0.1:6379/0", blob_timeout_ms=1234, blob_pool_size=3)
    )
    assert isinstance(s, RedisStore)
    try:
        assert s._blob_timeout == 1.234
        assert isinstance(s._blob_conns, Connections)
        assert len(s._blob_conns._all) == 3
    finally:
        await s.aclose()
