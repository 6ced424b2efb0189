"""Chunk frames as Anthropic Messages events and ``message`` bodies
(``anthropic.render``), and flatgate's errors in Anthropic's shape
(``anthropic.errors``). Every event and body is also validated against the
official SDK's own types."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import pydantic
import pytest

from flatgate.edge_translator.anthropic.errors import (
    OVERLOADED,
    TYPES,
    anthropic_error,
    error_body,
    error_event,
)
from flatgate.edge_translator.anthropic.render import EventRenderer, MessageAggregator
from flatgate.edge_translator.errors import ProxyFailed
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.schema import FinishReason

EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
STOP = FinishReason.STOP


def events(*chunks: Chunk) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every event the chunks render, checked: each has
    an ``event:`` line whose name is its data's ``type``, and the SDK's types
    take it."""
    r = EventRenderer(message_id="msg_1", model="claude")
    raw = b"".join(r.feed(c) for c in chunks) + r.end()
    out = []
    for block in raw.decode().split("\n\n")[:-1]:
        name_line, data_line = block.split("\n")
        name = name_line.removeprefix("event: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        EVENT.validate_python(data)
        out.append((name, data))
    assert r.finished
    return out


def names(evs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [n for n, _ in evs]


def blocks(evs: list[tuple[str, dict[str, Any]]]) -> list[tuple[int, str, str]]:
    """(index, block type, everything its deltas carried) per content block."""
    out: dict[int, list[str]] = {}
    for name, d in evs:
        if name == "content_block_start":
            out[d["index"]] = [d["content_block"]["type"], ""]
        elif name == "content_block_delta":
            delta = d["delta"]
            out[d["index"]][1] += (
                delta.get("text") or delta.get("thinking") or delta["partial_json"]
            )
    return [(i, t, s) for i, (t, s) in sorted(out.items())]


def test_text_events_in_the_documented_order() -> None:
    evs = events(
        Chunk(content="héllo "),
        Chunk(content="wörld 東京"),
        Chunk(finish_reason=STOP, usage=Usage(7, 2)),
    )
    assert names(evs) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = evs[0][1]["message"]
    assert (start["id"], start["role"], start["model"], start["content"]) == (
        "msg_1",
        "assistant",
        "claude",
        [],
    )
    assert start["usage"] == {"input_tokens": 0, "output_tokens": 0}  # not known yet
    assert blocks(evs) == [(0, "text", "héllo wörld 東京")]
    delta = evs[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {"output_tokens": 2, "input_tokens": 7}


def test_one_block_at_a_time_thinking_text_tools() -> None:
    evs = events(
        Chunk(reasoning="let me "),
        Chunk(reasoning="think", model="claude-x"),
        Chunk(content="I will look."),
        Chunk(tool_calls=(ToolCallDelta(0, "toolu_a", "lookup", '{"q":'),)),
        Chunk(tool_calls=(ToolCallDelta(0, arguments='"a"}'),)),
        Chunk(tool_calls=(ToolCallDelta(1, "toolu_b", "fetch"),)),
        Chunk(tool_calls=(ToolCallDelta(1, arguments="{}"),)),
        Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(10, 6, 4)),
    )
    assert blocks(evs) == [
        (0, "thinking", "let me think"),
        (1, "text", "I will look."),
        (2, "tool_use", '{"q":"a"}'),
        (3, "tool_use", "{}"),
    ]
    # Each block stops before the next starts, in index order.
    opened: list[int] = []
    for name, d in evs:
        if name == "content_block_start":
            assert not opened or opened[-1] < 0
            opened.append(d["index"])
        elif name == "content_block_stop":
            assert opened[-1] == d["index"]
            opened.append(-1)
    assert [d["content_block"] for n, d in evs if n == "content_block_start"][2] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "lookup",
        "input": {},
    }
    final = evs[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use"
    # Anthropic's input_tokens exclude the cached ones the wire counts in.
    assert final["usage"] == {"output_tokens": 6, "input_tokens": 6, "cache_read_input_tokens": 4}


@pytest.mark.parametrize(
    ("finish", "matched", "reason"),
    [
        (FinishReason.STOP, "", "end_turn"),
        (FinishReason.STOP, "###", "stop_sequence"),
        (FinishReason.LENGTH, "", "max_tokens"),
        (FinishReason.TOOL_CALLS, "", "tool_use"),
        (FinishReason.CONTENT_FILTER, "", "refusal"),
    ],
)
def test_stop_reasons(finish: FinishReason, matched: str, reason: str) -> None:
    final = Chunk(content="x", finish_reason=finish, stop_sequence=matched)
    delta = events(final)[-2][1]["delta"]
    assert delta == {"stop_reason": reason, "stop_sequence": matched or None}
    agg = MessageAggregator(message_id="m", model="c")
    agg.feed(final)
    body = json.loads(agg.body())
    assert (body["stop_reason"], body["stop_sequence"]) == (reason, matched or None)


def test_usage_on_the_first_chunk_is_in_message_start() -> None:
    evs = events(Chunk(content="one", finish_reason=STOP, usage=Usage(9, 1, 2)))
    assert evs[0][1]["message"]["usage"] == {
        "input_tokens": 7,
        "output_tokens": 0,
        "cache_read_input_tokens": 2,
    }


def test_no_usage_from_the_backend_is_zero_not_absent() -> None:
    """The Messages API requires the counts (the SDK reads output_tokens)."""
    evs = events(Chunk(content="one"), Chunk(finish_reason=STOP))
    assert evs[-2][1]["usage"] == {"output_tokens": 0}


def test_a_stream_with_no_content_has_no_blocks() -> None:
    assert names(events(Chunk(finish_reason=STOP))) == [
        "message_start",
        "message_delta",
        "message_stop",
    ]


def test_the_per_token_path_renders_what_the_general_one_does() -> None:
    w = ChunkWriter("r", "claude")
    hot = EventRenderer(message_id="m", model="claude")
    cold = EventRenderer(message_id="m", model="claude")
    hot.feed(read_chunk(w.content("first ")))
    cold.feed(read_chunk(w.content("first ")))
    for text in ('quote " and \\ back', "東京 ", "\n\t\u2028 ctl \x01", "🙂"):
        chunk = read_chunk(w.content(text))
        fast = hot.feed(chunk)
        assert fast == cold._feed(chunk)
        assert json.loads(fast.split(b"data: ")[1])["delta"]["text"] == text


def test_an_error_chunk_raises_its_error() -> None:
    r = EventRenderer(message_id="m", model="c")
    r.feed(Chunk(content="partial"))
    bad = Chunk(error=ChunkError("backend_timeout", "slow"), finish_reason=FinishReason.ERROR)
    with pytest.raises(FlatgateError) as info:
        r.feed(bad)
    assert (info.value.code.code, info.value.status, info.value.message) == (
        "backend_timeout",
        504,
        "slow",
    )
    with pytest.raises(FlatgateError):
        MessageAggregator(message_id="m", model="c").feed(bad)


def test_the_whole_message_keeps_block_order() -> None:
    agg = MessageAggregator(message_id="msg_9", model="claude")
    for c in (
        Chunk(reasoning="hmm", model="claude-real"),
        Chunk(content="Checking. "),
        Chunk(tool_calls=(ToolCallDelta(0, "toolu_a", "lookup", '{"q":'),)),
        Chunk(tool_calls=(ToolCallDelta(0, arguments=' "東京"}'),)),
        Chunk(tool_calls=(ToolCallDelta(1, "toolu_b", "noargs"),)),
        Chunk(content="Done."),
        Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(12, 5, 2)),
    ):
        agg.feed(c)
    assert agg.finished and agg.usage == Usage(12, 5, 2)
    body = json.loads(agg.body())
    anthropic.types.Message.model_validate(body)
    assert body == {
        "id": "msg_9",
        "type": "message",
        "role": "assistant",
        "model": "claude-real",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": ""},
            {"type": "text", "text": "Checking. "},
            {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"q": "東京"}},
            {"type": "tool_use", "id": "toolu_b", "name": "noargs", "input": {}},
            {"type": "text", "text": "Done."},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2},
    }


