"""``backends.anthropic.stream.AnthropicStream``: Messages API SSE into chunk frames,
what a stream says: its text, thinking, tool calls, usage, stop reason and model.

The documented text, tool-use, thinking and error streams are fixtures
(verbatim, see ``fixtures/SOURCES.md``); everything else is written inline
with the event builders of ``helpers``. Note that the documented streams end
with ``message_stop`` and one line end, no blank line: their final chunk comes
from ``end``. How a stream ends (errors, truncation, malformed and hostile
bodies, any cut into reads) is ``test_stream_ends``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.anthropic.adapter import STOP_REASONS, AnthropicAdapter
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    ANTHROPIC_RID,
    PING,
    STOP,
    STREAM_ERROR,
    STREAM_MODEL,
    anthropic_stream,
    block_start,
    body,
    calls,
    content,
    error_of,
    final,
    fixture,
    is_empty,
    message_delta,
    message_start,
    per_event,
    read_frames,
    reasoning,
    run,
    terminals,
    text_block,
    tool_block,
    translate_anthropic,
)

RID = ANTHROPIC_RID
MODEL = STREAM_MODEL
stream = anthropic_stream
translate = translate_anthropic


# -- the documented streams ------------------------------------------------------


def test_documented_text_stream() -> None:
    # Sent an event at a time, each text_delta is a chunk (in one read, one).
    chunks = run(stream(), per_event(fixture("anthropic_text.sse")))
    assert [c.content for c in chunks[:-1]] == ["Hello", "!"]
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(25, 15, 0)
    assert {c.model for c in chunks} == {"claude-opus-4-8"}
    assert {c.request_id for c in chunks} == {RID}


def test_documented_tool_use_stream() -> None:
    chunks = translate(fixture("anthropic_tool_use.sse"))
    assert content(chunks) == "Okay, let's check the weather for San Francisco, CA:"
    got = calls(chunks)
    assert got == {
        0: {
            "ids": ["toolu_01T1x1fJ34qAmk2tNTrN7Up6"],
            "names": ["get_weather"],
            "arguments": '{"location": "San Francisco, CA"}',
        }
    }
    assert json.loads(got[0]["arguments"]) == {"location": "San Francisco, CA"}
    last = final(chunks)
    assert last.finish_reason == FinishReason.TOOL_CALLS
    assert last.usage == Usage(472, 89)


def test_documented_2025_tool_use_stream_joins_every_input_json_delta() -> None:
    chunks = translate(fixture("anthropic_tool_use_v2025.sse"))
    args = calls(chunks)[0]["arguments"]
    assert json.loads(args) == {"location": "San Francisco, CA", "unit": "fahrenheit"}
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_documented_thinking_stream() -> None:
    chunks = translate(fixture("anthropic_thinking.sse"))
    assert reasoning(chunks) == (
        "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n"
        "1071 = 2 \u00d7 462 + 147\n462 = 3 \u00d7 147 + 21\n147 = 7 \u00d7 21 + 0\n"
        "The remainder is 0, so GCD(1071, 462) = 21."
    )
    assert content(chunks) == "The greatest common divisor of 1071 and 462 is **21**."
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage is None  # the docs' example has no usage at all
    # the signature_delta writes nothing
    assert not [c for c in chunks if is_empty(c)]


def test_documented_2025_thinking_stream() -> None:
    chunks = translate(fixture("anthropic_thinking_v2025.sse"))
    assert reasoning(chunks).endswith("6. 10,800 + 1,350 + 81 = 12,231")
    assert content(chunks) == "27 * 453 = 12,231"
    assert {c.model for c in chunks} == {"claude-sonnet-4-5-20250929"}


def test_documented_error_event_is_one_error_chunk() -> None:
    chunks = translate(fixture("anthropic_error.sse"))
    assert chunks == [chunks[-1]]
    err = error_of(chunks)
    assert err.code == STREAM_ERROR
    assert "overloaded_error" in err.message
    assert "Overloaded" in err.message


def test_the_documented_streams_final_chunk_comes_at_end() -> None:
    # The docs end with `data: {"type": "message_stop"}` and one line end.
    s = stream()
    fed = read_frames(s.feed(fixture("anthropic_tool_use.sse")))
    assert not terminals(fed)
    assert not s.done
    assert final(read_frames(s.end())).finish_reason == FinishReason.TOOL_CALLS
    assert s.done


def test_message_stop_ends_the_stream_when_its_blank_line_comes() -> None:
    s = stream()
    chunks = read_frames(s.feed(fixture("anthropic_text.sse")))
    assert s.done
    assert final(chunks).finish_reason == FinishReason.STOP


def test_web_search_docs_with_elisions_end_in_one_protocol_error() -> None:
    """The docs' own elided payload is not JSON: the stream ends in one error chunk."""
    chunks = translate(fixture("anthropic_web_search_docs_elided.sse"))
    assert [c.error.code for c in chunks if c.error] == ["backend_protocol_error"]


