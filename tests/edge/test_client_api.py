"""Each client API's parts of the shared flow (``client_api.ClientApi``): what
its answer needs of a request, its error shape, and the app's routes to it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from flatgate.edge_translator import app
from flatgate.edge_translator.anthropic.endpoint import COUNT_TOKENS, MESSAGES
from flatgate.edge_translator.client_api import Asked, ClientApi, Route
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.openai.endpoint import CHAT
from flatgate.edge_translator.settings import ModelConfig, load_edge_settings
from flatgate.proxy.apis.errors import openai_body
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from tests.edge.helpers import decode_request_fb

MODEL = ModelConfig("m", "SelfHosted")


def test_openai_asked_carries_the_answers_shape() -> None:
    req = CHAT.decode(
        json.dumps(
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "n": 2,
                "stream_options": {"include_usage": True},
            }
        ).encode()
    )
    asked = CHAT.asked(req, "chatcmpl-1", "rid", "m")
    assert asked == Asked(CHAT, "chatcmpl-1", "rid", "m", True, 2, True)
    plain = CHAT.decode(b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    assert CHAT.asked(plain, "c", "r", "m") == Asked(CHAT, "c", "r", "m", False)


def test_messages_asked_and_written() -> None:
    body = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
    req = MESSAGES.decode(body)
    assert MESSAGES.asked(req, "msg_1", "rid", "m") == Asked(MESSAGES, "msg_1", "rid", "m", False)
    wrote = decode_request_fb(MESSAGES.write(req, MODEL, tenant="acme", request_id="rid"))
    assert (wrote["modelName"], wrote["tenant"], wrote["requestId"]) == (b"m", b"acme", b"rid")
    answer = asyncio.run(COUNT_TOKENS.answer(COUNT_TOKENS.decode(body), MODEL, tenant=""))
    assert json.loads(answer)["input_tokens"] > 0


def test_each_api_answers_errors_in_its_own_shape() -> None:
    err = InvalidRequest("bad", param="model")
    assert CHAT.error_answer(err, "rid") == (400, openai_body(err))
    status, body = MESSAGES.error_answer(err, "rid")
    assert status == 400
    assert json.loads(body) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
        "request_id": "rid",
    }
    busy = FlatgateError("busy", code=codes.BACKENDS_BUSY)
    assert CHAT.error_answer(busy, None)[0] == 503
    assert MESSAGES.error_answer(busy, None)[0] == 529
    assert MESSAGES.error_event(busy).startswith(b"event: error\n")
    assert CHAT.error_event(busy).startswith(b"data: ")


def test_the_apps_routes() -> None:
    edge = app.EdgeApp(load_edge_settings(None, environ={}), tracing=None)
    apis: list[ClientApi[Any]] = [CHAT, MESSAGES]
    for api in apis:
        found = edge.routes.find("POST", api.path)
        assert found is not None and found.allowed
        route = found.endpoint.target
        assert isinstance(route, Route) and route.api is api and route.local is None
    found = edge.routes.find("POST", COUNT_TOKENS.path)
    assert found is not None and isinstance(found.endpoint.target, Route)
    counting = found.endpoint.target
    assert (counting.api, counting.local) == (MESSAGES, COUNT_TOKENS)
