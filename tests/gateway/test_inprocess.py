"""The router the edge calls, in process (``service.inprocess.InProcessRouter``):
what the edge reads from it is what it reads from the proxy over HTTP, and a
refusal is raised as ``transport.router.Refused``, never answered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from benchmarks.inmemory import FakeAnswer, FakeTransport, serve_one
from flatgate.proxy.service import dispatch
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import (
    Upstream,
    UpstreamConnectError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
)
from flatgate.proxy.transport.router import Refused
from flatgate.proxy.wire.chunk.frames import FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.request.verify import verify_request as verify
from flatgate.proxy.wire.schema import BACKEND_HEADER, FinishReason
from tests.proxy.routed import http_answer

CONFIG: dict[str, Any] = {
    "proxy": {"access_log": False},
    "backends": [{"name": "stub", "url": "http://127.0.0.1:9"}],
    "routes": [{"model": "echo-*", "backends": ["stub"]}],
}
FRAMES = write_chunk(content="hello ") + write_chunk(
    content="world", finish_reason=FinishReason.STOP
)


class BrokenAnswer(FakeAnswer):
    """Sends ``data``, then the connection breaks."""

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        yield self.data
        raise UpstreamProtocolError("connection reset mid-response")


class Scripted(FakeTransport):
    def __init__(self, data: bytes = FRAMES, error: Exception | None = None, broken: bool = False):
        super().__init__(data)
        self.error = error
        self.broken = broken

    async def request(self, req: Upstream) -> Any:
        if self.error is not None:
            raise self.error
        self.last_body = req.body
        self.last_answer = (BrokenAnswer if self.broken else FakeAnswer)(self.data)
        return self.last_answer


def router(upstream: FakeTransport) -> tuple[ProxyServer, InProcessRouter]:
    proxy = ProxyServer(parse_config(CONFIG), worker="t")
    proxy._transport = upstream
    return proxy, InProcessRouter(proxy)


async def ask(t: InProcessRouter, model: str = "echo-1") -> tuple[Any, bytes]:
    body = build_request(model, [("user", "hi")], request_id="r1")
    resp = await t.complete(body, "r1", admitted=True)
    return resp, await resp.read()


async def refusal(t: InProcessRouter, model: str = "echo-1") -> tuple[int, dict[str, str], Any]:
    """The refusal ``t`` raised: what the proxy's HTTP surface answers for it
    (status, headers, JSON body)."""
    with pytest.raises(Refused) as info:
        await ask(t, model)
    status, headers, body = http_answer(info.value)
    return status, headers, json.loads(body)


def chunks(data: bytes) -> list[Any]:
    return [decode_chunk(unprefix(f)) for f in FrameSplitter().feed(data)]


async def test_the_backend_gets_the_very_bytes_and_the_frames_come_back() -> None:
    upstream = Scripted()
    proxy, t = router(upstream)
    body = build_request("echo-1", [("user", "hi")])
    resp = await t.complete(body, "", admitted=True)
    assert resp.status == 200 and resp.headers[BACKEND_HEADER] == "stub"
    assert await resp.read() == FRAMES
    assert upstream.last_body is body  # the untouched object, no copy
    await resp.aclose()
    assert proxy.backends["stub"].outstanding == 0
    assert upstream.last_answer is not None and upstream.last_answer.closed
    assert (
        proxy.metrics.registry.get_sample_value(
            "flatgate_requests_total", {"route": "echo-*", "status": "200"}
        )
        == 1
    )


async def test_a_refusal_is_raised_with_the_proxys_status_and_error() -> None:
    proxy, t = router(Scripted())
    status, _, body = await refusal(t, "nope")
    assert status == 404 and body["error"]["code"] == "no_route"
    labels = {"route": "-", "status": "404"}
    assert proxy.metrics.registry.get_sample_value("flatgate_requests_total", labels) == 1
    _, t = router(Scripted(error=UpstreamPoolTimeout("full")))
    status, headers, body = await refusal(t)
    assert status == 503 and headers["retry-after"] == "1"
    assert body["error"]["code"] == "pool_exhausted"
    _, t = router(Scripted(error=UpstreamConnectError("refused")))
    status, _, body = await refusal(t)
    assert status == 502 and body["error"]["code"] == "backend_unavailable"


async def test_a_failure_mid_stream_is_one_error_chunk() -> None:
    proxy, t = router(Scripted(write_chunk(content="hello "), broken=True))
    _, body = await ask(t)
    got = chunks(body)
    assert [c.content for c in got] == ["hello ", ""]
    assert got[-1].finish_reason == FinishReason.ERROR
    assert got[-1].error is not None and got[-1].error.code == "backend_disconnected"
    assert proxy.backends["stub"].outstanding == 0


OPENAI_CONFIG: dict[str, Any] = {
    "proxy": {"access_log": False},
    "backends": [{"name": "oai", "url": "http://127.0.0.1:9/v1", "protocol": "openai"}],
    "routes": [{"model": "gpt-*", "backends": ["oai"]}],
}
WHOLE = (
    b'{"model": "gpt-x", "choices": [{"index": 0, "message": {"role": "assistant", '
    b'"content": "hi"}, "finish_reason": "stop"}]}'
)


class _Counted:
    """``verify_request`` that counts its calls and verifies as it would."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: bytes, **kw: Any) -> None:
        self.calls += 1
        verify(body, **kw)


async def test_the_edges_own_buffer_is_read_without_the_verifiers_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted = _Counted()
    monkeypatch.setattr(dispatch, "verify_request", counted)
    upstream = Scripted(WHOLE)
    proxy = ProxyServer(parse_config(OPENAI_CONFIG), worker="t")
    proxy._transport = upstream
    body = build_request("gpt-x", [("user", "hello there")], request_id="r1", stream=False)
    # In process: the edge wrote the buffer, so the adapter reads it unverified.
    resp = await InProcessRouter(proxy).complete(body, "r1", admitted=True)
    [chunk] = chunks(await resp.read())
    await resp.aclose()
    assert counted.calls == 0
    assert chunk.content == "hi" and chunk.finish_reason == FinishReason.STOP
    sent = json.loads(upstream.last_body)
    assert sent["messages"] == [{"role": "user", "content": "hello there"}]
    # Over the proxy's HTTP surface the same bytes are a caller's: verified first.
    exchange = serve_one(proxy, body)
    assert exchange.status == 200 and counted.calls == 1