def test_web_search_stream_skips_server_tool_blocks() -> None:
    # The docs' stream with its two elided lines (an elided payload and a bare
    # `...`) taken out: server_tool_use and web_search_tool_result blocks are
    # not the caller's tool calls, and their deltas write nothing.
    lines = fixture("anthropic_web_search_docs_elided.sse").split(b"\n")
    kept = [ln for ln in lines if ln != b"..." and b'"web_search_tool_result"' not in ln]
    chunks = translate(b"\n".join(kept))
    assert not [c for c in chunks if c.tool_calls]
    assert content(chunks)
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(10682, 510, 0)


# -- events ignored ------------------------------------------------------------


def test_ping_and_unknown_events_are_ignored() -> None:
    with_noise = body(
        message_start(),
        PING,
        text_block(0, "hi"),
        {"type": "some_future_event", "data": {"x": 1}},
        PING,
        message_delta("end_turn"),
        STOP,
    )
    plain = body(message_start(), text_block(0, "hi"), message_delta("end_turn"), STOP)
    assert translate(with_noise) == translate(plain)


def test_unknown_block_and_delta_types_are_skipped() -> None:
    chunks = translate(
        body(
            message_start(),
            block_start(0, {"type": "future_block", "data": "EmwKAhgB..."}),
            {"type": "content_block_stop", "index": 0},
            text_block(1, "a"),
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "citations_delta", "citation": {"type": "char_location"}},
            },
            {"type": "content_block_delta", "index": 1, "delta": {"type": "future_delta"}},
            message_delta("end_turn"),
            STOP,
        )
    )
    assert [c.content for c in chunks] == ["a", ""]
    assert not [c for c in chunks if is_empty(c)]


def test_text_in_a_block_start_is_content() -> None:
    chunks = translate(
        body(
            message_start(),
            block_start(0, {"type": "text", "text": "Hi"}),
            {"type": "content_block_stop", "index": 0},
            message_delta("end_turn"),
            STOP,
        )
    )
    assert content(chunks) == "Hi"


# -- tool calls ----------------------------------------------------------------


def test_tool_call_indices_count_tool_blocks_only() -> None:
    chunks = translate(
        body(
            message_start(),
            block_start(0, {"type": "thinking", "thinking": ""}),
            {"type": "content_block_stop", "index": 0},
            text_block(1, "Two lookups."),
            tool_block(2, "toolu_a", "weather", '{"city": "Paris"}'),
            tool_block(3, "toolu_b", "time", '{"tz": ', '"CET"}'),
            message_delta("tool_use"),
            STOP,
        )
    )
    assert calls(chunks) == {
        0: {"ids": ["toolu_a"], "names": ["weather"], "arguments": '{"city": "Paris"}'},
        1: {"ids": ["toolu_b"], "names": ["time"], "arguments": '{"tz": "CET"}'},
    }
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_input_json_delta_fragments_are_joined_in_order() -> None:
    fragments = ["", '{"loc', 'ation": "S', "an Francisco", ', CA"', "}"]
    chunks = translate(
        body(
            message_start(),
            tool_block(0, "toolu_1", "w", *fragments),
            message_delta("tool_use"),
            STOP,
        )
    )
    assert calls(chunks)[0]["arguments"] == "".join(fragments)
    # the empty first fragment writes nothing
    assert not [c for c in chunks if is_empty(c)]


@pytest.mark.parametrize("fragments", [(), ("",)], ids=["no-deltas", "empty-delta"])
def test_a_tool_use_with_no_input_gets_an_empty_object(fragments: tuple[str, ...]) -> None:
    chunks = translate(
        body(
            message_start(),
            tool_block(0, "toolu_1", "now", *fragments),
            tool_block(1, "toolu_2", "then", '{"a": 1}'),
            message_delta("tool_use"),
            STOP,
        )
    )
    got = calls(chunks)
    assert got[0]["arguments"] == "{}"
    assert got[1]["arguments"] == '{"a": 1}'


def test_the_empty_object_comes_at_the_blocks_stop() -> None:
    s = stream()
    read_frames(s.feed(body(message_start(), tool_block(0, "toolu_1", "now")[:1])))
    stop = read_frames(s.feed(body({"type": "content_block_stop", "index": 0})))
    assert [d.arguments for c in stop for d in c.tool_calls] == ["{}"]


