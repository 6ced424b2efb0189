from __future__ import annotations

import json
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from flatgate.edge_translator.errors import ProxyFailed, ProxyTimedOut, chunk_error
from flatgate.edge_translator.openai.render import (
    DONE,
    SYSTEM_FINGERPRINT,
    Aggregator,
    StreamRenderer,
    error_event,
    finish_reason_name,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.schema import FinishReason


def events(data: bytes) -> list[Any]:
    """Split SSE bytes into decoded ``data:`` payloads ("[DONE]" kept as a string)."""
    out: list[Any] = []
    assert data.endswith(b"\n\n")
    for event in data.split(b"\n\n")[:-1]:
        assert event.startswith(b"data: "), event
        payload = event[6:]
        out.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return out


def render(chunks: list[Chunk], include_usage: bool = False) -> list[Any]:
    r = StreamRenderer(
        completion_id="chatcmpl-x", created=1700000000, model="m", include_usage=include_usage
    )
    out = b"".join(r.feed(c) for c in chunks)
    assert r.finished
    return events(out + r.end())


TEXT = [
    Chunk(content=" Hello "),
    Chunk(content='wörld "quoted"\n'),
    Chunk(content="end", finish_reason=FinishReason.STOP, usage=Usage(5, 3)),
]


def test_text_stream_shape_and_sdk_accumulation():
    evs = render(TEXT)
    assert evs[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in evs[:-1]]
    assert all(c.id == "chatcmpl-x" and c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.created == 1700000000 and c.model == "m" for c in chunks)
    assert all(c.system_fingerprint == SYSTEM_FINGERPRINT for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in chunks[1:])
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, "stop"]
    assert chunks[-1].choices[0].delta.content is None
    assert all("usage" not in e for e in evs[:-1])
    state = ChatCompletionStreamState()
    for c in chunks:
        state.handle_chunk(c)
    final = state.get_final_completion()
    assert final.choices[0].message.content == ' Hello wörld "quoted"\nend'
    assert final.choices[0].finish_reason == "stop"


def test_include_usage_adds_a_final_usage_chunk():
    evs = render(TEXT, include_usage=True)
    assert all(e["usage"] is None for e in evs[:-2])
    last = ChatCompletionChunk.model_validate(evs[-2])
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        5,
        3,
        8,
    )
    assert evs[-1] == "[DONE]"


def test_tool_call_deltas_name_first_then_arguments():
    chunks = [
        Chunk(tool_calls=(ToolCallDelta(0, "call_1", "get_weather", '{"city": '),)),
        Chunk(tool_calls=(ToolCallDelta(0, "", "", '"Paris"}'),)),
        Chunk(
            tool_calls=(ToolCallDelta(1, "call_2", "get_time", "{}"),),
            finish_reason=FinishReason.TOOL_CALLS,
            usage=Usage(1, 1),
        ),
    ]
    evs = render(chunks)
    parsed = [ChatCompletionChunk.model_validate(e) for e in evs[:-1]]
    assert parsed[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.tool_calls[0] for c in parsed if c.choices[0].delta.tool_calls]
    first = deltas[0]
    assert (first.index, first.id, first.type) == (0, "call_1", "function")
    assert first.function is not None
    assert (first.function.name, first.function.arguments) == ("get_weather", "")
    assert deltas[1].id is None and deltas[1].function is not None
    assert deltas[1].function.name is None and deltas[1].function.arguments == '{"city": '
    assert deltas[2].function is not None and deltas[2].function.arguments == '"Paris"}'
    assert parsed[-1].choices[0].finish_reason == "tool_calls"
    state = ChatCompletionStreamState()
    for c in parsed:
        state.handle_chunk(c)
    calls = state.get_final_completion().choices[0].message.tool_calls
    assert calls is not None
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_1", "get_weather", '{"city": "Paris"}'),
        ("call_2", "get_time", "{}"),
    ]


def test_choices_get_their_own_role_delta():
    evs = render(
        [
            Chunk(content="a", index=0),
            Chunk(content="b", index=1),
            Chunk(finish_reason=FinishReason.STOP, index=0),
            Chunk(finish_reason=FinishReason.LENGTH, index=1),
        ]
    )
    parsed = [ChatCompletionChunk.model_validate(e) for e in evs[:-1]]
    roles = {c.choices[0].index: c.choices[0].delta.role for c in parsed[:2]}
    assert roles == {0: "assistant", 1: "assistant"}
    assert [c.choices[0].finish_reason for c in parsed[2:]] == ["stop", "length"]


def test_backend_model_name_is_used_when_given():
    evs = render([Chunk(content="x", model="llama-3-8b", finish_reason=FinishReason.STOP)])
    assert {e["model"] for e in evs[:-1]} == {"llama-3-8b"}


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        (FinishReason.STOP, "stop"),
        (FinishReason.LENGTH, "length"),
        (FinishReason.TOOL_CALLS, "tool_calls"),
        (FinishReason.CONTENT_FILTER, "content_filter"),
        (FinishReason.NONE, None),
        (FinishReason.ERROR, None),
    ],
)
def test_finish_reason_names(reason, name):
    assert finish_reason_name(reason) == name


