"""``backends.bedrock.converse_stream`` and ``converse_whole``: ConverseStream
event-stream bodies and whole Converse answers into chunk frames.

Streams are framed here with ``eventstream.encode_message``, which
``test_eventstream`` holds to botocore's parser; the documented stream and
tool-use answer are golden files (``golden/README.md``)."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest

from flatgate.proxy.backends.bedrock.converse_stream import ConverseStream
from flatgate.proxy.backends.bedrock.converse_whole import ConverseWhole
from flatgate.proxy.backends.bedrock.eventstream import encode_message
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.schema import ApiDialect, FinishReason
from tests.backends.bedrock.converse_helpers import event, exception, golden
from tests.backends.helpers import calls, content, error_of, final, random_pieces, reasoning, run

RID = "req-b"
MODEL = "amazon.nova-pro-v1:0"


def stream(*events: bytes, pieces: list[bytes] | None = None) -> list[Chunk]:
    body = b"".join(events)
    return run(ConverseStream(RID, MODEL), pieces if pieces is not None else [body])


def delta(index: int, **d: Any) -> bytes:
    return event("contentBlockDelta", {"contentBlockIndex": index, "delta": d})


def stop(index: int) -> bytes:
    return event("contentBlockStop", {"contentBlockIndex": index})


def message_stop(reason: str) -> bytes:
    return event("messageStop", {"stopReason": reason})


def metadata(**usage: int) -> bytes:
    return event("metadata", {"usage": usage, "metrics": {"latencyMs": 10}})


def documented_stream() -> bytes:
    return b"".join(
        encode_message(
            [(name, kind), (":content-type", "application/json"), (":message-type", "event")],
            json.dumps(payload).encode(),
        )
        for name, kind, payload in golden("text_stream.json")
    )


# -- streams ----------------------------------------------------------------------


def test_the_documented_text_stream() -> None:
    chunks = stream(documented_stream())
    assert content(chunks) == "Hello! How can I help you today?"
    last = final(chunks)
    assert last.finish_reason == FinishReason.STOP
    assert last.usage == Usage(12, 13)
    assert all(c.model == MODEL for c in chunks)


def test_any_cut_of_the_documented_stream_says_the_same() -> None:
    body = documented_stream()
    rng = random.Random(39)
    for _ in range(30):
        chunks = run(ConverseStream(RID, MODEL), random_pieces(body, rng))
        assert content(chunks) == "Hello! How can I help you today?"
        assert final(chunks).usage == Usage(12, 13)


def test_text_of_one_read_is_one_chunk() -> None:
    chunks = stream(
        delta(0, text="a"), delta(0, text="b"), stop(0), message_stop("end_turn"), metadata()
    )
    assert [c.content for c in chunks if c.content] == ["ab"]


def test_tool_calls() -> None:
    chunks = stream(
        delta(0, text="Let me look."),
        stop(0),
        event(
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "top_song"}}},
        ),
        delta(1, toolUse={"input": '{"sign":'}),
        delta(1, toolUse={"input": ' "WZPZ"}'}),
        stop(1),
        event(
            "contentBlockStart",
            {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t2", "name": "noop"}}},
        ),
        stop(2),
        message_stop("tool_use"),
        metadata(inputTokens=5, outputTokens=7, totalTokens=12),
    )
    assert calls(chunks) == {
        0: {"ids": ["t1"], "names": ["top_song"], "arguments": '{"sign": "WZPZ"}'},
        1: {"ids": ["t2"], "names": ["noop"], "arguments": "{}"},
    }
    assert final(chunks).finish_reason == FinishReason.TOOL_CALLS


def test_reasoning_with_its_signature_and_redacted_reasoning() -> None:
    chunks = stream(
        delta(0, reasoningContent={"text": "Think"}),
        delta(0, reasoningContent={"text": "ing."}),
        delta(0, reasoningContent={"signature": "sig-1"}),
        stop(0),
        delta(1, reasoningContent={"redactedContent": base64.b64encode(b"\x01\x02").decode()}),
        stop(1),
        delta(2, text="4"),
        stop(2),
        message_stop("end_turn"),
        metadata(inputTokens=1, outputTokens=2, totalTokens=3),
    )
    assert reasoning(chunks) == "Thinking."
    parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    assert parts[0].text == "Thinking." and parts[0].opaque == b"sig-1"
    assert parts[0].dialect == int(ApiDialect.ANTHROPIC_MESSAGES) and not parts[0].redacted
    assert parts[1].redacted and base64.b64decode(parts[1].opaque) == b"\x01\x02"
    assert content(chunks) == "4"


def test_usage_counts_cache_reads_and_writes_in_the_prompt() -> None:
    chunks = stream(
        delta(0, text="x"),
        message_stop("max_tokens"),
        metadata(
            inputTokens=10,
            outputTokens=3,
            totalTokens=73,
            cacheReadInputTokens=50,
            cacheWriteInputTokens=10,
        ),
    )
    last = final(chunks)
    assert last.finish_reason == FinishReason.LENGTH
    assert last.usage == Usage(70, 3, 50, 0, 10)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("tool_use", FinishReason.TOOL_CALLS),
        ("guardrail_intervened", FinishReason.CONTENT_FILTER),
        ("content_filtered", FinishReason.CONTENT_FILTER),
    ],
)
def test_stop_reasons(reason: str, finish: FinishReason) -> None:
    assert final(stream(message_stop(reason), metadata())).finish_reason == finish


def test_a_malformed_output_is_an_error() -> None:
    err = error_of(stream(message_stop("malformed_tool_use"), metadata()))
    assert err.code == codes.BACKEND_STREAM_ERROR.code and "malformed_tool_use" in err.message


@pytest.mark.parametrize(
    "kind",
    [
        "throttlingException",
        "modelStreamErrorException",
        "internalServerException",
        "serviceUnavailableException",
        "validationException",
    ],
)
def test_an_exception_event_is_one_error_chunk(kind: str) -> None:
    chunks = stream(delta(0, text="par"), exception(kind, "it broke"), delta(0, text="ignored"))
    err = error_of(chunks)
    assert err.code == codes.BACKEND_STREAM_ERROR.code
    assert err.message == f"{kind}: it broke"
    assert content(chunks) == "par"


def test_a_stream_that_ends_early_is_truncated_and_one_without_metadata_ends_well() -> None:
    err = error_of(stream(delta(0, text="x")))
    assert err.code == codes.BACKEND_STREAM_TRUNCATED.code
    cut = delta(0, text="x") + message_stop("end_turn")
    assert final(stream(cut)).finish_reason == FinishReason.STOP
    half = delta(0, text="x")
    err = error_of(stream(half[:-3]))
    assert err.code == codes.BACKEND_STREAM_TRUNCATED.code


def test_bytes_that_are_not_an_event_stream_are_a_protocol_error() -> None:
    bad = bytearray(delta(0, text="x"))
    bad[-1] ^= 1
    assert error_of(stream(bytes(bad))).code == codes.BACKEND_PROTOCOL_ERROR.code
    assert error_of(stream(event("contentBlockDelta", {"delta": {"text": 5}}))).code == (
        codes.BACKEND_PROTOCOL_ERROR.code
    )


# -- whole answers ----------------------------------------------------------------


def whole(body: dict[str, Any] | bytes) -> list[Chunk]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return run(ConverseWhole(RID, MODEL), [data])


def test_the_documented_tool_use_answer() -> None:
    chunks = whole(golden("tool_use_response.json"))
    call = calls(chunks)[0]
    assert (call["ids"], call["names"]) == (["tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"], ["top_song"])
    assert json.loads(call["arguments"]) == {"sign": "WZPZ"}
    last = final(chunks)
    assert last.finish_reason == FinishReason.TOOL_CALLS and last.usage is None


def test_a_whole_answer_with_reasoning_text_and_usage() -> None:
    chunks = whole(
        {
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [
                        {"reasoningContent": {"reasoningText": {"text": "Hmm.", "signature": "s"}}},
                        {"reasoningContent": {"redactedContent": base64.b64encode(b"r").decode()}},
                        {"text": "Four"},
                        {"text": "."},
                    ],
                }
            },
            "stopReason": "end_turn",
            "usage": {
                "inputTokens": 3,
                "outputTokens": 4,
                "totalTokens": 9,
                "cacheReadInputTokens": 2,
            },
            "metrics": {"latencyMs": 100},
        }
    )
    assert reasoning(chunks) == "Hmm."
    parts = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    assert parts[0].opaque == b"s" and parts[1].redacted
    last = final(chunks)
    assert last.content == "Four." and last.usage == Usage(5, 4, 2)


def test_a_whole_answer_without_a_stop_reason_is_a_protocol_error() -> None:
    assert error_of(whole({"output": {}})).code == codes.BACKEND_PROTOCOL_ERROR.code


def test_a_whole_answer_that_streams_anyway_is_read_as_a_stream() -> None:
    chunks = whole(documented_stream())
    assert content(chunks) == "Hello! How can I help you today?"
