"""``backends.anthropic.whole.AnthropicWhole``: a whole Messages ``message``
into chunk frames, and parity with the stream translator.

Parity: each answer (Anthropic's documented ``message`` examples, and
answers made up to reach every rule) is translated whole, and as the stream
a server sends for it (``streamed``: the same blocks as Messages API events,
their text cut into deltas), by ``AnthropicStream``; both are folded by the
Messages edge's, the Chat edge's and the Responses edge's aggregators, which
must give the same client bodies (the Responses items' random ids aside).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from flatgate.edge_translator.anthropic.render import MessageAggregator
from flatgate.edge_translator.openai.render import Aggregator as ChatAggregator
from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.render import Aggregator as ResponsesAggregator
from flatgate.proxy.backends.anthropic.adapter import STOP_REASONS, AnthropicAdapter
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.anthropic.stream import AnthropicStream
from flatgate.proxy.backends.anthropic.whole import AnthropicWhole
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.backends.helpers import (
    ANTHROPIC_RID,
    STREAM_MODEL,
    bytewise,
    error_of,
    final,
    fixture,
    merged,
    named_events,
    run,
    split,
)
from tests.edge.responses.common import decoded

ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
DOCUMENTED = [
    "anthropic_response_text.json",
    "anthropic_response_tool_use.json",
    "anthropic_response_api_reference.json",
    "anthropic_response_thinking.json",
    "anthropic_response_redacted_thinking.json",
]


def whole(body: bytes, pieces: list[bytes] | None = None) -> list[Chunk]:
    return run(AnthropicWhole(ANTHROPIC_RID, STREAM_MODEL), pieces or [body])


def stream(body: bytes) -> list[Chunk]:
    return run(AnthropicStream(ANTHROPIC_RID, STREAM_MODEL), [body])


def ending(c: Chunk) -> tuple[FinishReason, Usage | None, str, str, str]:
    """What ends an answer: the last chunk's finish reason, usage and stop
    sequence, and the model and request id it names (the whole answer's last
    chunk carries its last content too, the stream's carries none)."""
    return (c.finish_reason, c.usage, c.stop_sequence, c.model, c.request_id)


def open_chunks(chunks: list[Chunk]) -> list[tuple[FinishReason, Usage | None, str]]:
    """The finish reason, usage and stop sequence of all chunks but the last."""
    return [(c.finish_reason, c.usage, c.stop_sequence) for c in chunks[:-1]]


# -- the same answer as a stream ---------------------------------------------------


class _RawBlock(msgspec.Struct):
    type: str
    input: msgspec.Raw = msgspec.Raw(b"{}")


class _RawMessage(msgspec.Struct):
    content: list[_RawBlock] = []


def cuts(text: str, n: int = 3) -> list[str]:
    """``text`` in ``n`` deltas (fewer when short; none when empty)."""
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def streamed(body: bytes) -> bytes:
    """The stream a Messages server sends for the whole ``message`` ``body``:
    ``message_start`` (input usage), a ``ping``, each block's start, deltas and
    stop (a tool's ``input`` as the body wrote it, in fragments), then
    ``message_delta`` (stop reason, output usage) and ``message_stop``."""
    doc = json.loads(body)
    raws = msgspec.json.decode(body, type=_RawMessage).content
    usage = doc.get("usage")
    head = {k: v for k, v in doc.items() if k not in ("content", "usage")}
    head |= {"content": [], "stop_reason": None, "stop_sequence": None}
    if usage is not None:
        head["usage"] = {k: v for k, v in usage.items() if k != "output_tokens"}
        head["usage"]["output_tokens"] = 1
    events: list[dict[str, Any]] = [{"type": "message_start", "message": head}, {"type": "ping"}]
    for i, (block, raw) in enumerate(zip(doc["content"], raws, strict=True)):
        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [delta(i, type="text_delta", text=t) for t in cuts(block["text"])]
            deltas += [
                delta(i, type="citations_delta", citation=c) for c in block.get("citations", [])
            ]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [delta(i, type="thinking_delta", thinking=t) for t in cuts(block["thinking"])]
            if block.get("signature"):
                deltas.append(delta(i, type="signature_delta", signature=block["signature"]))
        elif kind in ("tool_use", "server_tool_use"):
            start = {**block, "input": {}}
            text = bytes(raw.input).decode()
            deltas = [delta(i, type="input_json_delta", partial_json=t) for t in cuts(text)]
        else:  # redacted_thinking, a server tool's result: whole at its start
            start, deltas = block, []
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        events += deltas
        events.append({"type": "content_block_stop", "index": i})
    end: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": doc["stop_reason"], "stop_sequence": doc.get("stop_sequence")},
    }
    if usage is not None:
        end["usage"] = {"output_tokens": usage["output_tokens"]}
    events += [end, {"type": "message_stop"}]
    return named_events(*events)


