"""Hostile embeddings buffers: every one is ``MalformedBuffer``, never another error.

Hand-made cases for each check of ``wire.embeddings.verify`` (each asserting
the check that caught it), then hypothesis feeding truncated, mutated and
random bytes to both readers (and to ``read_route``, which routes an
``EmbeddingRequest`` too).
"""

from __future__ import annotations

import contextlib
import struct

import flatbuffers
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.embeddings import (
    MAX_DIMENSIONS,
    MAX_INPUTS,
    read_embedding_request,
    read_embedding_response,
    verify_embedding_request,
    verify_embedding_response,
    write_embedding_request,
    write_embedding_response,
)
from flatgate.proxy.wire.layout import EMBEDDING_REQUEST, EMBEDDING_RESPONSE
from flatgate.proxy.wire.request.route import read_route, read_tenant, tenant_present
from flatgate.proxy.wire.schema import EMBEDDING_REQUEST_IDENTIFIER, EMBEDDING_RESPONSE_IDENTIFIER

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

TEXTS = write_embedding_request(
    "text-embedding-3-small",
    texts=["hello", "world", "東京"],
    request_id="r",
    provider=1,
    dimensions=64,
    user="u",
    tenant="t",
    extras='{"a": 1}',
    extras_dialect=1,
)
TOKENS = write_embedding_request("e5", tokens=[[1, 2, 3], [4], []], tenant="t")
RESPONSE = write_embedding_response(
    model="m", count=3, dimensions=4, values=bytes(range(48)), request_id="r", prompt_tokens=2
)


def field(buf: bytes, table: int, voffset: int) -> int:
    """Where the root field whose vtable entry is at ``voffset`` is (our writers'
    buffers: every field of interest present)."""
    vt = table - _I32.unpack_from(buf, table)[0]
    off: int = struct.unpack_from("<H", buf, vt + voffset)[0]
    assert off
    return table + off


def root(buf: bytes) -> int:
    return int(_U32.unpack_from(buf, 0)[0])


def target(buf: bytes, at: int) -> int:
    """What the uoffset at ``at`` points at."""
    return at + int(_U32.unpack_from(buf, at)[0])


