"""The [state], [[limits]] and [[tenants]] sections: defaults, overlays, and
every problem of a document, each naming its key."""

from __future__ import annotations

from typing import Any

import pytest

from flatgate.proxy.limits import (
    LimitRule,
    LimitsConfig,
    StateSection,
    limits_problems,
    parse_limits,
)
from flatgate.proxy.limits.sections import store_password
from flatgate.proxy.plumbing.config import ConfigError


def test_defaults() -> None:
    config = parse_limits({}, environ={})
    assert config == LimitsConfig()
    s = config.state
    assert (s.store, s.password_env, s.timeout_ms) == ("memory", "", 50.0)
    assert (s.on_store_error, s.key_prefix, s.pool_size) == ("open", "flatgate", 32)
    assert s.is_memory and store_password(s, {}) is None


def test_a_full_document() -> None:
    document = {
        "proxy": {"port": 1},  # another service's section: not read here
        "state": {
            "store": "rediss://cache.internal:6380/2",
            "password_env": "REDIS_PW",
            "timeout_ms": 20,
            "pool_size": 8,
            "on_store_error": "closed",
            "key_prefix": "fg-prod",
        },
        "limits": [
            {"tenant": "*", "requests_per_minute": 60, "tokens_per_minute": 90_000},
            {"tenant": "acme", "model": "gpt-*", "max_concurrent": 10, "tokens_per_day": 10**7},
        ],
        "tenants": [{"name": "acme", "models": ["gpt-*", "claude-3"]}, {"name": "globex"}],
    }
    config = parse_limits(document, environ={"REDIS_PW": "pw"})
    assert store_password(config.state, {"REDIS_PW": "pw"}) == "pw"
    assert config.limits[1] == LimitRule(
        tenant="acme", model="gpt-*", max_concurrent=10, tokens_per_day=10**7
    )
    assert config.limits[0].limits() == [("requests_per_minute", 60), ("tokens_per_minute", 90_000)]
    assert config.tenant_models() == {"acme": ("gpt-*", "claude-3"), "globex": None}


def test_environment_overlays_state() -> None:
    env = {"FLATGATE_STATE_STORE": "redis://10.0.0.5:6379", "FLATGATE_STATE_TIMEOUT_MS": "80"}
    state = parse_limits({"state": {"store": "memory"}}, environ=env).state
    assert state == StateSection(store="redis://10.0.0.5:6379", timeout_ms=80)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"state": {"store": "mem"}}, 'state.store: expected "memory" or redis://host'),
        ({"state": {"store": "http://h:1"}}, "state.store: expected"),
        ({"state": {"store": "redis://h:99999"}}, "state.store: not a URL"),
        ({"state": {"store": "redis://:pw@h"}}, "state.store: the URL carries a password"),
        ({"state": {"store": "redis://h/x"}}, "state.store: the path must be a database number"),
        ({"state": {"store": "redis://h/0?ssl=1"}}, "state.store: options go in [state] keys"),
        ({"state": {"store": "redis://h", "password_env": "NOPE"}}, "state.password_env: envir"),
        ({"state": {"password_env": "X"}}, "state.password_env: applies to a Redis store only"),
        ({"state": {"timeout_ms": 0}}, "state.timeout_ms: must be > 0"),
        ({"state": {"pool_size": 0}}, "state.pool_size: must be >= 1"),
        ({"state": {"on_store_error": "maybe"}}, "state.on_store_error: Invalid enum value"),
        ({"state": {"key_prefix": "a:b"}}, "state.key_prefix: must be non-empty"),
        ({"state": {"colour": 1}}, "state: Object contains unknown field `colour`"),
        ({"limits": {"tenant": "*"}}, "limits: expected an array of tables"),
        ({"limits": [{"requests_per_minute": 1}]}, "limits[0].tenant: required key is missing"),
        ({"limits": [{"tenant": "a"}]}, "limits[0]: sets no limit"),
        ({"limits": [{"tenant": "", "max_concurrent": 1}]}, "limits[0].tenant: must not be empty"),
        ({"limits": [{"tenant": "a", "model": "", "max_concurrent": 1}]}, "limits[0].model: must"),
        (
            {"limits": [{"tenant": "a", "max_concurrent": 0}]},
            "limits[0].max_concurrent: must be >=",
        ),
        ({"limits": [{"tenant": "a", "rpm": 1}]}, "limits[0]: Object contains unknown field `rpm`"),
        ({"limits": [{"tenant": "a", "tokens_per_day": "x"}]}, "limits[0].tokens_per_day: Expec"),
        ({"tenants": [{"name": "*"}]}, "tenants[0].name: must be a tenant's name"),
        ({"tenants": [{"name": "a", "models": [""]}]}, "tenants[0].models[0]: must not be empty"),
        ({"tenants": [{"name": "a", "models": "gpt"}]}, "tenants[0].models: Expected `array"),
    ],
)
def test_each_problem_names_its_key(document: dict[str, Any], problem: str) -> None:
    problems = limits_problems(document, environ={})
    assert any(p.startswith(problem) for p in problems), problems


def test_duplicates() -> None:
    document = {
        "limits": [
            {"tenant": "a", "model": "m", "max_concurrent": 1},
            {"tenant": "a", "model": "m", "requests_per_minute": 1},
            {"tenant": "b", "model": "m", "max_concurrent": 1},
        ],
        "tenants": [{"name": "a"}, {"name": "a"}],
    }
    assert limits_problems(document, environ={}) == [
        "limits[1].model: limits[0] already limits tenant 'a' on 'm'; put the limits in one entry",
        "tenants[1].name: tenants[0] already names 'a'",
    ]


def test_every_problem_at_once() -> None:
    document = {
        "state": {"store": "mem", "pool_size": 0},
        "limits": [{"tenant": "a"}, {"tenant": "b", "max_concurrent": -1}],
    }
    with pytest.raises(ConfigError) as caught:
        parse_limits(document, environ={})
    keys = [p.split(":")[0] for p in caught.value.problems]
    assert keys == ["state.store", "state.pool_size", "limits[0]", "limits[1].max_concurrent"]
