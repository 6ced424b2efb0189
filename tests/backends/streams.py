"""The streaming adapters (OpenAI Chat Completions, Anthropic Messages, OpenAI
Responses), described alike so that one test of how a stream ends runs over
each.

Each ``StreamAdapter`` says how to start its stream, how to write an answer in
its backend's SSE (text, then a finish reason; the end marker apart), its word
for a natural stop, its fixtures, and the hostile bodies
hypothesis writes for it. Pure: no I/O beyond reading fixtures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from flatgate.proxy.backends.anthropic.adapter import STOP_REASONS
from flatgate.proxy.backends.base import Translator
from flatgate.proxy.backends.openai.adapter import FINISH_REASONS
from flatgate.proxy.backends.responses.stream import INCOMPLETE_REASONS
from flatgate.proxy.wire.chunk.frames import Chunk
from tests.backends import responses_events as rev
from tests.backends.helpers import (
    ANTHROPIC_RID,
    OPENAI_RID,
    RESPONSES_RID,
    STOP,
    anthropic_stream,
    body,
    chunk,
    data_events,
    fixture,
    message_delta,
    message_start,
    named_events,
    openai_stream,
    responses_fixtures,
    responses_stream,
    run,
    sse_fixtures,
    text_block,
)

__all__ = ["ADAPTERS", "ANTHROPIC", "OPENAI", "RESPONSES", "StreamAdapter"]


@dataclass(frozen=True)
class StreamAdapter:
    name: str
    stream: Callable[[], Translator]
    request_id: str
    fixtures: list[str]
    # An answer of these texts, then (if given) a finish reason; no end marker.
    answer: Callable[..., bytes]
    # What ends the stream after its finish ("": the finish is the end, as
    # the Responses API's terminal event is).
    end_marker: bytes
    stop: str
    # Fixtures: a whole documented answer, and a non-streamed JSON answer.
    whole: str
    json_answer: str
    # A body that fails with an error event and says nothing before it.
    failure: bytes
    hostile: st.SearchStrategy[bytes]
    # OpenAI streams may carry several choices, each ending in its own terminal
    # chunk; an Anthropic stream is one message and ends once.
    many_choices: bool

    def translate(self, data: bytes) -> list[Chunk]:
        return run(self.stream(), [data])

    def __str__(self) -> str:
        return self.name


def openai_answer(*texts: str, finish: str | None = None) -> bytes:
    finished = [chunk(finish_reason=finish)] if finish else []
    return data_events(*(chunk(content=t) for t in texts), *finished, done=False)


def anthropic_answer(*texts: str, finish: str | None = None) -> bytes:
    finished = [message_delta(finish)] if finish else []
    return body(message_start(), text_block(0, *texts), *finished)


def responses_answer(*texts: str, finish: str | None = None) -> bytes:
    """``finish``: "completed", or an ``incomplete_details.reason``."""
    end = []
    if finish == "completed":
        end = [rev.completed()]
    elif finish:
        end = [rev.incomplete(finish)]
    return rev.events(rev.created(), rev.message(0, *texts, done=bool(finish)), *end)


# -- hostile bodies ----------------------------------------------------------------
# Mostly plausible values, sometimes ones the wire cannot carry (32-bit counts
# and indices) or text with a lone surrogate (invalid UTF-8 when written raw).
numbers = st.sampled_from([0, 0, 1, 7, -1, 1 << 31, -(1 << 40)])
texts = st.one_of(
    st.text(st.characters(categories=["Ll", "Lo", "Nd"]), max_size=6),
    st.text(st.characters(categories=["Ll", "Cs"]), min_size=1, max_size=3),
)


def raw_utf8(obj: dict[str, Any]) -> bytes:
    """Text written as UTF-8, not escaped: a lone surrogate becomes invalid UTF-8."""
    return (
        b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n\n"
    )


def one_choice(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


openai_usages = st.fixed_dictionaries(
    {"prompt_tokens": numbers, "completion_tokens": numbers},
    optional={
        "prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": numbers}),
        "completion_tokens_details": st.fixed_dictionaries({"reasoning_tokens": numbers}),
    },
)
openai_chunks = st.one_of(
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
        st.none() | openai_usages,
    ),
    st.builds(lambda u: {"choices": [], "usage": u}, openai_usages),
    st.builds(lambda t: {"error": {"message": t}}, texts),
)

anthropic_usages = st.fixed_dictionaries(
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
anthropic_events = st.one_of(
    st.builds(
        lambda m, u: {"type": "message_start", "message": {"model": m, "usage": u}},
        texts,
        anthropic_usages,
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
        anthropic_usages,
    ),
    st.just({"type": "message_stop"}),
    st.just({"type": "ping"}),
    st.builds(lambda t: {"type": "error", "error": {"type": "x", "message": t}}, texts),
)


responses_items = st.one_of(
    st.builds(
        lambda t, id_, text: {
            "type": t,
            "id": id_,
            "call_id": id_,
            "name": text,
            "arguments": text,
        },
        st.sampled_from(["message", "function_call", "reasoning", "web_search_call", "x"]),
        texts,
        texts,
    ),
    st.builds(lambda id_, t, e: rev.reasoning_item(id_, t, encrypted=e), texts, texts, texts),
)
responses_statuses = st.sampled_from(["completed", "incomplete", "failed", "in_progress"])
responses_payloads = st.one_of(
    st.builds(rev.text_delta, numbers, texts),
    st.builds(
        lambda t, i, s, d: {"type": t, "output_index": i, "summary_index": s, "delta": d},
        st.sampled_from(
            [
                "response.reasoning_summary_text.delta",
                "response.reasoning_text.delta",
                "response.function_call_arguments.delta",
                "response.refusal.delta",
                "response.web_search_call.searching",
            ]
        ),
        numbers,
        numbers,
        texts,
    ),
    st.builds(rev.item_added, numbers, responses_items),
    st.builds(rev.item_done, numbers, responses_items),
    st.builds(
        lambda i, a: {
            "type": "response.function_call_arguments.done",
            "output_index": i,
            "arguments": a,
        },
        numbers,
        texts,
    ),
    st.builds(
        lambda k, status, reason, u: {
            "type": k,
            "response": {
                "status": status,
                "incomplete_details": {"reason": reason},
                "usage": u,
                "error": {"code": reason, "message": reason},
            },
        },
        st.sampled_from(["response.completed", "response.incomplete", "response.failed"]),
        responses_statuses,
        st.sampled_from(sorted(INCOMPLETE_REASONS)) | texts,
        st.none() | st.builds(rev.usage, numbers, numbers, numbers, numbers),
    ),
    st.builds(lambda c, m: {"type": "error", "code": c, "message": m}, texts, texts),
    st.builds(lambda m: {"type": "response.created", "response": {"model": m}}, texts),
)


def data_event(obj: dict[str, Any]) -> bytes:
    return data_events(obj, done=False)


def events_body(
    objects: list[dict[str, Any]], write: Callable[[dict[str, Any]], bytes], end: bytes
) -> bytes:
    return b"".join(write(o) for o in objects) + end


DONE = b"data: [DONE]\n\n"

OPENAI = StreamAdapter(
    name="openai",
    stream=openai_stream,
    request_id=OPENAI_RID,
    fixtures=sse_fixtures("openai"),
    answer=openai_answer,
    end_marker=DONE,
    stop="stop",
    whole="openai_text.sse",
    json_answer="openai_response_text.json",
    failure=data_events({"error": "boom"}, done=False),
    hostile=st.builds(
        events_body,
        st.lists(openai_chunks, max_size=6),
        st.sampled_from([data_event, raw_utf8]),
        st.sampled_from([DONE, b""]),
    ),
    many_choices=True,
)

ANTHROPIC = StreamAdapter(
    name="anthropic",
    stream=anthropic_stream,
    request_id=ANTHROPIC_RID,
    fixtures=sse_fixtures("anthropic"),
    answer=anthropic_answer,
    end_marker=named_events(STOP),
    stop="end_turn",
    whole="anthropic_text.sse",
    json_answer="anthropic_response_text.json",
    failure=fixture("anthropic_error.sse") + b"\n",
    hostile=st.builds(
        events_body,
        st.lists(anthropic_events, max_size=10),
        st.sampled_from([named_events, raw_utf8]),
        st.just(b""),
    ),
    many_choices=False,
)

RESPONSES = StreamAdapter(
    name="openai-responses",
    stream=responses_stream,
    request_id=RESPONSES_RID,
    fixtures=responses_fixtures(),
    answer=responses_answer,
    end_marker=b"",
    stop="completed",
    whole="responses/openai_text.sse",
    json_answer="responses/openai_response_text.json",
    failure=fixture("responses/openai_error.sse"),
    hostile=st.builds(
        events_body,
        st.lists(responses_payloads, max_size=10),
        st.sampled_from([named_events, raw_utf8]),
        st.just(b""),
    ),
    many_choices=False,
)

ADAPTERS = [OPENAI, ANTHROPIC, RESPONSES]
# Those whose stream ends with a marker after the finish ([DONE], message_stop).
MARKED = [a for a in ADAPTERS if a.end_marker]
