"""``backends.openai.OpenAIStream``: Chat Completions SSE into chunk frames.

The fixtures are the providers' documented streams and real captures (see
``fixtures/SOURCES.md``); the quirks no fixture shows are written inline with
``helpers.chunk``. Every stream must end in exactly one terminal chunk (a
finish or an error), however its body is cut into reads, and wherever it is
cut short.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.backends.config import BackendConfig
from flatgate.proxy.backends.openai import FINISH_REASONS, OpenAIAdapter, OpenAIStream
from flatgate.proxy.wire.frames import Chunk, ChunkError, Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    STREAM_ERROR,
    TRUNCATED,
    bytewise,
    calls,
    chunk,
    content,
    data_events,
    error_of,
    final,
    fixture,
    is_empty,
    random_pieces,
    read_frames,
    reasoning,
    run,
    split,
    sse_fixtures,
    terminals,
)

RID = "req-42"
MODEL = "configured-model"
FIXTURE_NAMES = sse_fixtures("openai")


def stream() -> OpenAIStream:
    return OpenAIStream(RID, MODEL)


def translate(data: bytes) -> list[Chunk]:
    return run(stream(), [data])


def call(
    index: int = 0, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> dict[str, Any]:
    """One ``delta.tool_calls[]`` fragment, with only the keys given (as the wire omits)."""
    out: dict[str, Any] = {"index": index}
    if id is not None:
        out["id"] = id
        out["type"] = "function"
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    if fn:
        out["function"] = fn
    return out


# -- text ----------------------------------------------------------------------


def test_plain_text_stream_is_content_then_one_stop_chunk() -> None:
    chunks = translate(fixture("openai_text.sse"))
    # the role chunk ("content": "") writes nothing
    assert [c.content for c in chunks] == ["Hello", ""]
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage is None
    assert last.error is None


def test_every_chunk_carries_the_request_id_and_the_backends_model() -> None:
    chunks = translate(fixture("openai_text.sse"))
    assert {c.request_id for c in chunks} == {RID}
    assert {c.model for c in chunks} == {"gpt-4o-mini"}


def test_the_configured_model_names_chunks_when_the_backend_sends_none() -> None:
    body = data_events(
        {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
    assert {c.model for c in translate(body)} == {MODEL}


def test_the_adapter_names_its_configured_model_over_the_routed_one() -> None:
    adapter = OpenAIAdapter(
        BackendConfig(name="b", url="http://h/v1", protocol="openai", model="served-name")
    )
    body = data_events({"choices": [{"delta": {"content": "x"}, "finish_reason": "stop"}]})
    assert {c.model for c in run(adapter.translator(RID, "routed"), [body])} == {"served-name"}


def test_obfuscation_and_other_unknown_keys_are_ignored() -> None:
    assert translate(fixture("openai_text_obfuscation.sse")) == translate(
        fixture("openai_text.sse")
    )


def test_llamacpp_timings_and_null_content_opener_are_ignored() -> None:
    chunks = translate(fixture("llamacpp_stream_timings.sse"))
    assert content(chunks) == "Hello!"
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(75, 31)
    assert last.model == "google/gemma-3-1b-it-qat-q4_0"


def test_crlf_stream_translates_like_lf() -> None:
    assert translate(fixture("openai_text_crlf.sse")) == translate(fixture("openai_text.sse"))


def test_repeated_role_on_every_delta_is_ignored() -> None:
    chunks = translate(fixture("ollama_2024_empty_finish_reason_excerpt.sse"))
    assert content(chunks) == " Hello there! I'"
    assert not [c for c in chunks if is_empty(c)]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_no_fixture_makes_an_empty_chunk(name: str) -> None:
    assert not [c for c in translate(fixture(name)) if is_empty(c)]


def test_each_feed_returns_whole_frames_only() -> None:
    s = stream()
    for piece in bytewise(fixture("openai_usage.sse")):
        read_frames(s.feed(piece))  # asserts nothing is left over
    read_frames(s.end())


# -- usage ---------------------------------------------------------------------


def test_usage_on_a_chunk_with_empty_choices_goes_on_the_final_chunk() -> None:
    chunks = translate(fixture("openai_usage.sse"))
    assert content(chunks) == "Hello! How can I assist you today?"
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(19, 10, 0, 0)
    assert [c for c in chunks if c.usage is not None] == [last]


@pytest.mark.parametrize(
    "usage_chunk",
    [
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        {"choices": None, "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        {"usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ],
    ids=["empty", "null", "absent"],
)
def test_usage_on_a_usage_only_chunk_whatever_its_choices(usage_chunk: dict[str, Any]) -> None:
    body = data_events(chunk(content="hi"), chunk(finish_reason="stop"), usage_chunk)
    assert final(translate(body)).usage == Usage(3, 2)


def test_usage_on_the_finish_chunk() -> None:
    chunks = translate(fixture("deepseek_reasoning.sse"))
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(10, 40, 0, 38)


def test_ollama_usage_on_a_copy_of_the_finish_chunk() -> None:
    chunks = translate(fixture("ollama_stream_usage.sse"))
    assert content(chunks) == "Hello!"
    assert final(chunks).usage == Usage(26, 2)


def test_the_last_non_null_usage_wins() -> None:
    body = data_events(
        chunk(content="a", usage={"prompt_tokens": 1, "completion_tokens": 1}),
        chunk(finish_reason="stop", usage={"prompt_tokens": 5, "completion_tokens": 4}),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}},
        {"choices": [], "usage": None},
    )
    assert final(translate(body)).usage == Usage(5, 6)


def test_null_usage_on_every_chunk_means_no_usage() -> None:
    body = data_events(
        {**chunk(content="a"), "usage": None},
        {**chunk(finish_reason="stop"), "usage": None},
    )
    assert final(translate(body)).usage is None


def test_cached_and_reasoning_tokens_come_from_the_details() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 30, "audio_tokens": 0},
    }
    body = data_events(
        chunk(content="a"), chunk(finish_reason="stop"), {"choices": [], "usage": usage}
    )
    assert final(translate(body)).usage == Usage(100, 50, 64, 30)


def test_null_usage_details_and_counts_read_as_zero() -> None:
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": None,
        "prompt_tokens_details": None,
        "completion_tokens_details": {"reasoning_tokens": None},
    }
    body = data_events(chunk(finish_reason="stop", usage=usage))
    assert final(translate(body)).usage == Usage(7, 0, 0, 0)


# -- reasoning -----------------------------------------------------------------


def test_vllm_reasoning_field_is_reasoning() -> None:
    chunks = translate(fixture("vllm_reasoning.sse"))
    assert reasoning(chunks) == "9.11 vs 9.8: compare tenths, 8 > 1."
    assert content(chunks) == "9.8 is greater."
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(18, 22)


def test_deepseek_reasoning_content_field_is_reasoning() -> None:
    chunks = translate(fixture("deepseek_reasoning.sse"))
    assert reasoning(chunks) == "打招呼\uff0c"  # the last is a fullwidth comma
    assert content(chunks) == "你好"


def test_keep_alive_comments_change_nothing() -> None:
    assert translate(fixture("deepseek_keepalive_prefix.sse")) == translate(
        fixture("deepseek_reasoning.sse")
    )


def test_reasoning_before_content_keeps_its_order() -> None:
    chunks = translate(fixture("deepseek_reasoning.sse"))
    kinds = ["r" if c.reasoning else "c" for c in chunks if c.reasoning or c.content]
    assert kinds == ["r", "r", "c"]


def test_data_lines_without_a_space_and_reasoning_content() -> None:
    chunks = translate(fixture("compat_data_nospace_reasoning_excerpt.sse"))
    assert reasoning(chunks) == " bit of em"
    assert {c.model for c in chunks if c.reasoning} == {"deepseek-r1"}


# -- tool calls ----------------------------------------------------------------


def test_streamed_tool_call_has_id_and_name_once_and_its_arguments_joined() -> None:
    chunks = translate(fixture("openai_tool_calls.sse"))
    assert calls(chunks) == {
        0: {
            "ids": ["call_DdmO9pD3xa9XTPNJ32zg2hcA"],
            "names": ["get_weather"],
            "arguments": '{"location":"Paris, France"}',
        }
    }
    # the first fragment names the call; the others carry argument text only
    first = chunks[0].tool_calls[0]
    assert (first.index, first.id, first.name) == (
        0,
        "call_DdmO9pD3xa9XTPNJ32zg2hcA",
        "get_weather",
    )
    assert all(not d.id and not d.name for c in chunks[1:] for d in c.tool_calls)
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_tool_call_arguments_are_the_documented_deltas_joined() -> None:
    deltas = [
        json.loads(line)
        for line in fixture("openai_tool_calls_docs_deltas.txt").splitlines()
        if line.strip()
    ]
    documented = "".join(d[0]["function"]["arguments"] for d in deltas if d)
    assert calls(translate(fixture("openai_tool_calls.sse")))[0]["arguments"] == documented


def test_wire_fragments_without_id_or_name_keys_append_arguments() -> None:
    # Three real gpt-4o fragments from the middle of a call: no id, type or name keys.
    chunks = translate(fixture("openai_tool_calls_wire_excerpt.sse"))
    assert calls(chunks)[0]["arguments"] == '":"2023'
    assert error_of(chunks).code == TRUNCATED  # the excerpt stops before its finish


def test_parallel_tool_calls_keep_their_indices() -> None:
    chunks = translate(fixture("openai_parallel_tool_calls.sse"))
    got = calls(chunks)
    assert got[0] == {
        "ids": ["call_aaaaaaaaaaaaaaaaaaaaaaaa"],
        "names": ["get_weather"],
        "arguments": '{"location": "Paris"}',
    }
    assert got[1]["ids"] == ["call_bbbbbbbbbbbbbbbbbbbbbbbb"]
    assert got[1]["names"] == ["get_time"]
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_a_tool_call_with_no_arguments_gets_an_empty_object_before_the_finish() -> None:
    chunks = translate(fixture("openai_parallel_tool_calls.sse"))
    assert calls(chunks)[1]["arguments"] == "{}"
    braces = [i for i, c in enumerate(chunks) for d in c.tool_calls if d.arguments == "{}"]
    assert braces == [len(chunks) - 2]  # right before the finish chunk


def test_a_tool_call_with_no_arguments_at_the_end_of_the_body_gets_an_empty_object() -> None:
    body = data_events(
        chunk(tool_calls=[call(0, "call_1", "now", "")]),
        chunk(finish_reason="tool_calls"),
        done=False,
    )
    chunks = translate(body)
    assert calls(chunks)[0]["arguments"] == "{}"
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_a_whole_tool_call_in_one_delta() -> None:
    chunks = translate(fixture("ollama_stream_tool_call.sse"))
    assert len(chunks) == 2
    (only,) = chunks[0].tool_calls
    assert (only.index, only.id, only.name, only.arguments) == (
        0,
        "call_k3pb4j2q",
        "get_weather",
        '{"city":"Paris"}',
    )
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_repeated_id_and_name_on_every_fragment_are_ignored() -> None:
    body = data_events(
        chunk(tool_calls=[call(0, "call_1", "lookup", "")]),
        chunk(tool_calls=[call(0, "call_1", "lookup", '{"q":')]),
        chunk(tool_calls=[call(0, "call_1", "lookup", '"x"}')]),
        chunk(finish_reason="tool_calls"),
    )
    assert calls(translate(body)) == {
        0: {"ids": ["call_1"], "names": ["lookup"], "arguments": '{"q":"x"}'}
    }


def test_calls_all_sent_as_index_0_with_new_ids_are_separate_calls() -> None:
    body = data_events(
        chunk(tool_calls=[call(0, "call_a", "first", '{"n":')]),
        chunk(tool_calls=[call(0, arguments="1}")]),
        chunk(tool_calls=[call(0, "call_b", "second", '{"n":')]),
        chunk(tool_calls=[call(0, arguments="2}")]),
        chunk(tool_calls=[call(0, "call_c", "third")]),
        chunk(finish_reason="tool_calls"),
    )
    assert calls(translate(body)) == {
        0: {"ids": ["call_a"], "names": ["first"], "arguments": '{"n":1}'},
        1: {"ids": ["call_b"], "names": ["second"], "arguments": '{"n":2}'},
        2: {"ids": ["call_c"], "names": ["third"], "arguments": "{}"},
    }


def test_two_calls_in_one_delta() -> None:
    body = data_events(
        chunk(tool_calls=[call(0, "call_a", "f", "{}"), call(1, "call_b", "g", '{"x":1}')]),
        chunk(finish_reason="tool_calls"),
    )
    got = calls(translate(body))
    assert got[0]["arguments"] == "{}"
    assert got[1] == {"ids": ["call_b"], "names": ["g"], "arguments": '{"x":1}'}


def test_content_and_tool_calls_in_one_stream() -> None:
    body = data_events(
        chunk(content="Let me look."),
        chunk(tool_calls=[call(0, "call_1", "search", '{"q":"x"}')]),
        chunk(finish_reason="tool_calls"),
    )
    chunks = translate(body)
    assert content(chunks) == "Let me look."
    assert calls(chunks)[0]["arguments"] == '{"q":"x"}'


# -- finish reasons ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "want"),
    [
        ("stop", FinishReason.STOP),
        ("eos", FinishReason.STOP),
        ("eos_token", FinishReason.STOP),
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("insufficient_system_resource", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("max_tokens", FinishReason.LENGTH),
        ("model_length", FinishReason.LENGTH),
        ("tool_calls", FinishReason.TOOL_CALLS),
        ("function_call", FinishReason.TOOL_CALLS),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("something_new", FinishReason.STOP),
        ("STOP", FinishReason.STOP),
    ],
)
def test_finish_reason_mapping(reason: str, want: FinishReason) -> None:
    chunks = translate(data_events(chunk(content="x"), chunk(finish_reason=reason)))
    last = final(chunks)
    assert last.finish_reason == want
    assert last.error is None


@pytest.mark.parametrize("reason", ["error", "network_error", "abort"])
def test_an_error_finish_reason_is_one_error_chunk(reason: str) -> None:
    chunks = translate(data_events(chunk(content="x"), chunk(finish_reason=reason)))
    err = error_of(chunks)
    assert err.code == STREAM_ERROR
    assert reason in err.message


def test_the_finish_reason_table_has_every_documented_value() -> None:
    for name in ("stop", "length", "tool_calls", "content_filter", "function_call"):
        assert name in FINISH_REASONS


@pytest.mark.parametrize("not_yet", ["", None])
def test_an_empty_or_null_finish_reason_means_not_yet(not_yet: str | None) -> None:
    body = data_events(
        chunk(content="a", finish_reason=not_yet),
        chunk(content="b", finish_reason=not_yet),
        chunk(finish_reason="stop"),
    )
    chunks = translate(body)
    assert content(chunks) == "ab"
    assert final(chunks).finish_reason == FinishReason.STOP


def test_an_absent_finish_reason_key_means_not_yet() -> None:
    body = data_events(
        {"choices": [{"index": 0, "delta": {"content": "a"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    )
    assert final(translate(body)).finish_reason == FinishReason.LENGTH


def test_empty_finish_reasons_then_the_end_of_the_body_is_truncation() -> None:
    chunks = translate(fixture("ollama_2024_empty_finish_reason_excerpt.sse"))
    assert error_of(chunks).code == TRUNCATED


@pytest.mark.parametrize("reason", ["stop", "something_new", "eos"])
def test_stop_after_tool_deltas_is_tool_calls(reason: str) -> None:
    body = data_events(
        chunk(tool_calls=[call(0, "call_1", "f", "{}")]), chunk(finish_reason=reason)
    )
    assert final(translate(body)).finish_reason == FinishReason.TOOL_CALLS


def test_length_after_tool_deltas_stays_length() -> None:
    body = data_events(
        chunk(tool_calls=[call(0, "call_1", "f", '{"a":')]), chunk(finish_reason="length")
    )
    assert final(translate(body)).finish_reason == FinishReason.LENGTH


def test_two_choices_each_get_their_finish_and_the_last_carries_the_usage() -> None:
    body = data_events(
        chunk(content="a", index=0),
        chunk(content="b", index=1),
        chunk(finish_reason="stop", index=0),
        chunk(finish_reason="length", index=1),
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}},
    )
    chunks = translate(body)
    assert content(chunks, 0) == "a"
    assert content(chunks, 1) == "b"
    ends = terminals(chunks)
    assert [(c.index, c.finish_reason) for c in ends] == [
        (0, FinishReason.STOP),
        (1, FinishReason.LENGTH),
    ]
    assert [c.usage for c in ends] == [None, Usage(2, 2)]
    assert chunks[-1] is ends[-1]


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
