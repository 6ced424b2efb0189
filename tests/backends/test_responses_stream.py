"""``backends.responses.stream.ResponsesStream``: Responses API events
into chunk frames, what a stream says: text, reasoning and its reasoning
parts, function calls, hosted tools' items, usage and how it finished.

The fixtures (``fixtures/responses/``) are OpenAI's documented events and a
vLLM capture (see ``fixtures/SOURCES.md``); what no fixture shows is written
with ``responses_events``. How a stream ends (errors, truncation, malformed
and hostile bodies, any cut into reads) is ``test_stream_ends``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.backends import responses_events as rev
from tests.backends.helpers import (
    RESPONSES_RID,
    STREAM_MODEL,
    TRUNCATED,
    calls,
    content,
    error_of,
    final,
    fixture,
    is_empty,
    reasoning,
    responses_stream,
    run,
    translate_responses,
)

translate = translate_responses
OPENAI_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)


def parts(chunks: list[Chunk]) -> list[ReasoningPart]:
    return [c.reasoning_part for c in chunks if c.reasoning_part is not None]


def documented(name: str, kind: str) -> dict[str, Any]:
    """The first event of type ``kind`` in a fixture."""
    for line in fixture(name).split(b"\n"):
        if line.startswith(b"data: "):
            event: dict[str, Any] = json.loads(line[6:])
            if event["type"] == kind:
                return event
    raise AssertionError(f"{name} has no {kind}")


# -- text ----------------------------------------------------------------------


def test_the_documented_events_are_content_then_one_stop_with_usage() -> None:
    chunks = translate(fixture("responses/openai_text.sse"))
    done = documented("responses/openai_text.sse", "response.output_item.done")
    assert content(chunks) == done["item"]["content"][0]["text"]
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(0, 0)
    # the model the server names in response.created, on every chunk
    assert {c.model for c in chunks} == {"gpt-4o-2024-08-06"}
    assert {c.request_id for c in chunks} == {RESPONSES_RID}


def test_the_docs_streaming_example_is_its_deltas_not_its_done_text() -> None:
    # The reference elides the deltas after "Hi" (`...`); output_text.done and
    # output_item.done carry the whole text, which must not be sent twice.
    chunks = translate(fixture("responses/openai_text_docs_elided.sse"))
    assert content(chunks) == "Hi"
    assert final(chunks).usage == Usage(37, 11)


def test_a_message_sent_whole_without_deltas_is_its_text() -> None:
    item = {"id": "m", "type": "message", "content": [{"type": "output_text", "text": "Hi all"}]}
    chunks = translate(rev.events(rev.created(), rev.item_done(0, item), rev.completed()))
    assert content(chunks) == "Hi all"


def test_a_message_sent_whole_keeps_its_parts_logprobs() -> None:
    tokens: list[dict[str, Any]] = [
        {"token": t, "logprob": -0.25, "top_logprobs": []} for t in ("Hi", " all")
    ]
    parts = [
        {"type": "output_text", "text": "Hi", "logprobs": tokens[:1]},
        {"type": "output_text", "text": " all", "logprobs": tokens[1:]},
    ]
    item = {"id": "m", "type": "message", "content": parts}
    chunks = translate(rev.events(rev.created(), rev.item_done(0, item), rev.completed()))
    (said,) = [c for c in chunks if c.content]
    assert said.content == "Hi all"
    assert said.extras_dialect == int(ApiDialect.OPENAI_CHAT)
    assert json.loads(said.extras) == {"logprobs": {"content": tokens}}


def test_a_refusal_is_content() -> None:
    chunks = translate(fixture("responses/openai_refusal.sse"))
    assert content(chunks) == "refusal text so far"
    assert final(chunks).finish_reason == FinishReason.STOP


# -- how it finished -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("max_output_tokens", FinishReason.LENGTH),
        ("max_tokens", FinishReason.LENGTH),  # the reference's own example says this
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("something_new", FinishReason.LENGTH),
    ],
)
def test_incomplete_reasons(reason: str, finish: FinishReason) -> None:
    chunks = translate(rev.events(rev.message(0, "cut"), rev.incomplete(reason)))
    assert content(chunks) == "cut"
    assert final(chunks).finish_reason == finish


def test_the_documented_incomplete_event_is_a_length_finish() -> None:
    last = final(translate(fixture("responses/openai_incomplete.sse")))
    assert last.finish_reason == FinishReason.LENGTH
    assert last.usage is None  # the example's usage is null


def test_a_completed_event_whose_response_is_incomplete_is_a_length_finish() -> None:
    # llmock sends response.completed with status "incomplete".
    event = rev.completed()
    event["response"]["status"] = "incomplete"
    event["response"]["incomplete_details"] = {"reason": "max_output_tokens"}
    last = final(translate(rev.events(rev.message(0, "a"), event)))
    assert last.finish_reason == FinishReason.LENGTH


def test_usage_carries_cached_and_reasoning_tokens() -> None:
    chunks = translate(fixture("responses/openai_reasoning.sse"))
    assert final(chunks).usage == Usage(81, 1035, 64, 832)


def test_usage_carries_cache_writes() -> None:
    # The web search example's usage names cache_write_tokens (0 there).
    assert final(translate(fixture("responses/openai_web_search.sse"))).usage == Usage(328, 356)
    event = rev.completed(input_tokens=50, output_tokens=3, cached=10)
    event["response"]["usage"]["input_tokens_details"]["cache_write_tokens"] = 40
    last = final(translate(rev.events(rev.message(0, "a"), event)))
    assert last.usage == Usage(50, 3, 10, 0, 40)


# -- reasoning -------------------------------------------------------------------


def test_documented_reasoning_summary_is_reasoning_then_one_reasoning_part() -> None:
    chunks = translate(fixture("responses/openai_reasoning.sse"))
    first = (
        '**Responding to a greeting**\n\nThe user just said, "Hello!" So, it seems I need '
        "to engage."
    )
    second = "**Offering help**\n\nI'll reply warmly and ask what they need."
    said = reasoning(chunks)
    assert said.startswith(first)
    # a blank line between the item's two summary parts
    assert said.endswith("\n\n" + second)
    _, part = parts(chunks)
    assert part.text == said
    assert part.id == "rs_6806bfca0b2481918a5748308061a2600d3ce51bdffd5476"
    # Its id came first, alone, as the item was added: the client's item has it from the start.
    assert chunks[0].reasoning_part == ReasoningPart(dialect=OPENAI_RESPONSES, id=part.id)
    assert part.dialect == OPENAI_RESPONSES
    assert part.opaque.decode().startswith("gAAAAAB")
    assert not part.redacted
    # the part comes when the item is done: after its text, before the answer
    at = next(i for i, c in enumerate(chunks) if c.reasoning_part is not None)
    assert all(c.reasoning for c in chunks[:at])
    assert content(chunks[at:]) == "Hello! How can I assist you today?"


def test_a_reasoning_item_without_summary_deltas_sends_its_text_first() -> None:
    item = rev.reasoning_item("rs_1", "one", "two", encrypted="ENC")
    chunks = translate(rev.events(rev.item_done(0, item), rev.message(1, "ok"), rev.completed()))
    assert reasoning(chunks) == "one\n\ntwo"
    assert parts(chunks) == [ReasoningPart("one\n\ntwo", b"ENC", OPENAI_RESPONSES, "rs_1")]


def test_an_encrypted_item_without_summary_is_a_part_with_no_text() -> None:
    item = rev.reasoning_item("rs_2", encrypted="gAAAA==")
    chunks = translate(rev.events(rev.item_done(0, item), rev.message(1, "ok"), rev.completed()))
    assert reasoning(chunks) == ""
    assert parts(chunks) == [ReasoningPart("", b"gAAAA==", OPENAI_RESPONSES, "rs_2")]


def test_vllm_reasoning_text_under_a_shifted_output_index_is_not_sent_twice() -> None:
    # vLLM sent the delta at output_index 7 and the item's done at 8.
    chunks = translate(fixture("responses/vllm_reasoning_excerpt.sse"))
    assert reasoning(chunks) == "748"
    assert parts(chunks) == [
        ReasoningPart("977966748", b"", OPENAI_RESPONSES, "msg_b9691461a75ddddf")
    ]
    assert error_of(chunks).code == TRUNCATED  # an excerpt: no terminal event


def test_reasoning_text_deltas_are_reasoning() -> None:
    delta = {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "hmm"}
    chunks = translate(rev.events(delta, rev.message(1, "ok"), rev.completed()))
    assert reasoning(chunks) == "hmm"


# -- function calls -------------------------------------------------------------


def test_documented_function_call_is_one_call_with_its_arguments() -> None:
    chunks = translate(fixture("responses/openai_function_call.sse"))
    assert calls(chunks) == {
        0: {
            "ids": ["call_unLAR8MvFNptuiZK6K6HCy5k"],
            "names": ["get_current_weather"],
            "arguments": '{"location":"Boston, MA","unit":"celsius"}',
        }
    }
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_two_calls_get_our_indices_in_order() -> None:
    chunks = translate(
        rev.events(
            rev.message(0, "Two lookups."),
            rev.function_call(1, "call_a", "weather", '{"city":', ' "Paris"}'),
            rev.function_call(2, "call_b", "time", '{"tz": "CET"}'),
            rev.completed(),
        )
    )
    assert calls(chunks) == {
        0: {"ids": ["call_a"], "names": ["weather"], "arguments": '{"city": "Paris"}'},
        1: {"ids": ["call_b"], "names": ["time"], "arguments": '{"tz": "CET"}'},
    }
    assert content(chunks) == "Two lookups."


def test_arguments_sent_only_whole_arrive_once() -> None:
    whole = '{"q": 1}'
    done = {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": whole}
    chunks = translate(
        rev.events(
            rev.item_added(0, rev.call_item("c1", "f")),
            done,
            rev.item_done(0, rev.call_item("c1", "f", whole)),
            rev.completed(),
        )
    )
    assert calls(chunks)[0]["arguments"] == whole


def test_a_call_with_no_arguments_gets_an_empty_object() -> None:
    chunks = translate(rev.events(rev.function_call(0, "c1", "now"), rev.completed()))
    assert calls(chunks)[0]["arguments"] == "{}"


def test_a_call_seen_only_at_its_done_is_started_then() -> None:
    chunks = translate(
        rev.events(rev.item_done(0, rev.call_item("c9", "f", '{"a": 2}')), rev.completed())
    )
    assert calls(chunks) == {0: {"ids": ["c9"], "names": ["f"], "arguments": '{"a": 2}'}}
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_the_call_start_carries_the_call_id_not_the_item_id() -> None:
    chunks = translate(rev.events(rev.function_call(0, "call_x", "f", "{}"), rev.completed()))
    start = next(c for c in chunks if c.tool_calls)
    assert start.tool_calls == (ToolCallDelta(0, "call_x", "f", ""),)


# -- hosted tools ------------------------------------------------------------------


def test_a_hosted_tools_item_is_relayed_in_extras_as_sent() -> None:
    raw = fixture("responses/openai_web_search.sse")
    chunks = translate(raw)
    (relayed,) = [c for c in chunks if c.extras]
    assert relayed.extras_dialect == OPENAI_RESPONSES
    assert json.loads(relayed.extras) == {
        "output_item": {
            "type": "web_search_call",
            "id": "ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c",
            "status": "completed",
        }
    }
    assert content(chunks) == "As of today, March 9, 2025, one notable positive news story..."
    # a hosted tool's call is not a function call
    assert final(chunks).finish_reason == FinishReason.STOP


def test_a_hosted_tool_at_work_is_a_heartbeat_once_the_answer_has_begun() -> None:
    searching = {"type": "response.web_search_call.searching", "output_index": 1}
    raw = rev.events(
        searching,  # before anything was said: not relayed
        rev.message(0, "Let me look.", done=False),
        searching,
        {"type": "response.web_search_call.in_progress", "output_index": 1},
        rev.completed(),
    )
    chunks = run(responses_stream(), [raw], heartbeats=True)
    shape = ["beat" if is_empty(c) else c.content or "end" for c in chunks]
    assert shape == ["Let me look.", "beat", "beat", "end"]


def test_unknown_events_and_done_marker_are_ignored() -> None:
    noisy = rev.events(
        rev.created(),
        {"type": "response.future_event", "x": 1},
        rev.message(0, "hi"),
        {"type": "response.output_text.annotation.added", "annotation": {}},
        rev.completed(),
    )
    plain = rev.events(rev.created(), rev.message(0, "hi"), rev.completed())
    assert translate(noisy + b"data: [DONE]\n\n") == translate(plain)


def test_without_a_created_event_the_configured_model_is_named() -> None:
    chunks = translate(rev.events(rev.message(0, "hi"), rev.completed()))
    assert {c.model for c in chunks} == {STREAM_MODEL}
