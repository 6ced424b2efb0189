"""What a backend was not sent, named in the one-process gateway too: the
router as the edge's transport answers with ``x-flatgate-dropped-fields`` and
counts each field, as the proxy's HTTP surface does (``test_responses_e2e``)."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.inmemory import FakeTransport
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.inprocess import InProcessRouter
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.wire.request.writer import RequestWriter
from flatgate.proxy.wire.schema import (
    BACKEND_HEADER,
    OMITTED_HEADER,
    ApiDialect,
    Provider,
    Role,
)
from tests.backends import responses_events as rev

CONFIG: dict[str, Any] = {
    "proxy": {"access_log": False},
    "backends": [
        {"name": "resp", "url": "http://127.0.0.1:9/v1", "protocol": "openai-responses"},
        # drops what it cannot take, rather than refusing it (backends.extras)
        {
            "name": "chat",
            "url": "http://127.0.0.1:9/v1",
            "protocol": "openai",
            "drop_unsupported": True,
        },
    ],
    "routes": [{"model": "r-*", "backends": ["resp"]}, {"model": "c-*", "backends": ["chat"]}],
}
ANSWER = rev.events(rev.created(), rev.message(0, "hi"), rev.completed())


def body(model: str, extras: dict[str, Any]) -> bytes:
    w = RequestWriter()
    w.strings(
        request_id="r1",
        model_name=model,
        tenant="",
        user="",
        tool_choice_name="",
        response_format=b"",
        extras=json.dumps(extras).encode(),
    )
    w.messages([(int(Role.User), b"hi")])
    return w.finish(provider=int(Provider.OpenAI), extras_dialect=int(ApiDialect.OPENAI_RESPONSES))


async def answer(proxy: ProxyServer, model: str, extras: dict[str, Any]) -> Any:
    t = InProcessRouter(proxy)
    resp = await t.complete(body(model, extras), "", admitted=True)
    await resp.read()
    return resp


def counted(proxy: ProxyServer, backend: str, field: str) -> float | None:
    return proxy.metrics.registry.get_sample_value(
        "flatgate_proxy_dropped_fields_total", {"backend": backend, "field": field}
    )


async def test_the_omitted_fields_are_named_and_counted() -> None:
    proxy = ProxyServer(parse_config(CONFIG), worker="t")
    proxy._transport = FakeTransport(ANSWER)
    extras = {"tools": [{"type": "web_search"}], "include": ["reasoning.encrypted_content"]}
    resp = await answer(proxy, "r-1", extras)
    assert resp.status == 200
    assert resp.headers[BACKEND_HEADER] == "resp"
    # a Responses backend takes include; it runs no hosted tool unless configured
    assert resp.headers[OMITTED_HEADER] == "tools[web_search]"
    await answer(proxy, "r-1", extras)
    assert counted(proxy, "resp", "tools[web_search]") == 2
    assert counted(proxy, "resp", "include") is None


async def test_a_chat_backend_names_what_it_cannot_take() -> None:
    proxy = ProxyServer(parse_config(CONFIG), worker="t")
    proxy._transport = FakeTransport(
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    resp = await answer(proxy, "c-1", {"include": ["x"], "x_made_up": 1})
    assert resp.headers[OMITTED_HEADER] == "include,x_made_up"
    assert counted(proxy, "chat", "include") == 1
    # a field name a caller made up is counted under "other", not as a label of its own
    assert counted(proxy, "chat", "other") == 1


async def test_nothing_left_out_no_header() -> None:
    proxy = ProxyServer(parse_config(CONFIG), worker="t")
    proxy._transport = FakeTransport(ANSWER)
    resp = await answer(proxy, "r-1", {"prompt_cache_key": "k"})
    assert OMITTED_HEADER not in resp.headers