def test_error_chunks_raise_edge_errors():
    r = StreamRenderer(completion_id="c", created=1, model="m")
    with pytest.raises(ProxyFailed, match="backend died"):
        r.feed(
            Chunk(
                error=ChunkError("backend_failed", "backend died"), finish_reason=FinishReason.ERROR
            )
        )
    with pytest.raises(ProxyTimedOut):
        Aggregator(completion_id="c", created=1, model="m").feed(
            Chunk(error=ChunkError("backend_timeout", "slow"), finish_reason=FinishReason.ERROR)
        )
    assert chunk_error(None).code.code == "proxy_protocol_error"


def test_error_event_is_what_the_sdk_raises_on():
    ev = events(
        error_event(ProxyFailed("backend died", code=codes.peer_code("backend_failed", 502)))
    )
    assert ev == [
        {
            "error": {
                "message": "backend died",
                "type": "api_error",
                "param": None,
                "code": "backend_failed",
            }
        }
    ]


def test_end_without_chunks_and_done():
    r = StreamRenderer(completion_id="c", created=1, model="m", include_usage=True)
    assert r.end() == DONE  # no usage came: no usage event (never zeros)
    assert r.usage is None
    assert StreamRenderer(completion_id="c", created=1, model="m").end() == DONE


def test_usage_event_only_when_the_backend_sent_usage():
    r = StreamRenderer(completion_id="c", created=1, model="m", include_usage=True)
    r.feed(Chunk(content="hi"))
    r.feed(Chunk(finish_reason=FinishReason.STOP, usage=Usage(3, 1)))
    evs = [e for e in events(r.end()) if isinstance(e, dict)]
    assert evs[-1]["choices"] == [] and evs[-1]["usage"]["total_tokens"] == 4
    assert r.usage == Usage(3, 1)


def test_aggregated_completion_without_usage_has_no_usage_key():
    a = Aggregator(completion_id="c", created=1, model="m")
    a.feed(Chunk(content="hi", finish_reason=FinishReason.STOP))
    body = json.loads(a.body())
    assert "usage" not in body and a.usage is None
    assert body["choices"][0]["message"]["content"] == "hi"


def test_aggregated_completion_text():
    a = Aggregator(completion_id="chatcmpl-y", created=1700000001, model="m")
    assert not a.finished
    a.feed_all(TEXT)
    assert a.finished
    body = json.loads(a.body())
    done = ChatCompletion.model_validate(body)
    assert done.id == "chatcmpl-y" and done.object == "chat.completion"
    assert done.system_fingerprint == SYSTEM_FINGERPRINT
    msg = done.choices[0].message
    assert msg.role == "assistant" and msg.content == ' Hello wörld "quoted"\nend'
    assert msg.tool_calls is None and "tool_calls" not in body["choices"][0]["message"]
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.total_tokens == 8


def test_aggregated_tool_calls():
    a = Aggregator(completion_id="c", created=1, model="m")
    a.feed_all(
        [
            Chunk(tool_calls=(ToolCallDelta(0, "call_1", "f", '{"a"'),)),
            Chunk(tool_calls=(ToolCallDelta(0, "", "", ": 1}"), ToolCallDelta(1, "call_2", "g"))),
            Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(2, 1)),
        ]
    )
    done = ChatCompletion.model_validate_json(a.body())
    msg = done.choices[0].message
    assert msg.content is None
    assert msg.tool_calls is not None
    got = [(c.id, c.type, c.function.name, c.function.arguments) for c in msg.tool_calls]  # type: ignore[union-attr]
    assert got == [("call_1", "function", "f", '{"a": 1}'), ("call_2", "function", "g", "")]
    assert done.choices[0].finish_reason == "tool_calls"


def test_edge_error_is_the_root():
    assert issubclass(ProxyFailed, FlatgateError) and issubclass(ProxyTimedOut, FlatgateError)


def test_n_choices_finish_only_when_all_have():
    r = StreamRenderer(completion_id="c", created=1, model="m", choices=2)
    r.feed(Chunk(content="a", finish_reason=FinishReason.STOP, index=0))
    assert not r.finished and r.complete
    r.feed(Chunk(content="b", index=1))
    assert not r.complete
    r.feed(Chunk(finish_reason=FinishReason.STOP, index=1))
    assert r.finished and r.complete
    a = Aggregator(completion_id="c", created=1, model="m", choices=2)
    a.feed(Chunk(content="a", finish_reason=FinishReason.STOP, index=0))
    assert not a.finished and a.complete
    a.feed(Chunk(content="b", finish_reason=FinishReason.LENGTH, index=1))
    assert a.finished
    done = ChatCompletion.model_validate_json(a.body())
    assert [(c.index, c.message.content, c.finish_reason) for c in done.choices] == [
        (0, "a", "stop"),
        (1, "b", "length"),
    ]
