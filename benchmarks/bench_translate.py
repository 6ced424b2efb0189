"""Micro benchmark of the edge: JSON -> FlatBuffer translation and chunk -> SSE.

Run: ``.venv/bin/pytest benchmarks/bench_translate.py --benchmark-enable``
(``testpaths`` is ``tests``, so this file runs only when named).

Translate, one group per request (from ``benchmarks.payloads``; "2KB-4msg" is
a four-message request of about 2 KB of JSON, the others are 8 messages with a
tool call and a tool definition at 1 KB, 16 KB and 128 KB of prompt):

- ``translate_json``: the edge's whole op, JSON bytes in, FlatBuffer bytes out
  (decode, validate, model lookup, request id, the schema-specific writer);
- ``decode``: msgspec decode + validation alone (the floor);
- ``write``: the schema-specific writer from decoded Structs;
- ``stock``: a pooled stock ``flatbuffers.Builder`` driven from the Structs;
- ``stock_json``: decode + stock builder (what ``translate_json`` replaces).

Render, per streamed token (a one-word content frame as the proxy sends it):

- ``chunk_to_sse``: ``read_chunk`` + ``StreamRenderer.feed``, the edge's op;
- ``decode_chunk_to_sse``: the same through the generated accessors;
- ``render_only``: ``StreamRenderer.feed`` of an already decoded chunk.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from benchmarks.codecs.flatgate import translate_json
from benchmarks.codecs.stock_writer import write_request_stock
from benchmarks.payloads import make_request
from flatgate.edge_translator.config import ModelConfig
from flatgate.edge_translator.models import decode_request
from flatgate.edge_translator.render import StreamRenderer
from flatgate.edge_translator.translate import write_request
from flatgate.proxy.wire.chunks import read_chunk
from flatgate.proxy.wire.frames import build_chunk, decode_chunk, unprefix
from flatgate.proxy.wire.pool import BuilderPool

MODELS = {"gpt-4o-mini": ModelConfig("gpt-4o-mini", "OpenAI")}
REQUESTS = {
    "1KB": lambda: make_request(1 << 10, 1),
    "2KB-4msg": lambda: make_request(1700, 1, messages=4, tools=0),
    "16KB": lambda: make_request(16 << 10, 1),
    "128KB": lambda: make_request(128 << 10, 1),
}
WRITE_ARGS: dict[str, Any] = {
    "provider": 0,
    "model_name": "gpt-4o-mini",
    "tenant": "acme",
    "request_id": "chatcmpl-0123456789abcdef01234567",
}


@pytest.fixture(scope="module", params=list(REQUESTS))
def body(request: pytest.FixtureRequest) -> tuple[str, bytes]:
    raw = msgspec.json.encode(REQUESTS[request.param]())
    return request.param, raw


def _group(benchmark: Any, size: str, raw: bytes) -> None:
    benchmark.group = f"translate {size} ({len(raw)} B JSON)"


def test_translate_json(benchmark, body):
    size, raw = body
    _group(benchmark, size, raw)
    out = benchmark(translate_json, raw, models=MODELS, tenant="acme")
    assert out[4:8] == b"FGRQ"


def test_decode(benchmark, body):
    size, raw = body
    _group(benchmark, size, raw)
    benchmark(decode_request, raw)


def test_write(benchmark, body):
    size, raw = body
    _group(benchmark, size, raw)
    req = decode_request(raw)
    benchmark(write_request, req, **WRITE_ARGS)


def test_stock(benchmark, body):
    size, raw = body
    _group(benchmark, size, raw)
    req = decode_request(raw)
    pool = BuilderPool()
    benchmark(write_request_stock, pool, req, **WRITE_ARGS)


def test_stock_json(benchmark, body):
    size, raw = body
    _group(benchmark, size, raw)
    pool = BuilderPool()

    def stock_json() -> bytes:
        return write_request_stock(pool, decode_request(raw), **WRITE_ARGS)

    benchmark(stock_json)


FRAME = build_chunk(
    BuilderPool(),
    request_id="chatcmpl-0123456789abcdef01234567",
    content="token ",
    model="gpt-4o-mini",
)


def _renderer() -> StreamRenderer:
    r = StreamRenderer(
        completion_id="chatcmpl-0123456789abcdef01234567",
        created=1_700_000_000,
        model="gpt-4o-mini",
        include_usage=True,
    )
    r.feed(read_chunk(FRAME))  # past the first (role) delta
    return r


def test_chunk_to_sse(benchmark):
    benchmark.group = "render, per streamed token"
    r = _renderer()
    out = benchmark(lambda: r.feed(read_chunk(FRAME)))
    assert out.startswith(b"data: {")


def test_decode_chunk_to_sse(benchmark):
    benchmark.group = "render, per streamed token"
    r = _renderer()
    benchmark(lambda: r.feed(decode_chunk(unprefix(FRAME))))


def test_render_only(benchmark):
    benchmark.group = "render, per streamed token"
    r = _renderer()
    chunk = read_chunk(FRAME)
    benchmark(r.feed, chunk)
