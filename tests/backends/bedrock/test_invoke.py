"""InvokeModel for Anthropic's models: the Messages body in Bedrock's
envelope (held to the anthropic SDK's request types), and the answer's
event stream (written by botocore-compatible framing) into chunk frames."""

from __future__ import annotations

import base64
import json
from typing import Any, get_type_hints

import pydantic
import pytest
from anthropic.types.beta import message_create_params as sdk

from flatgate.proxy.backends.bedrock.eventstream import encode_message
from flatgate.proxy.backends.bedrock.invoke import InvokeStream, encode_invoke
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import FinishReason, Role
from tests.backends.helpers import STREAM_ERROR, content, error_of, final, request, run
from tests.backends.wire_requests import ANTHROPIC, assistant, msg, wire

_PARAMS = pydantic.TypeAdapter(sdk.MessageCreateParamsNonStreaming)
_KEYS = set(get_type_hints(sdk.MessageCreateParamsNonStreaming))
_ENVELOPE = {"anthropic_version", "anthropic_beta"}


def _checked(body: bytes) -> dict[str, Any]:
    """``body`` as InvokeModel takes it: the SDK's Messages params, once
    ``model`` (in Bedrock's URL) is put back and the envelope taken out."""
    doc: dict[str, Any] = json.loads(body)
    assert "model" not in doc and "stream" not in doc
    assert set(doc) - _ENVELOPE <= _KEYS, set(doc) - _ENVELOPE - _KEYS
    params = {k: v for k, v in doc.items() if k not in _ENVELOPE}
    valid = _PARAMS.validate_python({**params, "model": "claude"})
    list(valid["messages"])  # the SDK's iterables validate as they are read
    for message in doc["messages"]:
        if isinstance(message["content"], list):
            list(
                _PARAMS.validate_python({**params, "model": "m", "messages": [message]})["messages"]
            )
    return doc


def _encode(
    req: Any, betas: list[str] | None = None, **kw: Any
) -> tuple[dict[str, Any], list[str]]:
    omitted: list[str] = []
    body = encode_invoke(
        req,
        anthropic_version="bedrock-2023-05-31",
        default_max_tokens=kw.pop("default_max_tokens", 4096),
        betas=betas or [],
        omitted=omitted,
        drop_unsupported=kw.pop("drop", False),
    )
    return _checked(body), omitted


def test_the_envelope_is_bedrocks() -> None:
    doc, omitted = _encode(request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    assert next(iter(doc)) == "anthropic_version"
    assert doc["anthropic_version"] == "bedrock-2023-05-31"
    assert doc["max_tokens"] == 4096
    assert doc["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert "anthropic_beta" not in doc
    assert omitted == []


def test_betas_go_in_the_body_once_in_order() -> None:
    req = wire(
        [msg(Role.User, "hi")],
        extras={"$headers": {"anthropic-beta": "b-two,b-one"}},
        dialect=ANTHROPIC,
    )
    doc, _ = _encode(req, betas=["b-one", "b-zero"])
    assert doc["anthropic_beta"] == ["b-one", "b-zero", "b-two"]


def test_cache_control_thinking_and_extras_reach_claude_unchanged() -> None:
    signed = ReasoningPart(text="I think", opaque=b"sig-123", dialect=ANTHROPIC)
    req = wire(
        [
            msg(Role.System, "be brief"),
            msg(Role.User, "q"),
            assistant("a", reasoning=[signed]),
            msg(Role.User, "again"),
        ],
        extras={
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "$cache_control": [
                {"at": "messages", "index": 1, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        },
        dialect=ANTHROPIC,
        max_tokens=9000,
    )
    doc, omitted = _encode(req)
    assert doc["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert doc["system"] == [{"type": "text", "text": "be brief"}]
    first = doc["messages"][0]["content"][-1]
    assert first["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    thought = doc["messages"][1]["content"][0]
    assert thought == {"type": "thinking", "thinking": "I think", "signature": "sig-123"}
    assert doc["max_tokens"] == 9000
    assert omitted == []


def test_a_body_not_in_the_encoders_order_is_taken_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    from flatgate.proxy.backends.bedrock import invoke

    monkeypatch.setattr(
        invoke, "encode_request", lambda *a, **k: b'{"max_tokens":5,"model":"","messages":[]}'
    )
    doc = json.loads(_encode_body())
    assert doc == {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": []}


def _encode_body() -> bytes:
    return encode_invoke(
        request({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        anthropic_version="bedrock-2023-05-31",
        default_max_tokens=1,
        betas=[],
        omitted=[],
        drop_unsupported=False,
    )


def test_what_messages_cannot_take_is_named() -> None:
    doc, omitted = _encode(
        request({"model": "m", "seed": 3, "messages": [{"role": "user", "content": "x"}]})
    )
    assert "seed" not in doc
    assert omitted == ["seed"]


# -- the answer ---------------------------------------------------------------


def _chunk(event: dict[str, Any]) -> bytes:
    data = base64.b64encode(json.dumps(event).encode()).decode()
    payload = json.dumps({"bytes": data, "p": "abcdefgh"}).encode()
    return encode_message(
        [
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload,
    )


def _exception(kind: str, message: str) -> bytes:
    return encode_message(
        [
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json.dumps({"message": message}).encode(),
    )


_EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 12, "cache_read_input_tokens": 5, "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {
        "type": "message_stop",
        "amazon-bedrock-invocationMetrics": {
            "inputTokenCount": 17,
            "outputTokenCount": 2,
            "invocationLatency": 100,
            "firstByteLatency": 50,
        },
    },
]


def _body() -> bytes:
    return b"".join(_chunk(e) for e in _EVENTS)


@pytest.mark.parametrize("cut", [None, 1, 7])
def test_a_stream_translates_as_anthropics(cut: int | None) -> None:
    body = _body()
    pieces = [body] if cut is None else [body[i : i + cut] for i in range(0, len(body), cut)]
    chunks = run(InvokeStream("req-7", "configured"), pieces)
    assert content(chunks) == "Hello there"
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (17, 2)
    assert last.usage.cached_tokens == 5


def test_an_exception_ends_the_stream_after_the_text_before_it() -> None:
    body = b"".join(_chunk(e) for e in _EVENTS[:3]) + _exception(
        "throttlingException", "Too many tokens, please wait before trying again."
    )
    chunks = run(InvokeStream("req-7", "m"), [body, _chunk(_EVENTS[3])])
    assert content(chunks) == "Hello"
    err = error_of(chunks)
    assert err.code == STREAM_ERROR
    assert err.message == "throttlingException: Too many tokens, please wait before trying again."


def test_bad_framing_and_a_chunk_that_is_not_base64_are_protocol_errors() -> None:
    broken = bytearray(_body())
    broken[-1] ^= 0xFF
    assert error_of(run(InvokeStream("r", "m"), [bytes(broken)])).code == "backend_protocol_error"
    bad = encode_message([(":event-type", "chunk"), (":message-type", "event")], b'{"bytes": "!!"}')
    assert error_of(run(InvokeStream("r", "m"), [bad])).code == "backend_protocol_error"


def test_a_body_that_stops_early_is_truncated() -> None:
    chunks = run(InvokeStream("r", "m"), [b"".join(_chunk(e) for e in _EVENTS[:4])])
    assert content(chunks) == "Hello there"
    assert error_of(chunks).code == "backend_stream_truncated"
