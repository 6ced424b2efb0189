"""``backends.bedrock.converse_stub``: the stub's Converse side. What it
writes is read by botocore (its event-stream buffer and its parsers, with
the ``bedrock-runtime`` service model's shapes) and by our translators;
what it reads is what ``encode_converse`` writes, and what Bedrock refuses
it refuses in Bedrock's shape."""

from __future__ import annotations

import base64
import json
from typing import Any

import botocore.session
import pytest
from botocore.eventstream import EventStreamBuffer
from botocore.parsers import EventStreamJSONParser, RestJSONParser

from flatgate.proxy.backends.bedrock.converse import encode_converse
from flatgate.proxy.backends.bedrock.converse_stream import ConverseStream
from flatgate.proxy.backends.bedrock.converse_stub import (
    ConverseRendering,
    parse_converse,
    render_stream,
    render_whole,
)
from flatgate.proxy.backends.bedrock.converse_whole import ConverseWhole
from flatgate.proxy.backends.dialect import Rejected, StubRequest, answer
from flatgate.proxy.wire.schema import FinishReason, Role
from tests.backends.bedrock.converse_helpers import messages_request
from tests.backends.helpers import calls, content, final, reasoning, request, run, user

_MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000020000000108060000001f15c489"
    "0000000d4944415478da63f8cfc0f01f00050001ff5ccd5d4e0000000049454e44ae426082"
)


def body(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def parse(doc: dict[str, Any], model: str = "amazon.nova-pro-v1:0") -> StubRequest:
    return parse_converse(body(doc), model=model, request_id="rid-1")


def refused(doc: dict[str, Any]) -> str:
    with pytest.raises(Rejected) as err:
        parse(doc)
    reply = err.value.reply
    assert reply.status == 400
    assert ("x-amzn-errortype", "ValidationException") in reply.headers
    message: str = json.loads(reply.body)["message"]
    return message


HI = {"messages": [{"role": "user", "content": [{"text": "Hi there"}]}]}


# -- reading requests ---------------------------------------------------------------


def test_what_the_encoder_writes_is_read() -> None:
    req = request(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                user("one two"),
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look:"},
                        {
                            "type": "image_url",
                            "image_url": {
                                "url": "data:image/png;base64," + base64.b64encode(PNG).decode()
                            },
                        },
                    ],
                },
            ],
            "max_tokens": 5,
            "stop": ["END"],
        }
    )
    sent = encode_converse(req, [], False, max_tokens_default=None)
    got = parse_converse(sent, model="amazon.nova-pro-v1:0@die:3", request_id="rid-1")
    assert got.model == "amazon.nova-pro-v1:0" and (got.fault, got.fault_after) == ("die", 3)
    assert got.max_tokens == 5 and got.stop == ("END",)
    assert got.messages[:3] == (
        (Role.System, "Be brief."),
        (Role.User, "one two"),
        (Role.Assistant, "ok"),
    )
    role, text = got.messages[3]
    assert role == Role.User and text.startswith("Look: [image image/png 70 bytes sha256:")
    assert text.endswith(" 2x1]")


def test_tools_forced_and_offered_and_results() -> None:
    doc = {
        "messages": [
            {"role": "user", "content": [{"text": "go"}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}],
            },
            {
                "role": "user",
                "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "done"}]}}],
            },
        ],
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}],
            "toolChoice": {"tool": {"name": "f"}},
        },
    }
    got = parse(doc)
    assert got.forced_tool == "f"
    assert [t.name for t in got.offered] == ["f"]
    assert (Role.Tool, "done") in got.messages


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "assistant", "content": [{"text": "x"}]}]}, "start with a user"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"text": "a"}]},
                    {"role": "user", "content": [{"text": "b"}]},
                ]
            },
            "alternate",
        ),
        ({"messages": [{"role": "user", "content": []}]}, "messages.0.content"),
        (
            {"messages": [{"role": "user", "content": [{"text": "a", "image": None}, {}]}]},
            "exactly one member",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"toolResult": {"toolUseId": "t", "content": []}}]}
                ]
            },
            "toolConfig",
        ),
        ({**HI, "inferenceConfig": {"maxTokens": 0}}, "maxTokens"),
        ({**HI, "inferenceConfig": {"temperature": 1.5}}, "temperature"),
        ({**HI, "inferenceConfig": {"maxTokens": "many"}}, "maxTokens"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"image": {"format": "bmp", "source": {"bytes": ""}}}],
                    }
                ]
            },
            "image.format",
        ),
        ({"messages": [{"role": "system", "content": [{"text": "x"}]}]}, "role"),
    ],
)
def test_what_bedrock_refuses_is_refused_in_its_shape(doc: dict[str, Any], says: str) -> None:
    assert says in refused(doc)


def test_a_body_that_is_not_json_is_refused() -> None:
    with pytest.raises(Rejected) as err:
        parse_converse(b"{", model="m")
    assert err.value.reply.status == 400


# -- whole answers ------------------------------------------------------------------------


