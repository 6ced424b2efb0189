"""``backends.gemini.stream`` and ``whole``: streamGenerateContent SSE bodies
and whole generateContent answers into chunk frames. Every answer used here
is read by google-genai's own response type too (``helpers.sdk_response``);
Google's documented answers are golden files (``golden/README.md``)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from flatgate.proxy.backends.gemini.encode import SIGNED_TEXT, encode_gemini
from flatgate.proxy.backends.gemini.stream import GeminiStream
from flatgate.proxy.backends.gemini.whole import GeminiWhole
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import FunctionCall, Message, Request, ToolCall
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.backends.gemini.helpers import golden, golden_bytes, sdk_response, validate
from tests.backends.helpers import (
    calls,
    content,
    error_of,
    final,
    per_event,
    random_pieces,
    reasoning,
    run,
    terminals,
)

RID = "req-g"
# The documented call's id: ours, with its signature (URL-safe, unpadded).
SIGNED_ID = f"call_{RID}_0__thought__U2lnbmF0dXJlIEI"
MODEL = "gemini-test"
GEMINI = int(ApiDialect.GEMINI)


def sse(*docs: dict[str, Any]) -> bytes:
    for doc in docs:
        if "error" not in doc:
            sdk_response(doc)
    return b"".join(b"data: " + json.dumps(d).encode() + b"\r\n\r\n" for d in docs)


def stream(body: bytes, pieces: list[bytes] | None = None) -> list[Chunk]:
    return run(GeminiStream(RID, MODEL), pieces if pieces is not None else [body])


def whole(doc: dict[str, Any] | bytes) -> list[Chunk]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    if not body.startswith(b"data:"):
        sdk_response(body)
    return run(GeminiWhole(RID, MODEL), [body])


def text_chunk(text: str, **candidate: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, **candidate}]}


def parts(ps: list[dict[str, Any]], **candidate: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": ps}, **candidate}]}


def reasoning_parts(chunks: list[Chunk]) -> list[ReasoningPart]:
    return [c.reasoning_part for c in chunks if c.reasoning_part is not None]


# -- the documented stream -------------------------------------------------------


@pytest.mark.parametrize("cut", ["whole", "per_event", "random"])
def test_the_documented_text_stream(cut: str) -> None:
    body = golden_bytes("text_stream.txt")
    pieces = {
        "whole": [body],
        "per_event": per_event(body),
        "random": random_pieces(body, random.Random(4)),
    }[cut]
    chunks = stream(body, pieces)
    assert content(chunks) == "Hello! How can I help you today?"
    assert reasoning_parts(chunks) == [
        ReasoningPart(
            # Where it goes, a newline, the signature: a Responses client's
            # item brings it back under the item's own id.
            opaque=b"gemini:text\nAY89a18iOcFus5wr5bW5xN6zZ4aUiCyhgmg6HE2YjtYDV/dwZ5oZlZHeTmiUKv34qq0=",
            dialect=GEMINI,
            id=SIGNED_TEXT,
        )
    ]
    end = final(chunks)
    assert end.finish_reason == FinishReason.STOP
    assert end.usage == Usage(1, 9, 0, 0)
    assert len(terminals(chunks)) == 1


def test_the_documented_function_call_answer_whole_and_back() -> None:
    doc = golden("function_call_response.json")
    chunks = whole(doc)
    end = final(chunks)
    assert end.finish_reason == FinishReason.TOOL_CALLS
    assert calls(chunks) == {
        0: {"ids": [SIGNED_ID], "names": ["book_taxi"], "arguments": '{"time": "10 AM"}'}
    }
    signed = reasoning_parts(chunks)
    assert signed == [
        ReasoningPart(
            opaque=f"{SIGNED_ID}\nU2lnbmF0dXJlIEI=".encode(), dialect=GEMINI, id=SIGNED_ID
        )
    ]
    # Usage: the thoughts count in the completion, and apart.
    assert end.usage == Usage(135, 18 + 125, 0, 125)
    # The round trip: the call goes back with its signature where it came,
    # from the reasoning part (a Responses client keeps it) or, without it
    # (a Chat Completions or Messages client), from the call's id.
    tool_call = end.tool_calls[0]
    for reasoning_back in (signed, None):
        req = Request(
            model_name=MODEL,
            messages=[
                Message("user", "Book a taxi"),
                Message(
                    "assistant",
                    "",
                    tool_calls=[
                        ToolCall(tool_call.id, FunctionCall(tool_call.name, tool_call.arguments))
                    ],
                    reasoning=reasoning_back,
                ),
                Message("tool", "booked", tool_call_id=tool_call.id),
            ],
        )
        body = validate(encode_gemini(req, [], False))
        assert body["contents"][1]["parts"] == [
            {
                "functionCall": {
                    "name": "book_taxi",
                    "args": {"time": "10 AM"},
                    "id": f"call_{RID}_0",
                },
                "thoughtSignature": "U2lnbmF0dXJlIEI=",
            }
        ]
        assert body["contents"][2]["parts"][0]["functionResponse"]["id"] == f"call_{RID}_0"


def test_the_documented_thinking_answer() -> None:
    chunks = whole(golden("thinking_response.json"))
    assert reasoning(chunks) == "**Calculating the sum**\n\nI add the two numbers."
    assert content(chunks) == "2 + 2 = 4."
    assert reasoning_parts(chunks) == [
        ReasoningPart(
            text="**Calculating the sum**\n\nI add the two numbers.", opaque=b"\n", dialect=GEMINI
        ),
        ReasoningPart(
            opaque=b"gemini:text\nCiQB0e2Kb7dVqlqZ0Y7yQ1xU0A==", dialect=GEMINI, id=SIGNED_TEXT
        ),
    ]
    # promptTokenCount includes the cached tokens; thoughts are completion.
    assert final(chunks).usage == Usage(10, 127, 4, 120)


@pytest.mark.parametrize("translate", ["stream", "whole"])
def test_the_documented_blocked_prompt_is_a_refusal(translate: str) -> None:
    doc = golden("blocked_prompt.json")
    chunks = stream(sse(doc)) if translate == "stream" else whole(doc)
    end = final(chunks)
    assert end.finish_reason == FinishReason.CONTENT_FILTER
    assert end.content == ""
    assert end.usage == Usage(8, 0, 0, 0)
    assert len(terminals(chunks)) == 1


# -- streams -----------------------------------------------------------------------


def test_thoughts_stream_as_reasoning_then_one_part() -> None:
    body = sse(
        parts([{"text": "Let me ", "thought": True}]),
        parts([{"text": "think.", "thought": True, "thoughtSignature": "c2ln"}]),
        text_chunk("Answer."),
        text_chunk("", finishReason="STOP"),
        {
            "usageMetadata": {
                "promptTokenCount": 3,
                "candidatesTokenCount": 2,
                "thoughtsTokenCount": 5,
            }
        },
    )
    chunks = stream(body)
    assert reasoning(chunks) == "Let me think."
    assert content(chunks) == "Answer."
    assert reasoning_parts(chunks) == [
        ReasoningPart(text="Let me think.", opaque=b"\nc2ln", dialect=GEMINI)
    ]
    # The usage after the finish is the one the final chunk carries.
    assert final(chunks).usage == Usage(3, 7, 0, 5)


def test_parallel_calls_stream_whole_each() -> None:
    body = sse(
        parts(
            [
                {
                    "functionCall": {"name": "a", "args": {"x": 1}, "id": "g1"},
                    "thoughtSignature": "czE=",
                },
                {"functionCall": {"name": "b"}},
            ],
            finishReason="STOP",
        )
    )
    chunks = stream(body)
    assert calls(chunks) == {
        0: {"ids": ["g1__thought__czE"], "names": ["a"], "arguments": '{"x": 1}'},
        1: {"ids": [f"call_{RID}_1"], "names": ["b"], "arguments": "{}"},
    }
    assert reasoning_parts(chunks) == [
        ReasoningPart(opaque=b"g1__thought__czE\nczE=", dialect=GEMINI, id="g1__thought__czE")
    ]
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("MAX_TOKENS", FinishReason.LENGTH),
        ("SAFETY", FinishReason.CONTENT_FILTER),
        ("RECITATION", FinishReason.CONTENT_FILTER),
        ("BLOCKLIST", FinishReason.CONTENT_FILTER),
        ("PROHIBITED_CONTENT", FinishReason.CONTENT_FILTER),
        ("SPII", FinishReason.CONTENT_FILTER),
        ("OTHER", FinishReason.STOP),
    ],
)
def test_finish_reasons(reason: str, finish: FinishReason) -> None:
    chunks = stream(sse(text_chunk("a"), text_chunk("b", finishReason=reason)))
    assert content(chunks) == "ab"
    assert final(chunks).finish_reason == finish
    assert whole(text_chunk("ab", finishReason=reason))[-1].finish_reason == finish


def test_a_malformed_function_call_is_an_error() -> None:
    chunks = stream(sse(text_chunk("", finishReason="MALFORMED_FUNCTION_CALL")))
    assert error_of(chunks).code == codes.BACKEND_STREAM_ERROR.code
    assert "MALFORMED_FUNCTION_CALL" in error_of(chunks).message
    chunks = whole(text_chunk("", finishReason="MALFORMED_FUNCTION_CALL"))
    assert error_of(chunks).code == codes.BACKEND_STREAM_ERROR.code


def test_an_error_event_names_its_status() -> None:
    err = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    chunks = stream(sse(text_chunk("a"), err))
    assert content(chunks) == "a"
    assert error_of(chunks).message == "UNAVAILABLE: The model is overloaded."
    assert len(terminals(chunks)) == 1


def test_a_stream_that_ends_early_is_truncated() -> None:
    chunks = stream(sse(text_chunk("a")))
    assert error_of(chunks).code == codes.BACKEND_STREAM_TRUNCATED.code


def test_an_event_that_is_not_json_is_a_protocol_error() -> None:
    chunks = stream(b"data: {nope\n\n" + sse(text_chunk("a", finishReason="STOP")))
    assert error_of(chunks).code == codes.BACKEND_PROTOCOL_ERROR.code


def test_a_whole_answer_that_streamed_anyway() -> None:
    chunks = whole(sse(text_chunk("hi", finishReason="STOP")))
    assert content(chunks) == "hi"
    assert final(chunks).finish_reason == FinishReason.STOP


def test_a_whole_text_answer_is_one_frame() -> None:
    doc = text_chunk("Hello", finishReason="STOP")
    doc["usageMetadata"] = {
        "promptTokenCount": 2,
        "candidatesTokenCount": 1,
        "toolUsePromptTokenCount": 3,
    }
    chunks = whole(doc)
    assert len(chunks) == 1
    assert chunks[0].content == "Hello"
    assert chunks[0].usage == Usage(5, 1, 0, 0)


@pytest.mark.parametrize("cut", ["whole", "per_event", "bytewise"])
def test_crlf_framing_as_googles_servers_write_it(cut: str) -> None:
    lf = golden_bytes("text_stream.txt")
    crlf = lf.replace(b"\n", b"\r\n")
    pieces = {
        "whole": [crlf],
        "per_event": [e + b"\r\n\r\n" for e in crlf.split(b"\r\n\r\n") if e],
        "bytewise": [crlf[i : i + 1] for i in range(len(crlf))],
    }[cut]
    got, want = stream(crlf, pieces), stream(lf)
    assert content(got) == content(want) == "Hello! How can I help you today?"
    assert reasoning_parts(got) == reasoning_parts(want)
    assert final(got) == final(want)
    assert len(terminals(got)) == 1