def message(*content: dict[str, Any], stop: str | None = "end_turn", **fields: Any) -> bytes:
    doc = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20},
        **fields,
    }
    return json.dumps(doc).encode()


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def thinking(t: str, signature: str | None = "c2lnbmVk") -> dict[str, Any]:
    block = {"type": "thinking", "thinking": t}
    if signature is not None:
        block["signature"] = signature
    return block


def redacted(data: str) -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


def tool(id_: str, name: str, args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id_, "name": name, "input": args}


# Made-up answers, each reaching a rule the documented ones do not.
SEARCH_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "weather"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [{"type": "web_search_result", "url": "https://example.com", "title": "t"}],
}
MADE_UP = {
    "interleaved": message(
        thinking("First I look it up."),
        text("Let me check."),
        tool("toolu_1", "get_weather", {"city": "Paris"}),
        thinking("Now the other one.", signature="c2Vjb25k"),
        tool("toolu_2", "get_weather", {"city": "Oslo"}),
        text("Both asked."),
        stop="tool_use",
    ),
    "texts_join": message(text("one "), text(""), text("two "), text("three")),
    "text_after_tools": message(
        tool("toolu_1", "f", {}), tool("toolu_2", "g", {"a": [1, 2]}), text("done"), stop="tool_use"
    ),
    "server_tools_skipped": message(
        text("I'll search."), SEARCH_USE, SEARCH_RESULT, text("It is sunny.")
    ),
    "unsigned_thinking": message(thinking("no signature", signature=None), text("ok")),
    "redacted_first": message(redacted("ZGF0YQ=="), thinking("then this"), text("answer")),
    "stop_sequence": message(text("up to"), stop="stop_sequence", stop_sequence="END"),
    "cached": message(
        text("cached"),
        usage={
            "input_tokens": 3,
            "output_tokens": 7,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 50,
        },
    ),
    "no_usage": message(text("counted nowhere"), usage=None),
    "max_tokens": message(text("cut"), stop="max_tokens"),
    "empty": message(stop="end_turn"),
    **{
        f"stop_{reason}": message(text("x"), stop=reason)
        for reason in ("pause_turn", "refusal", "model_context_window_exceeded", "novel_reason")
    },
}
ANSWERS = {name: fixture(name) for name in DOCUMENTED} | MADE_UP


def folded_messages(chunks: list[Chunk]) -> dict[str, Any]:
    a = MessageAggregator(message_id="msg_edge", model="edge-model")
    for c in chunks:
        a.feed(c)
    assert a.finished
    out: dict[str, Any] = json.loads(a.body())
    return out


def folded_chat(chunks: list[Chunk]) -> dict[str, Any]:
    a = ChatAggregator(completion_id="chatcmpl-edge", created=1, model="edge-model")
    for c in chunks:
        a.feed(c)
    assert a.finished
    out: dict[str, Any] = json.loads(a.body())
    return out


def folded_responses(chunks: list[Chunk]) -> dict[str, Any]:
    echo = echo_of(decoded(include=["reasoning.encrypted_content"]))
    # A fixed clock: the two folds compared must not straddle a second.
    a = ResponsesAggregator(
        response_id="resp_edge", created=1, model="edge-model", echo=echo, clock=lambda: 2.0
    )
    for c in chunks:
        a.feed(c)
    assert a.finished
    out: dict[str, Any] = json.loads(a.body())
    for item in out["output"]:
        item.pop("id")  # made fresh for each answer
    return out


