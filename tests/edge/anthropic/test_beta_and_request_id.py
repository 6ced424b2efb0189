"""Every Anthropic edge error carries a request id, early ones included, and
the client's anthropic-beta header reaches the proxy in the extras."""

from __future__ import annotations

import json

from flatgate.proxy.wire.request.decode import read_request
from tests.edge.anthropic.test_app import body, messages
from tests.edge.test_app import app_with


async def test_early_errors_carry_a_request_id() -> None:
    app, _ = app_with(keys=[])
    for proto in [await messages(app, b"{nope"), await messages(app, body(model="nope"))]:
        rid = proto.header("request-id")
        assert rid and rid == proto.header("x-request-id") == proto.json()["request_id"]


async def test_the_beta_header_reaches_the_proxy() -> None:
    app, transport = app_with()
    beta = "mid-conversation-system-2026-04-07"
    proto = await messages(app, body(), **{"anthropic-beta": beta})
    assert proto.status == 200
    [sent] = transport.sent
    assert json.loads(read_request(sent.body).extras) == {"$headers": {"anthropic-beta": beta}}
