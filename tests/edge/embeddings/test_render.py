"""``embeddings.render``: the vectors of an ``EmbeddingResponse`` in OpenAI's
JSON, as base64 bytes and as floats, bit for bit."""

from __future__ import annotations

import base64
import json
import struct

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.edge_translator.embeddings.render import (
    CHUNK_FLOATS,
    STREAM_AT,
    pieces,
    render,
    size_bound,
)
from flatgate.proxy.wire.embeddings import read_embedding_response, write_embedding_response


def _answer(rows: list[list[float]], dims: int, model: str = "m", tokens: int = 0) -> bytes:
    values = b"".join(struct.pack(f"<{dims}f", *row) for row in rows)
    return write_embedding_response(
        model="backend", count=len(rows), dimensions=dims, values=values,
        prompt_tokens=tokens, total_tokens=tokens,
    )  # fmt: skip


_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(st.integers(0, 5), st.integers(1, 9), st.data())
def test_both_formats_carry_every_bit(count: int, dims: int, data: st.DataObject) -> None:
    rows = [data.draw(st.lists(_f32, min_size=dims, max_size=dims)) for _ in range(count)]
    e = read_embedding_response(_answer(rows, dims, tokens=count))
    as_b64 = json.loads(render(e, model="edge-name", base64=True))
    as_floats = json.loads(render(e, model="edge-name", base64=False))
    for body in (as_b64, as_floats):
        assert body["object"] == "list" and body["model"] == "edge-name"
        assert body["usage"] == {"prompt_tokens": count, "total_tokens": count}
        assert [d["index"] for d in body["data"]] == list(range(count))
        assert all(d["object"] == "embedding" for d in body["data"])
    for i, row in enumerate(rows):
        packed = struct.pack(f"<{dims}f", *row)
        assert base64.b64decode(as_b64["data"][i]["embedding"]) == packed
        # The JSON floats are the float32 values exactly (as doubles).
        assert struct.pack(f"<{dims}f", *as_floats["data"][i]["embedding"]) == packed
        assert as_floats["data"][i]["embedding"] == list(struct.unpack(f"<{dims}f", packed))


def test_the_model_name_is_escaped() -> None:
    e = read_embedding_response(_answer([[1.0]], 1))
    body = render(e, model='a"b\\c\u00e9', base64=False)
    assert msgspec.json.decode(body)["model"] == 'a"b\\c\u00e9'


def test_no_vectors_is_an_empty_list() -> None:
    e = read_embedding_response(_answer([], 4))
    assert json.loads(render(e, model="m", base64=True))["data"] == []
    assert json.loads(render(e, model="m", base64=False))["data"] == []


@settings(max_examples=30)
@given(st.integers(0, 7), st.integers(1, 5), st.integers(1, 4), st.booleans())
def test_pieces_make_the_whole_answer(count: int, dims: int, chunk: int, b64: bool) -> None:
    rows = [[float(i * dims + j) / 7 for j in range(dims)] for i in range(count)]
    e = read_embedding_response(_answer(rows, dims, tokens=3))
    parts = list(pieces(e, model="m", base64=b64, chunk=chunk))
    assert b"".join(parts) == render(e, model="m", base64=b64)
    # One piece per ``chunk`` vectors, then the envelope's tail.
    assert len(parts) == -(-count // chunk) + 1 if count else len(parts) == 1


def test_size_bound_holds_the_text() -> None:
    rows = [[-1.2345678e-30, 3.4028234e38, -0.0, 1e-45] for _ in range(3)]
    e = read_embedding_response(_answer(rows, 4))
    for b64 in (False, True):
        assert len(render(e, model="m" * 50, base64=b64)) <= size_bound(e, base64=b64)


def test_a_large_answer_goes_in_pieces_of_about_chunk_floats() -> None:
    dims = 8192
    count = 3 * CHUNK_FLOATS // dims + 1
    e = read_embedding_response(_answer([[0.5] * dims] * count, dims))
    assert size_bound(e, base64=False) > STREAM_AT
    parts = list(pieces(e, model="m", base64=False))
    assert len(parts) == 5  # four of vectors (the last one short), then the tail
    assert max(len(p) for p in parts) < 2 * CHUNK_FLOATS * 25
    assert len(json.loads(b"".join(parts))["data"]) == count
