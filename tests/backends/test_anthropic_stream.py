"""``backends.anthropic.AnthropicStream``: Messages API SSE into chunk frames.

The documented text, tool-use, thinking and error streams are fixtures
(verbatim, see ``fixtures/SOURCES.md``); everything else is written inline
with ``helpers.named_events``. Note that the documented streams end with
``message_stop`` and one line end, no blank line: their final chunk comes
from ``end``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.anthropic import STOP_REASONS, AnthropicAdapter, AnthropicStream
from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.backends.config import BackendConfig
from flatgate.proxy.wire.frames import Chunk, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    STREAM_ERROR,
    TRUNCATED,
    bytewise,
    calls,
    content,
    error_of,
    final,
    fixture,
    is_empty,
    named_events,
    random_pieces,
    read_frames,
    reasoning,
    run,
    split,
    sse_fixtures,
    terminals,
)

RID = "req-7"
MODEL = "configured-model"
FIXTURE_NAMES = sse_fixtures("anthropic")


def stream() -> AnthropicStream:
    return AnthropicStream(RID, MODEL)


def translate(data: bytes) -> list[Chunk]:
    return run(stream(), [data])


# -- event builders ------------------------------------------------------------


def message_start(model: str = "claude-test", **usage: int) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
    }
    if usage:
        message["usage"] = usage
    return {"type": "message_start", "message": message}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def text_block(index: int, *texts: str) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "text", "text": ""}),
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": t},
            }
            for t in texts
        ),
        {"type": "content_block_stop", "index": index},
    ]


def tool_block(index: int, id: str, name: str, *fragments: str) -> list[dict[str, Any]]:
    return [
        block_start(index, {"type": "tool_use", "id": id, "name": name, "input": {}}),
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": f},
            }
            for f in fragments
        ),
        {"type": "content_block_stop", "index": index},
    ]


def message_delta(stop_reason: str | None, **usage: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": usage or {"output_tokens": 1},
    }


STOP = {"type": "message_stop"}
PING = {"type": "ping"}


def body(*events: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    flat: list[dict[str, Any]] = []
    for e in events:
        flat += e if isinstance(e, list) else [e]
    return named_events(*flat)


# -- the documented streams ------------------------------------------------------


def test_documented_text_stream() -> None:
    chunks = translate(fixture("anthropic_text.sse"))
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
            block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgB..."}),
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
    assert final(chunks).usage == Usage(350, 25, 300)


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
    assert final(chunks).usage == Usage(125, 50, 100)


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


# -- errors and the end of the stream ------------------------------------------


def test_an_error_event_after_content_is_one_error_chunk() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    chunks = translate(
        body(message_start(), text_block(0, "partial"), error, message_delta("end_turn"), STOP)
    )
    assert content(chunks) == "partial"
    err = error_of(chunks)
    assert err.code == STREAM_ERROR
    assert err.message == "overloaded_error: Overloaded"


def test_an_error_event_without_details_is_still_an_error_chunk() -> None:
    err = error_of(translate(body(message_start(), {"type": "error"})))
    assert err.code == STREAM_ERROR
    assert err.message


def test_a_body_ending_before_the_stop_reason_is_one_truncation_chunk() -> None:
    chunks = translate(body(message_start(), text_block(0, "half")))
    assert content(chunks) == "half"
    assert error_of(chunks).code == TRUNCATED


def test_message_stop_without_a_stop_reason_is_one_truncation_chunk() -> None:
    chunks = translate(body(message_start(), text_block(0, "x"), STOP))
    assert error_of(chunks).code == TRUNCATED


def test_a_body_ending_after_message_delta_without_message_stop_is_a_normal_final() -> None:
    chunks = translate(body(message_start(), text_block(0, "x"), message_delta("max_tokens")))
    last = final(chunks)
    assert last.finish_reason == FinishReason.LENGTH
    assert last.error is None


@pytest.mark.parametrize("data", [b"", b'event: ping\ndata: {"type": "ping"}\n\n'])
def test_a_body_with_no_message_is_one_truncation_chunk(data: bytes) -> None:
    chunks = translate(data)
    assert len(chunks) == 1
    assert error_of(chunks).code == TRUNCATED


def test_a_non_streamed_json_answer_is_one_truncation_chunk_not_silence() -> None:
    chunks = translate(fixture("anthropic_response_text.json"))
    assert len(chunks) == 1
    assert error_of(chunks).code == TRUNCATED


def test_bytes_after_message_stop_are_ignored() -> None:
    s = stream()
    done = body(message_start(), text_block(0, "x"), message_delta("end_turn"), STOP)
    chunks = read_frames(s.feed(done + b"data: {not json\n\n" + body(text_block(1, "more"))))
    assert s.done
    assert final(chunks).finish_reason == FinishReason.STOP
    assert s.feed(body(text_block(2, "again"), STOP)) == b""
    assert s.feed(b"data: garbage\n\n") == b""
    assert s.end() == b""


def test_bytes_after_an_error_are_ignored() -> None:
    s = stream()
    read_frames(s.feed(fixture("anthropic_error.sse") + b"\n"))
    assert s.done
    assert s.feed(body(message_start(), text_block(0, "x"), message_delta("end_turn"), STOP)) == b""
    assert s.end() == b""


@pytest.mark.parametrize(
    "data", [b"data: {not json}\n\n", b'data: {"type": 3}\n\n', b"data: []\n\n"]
)
def test_an_event_that_does_not_decode_ends_the_stream_in_one_protocol_error(
    data: bytes,
) -> None:
    s = stream()
    chunks = run(s, [body(message_start(), text_block(0, "kept")) + data], end=False)
    assert content(chunks) == "kept"
    assert [c.error.code for c in chunks if c.error] == ["backend_protocol_error"]
    assert s.done and s.end() == b""


def test_an_oversized_event_ends_the_stream_in_one_protocol_error() -> None:
    s = stream()
    chunks = read_frames(s.feed(b"data: " + b"x" * (16 << 20)))
    assert [c.error.code for c in chunks if c.error] == ["backend_protocol_error"]
    assert s.done


# -- models --------------------------------------------------------------------


def test_the_configured_model_names_chunks_until_message_start_names_one() -> None:
    start = message_start()
    del start["message"]["model"]
    chunks = translate(body(start, text_block(0, "x"), message_delta("end_turn"), STOP))
    assert {c.model for c in chunks} == {MODEL}


def test_the_adapter_names_its_configured_model() -> None:
    adapter = AnthropicAdapter(
        BackendConfig(
            name="a", url="https://api.anthropic.com/v1", protocol="anthropic", model="m1"
        )
    )
    t = adapter.translator(RID, "routed")
    start = message_start()
    del start["message"]["model"]
    chunks = run(t, [body(start, text_block(0, "x"), message_delta("end_turn"), STOP)])
    assert {c.model for c in chunks} == {"m1"}


# -- properties over every fixture ---------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_ends_in_exactly_one_terminal_chunk(name: str) -> None:
    s = stream()
    final(run(s, [fixture(name)]))
    assert s.done


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_no_fixture_makes_an_empty_chunk(name: str) -> None:
    assert not [c for c in translate(fixture(name)) if is_empty(c)]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_a_fixture_fed_byte_by_byte_gives_the_same_chunks(name: str) -> None:
    data = fixture(name)
    assert run(stream(), bytewise(data)) == translate(data)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("seed", range(5))
def test_seeded_random_reads_give_the_same_chunks(name: str, seed: int) -> None:
    data = fixture(name)
    rng = random.Random(f"{name}/{seed}")
    for _ in range(20):
        pieces = random_pieces(data, rng)
        assert run(stream(), pieces) == translate(data), (name, seed, [len(p) for p in pieces])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FIXTURE_NAMES), data=st.data())
def test_any_reads_give_the_same_chunks_and_one_terminal(name: str, data: st.DataObject) -> None:
    raw = fixture(name)
    points = data.draw(st.lists(st.integers(0, len(raw)), max_size=10), label="cuts")
    chunks = run(stream(), split(raw, points))
    assert chunks == translate(raw)
    final(chunks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FIXTURE_NAMES), data=st.data())
def test_a_body_cut_short_anywhere_ends_in_exactly_one_terminal_chunk(
    name: str, data: st.DataObject
) -> None:
    raw = fixture(name)
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    s = stream()
    final(run(s, [raw[:cut]]))
    assert s.done


def test_a_body_cut_inside_an_event_is_one_truncation_chunk() -> None:
    raw = body(message_start(), text_block(0, "Hello", " world"))
    cut = raw.index(b'" world"')
    chunks = translate(raw[:cut])
    assert content(chunks) == "Hello"
    assert error_of(chunks).code == TRUNCATED


# -- hostile input: TranslatorError, or frames; never anything else --------------

# Mostly plausible values, sometimes ones the wire cannot carry (32-bit counts)
# or text with a lone surrogate (invalid UTF-8 when written raw).
numbers = st.sampled_from([0, 0, 1, 7, -1, 1 << 31, -(1 << 40)])
texts = st.one_of(
    st.text(st.characters(categories=["Ll", "Lo", "Nd"]), max_size=6),
    st.text(st.characters(categories=["Ll", "Cs"]), min_size=1, max_size=3),
)
usages = st.fixed_dictionaries(
    {},
    optional={
        "input_tokens": numbers,
        "output_tokens": numbers,
        "cache_read_input_tokens": numbers,
        "cache_creation_input_tokens": numbers,
    },
)
block_types = st.sampled_from(["text", "thinking", "tool_use", "server_tool_use", "other"])
delta_types = st.sampled_from(["text_delta", "thinking_delta", "input_json_delta", "x"])
event_objects = st.one_of(
    st.builds(
        lambda m, u: {"type": "message_start", "message": {"model": m, "usage": u}}, texts, usages
    ),
    st.builds(
        lambda i, t, id_, name, text: {
            "type": "content_block_start",
            "index": i,
            "content_block": {"type": t, "id": id_, "name": name, "text": text, "thinking": text},
        },
        numbers,
        block_types,
        texts,
        texts,
        texts,
    ),
    st.builds(
        lambda i, t, text: {
            "type": "content_block_delta",
            "index": i,
            "delta": {"type": t, "text": text, "thinking": text, "partial_json": text},
        },
        numbers,
        delta_types,
        texts,
    ),
    st.builds(lambda i: {"type": "content_block_stop", "index": i}, numbers),
    st.builds(
        lambda r, u: {"type": "message_delta", "delta": {"stop_reason": r}, "usage": u},
        st.sampled_from(sorted(STOP_REASONS)) | texts,
        usages,
    ),
    st.just({"type": "message_stop"}),
    st.just({"type": "ping"}),
    st.builds(lambda t: {"type": "error", "error": {"type": "x", "message": t}}, texts),
)


def escaped(obj: dict[str, Any]) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj)}\n\n".encode()


def raw_utf8(obj: dict[str, Any]) -> bytes:
    """Text written as UTF-8, not escaped: a lone surrogate becomes invalid UTF-8."""
    return (
        b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n\n"
    )


def check_hostile(raw: bytes, points: list[int]) -> None:
    s = stream()
    try:
        chunks = run(s, split(raw, points))
    except TranslatorError:
        return
    assert s.done
    final(chunks)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    objects=st.lists(event_objects, max_size=10),
    writer=st.sampled_from([escaped, raw_utf8]),
    data=st.data(),
)
def test_any_events_give_frames_or_translator_error_and_nothing_else(
    objects: list[dict[str, Any]], writer: Any, data: st.DataObject
) -> None:
    raw = b"".join(writer(o) for o in objects)
    check_hostile(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4), label="cuts"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=200), data=st.data())
def test_any_bytes_give_frames_or_translator_error_and_nothing_else(
    raw: bytes, data: st.DataObject
) -> None:
    check_hostile(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4), label="cuts"))


def test_invalid_utf8_in_an_event_ends_the_stream_in_one_protocol_error() -> None:
    event = (
        b'data: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"\xe4\xbd"}}\n\n'
    )
    chunks = read_frames(stream().feed(event))
    assert [c.error.code for c in chunks if c.error] == ["backend_protocol_error"]


def test_token_counts_the_wire_cannot_carry_are_refused_not_crashed_on() -> None:
    raw = body(
        message_start(input_tokens=1 << 31, output_tokens=1),
        text_block(0, "x"),
        message_delta("end_turn", output_tokens=1),
        STOP,
    )
    try:
        chunks = translate(raw)
    except TranslatorError:
        return
    final(chunks)
