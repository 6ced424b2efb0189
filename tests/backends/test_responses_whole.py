"""``backends.responses.whole.ResponsesWhole``: a whole Responses API
answer (the ``response`` object) into chunk frames, and its parity with the
stream translator.

Parity: the same answer, as the ``response`` object and as the events that
stream it, through ``ResponsesWhole`` and ``ResponsesStream``, folded by each
client API's edge (the Responses, Chat Completions and Messages
Aggregators), gives the same client bodies. The answers: OpenAI's documented
streams (``fixtures/responses/``, whose terminal event carries the whole
``response`` object a non-streamed call returns), OpenAI's documented whole
answers (``tests/edge/responses/golden/``) streamed the way the API streams
(``stream_of``), and answers written here for what no example shows
(logprobs, items interleaved, hosted tools, incomplete answers, errors).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai.types.responses as sdk
import pytest

from flatgate.edge_translator.anthropic.render import MessageAggregator
from flatgate.edge_translator.openai.render import Aggregator as ChatAggregator
from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.render import Aggregator as ResponsesAggregator
from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter, encode_request
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.backends.responses.stream import ResponsesStream
from flatgate.proxy.backends.responses.whole import ResponsesWhole
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.backends import responses_events as rev
from tests.backends.helpers import bytewise, error_of, fixture, request, run, user
from tests.edge.responses.common import decoded

GOLDEN = Path(__file__).parents[1] / "edge" / "responses" / "golden"
RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
CHAT = int(ApiDialect.OPENAI_CHAT)
ENC = "gAAAAABoWholeSyntheticEncryptedContent=="
Doc = dict[str, Any]


def whole(doc: Doc | bytes, model: str = "routed") -> list[Chunk]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return run(ResponsesWhole("rid", model), [body])


def streamed(body: bytes, model: str = "routed") -> list[Chunk]:
    return run(ResponsesStream("rid", model), [body])


def answer(*output: Doc, status: str = "completed", **fields: Any) -> Doc:
    """A ``response`` object (``rev.response``'s) with ``output`` and usage."""
    fields.setdefault("usage", rev.usage())
    return rev.response(status, output=list(output), **fields)


def text_item(item_id: str, *parts: Doc) -> Doc:
    return {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": list(parts),
    }


def output_text(text: str, logprobs: list[Doc] | None = None) -> Doc:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def token(text: str, logprob: float = -0.5) -> Doc:
    top = [{"token": text, "logprob": logprob, "bytes": list(text.encode())}]
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": top}


# -- streaming a whole answer the way the API does ------------------------------------


def _words(text: str) -> list[str]:
    return re.findall(r"\s*\S+\s*", text) or [text]


def _message_events(at: int, item: Doc) -> list[Doc]:
    out = [rev.item_added(at, {**item, "status": "in_progress", "content": []})]
    for k, part in enumerate(item["content"]):
        where = {"item_id": item["id"], "output_index": at, "content_index": k}
        if part["type"] == "refusal":
            kind = "response.refusal.delta"
            out += [{"type": kind, **where, "delta": d} for d in _words(part["refusal"])]
            continue
        entries = part.get("logprobs") or []
        pieces = [(e["token"], [e]) for e in entries] or [(d, []) for d in _words(part["text"])]
        assert "".join(p for p, _ in pieces) == part["text"]
        kind = "response.output_text.delta"
        out += [{"type": kind, **where, "delta": d, "logprobs": lp} for d, lp in pieces]
    return [*out, rev.item_done(at, item)]


def _reasoning_events(at: int, item: Doc) -> list[Doc]:
    out = [rev.item_added(at, {"id": item["id"], "type": "reasoning", "summary": []})]
    summary = item.get("summary") or []
    texts = [("response.reasoning_summary_text.delta", s["text"]) for s in summary] or [
        ("response.reasoning_text.delta", c["text"]) for c in item.get("content") or ()
    ]
    for j, (kind, text) in enumerate(texts):
        where = {"item_id": item["id"], "output_index": at, "summary_index": j}
        out += [{"type": kind, **where, "delta": d} for d in _words(text)]
    return [*out, rev.item_done(at, item)]


def _call_events(at: int, item: Doc) -> list[Doc]:
    args = item["arguments"]
    half = len(args) // 2
    kind = "response.function_call_arguments.delta"
    where = {"item_id": item["id"], "output_index": at}
    return [
        rev.item_added(at, {**item, "arguments": "", "status": "in_progress"}),
        *({"type": kind, **where, "delta": f} for f in (args[:half], args[half:]) if f),
        {"type": "response.function_call_arguments.done", **where, "arguments": args},
        rev.item_done(at, item),
    ]


def stream_of(doc: Doc) -> bytes:
    """The events that stream ``doc`` as the API streams an answer."""
    events: list[Doc] = [rev.created(doc.get("model") or "gpt-test")]
    for at, item in enumerate(doc.get("output") or ()):
        kind = item["type"]
        if kind == "message":
            events += _message_events(at, item)
        elif kind == "reasoning":
            events += _reasoning_events(at, item)
        elif kind == "function_call":
            events += _call_events(at, item)
        else:
            events += [
                rev.item_added(at, {**item, "status": "in_progress"}),
                rev.item_done(at, item),
            ]
    events.append({"type": f"response.{doc.get('status') or 'completed'}", "response": doc})
    return rev.events(*events)


def terminal_response(name: str) -> Doc:
    """The ``response`` object of a fixture's terminal event: what the same
    request answers when it is not streamed. Its model is the one the
    stream's ``response.created`` names (the documented examples of the two
    events were written for different models; the stream reports the first)."""
    events = [json.loads(line[6:]) for line in fixture(name).split(b"\n") if line[:6] == b"data: "]
    for event in reversed(events):
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            doc: Doc = event["response"]
            return {**doc, "model": events[0]["response"]["model"]}
    raise AssertionError(f"{name} has no terminal event")


# -- the client bodies each edge folds the chunks into ----------------------------------


def _ids_aside(body: Doc) -> Doc:
    """A ``response`` body with the ids the edge makes up (messages', calls')
    replaced: a reasoning item keeps its backend's id, which is compared."""
    for item in body["output"]:
        if item["type"] in ("message", "function_call"):
            item["id"] = "*"
    return body


def fold_responses(chunks: list[Chunk]) -> Doc:
    req = decoded(include=["reasoning.encrypted_content"])
    # A fixed clock: the two folds compared must not straddle a second.
    a = ResponsesAggregator(
        response_id="resp_1", created=1, model="m", echo=echo_of(req), clock=lambda: 2.0
    )
    for c in chunks:
        a.feed(c)
    assert a.finished
    body: Doc = json.loads(a.body())
    # Checked by the SDK's type, but for the hosted tools' items: the
    # backend's, relayed as sent (the documented ones predate the SDK's types).
    ours = [i for i in body["output"] if i["type"] in ("message", "reasoning", "function_call")]
    sdk.Response.model_validate({**body, "output": ours})
    return _ids_aside(body)


def fold_chat(chunks: list[Chunk]) -> Doc:
    a = ChatAggregator(completion_id="chatcmpl-1", created=1, model="m")
    a.feed_all(chunks)
    assert a.finished
    out: Doc = json.loads(a.body())
    return out


def fold_messages(chunks: list[Chunk]) -> Doc:
    a = MessageAggregator(message_id="msg_1", model="m")
    for c in chunks:
        a.feed(c)
    assert a.finished
    out: Doc = json.loads(a.body())
    return out


FOLDS: dict[str, Callable[[list[Chunk]], Doc]] = {
    "responses": fold_responses,
    "chat": fold_chat,
    "messages": fold_messages,
}


def bodies(chunks: list[Chunk]) -> dict[str, Any]:
    """Each edge's client body (or the error it raised: code and message)."""
    out: dict[str, Any] = {}
    for name, fold in FOLDS.items():
        try:
            out[name] = fold(chunks)
        except FlatgateError as exc:
            out[name] = ("error", exc.code.code, exc.message)
    return out


def assert_parity(doc: Doc, sse: bytes) -> dict[str, Any]:
    got, want = bodies(whole(doc)), bodies(streamed(sse))
    assert got == want
    return got


# -- parity -------------------------------------------------------------------------

STREAMS = [
    "responses/openai_text.sse",
    "responses/openai_function_call.sse",
    "responses/openai_reasoning.sse",
    "responses/openai_web_search.sse",
    "responses/openai_failed.sse",
]


@pytest.mark.parametrize("name", STREAMS)
def test_a_documented_stream_and_its_whole_response_give_the_same_bodies(name: str) -> None:
    out = assert_parity(terminal_response(name), fixture(name))
    if name.endswith("failed.sse"):
        assert out["chat"] == (
            "error",
            "backend_stream_error",
            "server_error: The model failed to generate a response.",
        )


def test_the_documented_reasoning_answer_keeps_its_item_and_encrypted_content() -> None:
    name = "responses/openai_reasoning.sse"
    doc = terminal_response(name)
    out = assert_parity(doc, fixture(name))
    reasoning, message = out["responses"]["output"]
    assert reasoning["id"] == doc["output"][0]["id"]
    assert reasoning["encrypted_content"] == doc["output"][0]["encrypted_content"]
    assert [s["text"] for s in reasoning["summary"]] == [
        "\n\n".join(s["text"] for s in doc["output"][0]["summary"])
    ]
    assert message["content"][0]["text"] == "Hello! How can I assist you today?"
    assert out["responses"]["usage"]["input_tokens_details"]["cached_tokens"] == 64
    assert out["chat"]["choices"][0]["message"]["reasoning_content"].startswith("**Responding")


@pytest.mark.parametrize(
    "path",
    [
        GOLDEN / "openai_response_text.json",
        GOLDEN / "openai_response_function_call.json",
        Path(__file__).parent / "fixtures" / "responses" / "openai_response_text.json",
    ],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_a_documented_whole_answer_and_its_stream_give_the_same_bodies(path: Path) -> None:
    doc = json.loads(path.read_text())
    out = assert_parity(doc, stream_of(doc))
    assert out["responses"]["model"] == doc["model"]


WRITTEN: dict[str, Doc] = {
    "logprobs in two parts": answer(
        text_item(
            "msg_1",
            output_text("Hi there", [token("Hi"), token(" there")]),
            output_text("!", [token("!", -0.1)]),
        ),
    ),
    "items interleaved": answer(
        rev.reasoning_item("rs_1", "Look it up.", encrypted=ENC),
        rev.call_item("call_1", "lookup", '{"q":"a"}'),
        rev.reasoning_item("rs_2", "Then answer.", "Briefly.", encrypted=ENC),
        text_item("msg_1", output_text("Found it.")),
        rev.call_item("call_2", "record", ""),
    ),
    "a hosted tool before a message with logprobs": answer(
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "news"},
        },
        text_item("msg_1", output_text("News.", [token("News"), token(".")])),
        {"type": "web_search_call", "id": "ws_2", "status": "completed"},
    ),
    "reasoning with encrypted content only": answer(
        rev.reasoning_item("rs_1", encrypted=ENC), text_item("msg_1", output_text("Yes."))
    ),
    "vLLM's reasoning text": answer(
        {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [],
            "encrypted_content": None,
            "content": [{"type": "reasoning_text", "text": "Counting words."}],
        },
        text_item("msg_1", output_text("Four.")),
    ),
    "two messages": answer(
        text_item("msg_1", output_text("One. ")), text_item("msg_2", output_text("Two."))
    ),
    "parallel calls": answer(
        rev.call_item("call_1", "get_weather", '{"city":"Paris"}'),
        rev.call_item("call_2", "get_weather", '{"city":"Oslo"}'),
        usage=rev.usage(10, 20, cached=4, reasoning=8),
    ),
    "cut at the output limit": answer(
        text_item("msg_1", output_text("one two")),
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
    ),
    "filtered": answer(
        text_item("msg_1", output_text("I was")),
        status="incomplete",
        incomplete_details={"reason": "content_filter"},
    ),
    "a refusal": answer(text_item("msg_1", {"type": "refusal", "refusal": "I can't help."})),
    "failed": rev.response("failed", error={"code": "server_error", "message": "went wrong"}),
}