def _botocore_whole(data: bytes) -> dict[str, Any]:
    shape = _MODEL.operation_model("Converse").output_shape
    parsed: dict[str, Any] = RestJSONParser().parse(
        {"status_code": 200, "headers": {}, "body": data}, shape
    )
    return parsed


def test_a_whole_echo_botocore_and_our_translator_read() -> None:
    req = parse({**HI, "inferenceConfig": {"maxTokens": 1}})
    ans = answer(req)
    data = render_whole(req, ans)
    parsed = _botocore_whole(data)
    assert parsed["output"]["message"]["content"] == [{"text": "Hi "}]
    assert parsed["stopReason"] == "max_tokens"
    assert parsed["usage"] == {"inputTokens": 2, "outputTokens": 1, "totalTokens": 3}
    chunks = run(ConverseWhole("rid-1", "m"), [data])
    assert final(chunks).content == "Hi " and final(chunks).finish_reason == FinishReason.LENGTH


def test_a_whole_tool_call_and_thinking() -> None:
    doc = {
        **HI,
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}],
            "toolChoice": {"tool": {"name": "f"}},
        },
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    }
    req = parse(doc)
    data = render_whole(req, answer(req, "tooluse_"))
    content_blocks = _botocore_whole(data)["output"]["message"]["content"]
    assert content_blocks[0]["reasoningContent"]["reasoningText"]["signature"]
    assert content_blocks[1]["toolUse"] == {
        "toolUseId": "tooluse_rid-1",
        "name": "f",
        "input": {"input": "Hi there"},
    }
    chunks = run(ConverseWhole("rid-1", "m"), [data])
    assert json.loads(calls(chunks)[0]["arguments"]) == {"input": "Hi there"}
    assert reasoning(chunks) == "The user wrote 2 words; I repeat them back."


# -- streams ---------------------------------------------------------------------------------


def _botocore_events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The frames as botocore reads them: its buffer, then its event parser
    with the service model's event shapes."""
    stream_shape = _MODEL.operation_model("ConverseStream").output_shape.members["stream"]
    buf = EventStreamBuffer()
    buf.add_data(data)
    parser = EventStreamJSONParser()
    out = []
    for msg in buf:
        if msg.headers[":message-type"] == "exception":
            # botocore raises these from the payload ({"message": ...}).
            out.append((msg.headers[":exception-type"], json.loads(msg.payload)))
            continue
        kind = msg.headers[":event-type"]
        parsed = parser.parse(msg.to_response_dict(), stream_shape.members[kind])
        parsed.pop("ResponseMetadata", None)
        out.append((kind, parsed))
    return out


def test_a_streamed_echo_botocore_and_our_translator_read() -> None:
    req = parse_converse(body(HI), model="m", request_id="rid-1", stream=True)
    data = b"".join(render_stream(req, answer(req)))
    events = _botocore_events(data)
    assert [k for k, _ in events] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert "".join(e["delta"]["text"] for k, e in events if k == "contentBlockDelta") == "Hi there"
    assert events[-2][1] == {"stopReason": "end_turn"}
    assert events[-1][1]["usage"] == {"inputTokens": 2, "outputTokens": 2, "totalTokens": 4}
    chunks = run(ConverseStream("rid-1", "m"), [data])
    assert content(chunks) == "Hi there" and final(chunks).finish_reason == FinishReason.STOP


def test_a_streamed_tool_call_with_thinking() -> None:
    doc = {
        **HI,
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}],
            "toolChoice": {"tool": {"name": "f"}},
        },
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    }
    req = parse(doc)
    data = b"".join(render_stream(req, answer(req, "tooluse_")))
    kinds = [k for k, _ in _botocore_events(data)]
    assert kinds[:5] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "contentBlockStart",
    ]
    chunks = run(ConverseStream("rid-1", "m"), [data])
    assert json.loads(calls(chunks)[0]["arguments"]) == {"input": "Hi there"}
    parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    assert len(parts) == 1 and parts[0].opaque
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_the_error_fault_is_an_exception_event_botocore_reads() -> None:
    req = parse(HI)
    r = ConverseRendering(req, answer(req))
    data = r.opening() + next(iter(r.steps())) + r.error()
    events = _botocore_events(data)
    assert events[-1][0] == "modelStreamErrorException"
    chunks = run(ConverseStream("rid-1", "m"), [data])
    assert final(chunks).error is not None


def test_a_stop_sequence_is_said() -> None:
    req = parse({**HI, "inferenceConfig": {"stopSequences": ["there"]}})
    data = render_whole(req, answer(req))
    assert _botocore_whole(data)["stopReason"] == "stop_sequence"


def test_a_messages_request_reaches_the_stub_through_the_encoder() -> None:
    req = messages_request(
        {
            "model": "claude",
            "max_tokens": 50,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "think about this"}],
        }
    )
    got = parse_converse(encode_converse(req, [], False, max_tokens_default=None), model="claude")
    assert got.max_tokens == 50 and "thinking" in got.params
