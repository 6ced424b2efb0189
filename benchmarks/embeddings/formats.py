"""The formats the embeddings bench compares, and every op each one runs.

One ``Payload`` (a seeded float32 matrix, its model and usage) is written in
each format once, outside any timing; ``cases(fmt, payload)`` gives that
format's ops as ``{op: (fn, arg)}``, each a one-argument call the harness
times (``benchmarks.micro.measure``). What each op starts from and ends
with, per format (``DECODES_TO`` says what a decode gives):

- ``encode``: from the float32 matrix a model hands over (plus model and
  usage) to the body's bytes. The JSON formats make it a list of Python floats
  first (``tolist``), as a Python server must; protobuf too (upb takes a list
  far faster than an ndarray); FlatBuffers' builder and flatgate's writer copy
  the array's bytes.
- ``decode``: the body to every vector and the usage, completely: stdlib json
  and msgspec (a typed ``Struct``) into Python floats; base64 through msgspec
  (``Struct``, a ``str`` per vector) then ``binascii.a2b_base64`` and
  ``numpy.frombuffer`` (a numpy array per vector); protobuf parses with upb and
  reads ``values`` through its ``__array__`` (one numpy array); the generated
  FlatBuffers accessors' ``ValuesAsNumpy`` and flatgate's reader (verified)
  view the buffer (one numpy array, no copy).
- ``read-one``: vector ``count // 2`` into a float32 numpy array, the internal
  caller's case. The JSON formats must still scan all of the body: stdlib json
  parses it all; msgspec and base64 decode every item's vector as
  ``msgspec.Raw`` (skipped, not parsed) and parse only the one; protobuf
  parses all of it and converts ``values`` whole (its one fast path), then
  slices; the FlatBuffers accessors and flatgate's reader view one slice.
- ``relay``: what a proxy does to the answer it passes on. flatgate: verify it
  (``read_embedding_response``, what the fbs adapter's ``embeddings_answer``
  does) and return the same bytes; the JSON formats parse and re-encode it,
  as a JSON proxy does (stdlib json; msgspec untyped, for msgspec and
  base64); protobuf parses and serializes. The generated FlatBuffers row has
  none: Python's runtime has no verifier, and relaying unchecked bytes is no
  operation.
- ``render-base64`` and ``render-float`` (format ``edge``): the edge's own
  renderer (``edge_translator.embeddings.render``) from the read response to
  OpenAI's JSON; ``b2a-base64`` (format ``binascii``): one
  ``binascii.b2a_base64`` over the same float bytes, the floor the base64
  render is held to.

``check(fmt, payload)`` runs every op once and raises ``AssertionError`` when a
decode, read or relay does not give back the payload's floats bit for bit: the
bench checks that before it times anything. No I/O.
"""

from __future__ import annotations

import json
from binascii import a2b_base64, b2a_base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flatbuffers
import msgspec
import numpy as np
import numpy.typing as npt

from flatgate.edge_translator.embeddings.render import render
from flatgate.generated import gateway_pb2 as pb
from flatgate.generated.LLMGateway import EmbeddingResponse as fb
from flatgate.proxy.wire.embeddings import read_embedding_response, write_embedding_response
from flatgate.proxy.wire.schema import EMBEDDING_RESPONSE_IDENTIFIER

__all__ = [
    "DECODES_TO",
    "FORMATS",
    "LABELS",
    "OPS",
    "Case",
    "Payload",
    "as_matrix",
    "cases",
    "check",
    "make_payload",
]

Floats = npt.NDArray[np.float32]
Case = tuple[Callable[[Any], object], object]

OPS = ("encode", "decode", "read-one", "relay", "render-base64", "render-float", "b2a-base64")
FORMATS = ("json", "msgspec", "base64", "protobuf", "flatbuffers", "flatgate", "edge", "binascii")
LABELS = {
    "json": "stdlib json (floats)",
    "msgspec": "msgspec (floats)",
    "base64": "base64 in JSON (msgspec + binascii)",
    "protobuf": "protobuf (upb, packed repeated float)",
    "flatbuffers": "FlatBuffers (generated accessors)",
    "flatgate": "flatgate (wire.embeddings)",
    "edge": "edge renderer",
    "binascii": "binascii.b2a_base64 (floor)",
}
DECODES_TO = {
    "json": "Python floats",
    "msgspec": "Python floats",
    "base64": "a numpy array per vector",
    "protobuf": "one numpy array (a copy)",
    "flatbuffers": "one numpy array (a view)",
    "flatgate": "one numpy array (a view)",
}
MODEL = "text-embedding-3-small"
REQUEST_ID = "embd-5f0c8a1e9d3b4c7a2e6f1d08"


