"""``backends.openai.whole.OpenAIWhole`` against ``OpenAIStream``: a whole
``chat.completion`` and the same answer streamed read alike.

The parity tests hand the same answer to both translators, as a whole body
and as the SSE stream a server sends for it (``as_stream``), and fold each
translator's chunks with the edge's aggregators (Chat Completions, Messages,
Responses): every client API must read the same answer either way. The
answers are OpenAI's documented examples (``fixtures/SOURCES.md``), a real
vLLM's captured whole and streamed answer to the same greedy request, and
answers written here for what the examples lack (reasoning, refusals,
several choices, parallel calls, ``stop_reason``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from flatgate.edge_translator.anthropic.render import MessageAggregator
from flatgate.edge_translator.openai.render import Aggregator as ChatAggregator
from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.render import Aggregator as ResponsesAggregator
from flatgate.proxy.apis.openai_responses.request import decode_request as decode_responses
from flatgate.proxy.backends.openai.adapter import OpenAIStream
from flatgate.proxy.backends.openai.whole import OpenAIWhole
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk
from tests.backends.helpers import (
    STREAM_MODEL,
    data_events,
    final,
    fixture,
    run,
    terminals,
)
from tests.backends.vllm_fixtures import read_capture

RID = "req-w"
PROTOCOL_ERROR = codes.BACKEND_PROTOCOL_ERROR.code
STREAM_ERROR = codes.BACKEND_STREAM_ERROR.code


def whole(data: bytes, model: str = STREAM_MODEL) -> list[Chunk]:
    return run(OpenAIWhole(RID, model), [data])


def streamed(data: bytes, model: str = STREAM_MODEL) -> list[Chunk]:
    return run(OpenAIStream(RID, model), [data])


def enc(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def completion(*choices: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": list(choices),
        **top,
    }


def choice(
    index: int = 0, finish: str | None = "stop", logprobs: Any = None, **message: Any
) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", **message},
        "logprobs": logprobs,
        "finish_reason": finish,
    }


def call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- the same answer, streamed ----------------------------------------------------


def _pieces(text: str | None, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


def as_stream(doc: dict[str, Any], size: int = 4) -> bytes:
    """The SSE stream a Chat Completions server sends for the whole answer
    ``doc``: per choice a role chunk, its reasoning, content and refusal in
    deltas of ``size`` characters (content one token per delta, each with
    its logprobs entry, when the choice has logprobs), each tool call's id
    and name then its argument fragments, the finish chunk (with vLLM's
    ``stop_reason`` when the answer has one); then the usage on a chunk with
    no choices, and ``[DONE]``."""
    head: dict[str, Any] = {k: doc[k] for k in ("id", "object", "created", "model") if k in doc}
    head["object"] = "chat.completion.chunk"
    events: list[dict[str, Any]] = []

    def event(index: int, delta: dict[str, Any], **more: Any) -> None:
        events.append({**head, "choices": [{"index": index, "delta": delta, **more}]})

    for c in doc["choices"]:
        i = c["index"]
        m = c["message"]
        event(i, {"role": "assistant", "content": ""})
        for field in ("reasoning", "reasoning_content"):
            for p in _pieces(m.get(field), size):
                event(i, {field: p})
        tokens = (c.get("logprobs") or {}).get("content")
        if tokens:
            assert "".join(t["token"] for t in tokens) == m["content"]
            for t in tokens:
                lp = {"content": [t], "refusal": None}
                event(i, {"content": t["token"]}, logprobs=lp, finish_reason=None)
        else:
            for p in _pieces(m.get("content"), size):
                event(i, {"content": p})
        for p in _pieces(m.get("refusal"), size):
            event(i, {"refusal": p})
        for k, tc in enumerate(m.get("tool_calls") or ()):
            fn = tc["function"]
            start = {"index": k, "id": tc["id"], "type": "function"}
            event(i, {"tool_calls": [{**start, "function": {"name": fn["name"], "arguments": ""}}]})
            for p in _pieces(fn["arguments"], size):
                event(i, {"tool_calls": [{"index": k, "function": {"arguments": p}}]})
        end = {"finish_reason": c["finish_reason"]}
        if "stop_reason" in c:
            end["stop_reason"] = c["stop_reason"]
        event(i, {}, **end)
    if doc.get("usage"):
        events.append({**head, "choices": [], "usage": doc["usage"]})
    return data_events(*events)


# -- what each client API reads ---------------------------------------------------

_ECHO = echo_of(decode_responses(b'{"model": "m", "input": "hi"}'))


def _anonymous(value: Any) -> Any:
    """``value`` with the ids the Responses edge makes up (``msg_``, ``fc_``,
    ``rs_``) blanked."""
    if isinstance(value, dict):
        return {k: "*" if k == "id" else _anonymous(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_anonymous(v) for v in value]
    return value


def chat_body(chunks: list[Chunk], choices: int = 1) -> Any:
    agg = ChatAggregator(completion_id="chatcmpl-x", created=1, model="m", choices=choices)
    agg.feed_all(chunks)
    assert agg.finished
    return json.loads(agg.body())


def messages_body(chunks: list[Chunk]) -> Any:
    agg = MessageAggregator(message_id="msg_x", model="m")
    for c in chunks:
        agg.feed(c)
    assert agg.finished
    return json.loads(agg.body())


def responses_body(chunks: list[Chunk]) -> Any:
    # A fixed clock: two bodies made a second apart would differ in ``completed_at``.
    agg = ResponsesAggregator(
        response_id="resp_x", created=1, model="m", echo=_ECHO, clock=lambda: 2.0
    )
    for c in chunks:
        agg.feed(c)
    assert agg.finished
    return _anonymous(json.loads(agg.body()))


def assert_parity(body: bytes, sse: bytes, choices: int = 1, responses: bool = True) -> Any:
    """The whole body and the stream through their translators read alike by
    every client API; the Chat Completions body, for more checks."""
    got, want = whole(body), streamed(sse)
    ends = terminals(got)
    assert [(c.index, c.finish_reason, c.stop_sequence, c.usage) for c in ends] == [
        (c.index, c.finish_reason, c.stop_sequence, c.usage) for c in terminals(want)
    ]
    assert got[-len(ends) :] == ends
    chat = chat_body(got, choices)
    assert chat == chat_body(want, choices)
    if choices == 1:
        assert messages_body(got) == messages_body(want)
        if responses:
            assert responses_body(got) == responses_body(want)
    return chat


# -- parity -------------------------------------------------------------------------

REASONING = completion(
    choice(
        content="Paris.",
        reasoning="The user asks for a capital. ",
        finish="stop",
    ),
    usage={
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "total_tokens": 42,
        "prompt_tokens_details": {"cached_tokens": 16},
        "completion_tokens_details": {"reasoning_tokens": 8},
    },
)
DEEPSEEK = completion(
    choice(content="42", reasoning_content="Six times seven.", finish="stop"),
    usage={"prompt_tokens": 5, "completion_tokens": 7},
)
REFUSAL = completion(
    choice(content=None, refusal="I'm sorry, I can't help with that.", finish="stop"),
    usage={"prompt_tokens": 9, "completion_tokens": 9},
)
PARALLEL = completion(
    choice(
        content="Checking both.",
        tool_calls=[
            call("call_1", "get_weather", '{"city": "Paris"}'),
            call("call_2", "get_time", ""),
        ],
        finish="stop",  # vLLM's word for a forced call: the adapter says tool_calls
    ),
    usage={"prompt_tokens": 40, "completion_tokens": 20},
)
STOP_SEQUENCE = completion(
    {**choice(content="one two ", finish="stop"), "stop_reason": "three"},
    usage={"prompt_tokens": 3, "completion_tokens": 2},
)
LENGTH = completion(
    choice(content="cut sho", finish="length"), usage={"prompt_tokens": 3, "completion_tokens": 2}
)
TWO_CHOICES = completion(
    choice(0, content="Heads.", finish="stop"),
    choice(1, content="Tails, by a long way.", finish="length"),
    usage={"prompt_tokens": 4, "completion_tokens": 9},
)

WRITTEN = {
    "reasoning": REASONING,
    "deepseek": DEEPSEEK,
    "refusal": REFUSAL,
    "parallel-calls": PARALLEL,
    "stop-sequence": STOP_SEQUENCE,
    "length": LENGTH,
}
DOCUMENTED = [
    "openai_response_text.json",
    "openai_response_tool_calls.json",
    "openai_response_logprobs.json",
]


@pytest.mark.parametrize("name", DOCUMENTED)
def test_a_documented_answer_reads_alike_whole_and_streamed(name: str) -> None:
    body = fixture(name)
    assert_parity(body, as_stream(json.loads(body)))


@pytest.mark.parametrize("name", list(WRITTEN))
def test_an_answer_reads_alike_whole_and_streamed(name: str) -> None:
    doc = WRITTEN[name]
    assert_parity(enc(doc), as_stream(doc))


def test_two_choices_read_alike_whole_and_streamed() -> None:
    chat = assert_parity(enc(TWO_CHOICES), as_stream(TWO_CHOICES), choices=2)
    assert [c["finish_reason"] for c in chat["choices"]] == ["stop", "length"]
    assert chat["choices"][1]["message"]["content"] == "Tails, by a long way."


def test_vllms_whole_and_streamed_answers_to_one_greedy_request_read_alike() -> None:
    record, _ = read_capture("logprobs_whole")
    _, sse = read_capture("logprobs_stream")
    body = record["direct"]["body"].encode()
    vllm = json.loads(body)["choices"][0]["logprobs"]["content"]
    chat = assert_parity(body, sse, responses=False)
    assert chat["choices"][0]["logprobs"]["content"] == vllm
    # vLLM streams the end token's logprobs on the finish chunk, with no
    # text: the Responses edge joins them to the message's all the same, so
    # a Responses client gets every entry vLLM sent, whole or streamed.
    [got] = responses_body(whole(body))["output"][0]["content"]
    [want] = responses_body(streamed(sse))["output"][0]["content"]
    assert got["text"] == want["text"]
    assert got["logprobs"] == vllm
    assert want["logprobs"] == vllm


def test_the_documented_answers_as_the_chat_client_reads_them() -> None:
    text = chat_body(whole(fixture("openai_response_text.json")))
    assert text["model"] == "gpt-5.4"
    assert text["choices"][0]["message"]["content"] == "Hello! How can I assist you today?"
    assert text["choices"][0]["finish_reason"] == "stop"
    assert text["usage"]["prompt_tokens"] == 19 and text["usage"]["total_tokens"] == 29
    tools = chat_body(whole(fixture("openai_response_tool_calls.json")))
    [got] = tools["choices"][0]["message"]["tool_calls"]
    assert got == {
        "id": "call_abc123",
        "type": "function",
        "function": {"name": "get_current_weather", "arguments": '{\n"location": "Boston, MA"\n}'},
    }
    assert tools["choices"][0]["finish_reason"] == "tool_calls"
    doc = json.loads(fixture("openai_response_logprobs.json"))
    lp = chat_body(whole(fixture("openai_response_logprobs.json")))
    assert lp["choices"][0]["logprobs"]["content"] == doc["choices"][0]["logprobs"]["content"]


def test_an_error_in_a_200_is_the_error_chunk_a_stream_would_end_in() -> None:
    for error in ({"message": "boom", "type": "server_error", "code": 500}, "boom"):
        [got] = whole(enc({"error": error}))
        [want] = streamed(data_events({"error": error}))
        assert got == want
        assert got.error is not None and got.error.code == STREAM_ERROR
        assert got.error.message == "boom"
        with pytest.raises(FlatgateError) as info:
            chat_body([got])
        assert "boom" in str(info.value)


def test_a_finish_reason_of_error_is_the_error_chunk_a_stream_would_end_in() -> None:
    doc = completion(choice(content="partial", finish="error"))
    [got] = whole(enc(doc))
    want = streamed(as_stream(doc))
    assert got == final(want)
    assert got.error is not None and got.error.code == STREAM_ERROR


def test_the_parity_streams_are_the_answers_they_stand_for() -> None:
    # as_stream itself: the stream translator reads back the answer's parts.
    doc = copy.deepcopy(PARALLEL)
    chunks = streamed(as_stream(doc, size=1))
    assert "".join(c.content for c in chunks) == "Checking both."
    args = "".join(d.arguments for c in chunks for d in c.tool_calls if d.index == 0)
    assert args == '{"city": "Paris"}'
