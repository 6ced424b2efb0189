"""The embeddings steps over fake protocol objects and a fake proxy transport:
what the proxy is sent, and an answer ended by the caller leaving or by the
drain."""

from __future__ import annotations

import asyncio
import json
import struct

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.settings import EdgeSection, EdgeSettings, ModelConfig
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.wire.embeddings import read_embedding_request, write_embedding_response
from tests.edge import fakes

BODY = json.dumps({"model": "vec", "input": ["a b", "c"]}).encode()
ANSWER = write_embedding_response(
    model="vec",
    count=2,
    dimensions=2,
    values=struct.pack("<4f", 1.0, 2.0, 3.0, 4.0),
    prompt_tokens=3,
    total_tokens=3,
)


def app_with(
    upstream: fakes.Response, drain: Drain | None = None
) -> tuple[EdgeApp, fakes.Transport]:
    transport = fakes.Transport(lambda sent: upstream)
    settings = EdgeSettings(
        edge=EdgeSection(proxy_url="http://127.0.0.1:9/", access_log=False),
        models=(ModelConfig("vec", "SelfHosted"),),
    )
    return EdgeApp(settings, transport_factory=lambda: transport, drain=drain), transport


def _scope() -> fakes.Scope:
    return fakes.Scope("POST", "/v1/embeddings", {"content-length": str(len(BODY))})


async def test_what_the_proxy_is_sent_and_the_answer() -> None:
    app, transport = app_with(fakes.Response(200, [ANSWER[:10], ANSWER[10:]]))
    proto = fakes.Protocol(BODY)
    await ServerApp(app).__rsgi__(_scope(), proto)
    assert proto.status == 200, proto.payload
    assert proto.json()["data"][1]["embedding"] == [3.0, 4.0]
    (sent,) = transport.sent
    assert sent.url == "http://127.0.0.1:9/v1/embeddings"
    assert sent.headers["content-type"] == sent.headers["accept"] == "application/x-flatbuffers"
    req = read_embedding_request(sent.body)
    assert (req.texts, req.model_name, req.provider) == (("a b", "c"), "vec", 2)
    assert transport.responses[0].closed


async def test_a_caller_leaving_while_the_answer_is_read_is_499() -> None:
    upstream = fakes.Response(200, [ANSWER[:10]], stall_after=1)
    app, _ = app_with(upstream)
    proto = fakes.Protocol(BODY)
    handler = asyncio.ensure_future(ServerApp(app).__rsgi__(_scope(), proto))
    await asyncio.wait_for(upstream.stalled.wait(), 5)
    proto.gone.set()
    await asyncio.wait_for(handler, 5)
    assert upstream.closed and proto.status is None
    assert 'route="/v1/embeddings",status="499"' in app.metrics.render().decode()


async def test_the_drain_ends_a_waiting_answer_with_draining() -> None:
    upstream = fakes.Response(200, [ANSWER[:10]], stall_after=1)
    drain = Drain(grace=0.0, seconds=0.05, margin=0.0)
    app, _ = app_with(upstream, drain)
    proto = fakes.Protocol(BODY)
    handler = asyncio.ensure_future(ServerApp(app).__rsgi__(_scope(), proto))
    await asyncio.wait_for(upstream.stalled.wait(), 5)
    drain.begin()
    await asyncio.wait_for(handler, 5)
    assert proto.status == 503 and proto.json()["error"]["code"] == "draining"
    assert upstream.closed
