"""Micro benchmark of the edge: JSON -> FlatBuffer translation and chunk -> SSE,
for the three client APIs (OpenAI Chat Completions, Anthropic Messages and
the OpenAI Responses API).

Run: ``.venv/bin/pytest benchmarks/bench_translate.py --benchmark-enable``
(``testpaths`` is ``tests``, so this file runs only when named).

Translate, one group per request (from ``benchmarks.payloads``; "2KB-4msg" is
a four-message request of about 2 KB of JSON, the others are 8 messages with a
tool call and a tool definition at 1 KB, 16 KB and 128 KB of prompt):

- ``translate_json``: the OpenAI edge's whole op, JSON bytes in, FlatBuffer
  bytes out (decode, validate, model lookup, request id, the schema-specific
  writer); ``translate_json_extras``, the same op for the 16 KB request
  carrying fields with no wire slot (``logprobs``, ``top_logprobs``,
  ``min_p``, ``logit_bias``: the extras);
- ``translate_messages_json``: the same op for the same conversation as an
  Anthropic Messages request (``payloads.to_messages``), through the
  Messages edge;
- ``translate_gemini_json``: the same conversation as a Gemini
  ``streamGenerateContent`` request (``payloads.to_gemini``: the system
  prompt as ``systemInstruction``, the tool call and its answer as
  ``functionCall`` / ``functionResponse`` parts), through the Gemini edge;
- ``translate_responses_json``: the same conversation as a Responses API
  request (``payloads.to_responses``: the system prompt as ``instructions``,
  the tool call and its result as items), through the Responses edge;
- ``stock_json``: decode + a pooled stock ``flatbuffers.Builder`` (what
  ``translate_json`` replaces).

Render, per streamed token: ``chunk_to_sse``, ``read_chunk`` +
``StreamRenderer.feed`` of a one-word content frame, the OpenAI edge's op;
``chunk_to_messages_sse``, ``read_chunk`` + ``EventRenderer.feed`` of the same
frame inside an open text block (one ``content_block_delta`` event), the
Messages edge's; ``chunk_to_responses_sse``, ``read_chunk`` +
``StreamRenderer.feed`` of the same frame inside an open text part (one
``response.output_text.delta`` event), the Responses edge's;
``chunk_to_gemini_sse``, ``read_chunk`` + the Gemini edge's
``StreamRenderer.feed`` of the same frame (one ``alt=sse`` event, a
``GenerateContentResponse``). (``benchmarks.edge_ratios`` holds the Gemini
rows to the Chat Completions ones, interleaved in one process; ``make bench``
measures the OpenAI translate at every size too, allocations included.)

Adapt, one 512-token answer (the proxy's side of a request the client did
not stream): ``openai_whole_answer``, ``OpenAIWhole`` turning the answer's
``chat.completion`` body (about 2.5 KB of content) into its frames, what
the ``openai`` adapter does since it asks for whole answers; and
``openai_streamed_answer``, ``OpenAIStream`` translating the same answer as
the 512 ``data:`` events (and role, finish, usage and ``[DONE]``) it is
streamed as, one feed per event, what it did before.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from benchmarks.codecs.common import MODELS
from benchmarks.codecs.flatgate import (
    translate_gemini_json,
    translate_json,
    translate_messages_json,
    translate_responses_json,
)
from benchmarks.codecs.stock_chunk import build_chunk
from benchmarks.codecs.stock_writer import write_request_stock
from benchmarks.payloads import make_request, to_gemini, to_messages, to_responses
from flatgate.edge_translator.anthropic.render import EventRenderer
from flatgate.edge_translator.gemini.render import StreamRenderer as GeminiRenderer
from flatgate.edge_translator.openai.render import StreamRenderer
from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.render import StreamRenderer as ResponsesRenderer
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.apis.openai_responses.request import decode_request as decode_responses
from flatgate.proxy.backends.openai.stream import OpenAIStream
from flatgate.proxy.backends.openai.whole import OpenAIWhole
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.reader import read_chunk

REQUESTS = {
    "1KB": lambda: make_request(1 << 10, 1),
    "2KB-4msg": lambda: make_request(1700, 1, messages=4, tools=0),
    "16KB": lambda: make_request(16 << 10, 1),
    "128KB": lambda: make_request(128 << 10, 1),
}
REQUEST_ID = "chatcmpl-0123456789abcdef01234567"


# (label, OpenAI JSON, the same conversation as Anthropic Messages JSON, as
# Responses JSON, and as Gemini JSON)
Body = tuple[str, bytes, bytes, bytes, bytes]


@pytest.fixture(scope="module", params=list(REQUESTS))
def body(request: pytest.FixtureRequest) -> Body:
    chat = REQUESTS[request.param]()
    return (
        request.param,
        msgspec.json.encode(chat),
        msgspec.json.encode(to_messages(chat)),
        msgspec.json.encode(to_responses(chat)),
        msgspec.json.encode(to_gemini(chat)),
    )


def _group(benchmark: Any, body: Body) -> None:
    label, chat, messages, responses, gemini = body
    benchmark.group = (
        f"translate {label} ({len(chat)} B OpenAI JSON, {len(messages)} B Anthropic JSON, "
        f"{len(responses)} B Responses JSON, {len(gemini)} B Gemini JSON)"
    )


def test_translate_json(benchmark: Any, body: Body) -> None:
    _group(benchmark, body)
    out = benchmark(translate_json, body[1], models=MODELS, tenant="acme")
    assert out[4:8] == b"FGRQ"


# The client's own fields with no wire slot, which travel in the extras.
EXTRAS = {
    "logprobs": True,
    "top_logprobs": 5,
    "min_p": 0.05,
    "logit_bias": {str(t): -100 for t in range(50256, 50272)},
}


def test_translate_json_extras(benchmark: Any) -> None:
    chat = {**make_request(16 << 10, 1), **EXTRAS}
    raw = msgspec.json.encode(chat)
    benchmark.group = f"translate 16KB with extras ({len(raw)} B OpenAI JSON)"
    out = benchmark(translate_json, raw, models=MODELS, tenant="acme")
    assert out[4:8] == b"FGRQ"


def test_translate_messages_json(benchmark: Any, body: Body) -> None:
    _group(benchmark, body)
    out = benchmark(translate_messages_json, body[2], models=MODELS, tenant="acme")
    assert out[4:8] == b"FGRQ"


def test_translate_responses_json(benchmark: Any, body: Body) -> None:
    _group(benchmark, body)
    out = benchmark(translate_responses_json, body[3], models=MODELS, tenant="acme")
    assert out[4:8] == b"FGRQ"


def test_translate_gemini_json(benchmark: Any, body: Body) -> None:
    _group(benchmark, body)
    model = next(iter(MODELS))
    out = benchmark(translate_gemini_json, body[4], model=model, models=MODELS, tenant="acme")
    assert out[4:8] == b"FGRQ"


def test_stock_json(benchmark: Any, body: Body) -> None:
    _group(benchmark, body)
    raw = body[1]
    pool = BuilderPool()

    def stock_json() -> bytes:
        req = decode_request(raw)
        return write_request_stock(
            pool, req, provider=0, model_name=req.model, tenant="acme", request_id=REQUEST_ID
        )

    assert benchmark(stock_json)[4:8] == b"FGRQ"


def test_chunk_to_sse(benchmark: Any) -> None:
    benchmark.group = "render, per streamed token"
    frame = build_chunk(BuilderPool(), request_id=REQUEST_ID, content="token ", model="gpt-4o-mini")
    r = StreamRenderer(
        completion_id=REQUEST_ID, created=1_700_000_000, model="gpt-4o-mini", include_usage=True
    )
    r.feed(read_chunk(frame))  # past the first (role) delta
    out = benchmark(lambda: r.feed(read_chunk(frame)))
    assert out.startswith(b"data: {")


def test_chunk_to_messages_sse(benchmark: Any) -> None:
    benchmark.group = "render, per streamed token"
    frame = build_chunk(BuilderPool(), request_id=REQUEST_ID, content="token ", model="claude")
    r = EventRenderer(message_id="msg_0123456789abcdef0123456789", model="claude")
    r.feed(read_chunk(frame))  # past message_start and the text block's start
    out = benchmark(lambda: r.feed(read_chunk(frame)))
    assert out.startswith(b"event: content_block_delta\ndata: {")


def test_chunk_to_responses_sse(benchmark: Any) -> None:
    benchmark.group = "render, per streamed token"
    frame = build_chunk(BuilderPool(), request_id=REQUEST_ID, content="token ", model="gpt-4o-mini")
    echo = echo_of(decode_responses(b'{"model": "gpt-4o-mini", "input": "hi", "stream": true}'))
    r = ResponsesRenderer(
        response_id="resp_0123456789abcdef01234567",
        created=1_700_000_000,
        model="gpt-4o-mini",
        echo=echo,
    )
    r.feed(read_chunk(frame))  # past response.created and the text part's start
    out = benchmark(lambda: r.feed(read_chunk(frame)))
    assert out.startswith(b"event: response.output_text.delta\ndata: {")


def test_chunk_to_gemini_sse(benchmark: Any) -> None:
    benchmark.group = "render, per streamed token"
    frame = build_chunk(BuilderPool(), request_id=REQUEST_ID, content="token ", model="gemini")
    r = GeminiRenderer(response_id="0123456789abcdef01234567", model="gemini", sse=True)
    out = benchmark(lambda: r.feed(read_chunk(frame)))
    assert out.startswith(b"data: {")


# -- adapt, one 512-token answer ----------------------------------------------------

_WORDS = ("the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. ")
_TOKENS = [_WORDS[(i * 7) % len(_WORDS)] for i in range(512)]
_HEAD = {"id": "chatcmpl-1", "created": 1_700_000_000, "model": "gpt-4o-mini"}
_USAGE = {"prompt_tokens": 40, "completion_tokens": 512, "total_tokens": 552}
_WHOLE = msgspec.json.encode(
    {
        **_HEAD,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(_TOKENS), "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _USAGE,
    }
)


def _event(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
    chunk = {
        **_HEAD,
        "object": "chat.completion.chunk",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **more,
    }
    return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


_EVENTS = [
    _event({"role": "assistant", "content": ""}),
    *(_event({"content": t}) for t in _TOKENS),
    _event({}, "stop"),
    b"data: " + msgspec.json.encode({**_HEAD, "choices": [], "usage": _USAGE}) + b"\n\n",
    b"data: [DONE]\n\n",
]


def _answer_group(benchmark: Any) -> None:
    benchmark.group = (
        f"adapt, one 512-token answer ({len(_WHOLE)} B chat.completion, "
        f"{sum(map(len, _EVENTS))} B in {len(_EVENTS)} SSE events)"
    )


def test_openai_whole_answer(benchmark: Any) -> None:
    _answer_group(benchmark)

    def whole() -> bytes:
        t = OpenAIWhole("r-1", "gpt-4o-mini")
        return t.feed(_WHOLE) + t.end()

    out = benchmark(whole)
    assert read_chunk(out[: 4 + int.from_bytes(out[:4], "little")]).content == "".join(_TOKENS)


def test_openai_streamed_answer(benchmark: Any) -> None:
    _answer_group(benchmark)

    def streamed() -> list[bytes]:
        t = OpenAIStream("r-1", "gpt-4o-mini")
        out = [t.feed(e) for e in _EVENTS]
        out.append(t.end())
        return out

    frames = benchmark(streamed)
    assert sum(1 for f in frames if f) == len(_TOKENS) + 1