@pytest.mark.parametrize("case", WRITTEN)
def test_an_answer_whole_and_streamed_gives_the_same_bodies(case: str) -> None:
    assert_parity(WRITTEN[case], stream_of(WRITTEN[case]))


def test_an_error_body_is_the_error_events_chunk() -> None:
    err = {"code": "rate_limit_exceeded", "message": "Slow down.", "param": None}
    sse = rev.events(rev.created(), {"type": "error", **err})
    got, want = whole({"error": {**err, "type": "requests"}}), streamed(sse)
    assert got == want
    assert (error_of(got).code, error_of(got).message) == (
        "backend_stream_error",
        "rate_limit_exceeded: Slow down.",
    )
    assert bodies(got)["responses"][0] == "error"


# -- what the frames hold ---------------------------------------------------------------


def test_an_answer_is_one_chunk_of_its_items_then_the_final_chunk() -> None:
    chunks = whole(WRITTEN["parallel calls"])
    assert len(chunks) == 2
    assert chunks[0].tool_calls == (
        ToolCallDelta(0, "call_1", "get_weather", '{"city":"Paris"}'),
        ToolCallDelta(1, "call_2", "get_weather", '{"city":"Oslo"}'),
    )
    last = chunks[1]
    assert (last.finish_reason, last.usage) == (FinishReason.TOOL_CALLS, Usage(10, 20, 4, 8))
    assert {c.model for c in chunks} == {"gpt-test"}


