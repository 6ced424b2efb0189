"""How a backend stream ends, for every streaming adapter (``streams``):
exactly one terminal chunk (a finish or an error), however the body is cut
into reads (the same chunks, once ``helpers.merged`` joins the text a read
coalesced) and wherever it is cut short (an error event, the end of the body
with or without its end marker, an event that does not decode or is
oversized, hostile input: anything but frames or ``TranslatorError`` is a
bug). One backend's own cases are named after it. What a stream says on the
way: ``test_*_stream``; the coalescing: ``test_coalesced``.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.wire.chunk.frames import ChunkError, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends import responses_events as rev
from tests.backends.helpers import (
    STOP,
    STREAM_ERROR,
    TRUNCATED,
    body,
    bytewise,
    chunk,
    content,
    data_events,
    error_of,
    final,
    fixture,
    is_empty,
    merged,
    message_delta,
    message_start,
    random_pieces,
    read_frames,
    run,
    split,
    terminals,
    text_block,
)
from tests.backends.streams import ADAPTERS, ANTHROPIC, MARKED, OPENAI, RESPONSES, StreamAdapter

each = pytest.mark.parametrize("adapter", ADAPTERS, ids=str)
FIXTURES = [pytest.param(a, n, id=f"{a}-{n}") for a in ADAPTERS for n in a.fixtures]
PROTOCOL_ERROR = "backend_protocol_error"


# -- errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "raw", "text", "error"),
    [
        pytest.param(
            ANTHROPIC,
            body(
                message_start(),
                text_block(0, "partial"),
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                message_delta("end_turn"),
                STOP,
            ),
            "partial",
            ChunkError(STREAM_ERROR, "overloaded_error: Overloaded"),
            id="anthropic-after-content",
        ),
        pytest.param(
            ANTHROPIC,
            body(message_start(), {"type": "error"}),
            "",
            ChunkError(STREAM_ERROR, "error: the backend failed"),
            id="anthropic-without-details",
        ),
        pytest.param(
            OPENAI,
            fixture("openai_midstream_error.sse"),
            "Hello",
            ChunkError(STREAM_ERROR, "synthetic fixture: upstream failed mid-stream"),
            id="openai-midstream-object",
        ),
        pytest.param(
            OPENAI,
            fixture("vllm_midstream_error.sse"),
            "Here",
            ChunkError(STREAM_ERROR, "Internal server error"),
            id="vllm-int-code-then-done",
        ),
        pytest.param(
            OPENAI,
            data_events(chunk(content="x"), {"error": "the model crashed"}),
            "x",
            ChunkError(STREAM_ERROR, "the model crashed"),
            id="openai-string-error",
        ),
        pytest.param(
            OPENAI,
            data_events({"error": {"type": "server_error", "code": None}}),
            "",
            ChunkError(STREAM_ERROR, "server_error"),
            id="openai-no-message-named-by-its-type",
        ),
        pytest.param(
            OPENAI,
            data_events(chunk(content="x"), chunk(finish_reason="stop"), {"error": "late failure"}),
            "x",
            ChunkError(STREAM_ERROR, "late failure"),
            id="openai-after-the-finish-before-done",
        ),
        pytest.param(
            RESPONSES,
            fixture("responses/openai_failed.sse"),
            "",
            ChunkError(STREAM_ERROR, "server_error: The model failed to generate a response."),
            id="responses-failed",
        ),
        pytest.param(
            RESPONSES,
            fixture("responses/openai_error.sse"),
            "",
            ChunkError(STREAM_ERROR, "ERR_SOMETHING: Something went wrong"),
            id="responses-error-event",
        ),
        pytest.param(
            RESPONSES,
            rev.events(
                rev.created(),
                rev.message(0, "partial", done=False),
                {"type": "response.failed", "response": {"status": "failed", "error": None}},
                rev.completed(),
            ),
            "partial",
            ChunkError(STREAM_ERROR, "the response failed"),
            id="responses-failed-after-content-without-details",
        ),
        pytest.param(
            RESPONSES,
            rev.events(
                rev.created(),
                {"type": "error", "error": {"code": "rate_limit_exceeded", "message": "slow"}},
            ),
            "",
            ChunkError(STREAM_ERROR, "rate_limit_exceeded: slow"),
            id="responses-error-object",
        ),
    ],
)
def test_an_error_event_is_the_one_terminal_chunk(
    adapter: StreamAdapter, raw: bytes, text: str, error: ChunkError
) -> None:
    chunks = adapter.translate(raw)
    assert content(chunks) == text
    assert error_of(chunks) == error


@each
def test_error_chunks_carry_the_request_id(adapter: StreamAdapter) -> None:
    (only,) = adapter.translate(adapter.failure)
    assert only.error is not None
    assert only.request_id == adapter.request_id


@each
def test_bytes_after_an_error_are_ignored(adapter: StreamAdapter) -> None:
    s = adapter.stream()
    read_frames(s.feed(adapter.failure))
    assert s.done
    assert s.feed(adapter.answer("more", finish=adapter.stop) + adapter.end_marker) == b""
    assert s.end() == b""


# -- the end of the stream -------------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "raw", "text"),
    [
        pytest.param(ANTHROPIC, ANTHROPIC.answer("half"), "half", id="anthropic"),
        pytest.param(OPENAI, fixture("vllm_text_excerpt.sse"), "Here's a poem", id="vllm"),
    ],
)
def test_a_body_ending_before_the_finish_is_one_truncation_chunk(
    adapter: StreamAdapter, raw: bytes, text: str
) -> None:
    chunks = adapter.translate(raw)
    assert content(chunks) == text
    assert error_of(chunks).code == TRUNCATED


@each
def test_the_end_marker_without_a_finish_is_one_truncation_chunk(adapter: StreamAdapter) -> None:
    chunks = adapter.translate(adapter.answer("x") + adapter.end_marker)
    assert error_of(chunks).code == TRUNCATED


@pytest.mark.parametrize(
    ("adapter", "raw"),
    [
        pytest.param(ANTHROPIC, b"", id="anthropic-empty"),
        pytest.param(ANTHROPIC, b'event: ping\ndata: {"type": "ping"}\n\n', id="anthropic-ping"),
        pytest.param(OPENAI, b"", id="openai-empty"),
        pytest.param(OPENAI, b": comment only\n\n", id="openai-comment"),
        pytest.param(OPENAI, b"\n\n\n", id="openai-blank-lines"),
        pytest.param(RESPONSES, b"", id="responses-empty"),
        pytest.param(RESPONSES, rev.events(rev.created()), id="responses-created-only"),
        pytest.param(RESPONSES, b"data: [DONE]\n\n", id="responses-done-marker"),
    ],
)
def test_a_body_with_no_answer_is_one_truncation_chunk(adapter: StreamAdapter, raw: bytes) -> None:
    chunks = adapter.translate(raw)
    assert len(chunks) == 1
    assert error_of(chunks).code == TRUNCATED


@each
def test_a_non_streamed_json_answer_is_one_truncation_chunk_not_silence(
    adapter: StreamAdapter,
) -> None:
    # A server that ignored `stream: true` answers one JSON document.
    chunks = adapter.translate(fixture(adapter.json_answer))
    assert len(chunks) == 1
    assert error_of(chunks).code == TRUNCATED


@pytest.mark.parametrize(
    ("adapter", "raw", "reason", "usage"),
    [
        pytest.param(
            ANTHROPIC,
            ANTHROPIC.answer("x", finish="max_tokens"),
            FinishReason.LENGTH,
            Usage(0, 1),
            id="anthropic-message-delta-without-message-stop",
        ),
        pytest.param(
            OPENAI,
            data_events(
                chunk(content="hi"),
                chunk(finish_reason="stop", usage={"prompt_tokens": 4, "completion_tokens": 1}),
                done=False,
            ),
            FinishReason.STOP,
            Usage(4, 1),
            id="openai-finish-without-done",
        ),
        pytest.param(
            RESPONSES,
            RESPONSES.answer("x", finish="max_output_tokens"),
            FinishReason.LENGTH,
            Usage(5, 2),
            id="responses-incomplete",
        ),
    ],
)
def test_a_body_ending_after_the_finish_without_the_end_marker_is_a_normal_final(
    adapter: StreamAdapter, raw: bytes, reason: FinishReason, usage: Usage
) -> None:
    last = final(adapter.translate(raw))
    assert last.finish_reason == reason
    assert last.usage == usage
    assert last.error is None


@each
def test_an_end_marker_without_a_trailing_blank_line_still_finishes(
    adapter: StreamAdapter,
) -> None:
    raw = adapter.answer("hi", finish=adapter.stop) + adapter.end_marker.rstrip(b"\n")
    assert final(adapter.translate(raw)).finish_reason == FinishReason.STOP


@pytest.mark.parametrize("adapter", MARKED, ids=str)
def test_the_final_chunk_waits_for_the_end_marker(adapter: StreamAdapter) -> None:
    s = adapter.stream()
    fed = read_frames(s.feed(adapter.answer("a", finish=adapter.stop)))
    assert [c.content for c in fed] == ["a"]
    assert not s.done
    tail = read_frames(s.feed(adapter.end_marker))
    assert s.done
    assert final(tail).finish_reason == FinishReason.STOP


@each
def test_bytes_after_the_terminal_chunk_are_ignored(adapter: StreamAdapter) -> None:
    s = adapter.stream()
    more = adapter.answer("more", finish=adapter.stop) + adapter.end_marker
    chunks = read_frames(s.feed(fixture(adapter.whole) + b"data: {not json\n\n" + more))
    assert s.done
    assert final(chunks).finish_reason == FinishReason.STOP
    assert s.feed(b"data: {not json either\n\n") == b""
    assert s.feed(more) == b""
    assert s.end() == b""


@each
def test_end_after_a_final_chunk_writes_nothing(adapter: StreamAdapter) -> None:
    s = adapter.stream()
    s.feed(fixture(adapter.whole))
    assert s.done
    assert s.end() == b""


# -- malformed bodies ----------------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "event"),
    [
        pytest.param(ANTHROPIC, b"data: {not json}\n\n", id="anthropic-not-json"),
        pytest.param(ANTHROPIC, b'data: {"type": 3}\n\n', id="anthropic-wrong-type"),
        pytest.param(ANTHROPIC, b"data: []\n\n", id="anthropic-a-list"),
        pytest.param(OPENAI, b"data: {not json}\n\n", id="openai-not-json"),
        pytest.param(OPENAI, b"data: 42\n\n", id="openai-a-number"),
        pytest.param(OPENAI, b'data: {"choices": "many"}\n\n', id="openai-wrong-shape"),
        pytest.param(OPENAI, b"data:\n\n", id="openai-empty"),
        pytest.param(RESPONSES, b"data: {not json}\n\n", id="responses-not-json"),
        pytest.param(RESPONSES, b'data: {"type": 3}\n\n', id="responses-wrong-type"),
        pytest.param(
            RESPONSES,
            b'data: {"type": "response.output_item.done", "item": {"type": 1}}\n\n',
            id="responses-item-of-the-wrong-shape",
        ),
        pytest.param(
            RESPONSES, b'data: {"type": "response.completed"}\n\n', id="responses-no-response"
        ),
    ],
)
def test_an_event_that_does_not_decode_ends_the_stream_in_one_protocol_error(
    adapter: StreamAdapter, event: bytes
) -> None:
    """The good events before it keep their frames; the bad one is the terminal chunk."""
    s = adapter.stream()
    chunks = run(s, [adapter.answer("kept") + event], end=False)
    assert content(chunks) == "kept"
    assert [c.error.code for c in terminals(chunks) if c.error] == [PROTOCOL_ERROR]
    assert s.done and s.end() == b""


@each
def test_an_oversized_event_ends_the_stream_in_one_protocol_error(adapter: StreamAdapter) -> None:
    s = adapter.stream()
    chunks = read_frames(s.feed(b"data: " + b"x" * (16 << 20)))
    assert [c.error.code for c in chunks if c.error] == [PROTOCOL_ERROR]
    assert s.done


@pytest.mark.parametrize(
    ("adapter", "event"),
    [
        pytest.param(
            ANTHROPIC,
            b'data: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"\xe4\xbd"}}\n\n',
            id="anthropic",
        ),
        # a multi-byte character cut in half, as some servers have streamed
        pytest.param(
            OPENAI,
            b'data: {"choices":[{"index":0,"delta":{"content":"\xf0\x9f"}}]}\n\n',
            id="openai",
        ),
        pytest.param(
            RESPONSES,
            b'data: {"type":"response.output_text.delta","delta":"\xe2\x82"}\n\n',
            id="responses",
        ),
    ],
)
def test_invalid_utf8_in_an_event_ends_the_stream_in_one_protocol_error(
    adapter: StreamAdapter, event: bytes
) -> None:
    chunks = read_frames(adapter.stream().feed(event))
    assert [c.error.code for c in chunks if c.error] == [PROTOCOL_ERROR]


# -- properties over every fixture ---------------------------------------------


@pytest.mark.parametrize(("adapter", "name"), FIXTURES)
def test_every_fixture_ends_in_exactly_one_terminal_chunk(
    adapter: StreamAdapter, name: str
) -> None:
    s = adapter.stream()
    final(run(s, [fixture(name)]))
    assert s.done


@pytest.mark.parametrize(("adapter", "name"), FIXTURES)
def test_a_fixture_fed_byte_by_byte_gives_the_same_chunks(
    adapter: StreamAdapter, name: str
) -> None:
    data = fixture(name)
    assert merged(run(adapter.stream(), bytewise(data))) == merged(adapter.translate(data))


@pytest.mark.parametrize(("adapter", "name"), FIXTURES)
@pytest.mark.parametrize("seed", range(5))
def test_seeded_random_reads_give_the_same_chunks(
    adapter: StreamAdapter, name: str, seed: int
) -> None:
    data = fixture(name)
    rng = random.Random(f"{name}/{seed}")
    want = merged(adapter.translate(data))
    for _ in range(20):
        pieces = random_pieces(data, rng)
        assert merged(run(adapter.stream(), pieces)) == want, (name, seed, [len(p) for p in pieces])


@each
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_reads_give_the_same_chunks_and_one_terminal(
    adapter: StreamAdapter, data: st.DataObject
) -> None:
    raw = fixture(data.draw(st.sampled_from(adapter.fixtures), label="name"))
    points = data.draw(st.lists(st.integers(0, len(raw)), max_size=10), label="cuts")
    chunks = run(adapter.stream(), split(raw, points))
    assert merged(chunks) == merged(adapter.translate(raw))
    final(chunks)


@each
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_body_cut_short_anywhere_ends_in_exactly_one_terminal_chunk(
    adapter: StreamAdapter, data: st.DataObject
) -> None:
    raw = fixture(data.draw(st.sampled_from(adapter.fixtures), label="name"))
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    s = adapter.stream()
    final(run(s, [raw[:cut]]))
    assert s.done


@each
def test_a_body_cut_inside_an_event_is_one_truncation_chunk(adapter: StreamAdapter) -> None:
    raw = adapter.answer("Hello", " world")
    chunks = adapter.translate(raw[: raw.index(b'" world"')])
    assert content(chunks) == "Hello"
    assert error_of(chunks).code == TRUNCATED


@each
def test_a_body_cut_inside_the_end_marker_is_one_truncation_chunk(
    adapter: StreamAdapter,
) -> None:
    chunks = adapter.translate(adapter.answer("Hello") + adapter.end_marker[: len(b"data: [DO")])
    assert content(chunks) == "Hello"
    assert error_of(chunks).code == TRUNCATED


# -- hostile input: TranslatorError, or frames; never anything else --------------


def check_hostile(adapter: StreamAdapter, raw: bytes, points: list[int]) -> None:
    s = adapter.stream()
    try:
        chunks = run(s, split(raw, points))
    except TranslatorError:
        return
    assert s.done
    if adapter.many_choices:  # each choice ends once; the stream ends on the last
        assert terminals(chunks)[-1] is chunks[-1]
    else:
        final(chunks)


@each
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_events_give_frames_or_translator_error_and_nothing_else(
    adapter: StreamAdapter, data: st.DataObject
) -> None:
    raw = data.draw(adapter.hostile, label="body")
    check_hostile(
        adapter, raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4), label="cuts")
    )


@each
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=200), data=st.data())
def test_any_bytes_give_frames_or_translator_error_and_nothing_else(
    adapter: StreamAdapter, raw: bytes, data: st.DataObject
) -> None:
    check_hostile(
        adapter, raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4), label="cuts")
    )


@pytest.mark.parametrize(
    ("adapter", "raw"),
    [
        pytest.param(
            ANTHROPIC,
            body(
                message_start(input_tokens=1 << 31, output_tokens=1),
                text_block(0, "x"),
                message_delta("end_turn", output_tokens=1),
                STOP,
            ),
            id="anthropic-input-tokens",
        ),
        pytest.param(OPENAI, data_events(chunk(content="x", index=1 << 31)), id="choice-index"),
        pytest.param(
            OPENAI,
            data_events(
                chunk(
                    finish_reason="stop",
                    usage={"prompt_tokens": 1 << 31, "completion_tokens": 1},
                )
            ),
            id="openai-prompt-tokens",
        ),
        pytest.param(
            OPENAI,
            data_events(
                chunk(
                    finish_reason="stop",
                    usage={
                        "prompt_tokens": 1,
                        "completion_tokens": 1,
                        "prompt_tokens_details": {"cached_tokens": -(1 << 40)},
                    },
                )
            ),
            id="openai-cached-tokens",
        ),
        pytest.param(
            RESPONSES,
            rev.events(rev.message(0, "x"), rev.completed(input_tokens=1 << 31)),
            id="responses-input-tokens",
        ),
        pytest.param(
            RESPONSES,
            rev.events(rev.message(0, "x"), rev.completed(reasoning=-(1 << 40))),
            id="responses-reasoning-tokens",
        ),
    ],
)
def test_numbers_the_wire_cannot_carry_are_refused_not_crashed_on(
    adapter: StreamAdapter, raw: bytes
) -> None:
    try:
        chunks = adapter.translate(raw)
    except TranslatorError:
        return
    final(chunks)


# -- OpenAI's own: a legacy field, the docs' bodies, OpenRouter's error shape --------


def test_openai_the_legacy_llamacpp_error_field_ends_in_one_truncation_chunk() -> None:
    # `error:` is not an SSE field flatgate reads: the stream is [DONE] alone.
    chunks = OPENAI.translate(fixture("llamacpp_legacy_error_field.sse"))
    assert error_of(chunks).code == TRUNCATED


def test_openai_the_docs_bare_json_lines_are_not_sse() -> None:
    # The reference shows chunks without `data:`; as a body that is no event at all.
    assert error_of(OPENAI.translate(fixture("openai_text_docs_body.txt"))).code == TRUNCATED


def test_openai_openrouter_error_with_choices_and_finish_error_is_one_error_chunk() -> None:
    chunks = OPENAI.translate(fixture("openrouter_comment_and_midstream_error.sse"))
    assert chunks == [chunks[-1]]
    assert error_of(chunks) == ChunkError(STREAM_ERROR, "Provider disconnected unexpectedly")


# -- Anthropic's own: pings, which become heartbeats once the answer has begun ------


@pytest.mark.parametrize("name", ANTHROPIC.fixtures)
def test_anthropic_a_fixture_makes_empty_chunks_only_for_its_pings_after_the_first_token(
    name: str,
) -> None:
    data = fixture(name)
    chunks = run(ANTHROPIC.stream(), [data], heartbeats=True)
    beats = [i for i, c in enumerate(chunks) if is_empty(c)]
    assert len(beats) <= data.count(b"event: ping\n")
    first = next((i for i, c in enumerate(chunks) if not is_empty(c)), len(chunks))
    assert all(i > first for i in beats)  # the answer has begun before any heartbeat
    assert all(chunks[i].finish_reason == FinishReason.NONE for i in beats)


def test_anthropic_pings_through_a_long_silence_are_heartbeats_between_the_tokens() -> None:
    ping = {"type": "ping"}
    raw = body(
        message_start(), ping, text_block(0, "a"), ping, ping, message_delta("end_turn"), STOP
    )
    chunks = run(ANTHROPIC.stream(), [raw], heartbeats=True)
    shape = ["beat" if is_empty(c) else c.content or "end" for c in chunks]
    # The ping before the first token is not relayed: the answer has not begun.
    assert shape == ["a", "beat", "beat", "end"]
