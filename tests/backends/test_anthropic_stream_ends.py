"""``backends.anthropic.AnthropicStream``: how a Messages API stream ends.

Every stream must end in exactly one terminal chunk (a stop or an error),
however its body is cut into reads, and wherever it is cut short: an error
event, the end of the body before or after ``message_stop``, an event that does
not decode or is oversized, and hostile input (anything but frames or
``TranslatorError`` is a bug). What a stream says on the way is
``test_anthropic_stream``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.anthropic import STOP_REASONS
from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    STOP,
    STREAM_ERROR,
    TRUNCATED,
    anthropic_stream,
    body,
    bytewise,
    content,
    error_of,
    final,
    fixture,
    is_empty,
    message_delta,
    message_start,
    random_pieces,
    read_frames,
    run,
    split,
    sse_fixtures,
    text_block,
    translate_anthropic,
)

FIXTURE_NAMES = sse_fixtures("anthropic")
stream = anthropic_stream
translate = translate_anthropic


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


# -- properties over every fixture ---------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_ends_in_exactly_one_terminal_chunk(name: str) -> None:
    s = stream()
    final(run(s, [fixture(name)]))
    assert s.done


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_a_fixture_makes_empty_chunks_only_for_its_pings_after_the_first_token(name: str) -> None:
    data = fixture(name)
    chunks = run(stream(), [data], heartbeats=True)
    beats = [i for i, c in enumerate(chunks) if is_empty(c)]
    assert len(beats) <= data.count(b"event: ping\n")
    first = next((i for i, c in enumerate(chunks) if not is_empty(c)), len(chunks))
    assert all(i > first for i in beats)  # the answer has begun before any heartbeat
    assert all(chunks[i].finish_reason == FinishReason.NONE for i in beats)


def test_pings_through_a_long_silence_are_heartbeats_between_the_tokens() -> None:
    ping = {"type": "ping"}
    data = body(
        message_start(), ping, text_block(0, "a"), ping, ping, message_delta("end_turn"), STOP
    )
    chunks = run(stream(), [data], heartbeats=True)
    shape = ["beat" if is_empty(c) else c.content or "end" for c in chunks]
    # The ping before the first token is not relayed: the answer has not begun.
    assert shape == ["a", "beat", "beat", "end"]


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