def test_a_reasoning_item_opens_with_its_id_then_carries_its_text_and_the_message() -> None:
    opening, body, last = whole(WRITTEN["reasoning with encrypted content only"])
    assert opening.reasoning_part == ReasoningPart(dialect=RESPONSES, id="rs_1")
    assert body.reasoning_part == ReasoningPart(opaque=ENC.encode(), dialect=RESPONSES, id="rs_1")
    assert (body.reasoning, body.content) == ("", "Yes.")
    assert last.finish_reason == FinishReason.STOP


def test_logprobs_ride_in_chat_completions_shape_with_the_text() -> None:
    body, _ = whole(WRITTEN["logprobs in two parts"])
    assert body.content == "Hi there!"
    assert body.extras_dialect == CHAT
    assert json.loads(body.extras) == {
        "logprobs": {"content": [token("Hi"), token(" there"), token("!", -0.1)]}
    }


def test_a_hosted_item_is_relayed_as_sent_in_its_own_extras() -> None:
    doc = WRITTEN["a hosted tool before a message with logprobs"]
    first, second, third, _ = whole(doc)
    assert (first.extras_dialect, json.loads(first.extras)) == (
        RESPONSES,
        {"output_item": doc["output"][0]},
    )
    assert (second.content, second.extras_dialect) == ("News.", CHAT)
    assert json.loads(third.extras) == {"output_item": doc["output"][2]}


