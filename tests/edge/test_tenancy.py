"""``Tenancy`` (edge_translator.tenancy) over a memory store and a clock the
test moves: who may use which model (``[[keys]] models``, a JWT's models
claim, ``[[tenants]]``), what ``GET /v1/models`` lists, admission against
``[[limits]]`` and its refusals, settling a reservation to the reported
usage, and a reload that keeps the counts; and ``wire.request.estimate.reservation``
on the buffers the edge writes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from flatgate.edge_translator.errors import ModelNotFound
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import OPEN, Credential, Identity, hash_key
from flatgate.edge_translator.openai.translate import write_request
from flatgate.edge_translator.settings import EdgeSettings, parse_edge_settings
from flatgate.edge_translator.tenancy import Admitted, Tenancy
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import Limiter
from flatgate.proxy.limits.algorithms import utc_day
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.request.estimate import estimate_request, reservation
from flatgate.proxy.wire.schema import Provider
from tests.edge.jwt_keys import AUDIENCE, ISSUER, rsa_signer, write_key_set

# 2026-03-01T06:00:00Z.
START = 1_772_344_800.0
MODELS = [
    {"name": "gpt-4o", "provider": "OpenAI", "aliases": ["gpt-latest"]},
    {"name": "claude", "provider": "Anthropic"},
    {"name": "echo", "provider": "SelfHosted", "aliases": ["echo-alias"]},
]
ALL_NAMES = ["gpt-4o", "gpt-latest", "claude", "echo", "echo-alias"]
# "You are terse." (14 bytes) and "Say hello to the world" (22 bytes): 36 bytes
# in 2 messages, ceil(36 / 4) + 2 * 4 = 17 tokens.
PROMPT_TOKENS = 17


class Clock:
    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> float:
        return self.t


def settings(**sections: Any) -> EdgeSettings:
    return parse_edge_settings({"models": MODELS, **sections}, environ={})


def tenancy(clock: Clock | None = None, **sections: Any) -> Tenancy:
    s = settings(**sections)
    return Tenancy(s, Limiter(s.limits_config(), clock=clock or Clock()))


def frame(**fields: Any) -> bytes:
    body = {
        "model": "echo",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello to the world"},
        ],
        **fields,
    }
    req = decode_request(json.dumps(body).encode())
    return write_request(req, provider=Provider.SelfHosted, model_name="echo", tenant="acme")


def listed(t: Tenancy, identity: Identity) -> list[str]:
    return [m["id"] for m in json.loads(t.listing(identity))["data"]]


def key_identity(s: EdgeSettings, key: str) -> Identity:
    identity = Identities.from_settings(s).cached_token(key)
    assert identity is not None
    return identity


def headers_of(admitted: Admitted) -> dict[str, str]:
    return dict(admitted.headers)


def sample(t: Tenancy, name: str, **labels: str) -> float:
    """The value of the sample ``name{labels}`` ``t`` collects."""
    samples = [s for m in t.collect() for s in m.samples]
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, (name, labels)
    return found[0]


async def refusal(t: Tenancy, tenant: str = "acme", model: str = "echo") -> FlatgateError:
    with pytest.raises(FlatgateError) as info:
        await t.admit(tenant, model, frame())
    return info.value


# -- models ------------------------------------------------------------------


def test_a_key_list_allows_its_models_and_their_aliases() -> None:
    keys = [{"tenant": "acme", "sha256": hash_key("k-gpt"), "models": ["gpt-*"]}]
    s = settings(keys=keys)
    t = Tenancy(s)
    caller = key_identity(s, "k-gpt")
    assert caller.models == ("gpt-*",)
    assert t.may_use(caller, "gpt-4o", "gpt-4o")
    assert t.may_use(caller, "gpt-latest", "gpt-4o")  # an alias of an allowed model
    assert not t.may_use(caller, "claude", "claude")
    with pytest.raises(ModelNotFound) as info:
        t.check(caller, "claude", "claude")
    assert (info.value.status, info.value.code.code) == (404, "model_not_found")
    assert info.value.param == "model"
    t.check(caller, "gpt-latest", "gpt-4o")  # no raise
    assert listed(t, caller) == ["gpt-4o", "gpt-latest"]


def test_a_list_naming_an_alias_allows_that_name_only() -> None:
    t = tenancy()
    caller = Identity("acme", Credential.KEY, ("gpt-latest",))
    assert t.may_use(caller, "gpt-latest", "gpt-4o")
    assert not t.may_use(caller, "gpt-4o", "gpt-4o")
    assert listed(t, caller) == ["gpt-latest"]


def test_without_lists_every_model_is_listed() -> None:
    t = tenancy(tenants=[{"name": "other", "models": ["echo"]}])
    assert listed(t, OPEN) == ALL_NAMES
    assert listed(t, Identity("acme", Credential.KEY)) == ALL_NAMES
    assert t.may_use(Identity("acme", Credential.KEY), "claude", "claude")


def test_a_tenant_list_and_a_key_list_both_apply() -> None:
    t = tenancy(tenants=[{"name": "acme", "models": ["echo", "claude"]}])
    unlisted_key = Identity("acme", Credential.KEY)
    assert listed(t, unlisted_key) == ["claude", "echo", "echo-alias"]
    narrow_key = Identity("acme", Credential.KEY, ("claude", "gpt-*"))
    assert listed(t, narrow_key) == ["claude"]
    assert not t.may_use(narrow_key, "gpt-4o", "gpt-4o")  # the key allows it, the tenant not
    assert not t.may_use(narrow_key, "echo", "echo")  # the tenant allows it, the key not
    assert listed(t, Identity("globex", Credential.KEY)) == ALL_NAMES  # not listed: all


def test_an_empty_tenant_list_allows_nothing() -> None:
    t = tenancy(tenants=[{"name": "acme", "models": []}])
    caller = Identity("acme", Credential.KEY)
    assert listed(t, caller) == []
    assert not any(t.may_use(caller, n, n) for n in ALL_NAMES)


async def test_a_jwt_models_claim_is_an_allow_list(tmp_path: Path) -> None:
    signer = rsa_signer()
    jwt = {
        "jwks_file": write_key_set(tmp_path / "jwks.json", signer),
        "issuer": ISSUER,
        "audience": AUDIENCE,
        "models_claim": "models",
    }
    s = settings(auth={"jwt": jwt}, tenants=[{"name": "acme", "models": ["echo*", "claude"]}])
    t = Tenancy(s)
    ids = Identities.from_settings(s)
    as_list = await ids.verify(f"Bearer {signer.token(sub='globex', models=['gpt-4o', 'echo'])}")
    assert (as_list.tenant, as_list.models) == ("globex", ("gpt-4o", "echo"))
    assert listed(t, as_list) == ["gpt-4o", "gpt-latest", "echo", "echo-alias"]
    spaced = await ids.verify(f"Bearer {signer.token(sub='globex', models='claude echo-*')}")
    assert listed(t, spaced) == ["claude", "echo-alias"]
    # Under [[tenants]] acme's list as well: only what both allow.
    both = await ids.verify(f"Bearer {signer.token(sub='acme', models=['gpt-*', 'echo'])}")
    assert listed(t, both) == ["echo", "echo-alias"]
    unclaimed = await ids.verify(f"Bearer {signer.token(sub='acme')}")
    assert unclaimed.models is None
    assert listed(t, unclaimed) == ["claude", "echo", "echo-alias"]


def test_a_reload_changes_lists_and_listings() -> None:
    t = tenancy(tenants=[{"name": "acme", "models": ["echo"]}])
    caller = Identity("acme", Credential.KEY)
    assert listed(t, caller) == ["echo", "echo-alias"]
    t.reload(settings(tenants=[{"name": "acme", "models": ["claude"]}]))
    assert listed(t, caller) == ["claude"]
    assert not t.may_use(caller, "echo", "echo")


# -- limits --------------------------------------------------------------------


async def test_requests_per_minute_is_counted_then_refused() -> None:
    t = tenancy(limits=[{"tenant": "acme", "requests_per_minute": 2}])
    remaining = []
    for _ in range(2):
        admitted = await t.admit("acme", "echo", frame())
        h = headers_of(admitted)
        assert h["x-ratelimit-limit-requests"] == "2"
        assert "x-ratelimit-limit-tokens" not in h  # no token rate applies
        remaining.append(int(h["x-ratelimit-remaining-requests"]))
        t.settle("acme", "echo", admitted, Usage(3, 4), answered=True)
    assert remaining == [1, 0]
    err = await refusal(t)
    assert (err.status, err.code.code, err.type) == (429, "tenant_rate_limited", "rate_limit_error")
    assert err.retry_after == pytest.approx(30)  # one request in 60 s / 2
    assert "requests_per_minute" in err.message
    h = dict(err.headers)
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("2", "0")
    assert h["x-ratelimit-reset-requests"] == "1m0s"
    # The app adds Retry-After from err.retry_after: not twice.
    assert "retry-after" not in h
    # Another tenant has no rule: unlimited, nothing to settle.
    free = await t.admit("globex", "echo", frame())
    assert (free.lease, free.headers) == (None, [])


async def test_no_limits_and_no_lists_admit_everything() -> None:
    t = tenancy()
    assert not t.active
    for _ in range(3):
        admitted = await t.admit("acme", "echo", frame())
        assert (admitted.lease, admitted.headers, admitted.reserved) == (None, [], 0)


async def test_settling_corrects_the_reservation_to_the_usage() -> None:
    clock = Clock()
    t = tenancy(
        clock,
        limits=[{"tenant": "acme", "tokens_per_minute": 10_000}],
        state={"default_max_tokens": 1000},
    )
    reserved = PROMPT_TOKENS + 1000

    async def remaining_after_admit() -> tuple[Admitted, int]:
        admitted = await t.admit("acme", "echo", frame())
        assert admitted.reserved == reserved
        return admitted, int(headers_of(admitted)["x-ratelimit-remaining-tokens"])

    first, left = await remaining_after_admit()
    assert left == 10_000 - reserved
    t.settle("acme", "echo", first, Usage(3, 5), answered=True)
    # The next request sees the 8 tokens used, not the 1,017 reserved.
    second, left = await remaining_after_admit()
    assert left == 10_000 - 8 - reserved
    # Answered without usage: the estimate stands.
    t.settle("acme", "echo", second, None, answered=True)
    third, left = await remaining_after_admit()
    assert left == 10_000 - 8 - 2 * reserved
    # No answer (the proxy failed): nothing is charged.
    t.settle("acme", "echo", third, None, answered=False)
    _, left = await remaining_after_admit()
    assert left == 10_000 - 8 - 2 * reserved


async def test_a_spent_token_rate_is_refused_and_says_when_to_retry() -> None:
    clock = Clock()
    t = tenancy(
        clock,
        limits=[{"tenant": "acme", "tokens_per_minute": 600}],
        state={"default_max_tokens": 250},
    )
    first = await t.admit("acme", "echo", frame())
    second = await t.admit("acme", "echo", frame())
    assert int(headers_of(second)["x-ratelimit-remaining-tokens"]) == 600 - 2 * 267
    err = await refusal(t)
    assert (err.status, err.code.code) == (429, "tenant_rate_limited")
    assert "tokens_per_minute" in err.message
    # 267 tokens at 10 a second, with 66 left: 20.1 s.
    assert err.retry_after == pytest.approx(20.1)
    assert dict(err.headers)["x-ratelimit-remaining-tokens"] == "66"
    # Settled to what they used, the two leave room for a third.
    for admitted in (first, second):
        t.settle("acme", "echo", admitted, Usage(10, 10), answered=True)
    await t.admit("acme", "echo", frame())


async def test_a_concurrency_slot_is_freed_when_settled() -> None:
    t = tenancy(limits=[{"tenant": "acme", "max_concurrent": 1}])
    held = await t.admit("acme", "echo", frame())
    assert held.lease is not None
    err = await refusal(t)
    assert (err.status, err.code.code, err.retry_after) == (429, "tenant_rate_limited", 1.0)
    assert "max_concurrent" in err.message
    t.settle("acme", "echo", held, None, answered=False)
    await t.admit("acme", "echo", frame())


async def test_a_day_budget_spent_refuses_until_the_day_ends() -> None:
    clock = Clock()
    t = tenancy(
        clock,
        limits=[{"tenant": "acme", "model": "echo", "tokens_per_day": 2500}],
        state={"default_max_tokens": 1000},
    )
    for _ in range(2):
        admitted = await t.admit("acme", "echo", frame())
        t.settle("acme", "echo", admitted, Usage(17, 1000), answered=True)
    err = await refusal(t)  # 2,034 used: 1,017 more would pass the budget
    assert (err.status, err.code.code) == (429, "tenant_rate_limited")
    assert "tokens_per_day" in err.message
    assert err.retry_after == pytest.approx(18 * 3600)  # 06:00 to midnight
    # Another model is not under the rule.
    await t.admit("acme", "claude", frame())
    clock.t += 18 * 3600
    await t.admit("acme", "echo", frame())


async def test_usage_is_counted_per_tenant_in_metrics() -> None:
    clock = Clock()
    t = tenancy(clock, limits=[{"tenant": "acme", "requests_per_minute": 100}])
    for used in (Usage(3, 5), Usage(4, 6)):
        t.settle("acme", "echo", await t.admit("acme", "echo", frame()), used, answered=True)
    # Not answered: not counted as used.
    t.settle("acme", "echo", await t.admit("acme", "echo", frame()), None, answered=False)
    assert sample(t, "flatgate_edge_tenant_requests_total", tenant="acme", model="echo") == 2
    tokens = "flatgate_edge_tenant_tokens_total"
    assert sample(t, tokens, tenant="acme", model="echo", kind="prompt") == 7
    assert sample(t, tokens, tenant="acme", model="echo", kind="completion") == 11
    assert sample(t, "flatgate_edge_limits_refused_total", limit="requests_per_minute") == 0
    # A memory store keeps no day of usage (only this process could read it:
    # /metrics has it); a shared store does (tests/limits/test_shared_limits.py).
    date, _ = utc_day(clock())
    assert await t.limiter.store.usage(date) == {}


async def test_a_reload_keeps_the_memory_counts() -> None:
    limits = [{"tenant": "acme", "requests_per_minute": 3}]
    t = tenancy(limits=limits)
    store = t.limiter.store
    for _ in range(2):
        await t.admit("acme", "echo", frame())
    # A new key, a new model, another policy for the store: the counts stay.
    t.reload(
        settings(
            limits=limits,
            keys=[{"tenant": "acme", "sha256": hash_key("new-key")}],
            state={"on_store_error": "closed", "default_max_tokens": 10},
        )
    )
    assert t.limiter.store is store
    last = await t.admit("acme", "echo", frame())
    assert headers_of(last)["x-ratelimit-remaining-requests"] == "0"
    err = await refusal(t)
    assert err.code.code == "tenant_rate_limited"
    # A reload that drops the limit applies from the next request on.
    t.reload(settings())
    assert (await t.admit("acme", "echo", frame())).lease is None


# -- reservation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, PROMPT_TOKENS + 1000),
        ({"max_tokens": 50}, PROMPT_TOKENS + 50),
        ({"n": 2}, PROMPT_TOKENS + 2 * 1000),
        ({"max_tokens": 50, "n": 2}, PROMPT_TOKENS + 2 * 50),
        ({"max_tokens": 50, "max_completion_tokens": 30, "n": 2}, PROMPT_TOKENS + 2 * 30),
    ],
)
def test_reservation_is_the_prompt_estimate_and_the_completion_cap(
    fields: dict[str, Any], expected: int
) -> None:
    buf = frame(**fields)
    assert estimate_request(buf) == PROMPT_TOKENS
    assert reservation(buf, 1000) == expected
    assert reservation(memoryview(buf), 1000) == expected


async def test_a_request_longer_than_its_lease_keeps_its_concurrency_slot() -> None:
    # Leases live for the edge's total_timeout (here 1 s); a running request's
    # is renewed every half of it, so a second request stays refused for as
    # long as the first runs, and gets in once it ends.
    s = settings(
        edge={"total_timeout": 1.0},
        limits=[{"tenant": "acme", "max_concurrent": 1}],
    )
    t = Tenancy(s)  # the real clock: the lease expires unless renewed
    try:
        first = await t.admit("acme", "echo", frame())
        await asyncio.sleep(1.6)  # past the lease's first expiry, three renewals in
        err = await refusal(t)
        assert "max_concurrent" in err.message
        t.settle("acme", "echo", first, Usage(1, 1), answered=True)
        await t.limiter.flush()
        await t.admit("acme", "echo", frame())
    finally:
        await t.aclose()
