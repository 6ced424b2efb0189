"""``backends.openai.stream.OpenAIStream``: Chat Completions SSE into chunk frames,
what a stream says: its text, usage, reasoning, tool calls and finish reasons.

The fixtures are the providers' documented streams and real captures (see
``fixtures/SOURCES.md``); the quirks no fixture shows are written inline with
``helpers.chunk``. How a stream ends (errors, truncation, malformed and hostile
bodies, any cut into reads) is ``test_stream_ends``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.backends.openai.adapter import FINISH_REASONS, OpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.schema import FinishReason
from tests.backends.helpers import (
    OPENAI_RID,
    STREAM_ERROR,
    STREAM_MODEL,
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
    openai_stream,
    read_frames,
    reasoning,
    run,
    sse_fixtures,
    terminals,
    translate_openai,
)

RID = OPENAI_RID
MODEL = STREAM_MODEL
FIXTURE_NAMES = sse_fixtures("openai")
stream = openai_stream
translate = translate_openai


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
        OpenAIConfig(name="b", url="http://h/v1", protocol="openai", model="served-name")
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
    data = fixture("ollama_2024_empty_finish_reason_excerpt.sse")
    chunks = run(stream(), [data], heartbeats=True)
    assert content(chunks) == " Hello there! I'"
    assert not [c for c in chunks if is_empty(c)]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_no_fixture_makes_an_empty_chunk(name: str) -> None:
    assert not [c for c in run(stream(), [fixture(name)], heartbeats=True) if is_empty(c)]


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


def test_a_refusal_is_what_the_model_said() -> None:
    # Structured outputs: the model refuses in ``delta.refusal``, not content.
    refused = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "refusal": ""}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "I'm sorry, "}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "I can't."}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    chunks = translate(data_events(*refused))
    assert content(chunks) == "I'm sorry, I can't."
    assert final(chunks).finish_reason == FinishReason.STOP


def test_a_refusals_logprobs_ride_with_its_text() -> None:
    lp = {"content": None, "refusal": [{"token": "No", "logprob": -0.1, "bytes": [78, 111]}]}
    delta = {"index": 0, "delta": {"refusal": "No"}, "logprobs": lp}
    chunks = translate(
        data_events(
            {"choices": [delta]}, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        )
    )
    [carrying] = [c for c in chunks if c.extras]
    assert carrying.content == "No"
    assert json.loads(carrying.extras) == {"logprobs": lp}
    assert content(chunks) == "No"


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