def test_incomplete_answers_finish_as_the_stream_says() -> None:
    assert whole(WRITTEN["cut at the output limit"])[-1].finish_reason == FinishReason.LENGTH
    assert whole(WRITTEN["filtered"])[-1].finish_reason == FinishReason.CONTENT_FILTER
    odd = answer(status="incomplete", incomplete_details={"reason": "something new"})
    assert whole(odd)[-1].finish_reason == FinishReason.LENGTH


def test_a_call_without_arguments_gets_an_empty_object_and_its_item_id_when_no_call_id() -> None:
    doc = answer({"type": "function_call", "id": "fc_9", "name": "now", "arguments": ""})
    (call,) = whole(doc)[0].tool_calls
    assert call == ToolCallDelta(0, "fc_9", "now", "{}")


def test_usage_carries_cache_writes_and_the_model_is_the_servers() -> None:
    u = rev.usage(100, 5, cached=60)
    u["input_tokens_details"]["cache_write_tokens"] = 30
    doc = answer(text_item("m", output_text("x")), usage=u, model="gpt-5.4-2026")
    chunks = whole(doc, model="configured")
    assert chunks[-1].usage == Usage(100, 5, 60, 0, 30)
    assert {c.model for c in chunks} == {"gpt-5.4-2026"}
    del doc["model"]
    assert {c.model for c in whole(doc, model="configured")} == {"configured"}