@pytest.mark.parametrize("name", list(ANSWERS))
def test_whole_and_streamed_fold_to_the_same_bodies(name: str) -> None:
    body = ANSWERS[name]
    got, want = whole(body), stream(streamed(body))
    assert folded_messages(got) == folded_messages(want)
    assert folded_chat(got) == folded_chat(want)
    assert folded_responses(got) == folded_responses(want)
    # The same reasoning parts, finish and usage, chunk for chunk aside: the
    # whole answer's come in fewer chunks, its last content with the finish.
    assert [c.reasoning_part for c in got if c.reasoning_part] == [
        c.reasoning_part for c in want if c.reasoning_part
    ]
    assert ending(final(got)) == ending(final(want))
    assert open_chunks(got) == [(FinishReason.NONE, None, "")] * (len(got) - 1)
    assert len(got) <= len(want)


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_body_in_any_pieces_is_the_same_answer(name: str) -> None:
    body = ANSWERS[name]
    once = whole(body)
    assert whole(body, bytewise(body)) == once
    assert whole(body, split(body, [1, len(body) // 2, len(body) - 1])) == once


def test_the_documented_text_answer_is_one_frame() -> None:
    [only] = whole(fixture("anthropic_response_text.json"))
    assert only.content == "Here's the answer to your question..."
    assert (only.finish_reason, only.stop_sequence) == (FinishReason.STOP, "")
    assert only.usage == Usage(100, 50)
    assert only.model == STREAM_MODEL  # the body names none
    assert only.request_id == ANTHROPIC_RID


def test_a_text_answers_one_chunk_carries_its_text_finish_and_usage_together() -> None:
    body = message(text("up to"), stop="stop_sequence", stop_sequence="END")
    [only] = whole(body)
    assert (only.content, only.reasoning, only.tool_calls) == ("up to", "", ())
    assert (only.finish_reason, only.stop_sequence) == (FinishReason.STOP, "END")
    assert only.usage == Usage(10, 20)
    assert (only.model, only.request_id) == ("claude-test", ANTHROPIC_RID)


def test_when_several_chunks_are_needed_only_the_last_ends_the_answer() -> None:
    first, last = whole(MADE_UP["text_after_tools"])
    assert [t.name for t in first.tool_calls] == ["f", "g"]
    assert (first.finish_reason, first.usage, first.stop_sequence) == (FinishReason.NONE, None, "")
    assert (last.content, last.tool_calls) == ("done", ())
    assert last.finish_reason == FinishReason.TOOL_CALLS
    assert last.usage == Usage(10, 20)


def test_a_message_without_content_is_one_empty_chunk_with_the_finish() -> None:
    [only] = whole(MADE_UP["empty"])
    assert (only.content, only.reasoning, only.tool_calls, only.reasoning_part) == (
        "",
        "",
        (),
        None,
    )
    assert (only.finish_reason, only.usage) == (FinishReason.STOP, Usage(10, 20))


def test_the_documented_tool_use_is_one_chunk_with_its_call() -> None:
    [only] = whole(fixture("anthropic_response_tool_use.json"))
    assert only.content == "I'll check the current weather in San Francisco for you."
    (call,) = only.tool_calls
    assert (call.index, call.id, call.name) == (0, "toolu_01A09q90qw90lq917835lq9", "get_weather")
    assert json.loads(call.arguments) == {"location": "San Francisco, CA", "unit": "celsius"}
    assert only.finish_reason == FinishReason.TOOL_CALLS
    assert only.usage is None  # the example has no usage: none is made up
    assert only.model == "claude-opus-5"


def test_the_documented_thinking_is_reasoning_and_its_signed_part() -> None:
    [only] = whole(fixture("anthropic_response_thinking.json"))
    signature = (
        "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL...."
    )
    thought = "Let me analyze this step by step..."
    assert only.reasoning == thought
    assert only.reasoning_part == ReasoningPart(thought, signature.encode(), ANTHROPIC)
    assert only.content == "Based on my analysis..."
    assert only.finish_reason == FinishReason.STOP


def test_the_documented_redacted_thinking_is_a_redacted_part() -> None:
    thought, rest = whole(fixture("anthropic_response_redacted_thinking.json"))
    assert thought.reasoning_part is not None and not thought.reasoning_part.redacted
    assert thought.finish_reason == FinishReason.NONE and thought.usage is None
    part = rest.reasoning_part
    assert part is not None
    assert part.redacted and part.dialect == ANTHROPIC and part.text == ""
    assert part.opaque.startswith(b"EmwKAhgBEgy3va3pzix/") and part.opaque.endswith(b"DcPrQ...")
    assert (rest.reasoning, rest.content) == ("", "Based on my analysis...")
    assert rest.finish_reason == FinishReason.STOP  # the last chunk ends the answer


def test_the_api_references_usage_counts_the_cache_as_the_stream_does() -> None:
    *_, end = whole(fixture("anthropic_response_api_reference.json"))
    # input 2095 + read 2051 + written 2051; the citations are skipped.
    assert end.usage == Usage(6197, 503, cached_tokens=2051, cache_write_tokens=2051)
    assert end.model == "claude-opus-5"


def test_interleaved_blocks_keep_their_order_in_few_chunks() -> None:
    chunks = whole(MADE_UP["interleaved"])
    assert [(c.reasoning, c.content, [t.name for t in c.tool_calls]) for c in chunks] == [
        ("First I look it up.", "Let me check.", ["get_weather"]),
        ("Now the other one.", "", ["get_weather"]),
        ("", "Both asked.", []),  # text after a call: it would fold before it
    ]
    assert [t.index for c in chunks for t in c.tool_calls] == [0, 1]
    assert [t.id for c in chunks for t in c.tool_calls] == ["toolu_1", "toolu_2"]
    assert [c.finish_reason for c in chunks] == [
        FinishReason.NONE,
        FinishReason.NONE,
        FinishReason.TOOL_CALLS,
    ]
    assert [c.usage for c in chunks] == [None, None, Usage(10, 20)]


def test_text_after_tool_calls_is_a_chunk_of_its_own() -> None:
    first, second = whole(MADE_UP["text_after_tools"])
    assert first.tool_calls == (
        ToolCallDelta(0, "toolu_1", "f", "{}"),
        ToolCallDelta(1, "toolu_2", "g", '{"a": [1, 2]}'),
    )
    assert first.content == ""
    assert (second.content, second.tool_calls) == ("done", ())


@pytest.mark.parametrize("given", ["{}", "null", " {} "])
def test_a_tool_call_with_no_input_has_empty_object_arguments(given: str) -> None:
    body = message(tool("toolu_1", "f", {}), stop="tool_use").replace(
        b'"input": {}', f'"input": {given}'.encode()
    )
    assert whole(body)[0].tool_calls == (ToolCallDelta(0, "toolu_1", "f", "{}"),)


def test_a_block_without_input_has_empty_object_arguments() -> None:
    body = message({"type": "tool_use", "id": "toolu_1", "name": "f"}, stop="tool_use")
    assert whole(body)[0].tool_calls == (ToolCallDelta(0, "toolu_1", "f", "{}"),)


@pytest.mark.parametrize(
    ("reason", "finish"), [*STOP_REASONS.items(), ("novel", FinishReason.STOP)]
)
def test_every_stop_reason_maps_as_the_stream_maps_it(reason: str, finish: FinishReason) -> None:
    body = message(text("x"), stop=reason, stop_sequence="END")
    [end] = whole(body)
    assert (end.content, end.finish_reason) == ("x", finish)
    # The matched sequence goes with a stop only (as the stream's).
    assert end.stop_sequence == ("END" if finish == FinishReason.STOP else "")
    assert ending(end) == ending(final(stream(streamed(body))))


def test_the_messages_model_is_used_over_the_configured_one() -> None:
    assert {c.model for c in whole(message(text("x")))} == {"claude-test"}
    assert {c.model for c in whole(message(text("x"), model=None))} == {STREAM_MODEL}


def test_an_error_body_in_a_200_is_the_stream_error_events_chunk() -> None:
    body = fixture("anthropic_error_overloaded_529.json")
    got = whole(body)
    assert error_of(got).code == codes.BACKEND_STREAM_ERROR.code
    assert error_of(got).message == "overloaded_error: Overloaded"
    assert got == stream(fixture("anthropic_error.sse"))
    with pytest.raises(FlatgateError):
        folded_messages(got)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "bad answer"),
        (b'{"type": "completion", "content": []}', "'completion'"),
        (message(text("x"), stop=None), "no stop_reason"),
        (b'{"type": "message", "content": "text", "stop_reason": "end_turn"}', "content"),
        (
            b'{"type": "message", "stop_reason": "end_turn", "usage": {"input_tokens": "1"}}',
            "usage",
        ),
        (b'{"type": "message"', "bad answer"),
        (b"", "bad answer"),
    ],
)
def test_a_body_that_is_not_a_message_is_one_protocol_error(body: bytes, says: str) -> None:
    chunks = whole(body)
    err = error_of(chunks)
    assert len(chunks) == 1
    assert err.code == codes.BACKEND_PROTOCOL_ERROR.code
    assert says in err.message


