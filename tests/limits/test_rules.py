"""Which rules apply to a (tenant, model), their keys, and the model
allow-lists; both cached within bounds."""

from __future__ import annotations

import pytest

from flatgate.proxy.limits import LimitRule, allowed
from flatgate.proxy.limits import rules as rules_module
from flatgate.proxy.limits.rules import RuleSet, key_part

RULES = [
    LimitRule(tenant="*", requests_per_minute=60),
    LimitRule(tenant="*", model="gpt-*", tokens_per_minute=1000, max_concurrent=2),
    LimitRule(tenant="acme", model="gpt-4o", tokens_per_day=5000),
    LimitRule(tenant="acme", model="g?t-[45]*", requests_per_minute=5),
]


def whats(tenant: str, model: str) -> list[str]:
    return [c.what for c in RuleSet(RULES, "fg").plan(tenant, model).checks]


def test_star_rules_for_tenants_without_their_own() -> None:
    assert whats("globex", "gpt-4o") == [
        "requests_per_minute (60) for tenant globex",
        "tokens_per_minute (1000) for tenant globex, model gpt-*",
        "max_concurrent (2) for tenant globex, model gpt-*",
    ]
    assert whats("globex", "llama") == ["requests_per_minute (60) for tenant globex"]


def test_a_tenants_own_rules_replace_the_star_rules() -> None:
    assert whats("acme", "gpt-4o") == [
        "tokens_per_day (5000) for tenant acme, model gpt-4o",
        "requests_per_minute (5) for tenant acme, model g?t-[45]*",
    ]
    assert whats("acme", "gpt-5") == ["requests_per_minute (5) for tenant acme, model g?t-[45]*"]
    assert whats("acme", "llama") == []  # none of acme's rules: unlimited, not the "*" ones
    assert not RuleSet(RULES, "fg").plan("acme", "llama")


def test_keys_per_rule_and_tenant() -> None:
    rules = RuleSet(RULES, "fg")
    plan = rules.plan("globex", "gpt-4o")
    assert plan.keys == (
        "fg:{globex}:rpm:*",
        "fg:{globex}:tpm:gpt-*",
        "fg:{globex}:conc:gpt-*",
    )
    assert rules.plan("globex", "gpt-5").keys == plan.keys  # a glob counts its models together
    day = rules.plan("acme", "gpt-4o")
    assert day.keys_on("20260301") == ("fg:{acme}:tpd:gpt-4o:20260301", "fg:{acme}:rpm:g?t-[45]*")
    assert day.keys_on("20260301") is day.keys_on("20260301")  # kept for the day
    assert day.keys_on("20260302")[0].endswith(":20260302")


def test_names_are_escaped_in_keys() -> None:
    assert key_part("a:b{c}%d") == "a%3Ab%7Bc%7D%25d"
    plan = RuleSet([LimitRule(tenant="*", model="m:1", max_concurrent=1)], "fg").plan("x}:y", "m:1")
    assert plan.keys == ("fg:{x%7D%3Ay}:conc:m%3A1",)


def test_plans_are_cached_within_bounds() -> None:
    rules = RuleSet(RULES, "fg", cache_size=3)
    first = rules.plan("t0", "m")
    assert rules.plan("t0", "m") is first
    for i in range(10):
        rules.plan(f"t{i}", "m")
    assert rules.cache_info() == (3, 3)
    assert rules.plan("t0", "m") is not first  # evicted, rebuilt alike
    rules.plan("x" * 600, "m")  # too long to keep
    assert ("x" * 600, "m", 0) not in rules._cache
    uncached = RuleSet(RULES, "fg", cache_size=0)
    uncached.plan("a", "b")
    assert uncached.cache_info() == (0, 0)
    with pytest.raises(ValueError):
        RuleSet(RULES, "fg", cache_size=-1)


@pytest.mark.parametrize(
    ("models", "model", "expected"),
    [
        (None, "anything", True),
        ((), "gpt-4o", False),
        (("gpt-4o",), "gpt-4o", True),
        (("gpt-4o",), "gpt-4o-mini", False),
        (("gpt-*", "claude-3"), "gpt-4o-mini", True),
        (["gpt-*", "claude-3"], "claude-3", True),
        (("gpt-*",), "GPT-4o", False),  # case-sensitive, as routes are
        (("model[1]",), "model[1]", True),  # an entry equal to the name
        (("model[12]",), "model2", True),
    ],
)
def test_allowed(models: tuple[str, ...] | None, model: str, expected: bool) -> None:
    assert allowed(models, model) is expected
    assert allowed(models, model) is expected  # cached


def test_allowed_cache_is_bounded() -> None:
    for i in range(50):
        allowed(("m-*",), f"m-{i}", cache_size=10)
    assert len(rules_module._ALLOWED) <= 10
