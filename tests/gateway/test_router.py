"""``transport.router.Router``, the one interface for what the edge asks of
the router, and its two makers: the router in process
(``service.inprocess.InProcessRouter``) and the edge's HTTP client to a
separate proxy (``edge_translator.proxy_link.ProxyLink``). A refusal crosses
in process as the error object (``Refused``), and the edge makes of it the
very error it makes of the proxy's JSON answer for it."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.inmemory import FakeTransport
from flatgate.edge_translator.proxy_link import ProxyLink, complete, embed, proxy_error, refused
from flatgate.edge_translator.settings import EdgeSection
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.errors import ProxyError, answer_of
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.router import Refused, Router
from flatgate.proxy.wire.embeddings import write_embedding_request
from flatgate.proxy.wire.request import build_request

CONFIG: dict[str, Any] = {
    "proxy": {"access_log": False},
    "backends": [{"name": "stub", "url": "http://127.0.0.1:9"}],
    "routes": [{"model": "echo-*", "backends": ["stub"]}],
}

# The router's refusals, as service.errors makes them.
REFUSALS = [
    ProxyError(codes.NO_ROUTE, "no route for ('', 'nope')"),
    ProxyError(codes.BODY_TOO_LARGE, "body over 10 bytes"),
    ProxyError(codes.BACKEND_TIMEOUT, "no backend answered in time"),
    ProxyError(codes.BACKEND_UNAVAILABLE, "no backend reachable: refused"),
    ProxyError(codes.POOL_EXHAUSTED, "no connection came free", retry_after=1.0),
    ProxyError(codes.BACKEND_RATE_LIMITED, "slow down", retry_after=2.5),
    ProxyError(codes.UNAUTHORIZED, "missing token"),
    ProxyError(codes.TENANT_FORBIDDEN, "tenant not allowed"),
    ProxyError(codes.MALFORMED_REQUEST, "bad buffer"),
    ProxyError(codes.BACKEND_UNAVAILABLE, "a backend's 400", status=400),
    ProxyError(codes.BACKEND_UNAVAILABLE, "", status=503),
]


def _fields(err: FlatgateError) -> tuple[Any, ...]:
    return (type(err), err.code, err.status, err.message, err.param, err.retry_after)


@pytest.mark.parametrize("err", REFUSALS, ids=lambda e: f"{e.code.code}-{e.status}")
def test_a_refusal_in_process_is_the_error_its_json_is_over_http(err: ProxyError) -> None:
    status, headers, body = answer_of(err)
    over_http = proxy_error(status, dict(headers), body)
    in_process = refused(Refused.of(err))
    assert _fields(in_process) == _fields(over_http)


def _router() -> tuple[ProxyServer, InProcessRouter]:
    proxy = ProxyServer(parse_config(CONFIG), worker="t")
    proxy._transport = FakeTransport()
    return proxy, InProcessRouter(proxy)


async def test_both_makers_are_the_edges_router() -> None:
    in_process = InProcessRouter(ProxyServer(parse_config(CONFIG), worker="t"))
    over_http = ProxyLink(EdgeSection(), Metrics("flatgate_edge"))
    routers: list[Router] = [in_process, over_http]
    assert all(r.pool() is None for r in routers)  # no pool until a request made one
    for router in routers:
        await router.aclose()


async def test_the_edge_gets_the_refusal_as_its_error_never_an_answer() -> None:
    _, router = _router()
    frame = build_request("nope", [("user", "hi")], request_id="r1")
    with pytest.raises(FlatgateError) as info:
        await complete(router, frame, "r1", Ending(), admitted=True)
    assert not isinstance(info.value, Refused)
    assert info.value.code is codes.MODEL_NOT_FOUND and info.value.param == "model"
    frame = write_embedding_request("nope", texts=["hi"])
    with pytest.raises(FlatgateError) as info:
        await embed(router, frame, "r1", Ending(), admitted=True)
    assert info.value.code is codes.MODEL_NOT_FOUND


async def test_a_completion_is_answered_with_its_backend() -> None:
    proxy, router = _router()
    frame = build_request("echo-1", [("user", "hi")], request_id="r1")
    resp = await complete(router, frame, "r1", Ending(), admitted=True)
    assert resp.status == 200 and resp.headers["x-flatgate-backend"] == "stub"
    assert await resp.read()
    await resp.aclose()
    assert router.pool() is proxy.transport