def patched(buf: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def request_field(buf: bytes, name: str) -> int:
    return field(buf, root(buf), EMBEDDING_REQUEST.voffset(name))


def response_field(buf: bytes, name: str) -> int:
    return field(buf, root(buf), EMBEDDING_RESPONSE.voffset(name))


def refused(buf: bytes | memoryview, match: str | None, *, max_bytes: int | None = None) -> None:
    """Both the verifier and the reader of the buffer's kind refuse it."""
    response = bytes(buf[4:8]) == EMBEDDING_RESPONSE_IDENTIFIER
    verify = verify_embedding_response if response else verify_embedding_request
    read = read_embedding_response if response else read_embedding_request
    with pytest.raises(MalformedBuffer, match=match):
        verify(buf, max_bytes=max_bytes)
    with pytest.raises(MalformedBuffer, match=match):
        read(buf, max_bytes=max_bytes)


# --- the buffer as a whole ---


def test_the_valid_buffers_pass() -> None:
    assert read_embedding_request(TEXTS).count == 3
    assert read_embedding_request(TOKENS).tokens == ((1, 2, 3), (4,), ())
    assert read_embedding_response(RESPONSE).count == 3


def test_wrong_identifier() -> None:
    refused(TEXTS[:4] + b"FGRQ" + TEXTS[8:], "file identifier: expected b'FGEQ'")
    with pytest.raises(MalformedBuffer, match="file identifier: expected b'FGEV'"):
        read_embedding_response(TEXTS)
    with pytest.raises(MalformedBuffer, match="file identifier: expected b'FGEQ'"):
        read_embedding_request(RESPONSE)


def test_short_buffers_and_inputs_of_the_wrong_type() -> None:
    for buf in (b"", b"\0\0\0", EMBEDDING_REQUEST_IDENTIFIER):
        refused(buf, "buffer of")
    refused(b"\0\0\0\0" + EMBEDDING_REQUEST_IDENTIFIER, "root offset points into the header")
    with pytest.raises(MalformedBuffer, match="input"):
        read_embedding_request(bytearray(TEXTS))  # type: ignore[arg-type]
    with pytest.raises(MalformedBuffer, match="input"):
        read_embedding_response(memoryview(bytearray(RESPONSE)))
    with pytest.raises(MalformedBuffer, match="input"):
        read_embedding_response("text")  # type: ignore[arg-type]


def test_max_bytes_exceeded() -> None:
    refused(TEXTS, "exceeds max_bytes", max_bytes=len(TEXTS) - 1)
    refused(RESPONSE, "exceeds max_bytes", max_bytes=len(RESPONSE) - 1)
    assert read_embedding_response(RESPONSE, max_bytes=len(RESPONSE)).count == 3


@pytest.mark.parametrize("buf", [TEXTS, TOKENS, RESPONSE], ids=["texts", "tokens", "response"])
def test_every_truncation_is_refused(buf: bytes) -> None:
    # Past the last 3 bytes (a string's padding) every cut loses data.
    for size in range(len(buf) - 3):
        refused(buf[:size], None)


# --- tables and offsets ---


def test_root_and_vtable_out_of_place() -> None:
    refused(patched(TEXTS, 0, "<I", len(TEXTS)), "soffset past buffer end")
    refused(patched(TEXTS, 0, "<I", 10), "not 4-byte aligned")
    at = root(TEXTS)
    refused(patched(TEXTS, at, "<i", at + 1000), "vtable outside buffer")
    refused(patched(TEXTS, at, "<i", -len(TEXTS)), "vtable outside buffer")
    refused(patched(TEXTS, at, "<i", 1), "vtable not 2-byte aligned")
    vt = at - _I32.unpack_from(TEXTS, at)[0]
    refused(patched(TEXTS, vt, "<H", 3), "vtable size 3 odd or < 4")
    refused(patched(TEXTS, vt, "<H", 0xFFFE), "vtable past buffer end")
    refused(patched(TEXTS, vt + 2, "<H", 0xFFFC), "inline size")
    refused(patched(TEXTS, vt + 2, "<H", 2), "inline size")


def test_field_offsets_outside_or_unaligned() -> None:
    at = root(TEXTS)
    vt = at - _I32.unpack_from(TEXTS, at)[0]
    tsize = struct.unpack_from("<H", TEXTS, vt + 2)[0]
    model = vt + EMBEDDING_REQUEST.voffset("model_name")
    refused(patched(TEXTS, model, "<H", tsize), "outside table inline size")
    refused(patched(TEXTS, model, "<H", 2), "outside table inline size")
    refused(patched(TEXTS, model, "<H", 5), "not aligned")
    rvt = root(RESPONSE) - _I32.unpack_from(RESPONSE, root(RESPONSE))[0]
    count = rvt + EMBEDDING_RESPONSE.voffset("count")
    refused(patched(RESPONSE, count, "<H", 6), "4-byte field not aligned")


def test_strings_past_the_end_or_unterminated() -> None:
    at = request_field(TEXTS, "model_name")
    refused(patched(TEXTS, at, "<I", len(TEXTS)), r"model_name: string length past buffer end")
    s = target(TEXTS, at)
    refused(patched(TEXTS, s, "<I", 1 << 30), r"model_name: string bytes or terminator past")
    refused(patched(TEXTS, s, "<I", 1), "model_name: string terminator is not NUL")
    refused(patched(TEXTS, at, "<I", 2), "model_name: string not 4-byte aligned")
    bad = bytearray(TEXTS)
    bad[s + 4] = 0xFF  # the model name's first byte: not UTF-8
    with pytest.raises(MalformedBuffer, match="model_name is not UTF-8"):
        read_embedding_request(bytes(bad))
    verify_embedding_request(bytes(bad))  # the verifier leaves UTF-8 to the reader
    at = response_field(RESPONSE, "model")
    refused(patched(RESPONSE, at, "<I", 1 << 20), "EmbeddingResponse.model")


def test_texts_vectors_past_the_end() -> None:
    at = request_field(TEXTS, "texts")
    vec = target(TEXTS, at)
    refused(patched(TEXTS, at, "<I", len(TEXTS)), "texts: vector length past buffer end")
    refused(patched(TEXTS, vec, "<I", 1000), "texts: vector of 1000 elements past buffer end")
    refused(patched(TEXTS, vec, "<I", 0xFFFFFFFF), "texts: vector of 4294967295 elements past")
    refused(patched(TEXTS, vec + 8, "<I", 1 << 20), r"texts\[1\]: string")


def test_tokens_vectors_past_the_end() -> None:
    at = request_field(TOKENS, "tokens")
    vec = target(TOKENS, at)
    refused(patched(TOKENS, vec, "<I", 1 << 28), "tokens: vector of 268435456 elements")
    first = target(TOKENS, vec + 4)
    refused(patched(TOKENS, vec + 4, "<I", 1 << 20), r"tokens\[0\]: table soffset past")
    ids = field(TOKENS, first, 4)
    refused(patched(TOKENS, ids, "<I", 1 << 20), r"tokens\[0\]: vector length past buffer end")
    refused(
        patched(TOKENS, target(TOKENS, ids), "<I", 1 << 29),
        r"tokens\[0\]: vector of 536870912 elements past buffer end",
    )
    refused(patched(TOKENS, first, "<i", 3), r"tokens\[0\]: vtable not 2-byte aligned")


def test_values_vectors_past_the_end_or_not_matching() -> None:
    at = response_field(RESPONSE, "values")
    vec = target(RESPONSE, at)
    refused(patched(RESPONSE, vec, "<I", 13), "values: vector of 13 elements past buffer end")
    refused(patched(RESPONSE, vec, "<I", 11), "values: 11 floats for 3 vectors of 4")
    refused(patched(RESPONSE, at, "<I", len(RESPONSE)), "values: vector length past buffer end")
    refused(patched(RESPONSE, at, "<I", 2), "values: vector not")
    refused(patched(RESPONSE, response_field(RESPONSE, "count"), "<I", 2), "12 floats for 2")
    empty = write_embedding_response(model="m", count=0, dimensions=0, values=b"")
    one = patched(empty, response_field(empty, "count"), "<I", 1)
    assert read_embedding_response(one).count == 1  # one vector of no floats
    one = patched(one, response_field(one, "dimensions"), "<I", 2)
    refused(one, "0 floats for 1 vectors of 2")


def test_absurd_counts() -> None:
    count, dims = response_field(RESPONSE, "count"), response_field(RESPONSE, "dimensions")
    # count * dimensions is 2**32: zero in 32-bit arithmetic, as the values are.
    empty = write_embedding_response(model="m", count=0, dimensions=0, values=b"")
    wraps = patched(empty, response_field(empty, "count"), "<I", 1 << 16)
    wraps = patched(wraps, response_field(wraps, "dimensions"), "<I", 1 << 16)
    refused(wraps, "more than")
    refused(patched(RESPONSE, count, "<I", MAX_INPUTS + 1), f"count: {MAX_INPUTS + 1} vectors")
    refused(patched(RESPONSE, count, "<I", 0xFFFFFFFF), "count: 4294967295 vectors")
    refused(patched(RESPONSE, dims, "<I", MAX_DIMENSIONS + 1), f"dimensions: {MAX_DIMENSIONS + 1}")
    # Within the bounds but not what the values hold.
    refused(patched(RESPONSE, count, "<I", MAX_INPUTS), "floats for 2048 vectors")


def test_too_many_inputs() -> None:
    refused(write_embedding_request("m", texts=["x"] * (MAX_INPUTS + 1)), "texts: 2049 inputs")
    refused(write_embedding_request("m", tokens=[[1]] * (MAX_INPUTS + 1)), "tokens: 2049 inputs")
    assert read_embedding_request(write_embedding_request("m", texts=["x"] * MAX_INPUTS)).count == (
        MAX_INPUTS
    )


def test_dimensions_out_of_bounds() -> None:
    refused(write_embedding_request("m", texts=["x"], dimensions=-1), r"dimensions: -1 outside")
    refused(
        write_embedding_request("m", texts=["x"], dimensions=MAX_DIMENSIONS + 1),
        f"dimensions: {MAX_DIMENSIONS + 1} outside",
    )
    ok = write_embedding_request("m", texts=["x"], dimensions=MAX_DIMENSIONS)
    assert read_embedding_request(ok).dimensions == MAX_DIMENSIONS


def test_both_texts_and_tokens_or_neither() -> None:
    refused(write_embedding_request("m", texts=["a"], tokens=[[1]]), "both texts and tokens")
    refused(write_embedding_request("m"), "neither texts nor tokens")
    # Present but empty vectors are no inputs either.
    builder = flatbuffers.Builder(64)
    builder.StartVector(4, 0, 4)
    empty = builder.EndVector()
    model = builder.CreateString("m")
    builder.StartObject(len(EMBEDDING_REQUEST.fields))
    builder.PrependUOffsetTRelativeSlot(EMBEDDING_REQUEST.slot("texts"), empty, 0)
    builder.PrependUOffsetTRelativeSlot(EMBEDDING_REQUEST.slot("tokens"), empty, 0)
    builder.PrependUOffsetTRelativeSlot(EMBEDDING_REQUEST.slot("model_name"), model, 0)
    builder.Finish(builder.EndObject(), EMBEDDING_REQUEST_IDENTIFIER)
    refused(bytes(builder.Output()), "neither texts nor tokens")


def _shared(slot: str, count: int, size: int) -> bytes:
    """A request whose ``count`` inputs all point at one ``size``-byte string
    (``texts``) or one ``size``-id TokenIds (``tokens``)."""
    builder = flatbuffers.Builder(size + 64)
    if slot == "texts":
        one = builder.CreateString("x" * size)
    else:
        builder.StartVector(4, size, 4)
        for _ in range(size):
            builder.PrependInt32(7)
        ids = builder.EndVector()
        builder.StartObject(1)
        builder.PrependUOffsetTRelativeSlot(0, ids, 0)
        one = builder.EndObject()
    builder.StartVector(4, count, 4)
    for _ in range(count):
        builder.PrependUOffsetTRelative(one)
    vec = builder.EndVector()
    model = builder.CreateString("m")
    builder.StartObject(len(EMBEDDING_REQUEST.fields))
    builder.PrependUOffsetTRelativeSlot(EMBEDDING_REQUEST.slot(slot), vec, 0)
    builder.PrependUOffsetTRelativeSlot(EMBEDDING_REQUEST.slot("model_name"), model, 0)
    builder.Finish(builder.EndObject(), EMBEDDING_REQUEST_IDENTIFIER)
    return bytes(builder.Output())


@pytest.mark.parametrize("slot", ["texts", "tokens"])
def test_shared_inputs_may_not_expand_past_max_bytes(slot: str) -> None:
    """2,048 inputs at one 64 KiB input: a 70 KB buffer that decodes to 128 MiB."""
    buf = _shared(slot, MAX_INPUTS, 1 << 14 if slot == "tokens" else 1 << 16)
    assert len(buf) < 100_000
    refused(buf, "expands to more than")
    refused(buf, "expands to more than 1000000 bytes", max_bytes=1_000_000)
    small = _shared(slot, 3, 8)  # shared, but small: passes a generous max_bytes
    assert read_embedding_request(small, max_bytes=1 << 20).count == 3


# --- arbitrary bytes: only MalformedBuffer ---


def _read_all(buf: bytes) -> None:
    """Every reader of the buffer; only MalformedBuffer may leave."""
    for read in (read_embedding_request, read_embedding_response):
        with contextlib.suppress(MalformedBuffer):
            read(buf)
    try:
        read_route(buf)
    except MalformedBuffer:
        return
    # Accepted by the route: the tenant readers must not raise either.
    tenant_present(buf)
    read_tenant(buf)


def _mutations(valid: bytes) -> st.SearchStrategy[bytes]:
    edits = st.lists(
        st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)), min_size=1, max_size=8
    )
    words = st.lists(
        st.tuples(
            st.integers(0, len(valid) // 4 - 1),
            st.sampled_from([0, 1, 2, 3, 4, 0x7FFF, 0xFFFF, 1 << 16, 1 << 31, 0xFFFFFFFF]),
        ),
        min_size=1,
        max_size=4,
    )

    def apply_bytes(e: list[tuple[int, int]]) -> bytes:
        out = bytearray(valid)
        for at, value in e:
            out[at] = value
        return bytes(out)

    def apply_words(e: list[tuple[int, int]]) -> bytes:
        out = bytearray(valid)
        for at, value in e:
            _U32.pack_into(out, 4 * at, value)
        return bytes(out)

    cut = st.integers(0, len(valid)).map(lambda n: valid[:n])
    return edits.map(apply_bytes) | words.map(apply_words) | cut


VALID = (TEXTS, TOKENS, RESPONSE)


@SETTINGS
@given(st.sampled_from(VALID).flatmap(_mutations))
def test_mutated_buffers_raise_only_malformed_buffer(buf: bytes) -> None:
    _read_all(buf)


@SETTINGS
@given(
    st.sampled_from([EMBEDDING_REQUEST_IDENTIFIER, EMBEDDING_RESPONSE_IDENTIFIER]),
    st.integers(8, 64).map(lambda n: n & ~3),
    st.binary(max_size=200),
)
def test_random_bytes_raise_only_malformed_buffer(identifier: bytes, at: int, rest: bytes) -> None:
    _read_all(_U32.pack(at) + identifier + rest)
    _read_all(rest)
