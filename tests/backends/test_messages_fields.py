"""The wire fields the Messages edge added (``top_k``, a tool result's
``is_error``, the final chunk's ``stop_sequence``), through both JSON adapters:
what each sends its backend and what it reads back."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.backends.anthropic.adapter import AnthropicStream
from flatgate.proxy.backends.anthropic.adapter import encode_request as anthropic_request
from flatgate.proxy.backends.openai.adapter import OpenAIStream
from flatgate.proxy.backends.openai.adapter import encode_request as openai_request
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import chunk, data_events, named_events, run

CALL = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}


def wire(**fields: Any) -> Request:
    """A Messages request as the proxy reads it, written by the Messages edge."""
    body = {"model": "m", "max_tokens": 16, **fields}
    buf = write_messages(decode_messages(msgspec.json.encode(body)), provider=1, model_name="m")
    verify_request(buf)
    return read_request(buf)


def results(*blocks: dict[str, Any]) -> Request:
    return wire(
        messages=[
            {"role": "user", "content": "look it up"},
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": [*blocks, {"type": "text", "text": "and then?"}]},
        ]
    )


def test_top_k_reaches_both_backends() -> None:
    req = wire(messages=[{"role": "user", "content": "hi"}], top_k=40)
    assert req.top_k == 40
    assert json.loads(anthropic_request(req, model="claude"))["top_k"] == 40
    assert json.loads(openai_request(req, model="llama"))["top_k"] == 40
    plain = wire(messages=[{"role": "user", "content": "hi"}])
    assert "top_k" not in json.loads(anthropic_request(plain, model="claude"))
    assert "top_k" not in json.loads(openai_request(plain, model="llama"))


def test_a_failed_tool_result_is_is_error_to_anthropic() -> None:
    req = results(
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "no such file",
            "is_error": True,
        }
    )
    assert [(m.role, m.is_error) for m in req.messages] == [
        ("user", False),
        ("assistant", False),
        ("tool", True),
        ("user", False),
    ]
    body = json.loads(anthropic_request(req, model="claude"))
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "no such file",
                "is_error": True,
            },
            {"type": "text", "text": "and then?"},
        ],
    }


def test_a_good_tool_result_carries_no_is_error() -> None:
    req = results({"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"})
    body = json.loads(anthropic_request(req, model="claude"))
    assert "is_error" not in body["messages"][2]["content"][0]
    assert "is_error" not in json.loads(openai_request(req, model="llama"))["messages"][2]


def test_openai_has_no_error_flag_so_the_text_says_it() -> None:
    for text, sent in [
        ("no such file", "Error: no such file"),
        ("Error: already said", "Error: already said"),
        ("", "Error"),
    ]:
        req = results(
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": text, "is_error": True}
        )
        tool = json.loads(openai_request(req, model="llama"))["messages"][2]
        assert tool == {"role": "tool", "content": sent, "tool_call_id": "toolu_1"}


def test_anthropic_stop_sequence_is_on_the_final_chunk() -> None:
    body = named_events(
        {"type": "message_start", "message": {"model": "claude", "usage": {"input_tokens": 3}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "stop_sequence", "stop_sequence": "###"},
            "usage": {"output_tokens": 1},
        },
        {"type": "message_stop"},
    )
    chunks = run(AnthropicStream("r", "claude"), [body])
    assert chunks[-1].finish_reason is FinishReason.STOP
    assert chunks[-1].stop_sequence == "###"
    assert all(not c.stop_sequence for c in chunks[:-1])


def test_anthropic_end_turn_names_no_stop_sequence() -> None:
    body = named_events(
        {"type": "message_start", "message": {"model": "claude"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}},
        {"type": "message_stop"},
    )
    [final] = run(AnthropicStream("r", "claude"), [body])
    assert (final.finish_reason, final.stop_sequence) == (FinishReason.STOP, "")


def test_vllm_stop_reason_string_is_the_stop_sequence() -> None:
    finish = chunk(finish_reason="stop")
    finish["choices"][0]["stop_reason"] = "</answer>"
    chunks = run(OpenAIStream("r", "m"), [data_events(chunk(content="a"), finish)])
    assert chunks[-1].stop_sequence == "</answer>"


def test_vllm_stop_token_id_and_openai_null_name_none() -> None:
    for reason in (128009, None):
        finish = chunk(finish_reason="stop")
        finish["choices"][0]["stop_reason"] = reason
        chunks = run(OpenAIStream("r", "m"), [data_events(chunk(content="a"), finish)])
        assert chunks[-1].finish_reason is FinishReason.STOP
        assert chunks[-1].stop_sequence == ""
