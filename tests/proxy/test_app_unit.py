"""ProxyServer in process: the in-memory exchange and backend of benchmarks.inmemory."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from benchmarks.inmemory import (
    ANSWER,
    FakeExchange,
    FakeTransport,
    drive,
    make_server,
    serve_one,
)
from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Upstream, UpstreamConnectError, UpstreamPoolTimeout
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FinishReason

BODY = build_request("m", [("user", "hi")])


def test_a_complete_answer_goes_out_as_one_response() -> None:
    frames = write_chunk(content="hi") + write_chunk(finish_reason=FinishReason.STOP)
    server, transport = make_server(frames)
    ex = serve_one(server, BODY)
    assert (ex.status, ex.body_out) == (200, frames)
    assert transport.last_body is BODY
    assert transport.last_answer is not None and transport.last_answer.closed
    assert server.backends["stub"].outstanding == 0


def test_a_malformed_first_frame_is_a_502_not_a_crash() -> None:
    server, transport = make_server(b"\xff\xff\xff\x7f" + b"x" * 64)
    ex = serve_one(server, BODY)
    assert ex.status == 502
    assert json.loads(ex.body_out)["error"]["code"] == "backend_protocol_error"
    assert transport.last_answer is not None and transport.last_answer.closed
    assert server.backends["stub"].outstanding == 0


# -- hardening: attempts, pool exhaustion, accounting, authentication --------

FAILING: dict[str, Any] = {
    "proxy": {"max_attempts": 2, "access_log": False},
    "backends": [{"name": f"b{i}", "url": f"http://127.0.0.{i + 1}:9"} for i in range(3)],
    "routes": [{"model": "*", "backends": ["b0", "b1", "b2"]}],
}


class ScriptedTransport(FakeTransport):
    """Raises ``errors[url host]`` for a backend, else answers with ``data``."""

    def __init__(self, errors: dict[str, Exception], data: bytes = ANSWER) -> None:
        super().__init__(data)
        self.errors = errors
        self.calls: list[str] = []

    async def request(self, req: Upstream) -> Any:
        self.calls.append(req.url)
        for host, error in self.errors.items():
            if host in req.url:
                raise error
        return await super().request(req)


def scripted(config: dict[str, Any], errors: dict[str, Exception]) -> tuple[ProxyServer, Any]:
    server = ProxyServer(parse_config(config), worker="t")
    transport = ScriptedTransport(errors)
    server._transport = transport
    return server, transport


def count_of(server: ProxyServer, status: int) -> float:
    value = server.metrics.registry.get_sample_value(
        "flatgate_requests_total", {"route": "*", "status": str(status)}
    )
    return value or 0.0


def test_max_attempts_bounds_the_backends_tried() -> None:
    down = UpstreamConnectError("refused")
    server, transport = scripted(FAILING, {"127.0.0.1": down, "127.0.0.2": down, "127.0.0.3": down})
    ex = serve_one(server, BODY)
    assert ex.status == 502
    assert len(transport.calls) == 2  # max_attempts, not all three
    assert all(b.outstanding == 0 for b in server.backends.values())


def test_a_pool_timeout_fails_over_without_cooling_the_backend_down() -> None:
    full = UpstreamPoolTimeout("no free connection")
    server, transport = scripted(FAILING, {"127.0.0.1": full, "127.0.0.2": full, "127.0.0.3": full})
    ex = serve_one(server, BODY)
    assert ex.status == 503
    assert json.loads(ex.body_out)["error"]["code"] == "pool_exhausted"
    assert dict(ex.headers_out)["retry-after"] == "1"
    for b in server.backends.values():
        assert (b.cooldown_until, b.failures, b.outstanding) == (0.0, 0, 0)
    # One host full, another free: the request fails over and succeeds.
    server, transport = scripted(FAILING, {"127.0.0.1": full})
    for _ in range(3):  # the balancer rotates: b0 comes first once
        assert serve_one(server, BODY).status == 200
    assert transport.calls.count("http://127.0.0.1:9/v1/completions") == 1
    assert server.backends["b0"].cooldown_until == 0.0


def test_a_request_is_counted_once_even_when_its_first_read_fails() -> None:
    server, _ = make_server(b"\xff\xff\xff\x7f" + b"x" * 64)
    ex = serve_one(server, BODY)
    assert ex.status == 502
    assert count_of(server, 502) == 1 and count_of(server, 200) == 0
    server, _ = make_server()
    serve_one(server, BODY)
    assert count_of(server, 200) == 1 and count_of(server, 502) == 0


TOKEN = "proxy-token-1"
AUTH: dict[str, Any] = {
    "proxy": {"auth_token_sha256": hash_key(TOKEN), "access_log": False},
    "backends": [{"name": "stub", "url": "http://127.0.0.1:9", "forward_credentials": True}],
    "routes": [{"model": "*", "backends": ["stub"]}],
}


def authed(
    authorization: str | None, *, tenant: str = "", require: bool = False
) -> tuple[FakeExchange, list[tuple[str, str]]]:
    config = {**AUTH, "proxy": {**AUTH["proxy"], "require_auth": require}}
    server, transport = scripted(config, {})
    body = build_request("m", [("user", "hi")], tenant=tenant)
    ex = FakeExchange(body)
    if authorization is not None:
        ex._headers["authorization"] = authorization
    drive(server.completions(ex))
    return ex, list(transport.last_headers)


@pytest.mark.parametrize(
    ("authorization", "tenant", "require", "status", "code"),
    [
        (None, "", False, 200, None),  # anonymous, no tenant: allowed
        (None, "acme", False, 403, "tenant_forbidden"),
        # A wrong token is 401 on any request, a tenant set or not.
        ("Bearer wrong", "acme", False, 401, "unauthorized"),
        ("Bearer wrong", "", False, 401, "unauthorized"),
        (f"Bearer {TOKEN}", "acme", False, 200, None),
        (None, "", True, 401, "unauthorized"),
        (f"Bearer {TOKEN}", "", True, 200, None),
    ],
)
def test_proxy_authentication(
    authorization: str | None, tenant: str, require: bool, status: int, code: str | None
) -> None:
    ex, forwarded = authed(authorization, tenant=tenant, require=require)
    assert ex.status == status
    if code is not None:
        assert json.loads(ex.body_out)["error"]["code"] == code
    else:
        # The proxy's token is never forwarded, whatever forward_credentials says.
        assert "authorization" not in {k for k, _ in forwarded}


def test_without_authentication_a_callers_credential_is_forwarded_when_asked() -> None:
    config = {**AUTH, "proxy": {"access_log": False}}
    server, transport = scripted(config, {})
    ex = FakeExchange(BODY)
    ex._headers["authorization"] = "Bearer caller-key"
    drive(server.completions(ex))
    assert ex.status == 200
    assert ("authorization", "Bearer caller-key") in transport.last_headers


class HangingTransport(FakeTransport):
    """Never answers: the request waits for its response head until cancelled."""

    async def request(self, req: Upstream) -> Any:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_cancelled_request_releases_its_backend_and_admission() -> None:
    server = ProxyServer(parse_config({**FAILING, "proxy": {"access_log": False}}), worker="t")
    server._transport = HangingTransport()
    task = asyncio.ensure_future(server.completions(FakeExchange(BODY)))
    await asyncio.sleep(0.05)
    assert sum(b.outstanding for b in server.backends.values()) == 1
    assert server.admission.in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sum(b.outstanding for b in server.backends.values()) == 0
    assert (server.admission.in_flight, server.admission.held) == (0, 0)