def test_input_json_delta_on_a_non_tool_block_is_ignored() -> None:
    chunks = translate(
        body(
            message_start(),
            block_start(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}),
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'},
            },
            {"type": "content_block_stop", "index": 0},
            message_delta("end_turn"),
            STOP,
        )
    )
    assert not [c for c in chunks if c.tool_calls]


# -- usage ---------------------------------------------------------------------


def test_prompt_tokens_are_input_plus_cache_reads_and_writes() -> None:
    chunks = translate(
        body(
            message_start(
                input_tokens=10,
                cache_read_input_tokens=300,
                cache_creation_input_tokens=40,
                output_tokens=1,
            ),
            text_block(0, "x"),
            message_delta("end_turn", output_tokens=25),
            STOP,
        )
    )
    assert final(chunks).usage == Usage(350, 25, 300, cache_write_tokens=40)


def test_output_tokens_are_the_last_cumulative_count() -> None:
    chunks = translate(
        body(
            message_start(input_tokens=5, output_tokens=1),
            text_block(0, "x"),
            message_delta(None, output_tokens=10),
            message_delta("end_turn", output_tokens=30),
            STOP,
        )
    )
    assert final(chunks).usage == Usage(5, 30)


def test_output_tokens_from_message_start_when_message_delta_has_none() -> None:
    events: list[dict[str, Any] | list[dict[str, Any]]] = [
        message_start(input_tokens=5, output_tokens=3),
        text_block(0, "x"),
    ]
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    chunks = translate(body(*events, delta, STOP))
    assert final(chunks).usage == Usage(5, 3)


def test_message_delta_input_usage_replaces_message_starts() -> None:
    chunks = translate(
        body(
            message_start(input_tokens=2679, cache_read_input_tokens=0, output_tokens=3),
            text_block(0, "x"),
            message_delta(
                "end_turn",
                input_tokens=10682,
                cache_read_input_tokens=100,
                cache_creation_input_tokens=0,
                output_tokens=510,
            ),
            STOP,
        )
    )
    assert final(chunks).usage == Usage(10782, 510, 100)


def test_message_delta_usage_without_cache_fields_keeps_message_starts_cache_counts() -> None:
    # message_delta counts are cumulative, and a field it leaves out is not
    # zero: it was not reported (the SDK keeps message_start's value).
    chunks = translate(
        body(
            message_start(
                input_tokens=5,
                cache_read_input_tokens=100,
                cache_creation_input_tokens=20,
                output_tokens=1,
            ),
            text_block(0, "x"),
            message_delta("end_turn", input_tokens=5, output_tokens=50),
            STOP,
        )
    )
    assert final(chunks).usage == Usage(125, 50, 100, cache_write_tokens=20)


def test_no_usage_anywhere_means_no_usage() -> None:
    chunks = translate(body(message_start(), text_block(0, "x"), message_delta("end_turn"), STOP))
    # message_delta() carries output_tokens=1 by default: only output is known
    assert final(chunks).usage == Usage(0, 1)
    bare = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}
    assert final(translate(body(message_start(), bare, STOP))).usage is None


# -- stop reasons --------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "want"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("pause_turn", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("model_context_window_exceeded", FinishReason.LENGTH),
        ("tool_use", FinishReason.TOOL_CALLS),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("a_new_reason", FinishReason.STOP),
    ],
)
def test_stop_reason_mapping(stop_reason: str, want: FinishReason) -> None:
    chunks = translate(body(message_start(), text_block(0, "x"), message_delta(stop_reason), STOP))
    last = final(chunks)
    assert last.finish_reason == want
    assert last.error is None


def test_the_stop_reason_table_is_the_documented_one() -> None:
    assert set(STOP_REASONS) == {
        "end_turn",
        "stop_sequence",
        "pause_turn",
        "max_tokens",
        "model_context_window_exceeded",
        "tool_use",
        "refusal",
    }


# -- models --------------------------------------------------------------------


def test_the_configured_model_names_chunks_until_message_start_names_one() -> None:
    start = message_start()
    del start["message"]["model"]
    chunks = translate(body(start, text_block(0, "x"), message_delta("end_turn"), STOP))
    assert {c.model for c in chunks} == {MODEL}


def test_the_adapter_names_its_configured_model() -> None:
    adapter = AnthropicAdapter(
        AnthropicConfig(
            name="a", url="https://api.anthropic.com/v1", protocol="anthropic", model="m1"
        )
    )
    t = adapter.translator(RID, "routed")
    start = message_start()
    del start["message"]["model"]
    chunks = run(t, [body(start, text_block(0, "x"), message_delta("end_turn"), STOP)])
    assert {c.model for c in chunks} == {"m1"}
