"""Backend choice: weights, outstanding requests, cool-downs, fallbacks, limits."""

from __future__ import annotations

from collections import Counter

from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget


def backend(name: str, weight: int = 1, limit: int = 0) -> Backend:
    return Backend.from_config(
        BackendConfig(name=name, url=f"http://{name}:1/", weight=weight, max_outstanding=limit)
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_urls_and_timeouts_from_config() -> None:
    b = backend("a")
    out = b.adapter.prepare(Inbound(b"body", lambda: None, "rid", ""))  # type: ignore[arg-type,return-value]
    assert out.url == "http://a:1/v1/completions"
    assert out.body == b"body"
    assert b.timeouts.total is None
    assert b.timeouts.first_byte == b.timeouts.read


def test_a_429_cools_a_backend_down_for_its_retry_after() -> None:
    clock = Clock()
    a, b = backend("a"), backend("b")
    bal = Balancer(5.0, clock)
    bal.failed(a, 30.0)
    assert a.cooldown_until == clock.now + 30.0
    assert [x.name for x in bal.plan(RouteTarget("r", (a, b)))] == ["b", "a"]
    bal.failed(a)  # a shorter cooldown never cuts a longer one short
    assert a.cooldown_until == clock.now + 30.0


def test_equal_backends_share_the_load() -> None:
    a, b = backend("a"), backend("b")
    bal = Balancer(5.0)
    firsts = Counter(bal.plan(RouteTarget("r", (a, b)))[0].name for _ in range(100))
    assert firsts == {"a": 50, "b": 50}


def test_least_outstanding_per_weight_first() -> None:
    a, b = backend("a", weight=1), backend("b", weight=4)
    a.outstanding, b.outstanding = 1, 4  # (1+1)/1 = 2 > (4+1)/4 = 1.25
    bal = Balancer(5.0)
    assert [x.name for x in bal.plan(RouteTarget("r", (a, b)))] == ["b", "a"]


def test_cooled_backends_go_last_until_the_cooldown_ends() -> None:
    clock = Clock()
    a, b, f = backend("a"), backend("b"), backend("f")
    bal = Balancer(5.0, clock)
    route = RouteTarget("r", (a, b), (f,))
    bal.failed(a)
    for _ in range(4):
        assert [x.name for x in bal.plan(route)] == ["b", "a", "f"]
    clock.now += 6
    assert {bal.plan(route)[0].name for _ in range(4)} == {"a", "b"}
    bal.failed(b)
    bal.succeeded(b)
    assert b.cooldown_until == 0.0
    assert a.failures == 1 and b.failures == 1


def test_backends_at_their_limit_are_left_out() -> None:
    a, b = backend("a", limit=1), backend("b")
    a.outstanding = 1
    bal = Balancer(5.0)
    assert [x.name for x in bal.plan(RouteTarget("r", (a, b)))] == ["b"]
    assert bal.plan(RouteTarget("solo", (a,))) == []
    a.outstanding = 0
    assert bal.plan(RouteTarget("solo", (a,))) == [a]
