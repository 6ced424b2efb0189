"""The Gemini edge's answers: chunk frames as a whole GenerateContentResponse,
an ``alt=sse`` stream and a JSON array stream; usage, finish reasons,
thought signatures back on their parts; errors in Google's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.edge_translator.errors import InvalidRequest, ProxyFailed
from flatgate.edge_translator.gemini.errors import error_body, error_element, error_event
from flatgate.edge_translator.gemini.render import Aggregator, StreamRenderer
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

GEMINI = int(ApiDialect.GEMINI)
USAGE = Usage(prompt_tokens=10, completion_tokens=7, cached_tokens=4, reasoning_tokens=2)


def signed(where: str, signature: str, text: str = "") -> ReasoningPart:
    return ReasoningPart(text=text, opaque=f"{where}\n{signature}".encode(), dialect=GEMINI)


CHUNKS = [
    Chunk(reasoning="let me "),
    Chunk(reasoning="think"),
    Chunk(reasoning_part=signed("", "c2lnMA==", "let me think")),
    Chunk(content="Hel"),
    Chunk(content="lo", reasoning_part=signed("gemini:text", "c2lnMQ==")),
    Chunk(reasoning_part=signed("call_9", "c2lnMg==")),
    Chunk(tool_calls=(ToolCallDelta(0, "call_9", "lookup", '{"q":'),)),
    Chunk(tool_calls=(ToolCallDelta(0, arguments='"x"}'),)),
    Chunk(tool_calls=(ToolCallDelta(1, "call_10", "other"),)),
    Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=USAGE, model="gemini-x"),
]


def whole(chunks: list[Chunk]) -> dict[str, Any]:
    agg = Aggregator(response_id="resp_1", model="house")
    for c in chunks:
        agg.feed(c)
    assert agg.finished and agg.complete
    out: dict[str, Any] = json.loads(agg.body())
    return out


def streamed(chunks: list[Chunk], *, sse: bool) -> bytes:
    r = StreamRenderer(response_id="resp_1", model="house", sse=sse)
    out = b"".join(r.feed(c) for c in chunks) + r.end()
    assert r.finished and r.usage == chunks[-1].usage
    return out


def sse_events(data: bytes) -> list[dict[str, Any]]:
    events = data.split(b"\r\n\r\n")
    assert events[-1] == b""
    assert all(e.startswith(b"data: ") for e in events[:-1])
    return [json.loads(e[len(b"data: ") :]) for e in events[:-1]]


def test_a_whole_answer() -> None:
    body = whole(CHUNKS)
    assert body["responseId"] == "resp_1" and body["modelVersion"] == "gemini-x"
    cand = body["candidates"][0]
    assert (cand["index"], cand["finishReason"], cand["content"]["role"]) == (0, "STOP", "model")
    assert cand["content"]["parts"] == [
        {"text": "let me think", "thought": True, "thoughtSignature": "c2lnMA=="},
        {"text": "Hello", "thoughtSignature": "c2lnMQ=="},
        {
            "functionCall": {"name": "lookup", "args": {"q": "x"}, "id": "call_9"},
            "thoughtSignature": "c2lnMg==",
        },
        {"functionCall": {"name": "other", "args": {}, "id": "call_10"}},
    ]
    assert body["usageMetadata"] == {
        "promptTokenCount": 10,
        "cachedContentTokenCount": 4,
        "candidatesTokenCount": 5,
        "thoughtsTokenCount": 2,
        "totalTokenCount": 17,
    }


def test_an_sse_stream() -> None:
    events = sse_events(streamed(CHUNKS, sse=True))
    assert all(e["responseId"] == "resp_1" for e in events)
    parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
    assert parts == [
        {"text": "let me ", "thought": True},
        {"text": "think", "thought": True},
        {"text": "", "thought": True, "thoughtSignature": "c2lnMA=="},
        {"text": "Hel"},
        {"text": "lo", "thoughtSignature": "c2lnMQ=="},
        {
            "functionCall": {"name": "lookup", "args": {"q": "x"}, "id": "call_9"},
            "thoughtSignature": "c2lnMg==",
        },
        {"functionCall": {"name": "other", "args": {}, "id": "call_10"}},
    ]
    assert [e["candidates"][0].get("finishReason") for e in events][-2:] == [None, "STOP"]
    assert "usageMetadata" not in events[0]
    assert events[-1]["usageMetadata"]["totalTokenCount"] == 17
    assert events[-1]["modelVersion"] == "gemini-x"


def test_a_json_array_stream_is_one_json_array() -> None:
    data = streamed(CHUNKS, sse=False)
    assert data.startswith(b"[{") and data.endswith(b"}]")
    assert json.loads(data) == sse_events(streamed(CHUNKS, sse=True))


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        (FinishReason.STOP, "STOP"),
        (FinishReason.LENGTH, "MAX_TOKENS"),
        (FinishReason.CONTENT_FILTER, "SAFETY"),
    ],
)
def test_finish_reasons(reason: FinishReason, name: str) -> None:
    chunks = [Chunk(content="x"), Chunk(finish_reason=reason)]
    assert whole(chunks)["candidates"][0]["finishReason"] == name
    last = sse_events(streamed(chunks, sse=True))[-1]["candidates"][0]
    assert last == {
        "content": {"parts": [{"text": ""}], "role": "model"},
        "finishReason": name,
        "index": 0,
    }


def test_a_whole_answer_with_no_usage_still_has_usage_metadata() -> None:
    body = whole([Chunk(content="x"), Chunk(finish_reason=FinishReason.STOP)])
    assert body["usageMetadata"] == {"promptTokenCount": 0, "totalTokenCount": 0}


def test_another_dialects_reasoning_payload_is_not_shown() -> None:
    foreign = ReasoningPart(text="t", opaque=b"sig", dialect=int(ApiDialect.ANTHROPIC_MESSAGES))
    chunks = [
        Chunk(reasoning="t"),
        Chunk(reasoning_part=foreign),
        Chunk(finish_reason=FinishReason.STOP),
    ]
    assert whole(chunks)["candidates"][0]["content"]["parts"] == [{"text": "t", "thought": True}]


def test_an_error_chunk_raises_what_it_carries() -> None:
    bad = Chunk(error=ChunkError("rate_limited", "slow down"), finish_reason=FinishReason.ERROR)
    with pytest.raises(FlatgateError, match="slow down"):
        Aggregator(response_id="r", model="m").feed(bad)
    with pytest.raises(FlatgateError, match="slow down"):
        StreamRenderer(response_id="r", model="m", sse=True).feed(bad)


def test_arguments_that_are_not_an_object_are_a_protocol_error() -> None:
    chunks = [
        Chunk(tool_calls=(ToolCallDelta(0, "c", "f", "[1]"),)),
        Chunk(finish_reason=FinishReason.TOOL_CALLS),
    ]
    with pytest.raises(ProxyFailed):
        whole(chunks)


def test_errors_in_googles_shape() -> None:
    err = InvalidRequest("contents.0.role: 'x' is neither", param="contents.0.role")
    status, body = error_body(err, "req_1")
    got = json.loads(body)["error"]
    assert (status, got["code"], got["status"]) == (400, 400, "INVALID_ARGUMENT")
    assert got["message"] == err.message
    violations = [d for d in got["details"] if d["@type"].endswith("BadRequest")]
    assert violations[0]["fieldViolations"] == [
        {"field": "contents.0.role", "description": err.message}
    ]
    limited = FlatgateError("slow down", code=codes.TENANT_RATE_LIMITED, retry_after=1.5)
    status, body = error_body(limited)
    got = json.loads(body)["error"]
    assert (status, got["status"]) == (429, "RESOURCE_EXHAUSTED")
    retry = [d for d in got["details"] if d["@type"].endswith("RetryInfo")]
    assert retry == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]
    missing = FlatgateError("no such model", code=codes.MODEL_NOT_FOUND)
    assert json.loads(error_body(missing)[1])["error"]["status"] == "NOT_FOUND"
    assert error_event(missing).startswith(b"data: {") and error_event(missing).endswith(
        b"\r\n\r\n"
    )
    assert error_element(missing).startswith(b",\r\n{") and error_element(missing).endswith(b"}]")


def test_a_stream_that_fails_ends_as_its_form_wants() -> None:
    err = FlatgateError("broke", code=codes.PROXY_UNAVAILABLE)
    sse = StreamRenderer(response_id="r", model="m", sse=True)
    assert json.loads(sse.fail(err)[len(b"data: ") :])["error"]["message"] == "broke"
    array = StreamRenderer(response_id="r", model="m", sse=False)
    begun = array.feed(Chunk(content="x")) + array.fail(err)
    assert json.loads(begun)[1]["error"]["message"] == "broke"
    fresh = StreamRenderer(response_id="r", model="m", sse=False)
    assert json.loads(fresh.fail(err))[0]["error"]["message"] == "broke"