@dataclass(frozen=True, slots=True)
class Payload:
    """One embeddings answer: ``matrix`` is ``count x dimensions`` float32."""

    matrix: Floats
    model: str = MODEL
    request_id: str = REQUEST_ID
    prompt_tokens: int = 0
    total_tokens: int = 0

    @property
    def count(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dimensions(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def index(self) -> int:
        """The vector ``read-one`` reads."""
        return self.count // 2


def make_payload(count: int, dimensions: int, seed: int = 0) -> Payload:
    """Seeded unit-normal float32 values (a vector's norm near 1, as models give)."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((count, dimensions), dtype=np.float32)
    matrix /= np.float32(np.sqrt(dimensions))
    tokens = 7 * count
    return Payload(matrix=matrix, prompt_tokens=tokens, total_tokens=tokens)


def _f32(values: object) -> Floats:
    return np.asarray(values, dtype=np.float32)


def _usage(p: Payload) -> dict[str, int]:
    return {"prompt_tokens": p.prompt_tokens, "total_tokens": p.total_tokens}


def _openai(p: Payload, vectors: list[Any]) -> dict[str, Any]:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": p.model, "usage": _usage(p)}


# --- JSON: stdlib json and msgspec, floats; base64 strings -----------------


class Usage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class FloatItem(msgspec.Struct):
    index: int
    embedding: list[float]


class TextItem(msgspec.Struct):
    index: int
    embedding: str


class RawItem(msgspec.Struct):
    index: int
    embedding: msgspec.Raw


class FloatList(msgspec.Struct):
    data: list[FloatItem]
    model: str
    usage: Usage


class TextList(msgspec.Struct):
    data: list[TextItem]
    model: str
    usage: Usage


class RawList(msgspec.Struct):
    data: list[RawItem]
    model: str
    usage: Usage


_FLOATS = msgspec.json.Decoder(FloatList)
_TEXTS = msgspec.json.Decoder(TextList)
_RAWS = msgspec.json.Decoder(RawList)
_ANY = msgspec.json.Decoder()
_VECTOR = msgspec.json.Decoder(list[float])
_encode = msgspec.json.Encoder().encode


def _json_cases(p: Payload) -> dict[str, Case]:
    i = p.index
    body = json.dumps(_openai(p, p.matrix.tolist()), separators=(",", ":")).encode()

    def encode(m: Floats) -> bytes:
        return json.dumps(_openai(p, m.tolist()), separators=(",", ":")).encode()

    def read_one(b: bytes) -> Floats:
        return _f32(json.loads(b)["data"][i]["embedding"])

    def relay(b: bytes) -> bytes:
        return json.dumps(json.loads(b), separators=(",", ":")).encode()

    return {
        "encode": (encode, p.matrix),
        "decode": (json.loads, body),
        "read-one": (read_one, body),
        "relay": (relay, body),
    }


def _msgspec_cases(p: Payload) -> dict[str, Case]:
    i = p.index
    body = _encode(_openai(p, p.matrix.tolist()))

    def encode(m: Floats) -> bytes:
        return _encode(_openai(p, m.tolist()))

    def read_one(b: bytes) -> Floats:
        return _f32(_VECTOR.decode(_RAWS.decode(b).data[i].embedding))

    def relay(b: bytes) -> bytes:
        return _encode(_ANY.decode(b))

    return {
        "encode": (encode, p.matrix),
        "decode": (_FLOATS.decode, body),
        "read-one": (read_one, body),
        "relay": (relay, body),
    }


def _base64_cases(p: Payload) -> dict[str, Case]:
    i = p.index

    def encode(m: Floats) -> bytes:
        return _encode(_openai(p, [b2a_base64(v, newline=False).decode() for v in m]))

    def decode(b: bytes) -> tuple[str, Usage, list[Floats]]:
        r = _TEXTS.decode(b)
        return r.model, r.usage, [np.frombuffer(a2b_base64(d.embedding), "<f4") for d in r.data]

    def read_one(b: bytes) -> Floats:
        raw = memoryview(_RAWS.decode(b).data[i].embedding)
        return np.frombuffer(a2b_base64(raw[1:-1]), "<f4")  # the string without its quotes

    def relay(b: bytes) -> bytes:
        return _encode(_ANY.decode(b))

    body = encode(p.matrix)
    return {
        "encode": (encode, p.matrix),
        "decode": (decode, body),
        "read-one": (read_one, body),
        "relay": (relay, body),
    }


# --- protobuf ---------------------------------------------------------------


def _protobuf_cases(p: Payload) -> dict[str, Case]:
    n = p.dimensions
    lo = p.index * n
    parse = pb.EmbeddingResponse.FromString

    def encode(m: Floats) -> bytes:
        rows, dims = m.shape
        msg = pb.EmbeddingResponse(
            request_id=p.request_id,
            model=p.model,
            count=rows,
            dimensions=dims,
            values=m.ravel().tolist(),
            prompt_tokens=p.prompt_tokens,
            total_tokens=p.total_tokens,
        )
        out: bytes = msg.SerializeToString()
        return out

    def decode(b: bytes) -> tuple[str, int, int, Floats]:
        m = parse(b)
        values = _f32(m.values).reshape(m.count, m.dimensions)
        return m.model, m.prompt_tokens, m.total_tokens, values

    def read_one(b: bytes) -> Floats:
        return _f32(parse(b).values)[lo : lo + n]

    def relay(b: bytes) -> bytes:
        out: bytes = parse(b).SerializeToString()
        return out

    body = encode(p.matrix)
    return {
        "encode": (encode, p.matrix),
        "decode": (decode, body),
        "read-one": (read_one, body),
        "relay": (relay, body),
    }


# --- FlatBuffers, generated code ---------------------------------------------


def _flatbuffers_cases(p: Payload) -> dict[str, Case]:
    i = p.index
    root = fb.EmbeddingResponse.GetRootAs

    def encode(m: Floats) -> bytes:
        rows, dims = m.shape
        b = flatbuffers.Builder(m.nbytes + 256)
        rid = b.CreateString(p.request_id)
        model = b.CreateString(p.model)
        values = b.CreateNumpyVector(m.ravel())
        fb.Start(b)
        fb.AddRequestId(b, rid)
        fb.AddModel(b, model)
        fb.AddCount(b, rows)
        fb.AddDimensions(b, dims)
        fb.AddValues(b, values)
        fb.AddPromptTokens(b, p.prompt_tokens)
        fb.AddTotalTokens(b, p.total_tokens)
        b.Finish(fb.End(b), file_identifier=EMBEDDING_RESPONSE_IDENTIFIER)
        return bytes(b.Output())

    def decode(b: bytes) -> tuple[bytes, int, int, Floats]:
        r = root(b, 0)
        values = r.ValuesAsNumpy().reshape(r.Count(), r.Dimensions())
        return r.Model(), r.PromptTokens(), r.TotalTokens(), values

    def read_one(b: bytes) -> Floats:
        r = root(b, 0)
        n = r.Dimensions()
        values: Floats = r.ValuesAsNumpy()
        return values[i * n : (i + 1) * n]

    body = encode(p.matrix)
    return {"encode": (encode, p.matrix), "decode": (decode, body), "read-one": (read_one, body)}


# --- flatgate -----------------------------------------------------------------


def _flatgate_body(p: Payload) -> bytes:
    return write_embedding_response(
        model=p.model,
        count=p.count,
        dimensions=p.dimensions,
        values=p.matrix.data,
        prompt_tokens=p.prompt_tokens,
        total_tokens=p.total_tokens,
        request_id=p.request_id,
    )


def _flatgate_cases(p: Payload) -> dict[str, Case]:
    i = p.index

    def encode(m: Floats) -> bytes:
        rows, dims = m.shape
        return write_embedding_response(
            model=p.model,
            count=rows,
            dimensions=dims,
            values=m.data,
            prompt_tokens=p.prompt_tokens,
            total_tokens=p.total_tokens,
            request_id=p.request_id,
        )

    def decode(b: bytes) -> tuple[str, int, int, Floats]:
        e = read_embedding_response(b)
        values = np.frombuffer(e.values, "<f4").reshape(e.count, e.dimensions)
        return e.model, e.prompt_tokens, e.total_tokens, values

    def read_one(b: bytes) -> Floats:
        return np.frombuffer(read_embedding_response(b).vector(i), "<f4")

    def relay(b: bytes) -> bytes:
        read_embedding_response(b)
        return b

    body = _flatgate_body(p)
    return {
        "encode": (encode, p.matrix),
        "decode": (decode, body),
        "read-one": (read_one, body),
        "relay": (relay, body),
    }


# --- the edge's renderer, and its floor ------------------------------------------


def _edge_cases(p: Payload) -> dict[str, Case]:
    e = read_embedding_response(_flatgate_body(p))

    def base64(x: Any) -> bytes:
        return render(x, model=p.model, base64=True)

    def floats(x: Any) -> bytes:
        return render(x, model=p.model, base64=False)

    return {"render-base64": (base64, e), "render-float": (floats, e)}


def _binascii_cases(p: Payload) -> dict[str, Case]:
    values = read_embedding_response(_flatgate_body(p)).values

    def encode(v: memoryview) -> bytes:
        return b2a_base64(v, newline=False)

    return {"b2a-base64": (encode, values)}


_CASES: dict[str, Callable[[Payload], dict[str, Case]]] = {
    "json": _json_cases,
    "msgspec": _msgspec_cases,
    "base64": _base64_cases,
    "protobuf": _protobuf_cases,
    "flatbuffers": _flatbuffers_cases,
    "flatgate": _flatgate_cases,
    "edge": _edge_cases,
    "binascii": _binascii_cases,
}


def cases(fmt: str, p: Payload) -> dict[str, Case]:
    """``fmt``'s ops on ``p``, in ``OPS`` order (``KeyError``: no such format)."""
    if fmt not in _CASES:
        raise KeyError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return _CASES[fmt](p)


# --- what each op must give back ---------------------------------------------------


def as_matrix(fmt: str, out: Any) -> Floats:
    """What ``fmt``'s decode gave, its vectors as one float32 matrix (untimed)."""
    if fmt == "json":
        return _f32([d["embedding"] for d in out["data"]])
    if fmt == "msgspec":
        return _f32([d.embedding for d in out.data])
    if fmt == "base64":
        return _f32(out[2])
    return _f32(out[3])


def _json_floats(fmt: str, body: bytes) -> Floats:
    data = json.loads(body)["data"]
    if fmt == "base64":
        return _f32([np.frombuffer(a2b_base64(d["embedding"]), "<f4") for d in data])
    return _f32([d["embedding"] for d in data])


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"{what}: not the payload's floats")


def check(fmt: str, p: Payload) -> None:
    """Every op of ``fmt`` run once on ``p``; ``AssertionError`` unless each
    decode, read and relay gives ``p``'s floats back bit for bit, and each
    render, OpenAI's answer with them."""
    ops = cases(fmt, p)
    for op, (fn, arg) in ops.items():
        out: Any = fn(arg)
        what = f"{fmt} {op} at {p.count}x{p.dimensions}"
        if op == "decode":
            got = as_matrix(fmt, out)
            _expect(got.dtype == np.float32 and np.array_equal(got, p.matrix), what)
        elif op == "read-one":
            _expect(out.dtype == np.float32 and np.array_equal(out, p.matrix[p.index]), what)
        elif op in ("encode", "relay"):
            again = ops["decode"][0](out)
            _expect(np.array_equal(as_matrix(fmt, again), p.matrix), what)
        elif op.startswith("render"):
            fmt_seen = "base64" if op == "render-base64" else "json"
            _expect(np.array_equal(_json_floats(fmt_seen, out), p.matrix), what)
        else:  # b2a-base64
            floor = np.frombuffer(a2b_base64(out), "<f4")
            _expect(np.array_equal(floor, p.matrix.ravel()), what)
