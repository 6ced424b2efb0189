"""``backends.openai.whole.OpenAIWhole``: a whole ``chat.completion`` (what a
Chat Completions server answers ``stream: false``) into chunk frames: what
each choice's chunk carries, the finish chunks, usage, model, errors, and
any body at all ending in one terminal chunk. That every client API reads
the answer as it would have streamed is ``test_openai_whole_parity``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.json_api import INT32_MAX
from flatgate.proxy.backends.openai.adapter import FINISH_REASONS, OpenAIStream
from flatgate.proxy.backends.openai.whole import OpenAIWhole
from flatgate.proxy.wire.chunk.frames import ToolCallDelta, Usage
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.backends.helpers import (
    STREAM_MODEL,
    bytewise,
    error_of,
    final,
    fixture,
    merged,
    random_pieces,
    read_frames,
    run,
    terminals,
)
from tests.backends.test_openai_whole_parity import (
    DEEPSEEK,
    PARALLEL,
    PROTOCOL_ERROR,
    REASONING,
    REFUSAL,
    RID,
    STOP_SEQUENCE,
    TWO_CHOICES,
    as_stream,
    call,
    choice,
    completion,
    enc,
    streamed,
    whole,
)

# -- the frames ---------------------------------------------------------------------


def test_a_one_choice_answer_is_one_chunk_with_its_text_finish_and_usage() -> None:
    [only] = whole(fixture("openai_response_text.json"))
    assert only.content == "Hello! How can I assist you today?"
    assert only.finish_reason == FinishReason.STOP
    assert only.usage == Usage(19, 10, 0, 0)
    assert only.request_id == RID
    assert only.model == "gpt-5.4"


def test_a_long_answer_is_still_one_frame() -> None:
    text = "word " * 512
    chunks = whole(enc(completion(choice(content=text), usage={"completion_tokens": 512})))
    assert len(chunks) == 1
    assert chunks[0].content == text
    assert chunks[0].usage is not None and chunks[0].usage.completion_tokens == 512


def test_reasoning_content_and_calls_of_a_choice_come_in_one_chunk() -> None:
    doc = completion(
        choice(
            content="Let me look.",
            reasoning="Weather needs a tool.",
            tool_calls=[call("call_9", "get_weather", '{"city":"Oslo"}')],
            finish="tool_calls",
        )
    )
    [first] = whole(enc(doc))
    assert first.reasoning == "Weather needs a tool."
    assert first.content == "Let me look."
    assert first.tool_calls == (ToolCallDelta(0, "call_9", "get_weather", '{"city":"Oslo"}'),)
    assert first.finish_reason == FinishReason.TOOL_CALLS


def test_vllm_reasoning_and_deepseek_reasoning_content_are_reasoning() -> None:
    assert whole(enc(REASONING))[0].reasoning == "The user asks for a capital. "
    assert whole(enc(DEEPSEEK))[0].reasoning == "Six times seven."


def test_a_refusal_is_what_the_model_said() -> None:
    [said] = [c for c in whole(enc(REFUSAL)) if c.content]
    assert said.content == "I'm sorry, I can't help with that."


def test_the_tool_calls_keep_their_order_ids_and_whole_arguments() -> None:
    [first] = whole(enc(PARALLEL))
    assert first.tool_calls == (
        ToolCallDelta(0, "call_1", "get_weather", '{"city": "Paris"}'),
        ToolCallDelta(1, "call_2", "get_time", "{}"),
    )
    assert first.finish_reason == FinishReason.TOOL_CALLS


def test_a_call_without_arguments_or_function_gets_an_empty_object() -> None:
    doc = completion(choice(tool_calls=[{"id": "c1", "type": "function"}], finish="tool_calls"))
    assert whole(enc(doc))[0].tool_calls == (ToolCallDelta(0, "c1", "", "{}"),)


def test_an_empty_tool_call_list_is_no_call() -> None:
    doc = completion(choice(content="hi", tool_calls=[], finish="stop"))
    assert final(whole(enc(doc))).finish_reason == FinishReason.STOP


def test_length_after_tool_calls_stays_length() -> None:
    doc = completion(choice(tool_calls=[call("c", "f", '{"a":')], finish="length"))
    assert final(whole(enc(doc))).finish_reason == FinishReason.LENGTH


@pytest.mark.parametrize(("reason", "want"), sorted(FINISH_REASONS.items()))
def test_finish_reasons_map_as_a_streams(reason: str, want: FinishReason) -> None:
    doc = completion(choice(content="x", finish=reason))
    got = final(whole(enc(doc)))
    assert got.finish_reason == final(streamed(as_stream(doc))).finish_reason
    assert got.finish_reason == want


@pytest.mark.parametrize("reason", [None, "", "made_up"])
def test_a_missing_or_unknown_finish_reason_of_a_whole_answer_is_stop(reason: str | None) -> None:
    assert final(whole(enc(completion(choice(content="x", finish=reason))))).finish_reason == (
        FinishReason.STOP
    )


def test_vllms_stop_reason_string_is_the_stop_sequence_and_a_token_id_is_not() -> None:
    assert final(whole(enc(STOP_SEQUENCE))).stop_sequence == "three"
    by_token = completion({**choice(content="x"), "stop_reason": 151645})
    assert final(whole(enc(by_token))).stop_sequence == ""


def test_logprobs_ride_in_the_content_chunks_extras_as_the_server_sent_them() -> None:
    raw = b'{ "content" : [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}], "refusal": null }'  # noqa: E501
    body = (
        b'{"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", '
        b'"content": "Hi"}, "logprobs": ' + raw + b', "finish_reason": "stop"}]}'
    )
    [first] = whole(body)
    assert first.content == "Hi"
    assert first.extras_dialect == int(ApiDialect.OPENAI_CHAT)
    assert first.extras.encode() == b'{"logprobs":' + raw + b"}"


def test_null_logprobs_make_no_extras() -> None:
    assert not any(c.extras for c in whole(fixture("openai_response_text.json")))


def test_logprobs_without_text_still_come_back() -> None:
    lp = {"content": None, "refusal": [{"token": "No", "logprob": -1.0, "bytes": None}]}
    [first] = whole(enc(completion(choice(logprobs=lp))))
    assert first.content == "" and json.loads(first.extras) == {"logprobs": lp}


def test_cached_and_reasoning_tokens_come_from_the_details() -> None:
    assert final(whole(enc(REASONING))).usage == Usage(30, 12, 16, 8)


@pytest.mark.parametrize("usage", [None, {}], ids=["null", "empty"])
def test_no_usage_is_no_usage_and_empty_usage_is_zeros(usage: Any) -> None:
    got = final(whole(enc(completion(choice(content="x"), usage=usage))))
    assert got.usage == (None if usage is None else Usage(0, 0, 0, 0))


def test_counts_the_wire_cannot_carry_are_clamped() -> None:
    usage = {"prompt_tokens": -5, "completion_tokens": 1 << 40}
    got = final(whole(enc(completion(choice(content="x"), usage=usage))))
    assert got.usage == Usage(0, INT32_MAX, 0, 0)


def test_each_choice_gets_its_finish_and_the_last_carries_the_usage() -> None:
    chunks = whole(enc(TWO_CHOICES))
    ends = terminals(chunks)
    assert [(c.index, c.finish_reason) for c in ends] == [
        (0, FinishReason.STOP),
        (1, FinishReason.LENGTH),
    ]
    assert ends[0].usage is None and ends[1].usage == Usage(4, 9, 0, 0)
    assert chunks[-2:] == ends


def test_the_answers_model_names_the_chunks_else_the_configured_one() -> None:
    assert {c.model for c in whole(fixture("openai_response_tool_calls.json"))} == {"gpt-4o-mini"}
    doc = completion(choice(content="x"))
    del doc["model"]
    assert {c.model for c in whole(enc(doc), model="configured")} == {"configured"}


def test_unknown_keys_are_ignored() -> None:
    doc = completion(choice(content="x", annotations=[], audio=None), service_tier="default")
    doc["choices"][0] |= {"token_ids": None, "routed_experts": None}
    doc |= {"prompt_logprobs": None, "kv_transfer_params": None}
    assert whole(enc(doc))[0].content == "x"


def test_the_body_in_any_pieces_is_the_same_answer() -> None:
    body = enc(PARALLEL)
    want = whole(body)
    assert run(OpenAIWhole(RID, STREAM_MODEL), bytewise(body)) == want
    rng = random.Random(23)
    for _ in range(20):
        assert run(OpenAIWhole(RID, STREAM_MODEL), random_pieces(body, rng)) == want


def test_nothing_comes_before_the_end_and_nothing_after_it() -> None:
    t = OpenAIWhole(RID, STREAM_MODEL)
    assert t.feed(fixture("openai_response_text.json")) == b""
    assert not t.done
    assert len(read_frames(t.end())) == 1
    assert t.done
    assert t.feed(b"{}") == b"" and t.end() == b""


def test_a_body_that_streams_anyway_is_translated_as_the_stream() -> None:
    sse = as_stream(PARALLEL)
    assert run(OpenAIWhole(RID, STREAM_MODEL), [sse]) == streamed(sse)
    pieces = random_pieces(sse, random.Random(5))
    got = run(OpenAIWhole(RID, STREAM_MODEL), pieces)
    assert got == run(OpenAIStream(RID, STREAM_MODEL), pieces)
    assert merged(got) == merged(streamed(sse))


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": []}',
        b'{"object": "chat.completion"}',
        b'{"choices": [{"index": -1, "message": {"content": "x"}, "finish_reason": "stop"}]}',
        b'{"choices": [{"index": 4294967296, "finish_reason": "stop"}]}',
        b'{"choices": [{"index": 0, "message": {"content": 7}}]}',
        b'{"choices": [{"index": 0, "message": {"content": "cut',
        b'{"choices": [{"index": 0, "message": {"content": "\xff"}}]}',
    ],
    ids=["no-choices", "no-choices-key", "negative-index", "huge-index", "bad-type", "cut", "utf8"],
)
def test_a_body_that_is_no_chat_completion_is_one_protocol_error(body: bytes) -> None:
    err = error_of(whole(body))
    assert err.code == PROTOCOL_ERROR
    assert err.message.startswith("backend sent a bad answer")


def test_an_empty_body_is_an_error_not_silence() -> None:
    chunks = whole(b"")
    assert final(chunks).error is not None


# -- hostile answers ----------------------------------------------------------------

_numbers = st.sampled_from([0, 1, 2, -1, 1 << 31, -(1 << 40)])
_texts = st.none() | st.text(max_size=5)
_calls = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": _texts,
            "type": _texts,
            "function": st.none()
            | st.fixed_dictionaries({}, optional={"name": _texts, "arguments": _texts}),
        },
    ),
    max_size=3,
)
_messages = st.fixed_dictionaries(
    {},
    optional={
        "content": _texts,
        "refusal": _texts,
        "reasoning": _texts,
        "reasoning_content": _texts,
        "tool_calls": st.none() | _calls,
    },
)
_choices: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "index": _numbers,
        "message": st.none() | _messages,
        "finish_reason": st.none() | st.sampled_from(sorted(FINISH_REASONS)) | st.text(max_size=4),
        "stop_reason": st.none() | _numbers | st.text(max_size=3),
        "logprobs": st.none() | st.just({"content": [], "refusal": None}),
    },
)
_answers = st.fixed_dictionaries(
    {},
    optional={
        "model": _texts,
        "choices": st.none() | st.lists(_choices, max_size=3),
        "usage": st.none()
        | st.fixed_dictionaries(
            {}, optional={"prompt_tokens": _numbers, "completion_tokens": _numbers}
        ),
        "error": st.none() | st.text(max_size=3),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_answers, st.integers(0, 40))
def test_any_answer_ends_in_exactly_one_terminal_chunk(doc: dict[str, Any], cut: int) -> None:
    body = enc(doc)
    for data in (body, body[: len(body) - cut]):
        chunks = whole(data)
        ends = [c for c in chunks if c.error is not None or c.finish_reason == FinishReason.ERROR]
        if ends:
            assert chunks == ends  # an error is the whole answer
        else:
            indices = [c.index for c in terminals(chunks)]
            assert indices and len(indices) == len(set(indices))
            assert chunks[-len(indices) :] == terminals(chunks)
