"""What the new Messages fields become through the edge app (fake proxy
transport): a mid-conversation system message and thinking blocks reach the
proxy, ``thread`` is refused so that the SDK's own error class is raised, and
``message_start`` reports the prompt's estimate until the backend counts."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx2
import pytest
from anthropic.types.thread_unsupported_request_error import ThreadUnsupportedRequestError

from flatgate.edge_translator.anthropic.endpoint import MESSAGES
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.request.decode import read_request
from flatgate.proxy.wire.request.estimate import estimate_request
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.edge import fakes
from tests.edge.anthropic.test_app import body, events, messages
from tests.edge.test_app import app_with, frame


async def test_system_messages_and_thinking_reach_the_proxy() -> None:
    app, transport = app_with()
    history = [
        {"role": "user", "content": "Fix it"},
        {"role": "system", "content": "Plan mode is on."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me see.", "signature": "c2ln"},
                {"type": "text", "text": "Looking."},
            ],
        },
        {"role": "user", "content": "Go"},
    ]
    proto = await messages(app, body(messages=history, thinking={"type": "adaptive"}))
    assert proto.status == 200, proto.payload
    [sent] = transport.sent
    req = read_request(sent.body)
    assert [(m.role, m.content) for m in req.messages] == [
        ("user", "Fix it"),
        ("system", "Plan mode is on."),
        ("assistant", "Looking."),
        ("user", "Go"),
    ]
    reasoning = req.messages[2].reasoning
    assert reasoning is not None and reasoning[0].opaque == b"c2ln"
    extras = json.loads(req.extras)
    extras.pop("$headers", None)  # the client's anthropic-beta, once the flow hands it over
    assert extras == {"thinking": {"type": "adaptive"}}
    assert req.extras_dialect == ApiDialect.ANTHROPIC_MESSAGES


async def test_thread_is_the_sdk_s_thread_unsupported_error() -> None:
    app, transport = app_with()
    proto = await messages(app, body(thread={"type": "create"}), **{"x-request-id": "rid-7"})
    assert proto.status == 400
    doc = proto.json()
    assert doc["error"]["details"] == {"error_code": "thread_unsupported_request"}
    assert transport.sent == []

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            400, headers={"content-type": "application/json"}, content=proto.payload
        )

    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://edge",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
        max_retries=0,
    )
    with pytest.raises(ThreadUnsupportedRequestError) as info:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert info.value.details.error_code == "thread_unsupported_request"


async def test_message_start_reports_the_estimate_until_the_backend_counts() -> None:
    # A backend that counts only at the end: message_start has the estimate.
    app, _ = app_with()
    data = body(stream=True, system="s" * 400)
    proto = await messages(app, data)
    start = events(proto.streamed)[0][1]
    frame = write_messages(decode_messages(data), provider=0, model_name="flatgate-echo")
    assert start["message"]["usage"]["input_tokens"] == estimate_request(frame) > 100
    # The final message_delta has the backend's count.
    assert events(proto.streamed)[-2][1]["usage"]["input_tokens"] == 3


async def test_a_stream_the_backend_counts_first_has_its_count() -> None:
    first = frame(content="a", usage=Usage(7, 0))
    last = frame(content="b", finish_reason=FinishReason.STOP, usage=Usage(7, 2))
    app, _ = app_with(lambda sent: fakes.Response(200, [first + last]))
    proto = await messages(app, body(stream=True))
    assert events(proto.streamed)[0][1]["message"]["usage"]["input_tokens"] == 7


def test_the_endpoint_writes_the_beta_header_it_is_given() -> None:
    """``MessagesApi.write`` with the client's headers (``carried_headers``)."""
    assert MESSAGES.carried_headers == ("anthropic-beta",)
    beta = "mid-conversation-system-2026-04-07"
    model = ModelConfig(name="m", provider="Anthropic")
    frame = MESSAGES.write(
        decode_messages(body()), model, tenant="t", request_id="r", headers={"anthropic-beta": beta}
    )
    assert json.loads(read_request(frame).extras) == {"$headers": {"anthropic-beta": beta}}


def test_claude_code_s_captured_request_loses_nothing() -> None:
    """Claude Code's own request (``tests/clients/fixtures``): its system
    blocks, mid-conversation system message, breakpoints and unslotted
    fields all reach the wire."""
    raw = (Path(__file__).parents[2] / "clients/fixtures/claude_request.json").read_bytes()
    doc = json.loads(raw)
    req = read_request(write_messages(decode_messages(raw), provider=1, model_name="m"))
    extras = json.loads(req.extras)
    slotted = {"model", "messages", "system", "tools", "metadata", "max_tokens", "stream"}
    assert set(doc) - slotted == set(extras) - {"$cache_control", "$tools"}
    # every tool field with no wire slot is carried, on its tool's index
    own = {"name", "description", "input_schema", "type", "strict", "cache_control"}
    unslotted = {
        k: {f: v for f, v in t.items() if f not in own}
        for k, t in enumerate(doc["tools"])
        if set(t) - own
    }
    assert unslotted, "the fixture has a deferred tool"
    assert {e["index"]: e["fields"] for e in extras["$tools"]} == unslotted
    assert unslotted[next(iter(unslotted))] == {"defer_loading": True}
    marks = sum(
        "cache_control" in b
        for part in (doc.get("system") or [], *(m["content"] for m in doc["messages"]))
        if isinstance(part, list)
        for b in part
    ) + sum("cache_control" in t for t in doc.get("tools") or [])
    assert len(extras["$cache_control"]) == marks > 0
    roles = [m["role"] for m in doc["messages"]]
    assert [m.role for m in req.messages][-len(roles) :] == roles