def test_tool_arguments_that_are_no_object_are_a_backend_error() -> None:
    agg = MessageAggregator(message_id="m", model="c")
    agg.feed(Chunk(tool_calls=(ToolCallDelta(0, "t", "f", "[1, 2]"),)))
    agg.feed(Chunk(finish_reason=FinishReason.TOOL_CALLS))
    with pytest.raises(ProxyFailed) as info:
        agg.body()
    assert info.value.code.code == "backend_protocol_error"


# -- errors -------------------------------------------------------------------


def test_every_code_has_a_documented_anthropic_type() -> None:
    for code in codes.CODES:
        status, kind = anthropic_error(FlatgateError("x", code=code))
        assert kind in TYPES.values() or kind == "invalid_request_error", code
        if code.code in OVERLOADED:
            assert (status, kind) == (529, "overloaded_error")
        else:
            assert status == code.status, code
        if status in TYPES:
            assert kind == TYPES[status]
        else:
            assert kind == ("invalid_request_error" if status < 500 else "api_error")


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        (codes.INVALID_REQUEST, 400, "invalid_request_error"),
        (codes.INVALID_API_KEY, 401, "authentication_error"),
        (codes.MISSING_API_KEY, 401, "authentication_error"),
        (codes.TENANT_FORBIDDEN, 403, "permission_error"),
        (codes.MODEL_NOT_FOUND, 404, "not_found_error"),
        (codes.METHOD_NOT_ALLOWED, 405, "invalid_request_error"),
        (codes.BODY_TOO_LARGE, 413, "request_too_large"),
        (codes.BACKEND_RATE_LIMITED, 429, "rate_limit_error"),
        (codes.INTERNAL_ERROR, 500, "api_error"),
        (codes.BACKEND_UNAVAILABLE, 502, "api_error"),
        (codes.DRAINING, 503, "api_error"),
        (codes.BACKENDS_BUSY, 529, "overloaded_error"),
        (codes.SERVER_BUSY, 529, "overloaded_error"),
        (codes.POOL_EXHAUSTED, 529, "overloaded_error"),
        (codes.BACKEND_TIMEOUT, 504, "timeout_error"),
    ],
)
def test_status_and_type(code: codes.ErrorCode, status: int, kind: str) -> None:
    got, body = error_body(FlatgateError("what happened", code=code), "req-1")
    assert got == status
    assert json.loads(body) == {
        "type": "error",
        "error": {"type": kind, "message": "what happened"},
        "request_id": "req-1",
    }


def test_a_backend_status_passed_through_keeps_its_meaning() -> None:
    """A backend's 404 or 413 reaches the proxy's client as ``backend_rejected``
    with the backend's status; the type follows the status."""
    for status, kind in [
        (404, "not_found_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
    ]:
        err = FlatgateError("nope", code=codes.BACKEND_REJECTED, status=status)
        assert anthropic_error(err) == (status, kind)


def test_the_error_event() -> None:
    event = error_event(FlatgateError("cut", code=codes.BACKEND_DISCONNECTED))
    name, data = event.decode().rstrip("\n").split("\n")
    assert name == "event: error"
    assert json.loads(data.removeprefix("data: ")) == {
        "type": "error",
        "error": {"type": "api_error", "message": "cut"},
    }
