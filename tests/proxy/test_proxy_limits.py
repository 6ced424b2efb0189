"""Tenants' limits at the proxy (``service.quota``), in process: a caller
holding the proxy's token names a tenant, and its ``[[limits]]`` hold before
any backend is contacted; a request the edge admitted is not counted twice;
a reload changes the limit and keeps the count."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.codecs.stock_chunk import build_chunk
from benchmarks.inmemory import FakeExchange, FakeTransport, drive
from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Upstream
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import ADMITTED_HEADER, FinishReason

TOKEN = "proxy-caller-token"


def config(rpm: int = 2, **limit: Any) -> dict[str, Any]:
    return {
        "proxy": {"access_log": False, "auth_token_sha256": hash_key(TOKEN)},
        "backends": [{"name": "stub", "url": "http://127.0.0.1:9"}],
        "routes": [{"model": "*", "backends": ["stub"]}],
        "limits": [{"tenant": "acme", "requests_per_minute": rpm, **limit}],
    }


class CountingTransport(FakeTransport):
    """Counts the requests sent to the backend."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def request(self, req: Upstream) -> Any:
        self.calls += 1
        return await super().request(req)


def server_for(
    cfg: dict[str, Any], *, limits: bool = True
) -> tuple[ProxyServer, CountingTransport]:
    server = ProxyServer(parse_config(cfg, environ={}), worker="t", limits=limits)
    transport = CountingTransport()
    server._transport = transport
    return server, transport


def call(server: ProxyServer, body: bytes, **headers: str) -> FakeExchange:
    ex = FakeExchange(body)
    ex._headers.update({"authorization": f"Bearer {TOKEN}", **headers})
    drive(server.completions(ex))
    return ex


def statuses(server: ProxyServer, body: bytes, n: int, **headers: str) -> list[int]:
    return [call(server, body, **headers).status for _ in range(n)]


ACME = build_request("m", [("user", "hi")], tenant="acme")
OTHER = build_request("m", [("user", "hi")], tenant="globex")
NO_TENANT = build_request("m", [("user", "hi")])


def test_a_tenants_limit_holds_before_any_backend_is_contacted() -> None:
    server, transport = server_for(config(rpm=2))
    assert statuses(server, ACME, 2) == [200, 200]
    sent = transport.calls
    refused = call(server, ACME)
    assert refused.status == 429
    error = json.loads(refused.body_out)["error"]
    assert error["code"] == "tenant_rate_limited"
    assert "requests_per_minute (2)" in error["message"]
    assert int(dict(refused.headers_out)["retry-after"]) >= 1
    assert transport.calls == sent  # the backend never saw it
    # Other tenants, and requests without one, have no limit here.
    assert statuses(server, OTHER, 3) == [200] * 3
    assert statuses(server, NO_TENANT, 3) == [200] * 3


def test_a_request_the_edge_admitted_is_not_counted_again() -> None:
    server, _ = server_for(config(rpm=1))
    assert statuses(server, ACME, 4, **{ADMITTED_HEADER: "1"}) == [200] * 4
    assert statuses(server, ACME, 2) == [200, 429]


def test_the_in_process_router_keeps_no_limits() -> None:
    server, _ = server_for(config(rpm=1), limits=False)
    assert server.quota is None
    assert statuses(server, ACME, 3) == [200] * 3


def test_a_reload_changes_the_limit_and_keeps_the_count() -> None:
    server, _ = server_for(config(rpm=3))
    assert statuses(server, ACME, 2) == [200, 200]
    server.reload(parse_config(config(rpm=3, tokens_per_day=10**9), environ={}))
    assert statuses(server, ACME, 2) == [200, 429]  # the third of three, then spent


def test_a_token_budget_counts_the_reservation() -> None:
    # max_tokens 100 reserved per request (plus a few prompt tokens): a 250
    # budget allows two; the stub's answers report no usage, so the
    # reservations stand.
    body = build_request("m", [("user", "hi")], tenant="acme", max_tokens=100)
    server, _ = server_for(config(rpm=100, tokens_per_day=250))
    assert statuses(server, body, 3) == [200, 200, 429]
    err = json.loads(call(server, body).body_out)["error"]
    assert "tokens_per_day" in err["message"]


def test_a_token_budget_is_settled_to_the_reported_usage() -> None:
    # The same 250-token budget: each request reserves about 106 tokens, and
    # settles to its prompt's estimate plus the 5 completion tokens the
    # backend reports (read from the final chunk, access log or not).
    answer = build_chunk(
        BuilderPool(),
        content="done",
        finish_reason=FinishReason.STOP,
        usage=Usage(prompt_tokens=3, completion_tokens=5),
    )
    body = build_request("m", [("user", "hi")], tenant="acme", max_tokens=100)
    server, transport = server_for(config(rpm=100, tokens_per_day=250))
    transport.data = answer
    assert statuses(server, body, 6) == [200] * 6