def test_logprobs_that_are_not_a_list_are_left_out() -> None:
    part = {**output_text("x"), "logprobs": {"odd": True}}
    body, _ = whole(answer(text_item("m", part)))
    assert (body.content, body.extras) == ("x", "")


def test_the_body_may_come_in_any_pieces() -> None:
    body = json.dumps(WRITTEN["items interleaved"]).encode()
    assert run(ResponsesWhole("rid", "routed"), bytewise(body)) == whole(body)


def test_a_server_that_streams_anyway_is_read_as_a_stream() -> None:
    sse = stream_of(WRITTEN["items interleaved"])
    assert run(ResponsesWhole("rid", "routed"), [sse]) == streamed(sse)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"status": "queued", "output": []}', "status 'queued'"),
        (b'{"status": "in_progress"}', "status 'in_progress'"),
        (b"{}", "status None"),
        (b'{"status": "completed", "output": [', "bad answer"),
        (b'{"status": "completed", "output": {"a": 1}}', "bad answer"),
    ],
)
def test_what_is_not_an_answer_is_a_protocol_error(body: bytes, why: str) -> None:
    (chunk,) = whole(body)
    assert chunk.finish_reason == FinishReason.ERROR
    assert error_of([chunk]).code == "backend_protocol_error"
    assert why in error_of([chunk]).message


def test_an_error_body_in_a_few_words_is_its_message() -> None:
    err = error_of(whole(b'{"error": "model overloaded"}'))
    assert (err.code, err.message) == ("backend_stream_error", "model overloaded")
    err = error_of(whole(b'{"status": "failed", "error": null}'))
    assert err.message == "the response failed"


# -- the request and the adapter -----------------------------------------------------------


def test_a_whole_answer_is_asked_for_with_stream_false_and_still_stores_nothing() -> None:
    req = request({"model": "client-model", "messages": [user("hi")]})
    sent = json.loads(encode_request(req, model="m", whole=True))
    assert (sent["stream"], sent["store"]) == (False, False)
    assert json.loads(encode_request(req, model="m"))["stream"] is True


def adapter(**kw: Any) -> ResponsesAdapter:
    return ResponsesAdapter(
        ResponsesConfig(
            name="r", url="https://api.example.com/v1", protocol="openai-responses", **kw
        )
    )


@pytest.mark.parametrize(
    ("stream", "whole_answers", "asked"),
    [(False, True, True), (True, True, False), (False, False, False)],
)
def test_the_adapter_asks_for_a_whole_answer_only_when_the_client_did_not_stream(
    stream: bool, whole_answers: bool, asked: bool
) -> None:
    req = request({"model": "c", "messages": [user("hi")], "stream": stream})
    out = adapter(whole_answers=whole_answers).prepare(Inbound(b"", lambda: req, "rid", ""))
    assert (out.whole, json.loads(out.body)["stream"]) == (asked, not asked)
    assert dict(out.headers)["accept"] == ("application/json" if asked else "text/event-stream")


def test_the_translator_is_the_whole_answers_when_asked_and_names_the_configured_model() -> None:
    a = adapter(model="gpt-5")
    assert isinstance(a.translator("r", "routed", whole=True), ResponsesWhole)
    assert isinstance(a.translator("r", "routed"), ResponsesStream)
    doc = answer(text_item("m", output_text("hi")))
    del doc["model"]
    chunks = run(a.translator("r", "routed", True), [json.dumps(doc).encode()])
    assert {c.model for c in chunks} == {"gpt-5"}