def test_a_body_that_is_neither_json_nor_events_is_cut_short_as_a_stream() -> None:
    chunks = whole(b"Service Unavailable")
    assert len(chunks) == 1
    assert error_of(chunks).code == codes.BACKEND_STREAM_TRUNCATED.code


def test_nothing_is_translated_after_the_answer() -> None:
    w = AnthropicWhole(ANTHROPIC_RID, STREAM_MODEL)
    assert w.feed(fixture("anthropic_response_text.json")) == b""
    assert not w.done
    assert w.end()
    assert w.done
    assert (w.feed(b"{}"), w.end()) == (b"", b"")


@pytest.mark.parametrize("name", ["anthropic_text.sse", "anthropic_thinking.sse"])
def test_a_server_that_streams_anyway_is_translated_as_a_stream(name: str) -> None:
    body = fixture(name)
    assert whole(body) == stream(body)
    pieces = bytewise(body)
    streamed = run(AnthropicStream(ANTHROPIC_RID, STREAM_MODEL), pieces)
    assert whole(body, pieces) == streamed
    assert merged(streamed) == merged(stream(body))


def test_the_adapter_gives_the_whole_translator_for_a_whole_answer() -> None:
    a = AnthropicAdapter(
        AnthropicConfig(name="an", protocol="anthropic", url="http://127.0.0.1:9/v1", model="pin")
    )
    assert isinstance(a.translator("r", "routed", whole=True), AnthropicWhole)
    assert isinstance(a.translator("r", "routed"), AnthropicStream)
    # The configured model names the answer when the body names none.
    chunks = run(a.translator("r", "routed", True), [message(text("x"), model=None)])
    assert {c.model for c in chunks} == {"pin"}
