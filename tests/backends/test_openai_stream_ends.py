"""``backends.openai.OpenAIStream``: how a Chat Completions stream ends.

Every stream must end in exactly one terminal chunk (a finish or an error),
however its body is cut into reads, and wherever it is cut short: a mid-stream
error, the end of the body with or without ``[DONE]``, a malformed or oversized
event, and hostile input (anything but frames or ``TranslatorError`` is a bug).
What a stream says on the way is ``test_openai_stream``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.backends.openai import FINISH_REASONS
from flatgate.proxy.wire.chunk.frames import ChunkError, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    OPENAI_RID,
    STREAM_ERROR,
    TRUNCATED,
    bytewise,
    chunk,
    content,
    data_events,
    error_of,
    final,
    fixture,
    openai_stream,
    random_pieces,
    read_frames,
    run,
    split,
    sse_fixtures,
    terminals,
    translate_openai,
)

RID = OPENAI_RID
FIXTURE_NAMES = sse_fixtures("openai")
stream = openai_stream
translate = translate_openai


# -- errors --------------------------------------------------------------------


def test_midstream_error_object_is_one_error_chunk() -> None:
    chunks = translate(fixture("openai_midstream_error.sse"))
    assert content(chunks) == "Hello"
    err = error_of(chunks)
    assert err == ChunkError(STREAM_ERROR, "synthetic fixture: upstream failed mid-stream")


def test_vllm_midstream_error_with_an_int_code_then_done_is_one_error_chunk() -> None:
    chunks = translate(fixture("vllm_midstream_error.sse"))
    assert content(chunks) == "Here"
    assert error_of(chunks) == ChunkError(STREAM_ERROR, "Internal server error")


def test_a_string_error_is_one_error_chunk() -> None:
    body = data_events(chunk(content="x"), {"error": "the model crashed"})
    assert error_of(translate(body)) == ChunkError(STREAM_ERROR, "the model crashed")


def test_an_error_without_a_message_is_named_by_its_type() -> None:
    body = data_events({"error": {"type": "server_error", "code": None}})
    assert error_of(translate(body)) == ChunkError(STREAM_ERROR, "server_error")


def test_openrouter_error_with_choices_and_finish_error_is_one_error_chunk() -> None:
    chunks = translate(fixture("openrouter_comment_and_midstream_error.sse"))
    assert chunks == [chunks[-1]]
    assert error_of(chunks) == ChunkError(STREAM_ERROR, "Provider disconnected unexpectedly")


def test_an_error_after_the_finish_but_before_done_is_the_one_terminal_chunk() -> None:
    body = data_events(chunk(content="x"), chunk(finish_reason="stop"), {"error": "late failure"})
    chunks = translate(body)
    assert error_of(chunks).message == "late failure"


def test_the_legacy_llamacpp_error_field_ends_in_one_truncation_chunk() -> None:
    # `error:` is not an SSE field flatgate reads: the stream is [DONE] alone.
    assert error_of(translate(fixture("llamacpp_legacy_error_field.sse"))).code == TRUNCATED


def test_error_chunks_carry_the_request_id() -> None:
    (only,) = translate(data_events({"error": "x"}))
    assert only.request_id == RID


# -- the end of the stream -------------------------------------------------------


def test_a_body_ending_without_a_finish_is_one_truncation_chunk() -> None:
    chunks = translate(fixture("vllm_text_excerpt.sse"))
    assert content(chunks) == "Here's a poem"
    assert error_of(chunks).code == TRUNCATED


def test_done_without_a_finish_is_one_truncation_chunk() -> None:
    chunks = translate(data_events(chunk(content="x")))
    assert error_of(chunks).code == TRUNCATED


@pytest.mark.parametrize("body", [b"", b": comment only\n\n", b"\n\n\n"])
def test_a_body_with_no_chunks_is_one_truncation_chunk(body: bytes) -> None:
    chunks = translate(body)
    assert len(chunks) == 1
    assert error_of(chunks).code == TRUNCATED


def test_a_non_streamed_json_answer_is_one_truncation_chunk_not_silence() -> None:
    # A server that ignored `stream: true` answers one JSON document.
    chunks = translate(fixture("openai_response_text.json"))
    assert len(chunks) == 1
    assert error_of(chunks).code == TRUNCATED


def test_a_body_ending_after_the_finish_without_done_is_a_normal_final_chunk() -> None:
    body = data_events(
        chunk(content="hi"),
        chunk(finish_reason="stop", usage={"prompt_tokens": 4, "completion_tokens": 1}),
        done=False,
    )
    last = final(translate(body))
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(4, 1)
    assert last.error is None


def test_done_without_a_trailing_blank_line_still_finishes() -> None:
    body = data_events(chunk(content="hi"), chunk(finish_reason="stop"), done=False)
    chunks = translate(body + b"data: [DONE]")
    assert final(chunks).finish_reason == FinishReason.STOP


def test_the_final_chunk_waits_for_done() -> None:
    s = stream()
    fed = read_frames(
        s.feed(data_events(chunk(content="a"), chunk(finish_reason="stop"), done=False))
    )
    assert [c.content for c in fed] == ["a"]
    assert not s.done
    tail = read_frames(s.feed(b"data: [DONE]\n\n"))
    assert s.done
    assert final(tail).finish_reason == FinishReason.STOP


def test_bytes_after_the_terminal_chunk_are_ignored() -> None:
    s = stream()
    body = fixture("openai_text.sse")
    chunks = read_frames(s.feed(body + b"data: {not json\n\n" + data_events(chunk(content="z"))))
    assert s.done
    assert final(chunks).finish_reason == FinishReason.STOP
    assert s.feed(b"data: {not json either\n\n") == b""
    assert s.feed(data_events(chunk(content="more"))) == b""
    assert s.end() == b""


def test_bytes_after_an_error_chunk_are_ignored() -> None:
    s = stream()
    read_frames(s.feed(data_events({"error": "boom"}, done=False)))
    assert s.done
    assert s.feed(data_events(chunk(content="more"), chunk(finish_reason="stop"))) == b""
    assert s.end() == b""


def test_end_after_a_final_chunk_writes_nothing() -> None:
    s = stream()
    s.feed(fixture("openai_text.sse"))
    assert s.done
    assert s.end() == b""


# -- malformed bodies ----------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [b"data: {not json}\n\n", b"data: 42\n\n", b'data: {"choices": "many"}\n\n', b"data:\n\n"],
    ids=["not-json", "a-number", "wrong-shape", "empty"],
)
def test_an_event_that_is_not_a_chunk_ends_the_stream_in_one_protocol_error(
    event: bytes,
) -> None:
    """The good events before it keep their frames; the bad one is the terminal chunk."""
    s = stream()
    chunks = run(s, [data_events(chunk(content="a"), done=False) + event], end=False)
    assert content(chunks) == "a"
    assert [c.error.code for c in terminals(chunks) if c.error] == ["backend_protocol_error"]
    assert s.done and s.end() == b""


def test_the_docs_bare_json_lines_are_not_sse() -> None:
    # The reference shows chunks without `data:`; as a body that is no event at all.
    chunks = translate(fixture("openai_text_docs_body.txt"))
    assert error_of(chunks).code == TRUNCATED


def test_an_oversized_event_ends_the_stream_in_one_protocol_error() -> None:
    s = stream()
    chunks = read_frames(s.feed(b"data: " + b"x" * (16 << 20)))
    assert [c.error.code for c in chunks if c.error] == ["backend_protocol_error"]
    assert s.done


# -- properties over every fixture ---------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_ends_in_exactly_one_terminal_chunk(name: str) -> None:
    s = stream()
    chunks = run(s, [fixture(name)])
    final(chunks)
    assert s.done


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
    body = fixture(name)
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=10), label="cuts")
    chunks = run(stream(), split(body, points))
    assert chunks == translate(body)
    final(chunks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FIXTURE_NAMES), data=st.data())
def test_a_body_cut_short_anywhere_ends_in_exactly_one_terminal_chunk(
    name: str, data: st.DataObject
) -> None:
    body = fixture(name)
    cut = data.draw(st.integers(0, len(body)), label="cut")
    s = stream()
    chunks = run(s, [body[:cut]])
    final(chunks)
    assert s.done


def test_a_body_cut_inside_an_event_is_one_truncation_chunk() -> None:
    body = data_events(chunk(content="Hello"), chunk(content=" world"), done=False)
    cut = body.index(b'" world"')
    chunks = translate(body[:cut])
    assert content(chunks) == "Hello"
    assert error_of(chunks).code == TRUNCATED


def test_a_body_cut_inside_done_is_one_truncation_chunk() -> None:
    body = data_events(chunk(content="Hello"), done=False) + b"data: [DO"
    chunks = translate(body)
    assert content(chunks) == "Hello"
    assert error_of(chunks).code == TRUNCATED


# -- hostile input: TranslatorError, or frames; never anything else --------------

# Mostly plausible values, sometimes ones the wire cannot carry (32-bit counts
# and indices) or text with a lone surrogate (invalid UTF-8 when written raw).
numbers = st.sampled_from([0, 0, 1, 7, -1, 1 << 31, -(1 << 40)])
texts = st.one_of(
    st.text(st.characters(categories=["Ll", "Lo", "Nd"]), max_size=6),
    st.text(st.characters(categories=["Ll", "Cs"]), min_size=1, max_size=3),
)
usages = st.fixed_dictionaries(
    {"prompt_tokens": numbers, "completion_tokens": numbers},
    optional={
        "prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": numbers}),
        "completion_tokens_details": st.fixed_dictionaries({"reasoning_tokens": numbers}),
    },
)


def one_choice(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


chunk_objects = st.one_of(
    st.builds(lambda i, t: one_choice(i, {"content": t}), numbers, texts),
    st.builds(lambda i, t: one_choice(i, {"reasoning_content": t}), numbers, texts),
    st.builds(
        lambda i, n, id_, name, args: one_choice(
            i,
            {
                "tool_calls": [
                    {"index": n, "id": id_, "function": {"name": name, "arguments": args}}
                ]
            },
        ),
        numbers,
        numbers,
        st.none() | texts,
        st.none() | texts,
        texts,
    ),
    st.builds(
        lambda i, r, u: {**one_choice(i, {}, r), "usage": u},
        numbers,
        st.sampled_from(sorted(FINISH_REASONS)) | texts,
        st.none() | usages,
    ),
    st.builds(lambda u: {"choices": [], "usage": u}, usages),
    st.builds(lambda t: {"error": {"message": t}}, texts),
)


def escaped(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


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
    assert terminals(chunks)[-1] is chunks[-1]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    objects=st.lists(chunk_objects, max_size=6),
    writer=st.sampled_from([escaped, raw_utf8]),
    done=st.booleans(),
    data=st.data(),
)
def test_any_chunks_give_frames_or_translator_error_and_nothing_else(
    objects: list[dict[str, Any]], writer: Any, done: bool, data: st.DataObject
) -> None:
    raw = b"".join(writer(o) for o in objects) + (b"data: [DONE]\n\n" if done else b"")
    check_hostile(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4), label="cuts"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=200), data=st.data())
def test_any_bytes_give_frames_or_translator_error_and_nothing_else(
    raw: bytes, data: st.DataObject
) -> None:
    check_hostile(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=4), label="cuts"))


def test_invalid_utf8_in_an_event_ends_the_stream_in_one_protocol_error() -> None:
    # a multi-byte character cut in half, as some servers have streamed
    body = b'data: {"choices":[{"index":0,"delta":{"content":"\xf0\x9f"}}]}\n\n'
    chunks = read_frames(stream().feed(body))
    assert [c.error.code for c in chunks if c.error] == ["backend_protocol_error"]


@pytest.mark.parametrize(
    "event",
    [
        chunk(content="x", index=1 << 31),
        chunk(finish_reason="stop", usage={"prompt_tokens": 1 << 31, "completion_tokens": 1}),
        chunk(
            finish_reason="stop",
            usage={
                "prompt_tokens": 1,
                "completion_tokens": 1,
                "prompt_tokens_details": {"cached_tokens": -(1 << 40)},
            },
        ),
    ],
    ids=["choice-index", "prompt-tokens", "cached-tokens"],
)
def test_numbers_the_wire_cannot_carry_are_refused_not_crashed_on(event: dict[str, Any]) -> None:
    try:
        chunks = translate(data_events(event))
    except TranslatorError:
        return
    final(chunks)
