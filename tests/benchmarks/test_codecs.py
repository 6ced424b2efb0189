"""The benchmark codecs do the same work: same route, same decoded fields,
encodings that decode back to the request, chunks that carry the delta.

A codec that silently skipped a field would look fast; these tests make every
codec's output comparable after normalising each format's own types (roles as
names, text as ``str``, absent as ``None``, float32 rounding).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from benchmarks.codecs import FORMATS, OPS, cases, load, operation
from benchmarks.codecs.common import DELTA, MODELS, Decoded
from benchmarks.codecs.fbs_generated import read
from benchmarks.codecs.proto import backend
from benchmarks.payloads import make_request
from flatgate.generated import gateway_pb2 as pb
from flatgate.proxy.wire.chunk.frames import unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request

ROLES = {0: "user", 1: "system", 2: "developer", 3: "assistant", 4: "tool"}
CHOICES = {0: None, 1: "auto", 2: "none", 3: "required"}


@pytest.fixture(scope="module", params=[(700, 3), (9000, 11)], ids=["700B", "9KB"])
def request_dict(request: pytest.FixtureRequest) -> dict[str, Any]:
    size, seed = request.param
    return make_request(size, seed, messages=9, tools=2)


def _text(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        value = bytes(value).decode()
    return value or None


def _json(value: Any) -> Any:
    if isinstance(value, msgspec.Raw):
        value = bytes(value)
    if isinstance(value, bytes | str):
        return json.loads(value) if value else None
    return value


def _float(value: Any) -> Any:
    return None if value is None else round(value, 5)


def normal(decoded: Decoded) -> tuple[Any, ...]:
    """One codec's ``decode`` output in comparable types."""
    model, messages, tools, sampling = decoded
    msgs = [
        (
            ROLES.get(role, role) if isinstance(role, int) else role,
            _text(content),
            tuple(tuple(_text(v) for v in call) for call in calls),
            _text(call_id),
        )
        for role, content, calls, call_id in messages
    ]
    tool_views = [
        (_text(name), _text(desc), _json(params), bool(strict))
        for name, desc, params, strict in tools
    ]
    t, top_p, max_tokens, stop, seed, n, pp, fp, stream, user, choice = sampling
    return (
        _text(model),
        msgs,
        tool_views,
        (
            _float(t),
            _float(top_p),
            max_tokens or None,
            [_text(s) for s in stop or ()],
            seed,
            n or None,
            _float(pp),
            _float(fp),
            bool(stream),
            _text(user),
            CHOICES.get(choice, choice) if isinstance(choice, int) else choice,
        ),
    )


def run(fmt: str, op: str, request: dict[str, Any]) -> Any:
    """``fmt``'s ``op`` on the input it builds from ``request``."""
    codec = load(fmt)
    return operation(codec, op)(codec.inputs(request)[op])


def decode(fmt: str, data: bytes) -> Any:
    return operation(load(fmt), "decode")(data)


def test_protobuf_runs_on_upb() -> None:
    assert backend() == "upb"


def test_matrix_covers_every_format_and_op() -> None:
    matrix = cases()
    assert {f for f, _ in matrix} == set(FORMATS)
    assert {op for _, op in matrix} == set(OPS)
    for fmt, op in matrix:
        assert callable(operation(load(fmt), op))
    with pytest.raises(KeyError):
        load("yaml")
    with pytest.raises(KeyError):
        operation(load("msgspec-partial"), "decode")


def test_every_route_finds_the_same_model(request_dict: dict[str, Any]) -> None:
    for fmt, op in cases():
        if op == "route":
            provider, model = run(fmt, op, request_dict)
            assert (provider, _text(model)) == (0, request_dict["model"]), fmt


def test_every_decode_reads_the_same_fields(request_dict: dict[str, Any]) -> None:
    views = {}
    for fmt, op in cases():
        if op == "decode":
            views[fmt] = normal(run(fmt, op, request_dict))
    reference = views.pop("json")
    assert len(reference[1]) == len(request_dict["messages"])
    assert len(reference[2]) == len(request_dict["tools"])
    for fmt, view in views.items():
        assert view == reference, fmt


def test_every_encode_decodes_back(request_dict: dict[str, Any]) -> None:
    reference = normal(run("json", "decode", request_dict))
    for fmt, op in cases():
        if op != "encode":
            continue
        wire = run(fmt, op, request_dict)
        assert isinstance(wire, bytes)
        if fmt in ("flatbuffers", "flatgate"):
            verify_request(wire)
            decoded = read(wire)
        else:
            decoded = decode(fmt, wire)
        assert normal(decoded) == reference, fmt


def test_every_chunk_carries_the_delta() -> None:
    for fmt, op in cases():
        if op != "chunk":
            continue
        frame = run(fmt, op, make_request(100))
        assert isinstance(frame, bytes)
        if fmt in ("flatbuffers", "flatgate", "flatgate-writer"):
            chunk = decode_chunk(unprefix(frame))
            fields = (chunk.request_id, chunk.content, chunk.model, chunk.index)
        elif fmt == "protobuf":
            msg = pb.CompletionChunk.FromString(frame)
            fields = (msg.request_id, msg.content, msg.model, msg.index)
        else:
            doc = json.loads(frame)
            fields = (doc["request_id"], doc["content"], doc["model"], doc.get("index", 0))
        assert fields == (DELTA.request_id, DELTA.content, DELTA.model, DELTA.index), fmt


def test_every_translate_writes_the_routed_request(request_dict: dict[str, Any]) -> None:
    reference = normal(run("json", "decode", request_dict))
    model = MODELS[request_dict["model"]]
    for fmt, op in cases():
        if op != "translate":
            continue
        wire = run(fmt, op, request_dict)
        assert isinstance(wire, bytes)
        if fmt == "protobuf":
            msg = pb.CompletionRequest.FromString(wire)
            assert (msg.provider, msg.model_name) == (model.provider_id, model.name)
            decoded = decode(fmt, wire)
        else:
            provider, name = read_route(wire)
            assert (provider, bytes(name).decode()) == (model.provider_id, model.name)
            verify_request(wire)
            decoded = read(wire)
        assert normal(decoded) == reference, fmt
