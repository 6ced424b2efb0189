"""``[state] store``'s URLs (``limits.redisurl``) and the start-up check that
each tenant's keys share one cluster slot (``limiter.check_slots``)."""

from __future__ import annotations

import re

import pytest

from flatgate.proxy.limits import RedisStore, limits_problems
from flatgate.proxy.limits.limiter import check_slots
from flatgate.proxy.limits.rediscluster import key_slot, one_slot
from flatgate.proxy.limits.redisurl import Kind, StoreAddress, parse_store_url
from flatgate.proxy.limits.rules import RuleSet
from flatgate.proxy.limits.sections import LimitRule


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("redis://h", StoreAddress(Kind.SINGLE, False, (("h", 6379),))),
        ("rediss://h:6380/2", StoreAddress(Kind.SINGLE, True, (("h", 6380),), 2)),
        (
            "redis+cluster://a:7000,b:7001, c",
            StoreAddress(Kind.CLUSTER, False, (("a", 7000), ("b", 7001), ("c", 6379))),
        ),
        ("rediss+cluster://[::1]:7000/0", StoreAddress(Kind.CLUSTER, True, (("::1", 7000),))),
        (
            "redis+sentinel://s1,s2:26380/mymaster",
            StoreAddress(Kind.SENTINEL, False, (("s1", 26379), ("s2", 26380)), 0, "mymaster"),
        ),
        (
            "rediss+sentinel://s1:1/cache/3",
            StoreAddress(Kind.SENTINEL, True, (("s1", 1),), 3, "cache"),
        ),
    ],
)
def test_urls_parse(url: str, want: StoreAddress) -> None:
    assert parse_store_url(url) == want


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://", "no host"),
        ("redis+cluster://a:7000/1", "a cluster has database 0 only"),
        ("redis+cluster://a:x", "not a host[:port]"),
        ("redis+cluster://a:70000", "port out of range"),
        ("redis+cluster://u:pw@a:7000", "the URL carries a password"),
        ("redis+sentinel://s1:26379", "expected /service or /service/db"),
        ("redis+sentinel://s1:26379/m/x", "expected /service or /service/db"),
        ("redis+sentinel://s1/m?x=1", "options go in [state] keys"),
        ("redis+sentinels://s1/m", 'expected "memory" or redis://host'),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_store_url(url)
    (found,) = limits_problems({"state": {"store": url}})
    assert found.startswith("state.store: ") and problem in found


def test_node_urls_keep_tls_and_the_database() -> None:
    address = parse_store_url("rediss+sentinel://s1/m/4")
    assert address.node_url("10.0.0.1", 6379) == "rediss://10.0.0.1:6379/4"
    assert address.node_url("::1", 26379, db=0) == "rediss://[::1]:26379/0"
    assert parse_store_url("redis+cluster://a").node_url("b", 1) == "redis://b:1/0"


def test_the_sentinels_password_is_checked_like_the_primarys() -> None:
    sentinel = {"store": "redis+sentinel://s1/m", "sentinel_password_env": "SP"}
    assert limits_problems({"state": sentinel}, environ={"SP": "x"}) == []
    assert limits_problems({"state": sentinel}, environ={}) == [
        "state.sentinel_password_env: environment variable SP is not set"
    ]
    cluster = {"store": "redis+cluster://a:1", "sentinel_password_env": "SP"}
    assert limits_problems({"state": cluster}, environ={"SP": "x"}) == [
        "state.sentinel_password_env: applies to a redis+sentinel:// store only"
    ]


def test_key_slot_is_crc16_of_the_hash_tag() -> None:
    # The values Redis' own CLUSTER KEYSLOT gives (and its documentation's).
    assert key_slot("foo") == 12182
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers") == 3443
    assert key_slot("foo{}{bar}") == key_slot("foo{}{bar}")  # the whole key: an empty tag
    assert key_slot("foo{{bar}}zap") == key_slot("{bar")
    assert one_slot(["{a}:1", "{a}:2"]) and not one_slot(["{a}:1", "{b}:1"])


def test_each_tenants_keys_share_a_slot() -> None:
    rules = RuleSet(
        [
            LimitRule(tenant="acme", model="gpt-*", tokens_per_minute=10, tokens_per_day=100),
            LimitRule(tenant="acme", model="*", requests_per_minute=5, max_concurrent=2),
            LimitRule(tenant="*", model="*", requests_per_minute=1),
        ],
        "fg",
    )
    keys = rules.tenant_keys("acme", "20261201")
    assert sorted(keys) == [
        "fg:{acme}:conc:*",
        "fg:{acme}:rpm:*",
        "fg:{acme}:tpd:gpt-*:20261201",
        "fg:{acme}:tpm:gpt-*",
    ]
    assert one_slot(keys)
    assert rules.tenants() == ["acme"]
    store = RedisStore("redis+cluster://127.0.0.1:1")
    check_slots(store, rules)  # no I/O: the slots are computed here


def test_a_key_format_that_spans_slots_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rules = RuleSet([LimitRule(tenant="acme", model="*", requests_per_minute=5)], "fg")
    monkeypatch.setattr(RuleSet, "tenant_keys", lambda self, tenant: ["{a}:x", "{b}:y"])
    with pytest.raises(ValueError, match="span slots"):
        check_slots(RedisStore("redis+cluster://127.0.0.1:1"), rules)
    check_slots(RedisStore("redis://127.0.0.1:1"), rules)  # one server: any key
