"""``backends.bedrock.eventstream``: AWS's event-stream framing, held to
botocore's ``EventStreamBuffer`` both ways.

Frames we encode are parsed by botocore; frames built here from the
specification (every header type, struct by struct, CRC32 by zlib) are parsed
by ours and by botocore alike; bad lengths, CRCs and headers are refused as
``EventStreamError``; any cut of a stream into reads gives the same messages.
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from flatgate.proxy.backends.bedrock.eventstream import (
    EventMessage,
    EventStreamError,
    EventStreamParser,
    encode_message,
    event_type,
    message_type,
)
from flatgate.proxy.errors import codes


def spec_header(name: str, kind: int, value: Any) -> bytes:
    """One header as the specification lays it out."""
    raw = name.encode()
    out = bytes([len(raw)]) + raw + bytes([kind])
    if kind in (0, 1):
        return out
    if kind == 2:
        return out + struct.pack(">b", value)
    if kind == 3:
        return out + struct.pack(">h", value)
    if kind == 4:
        return out + struct.pack(">i", value)
    if kind in (5, 8):
        return out + struct.pack(">q", value)
    if kind == 6:
        return out + struct.pack(">H", len(value)) + bytes(value)
    if kind == 7:
        data = str(value).encode()
        return out + struct.pack(">H", len(data)) + data
    assert kind == 9 and len(value) == 16
    return out + bytes(value)


def spec_frame(headers: bytes, payload: bytes) -> bytes:
    """A message as the specification lays it out: prelude, its CRC, headers, payload, CRC."""
    lengths = struct.pack(">II", 16 + len(headers) + len(payload), len(headers))
    prelude = lengths + struct.pack(">I", zlib.crc32(lengths))
    body = prelude + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def botocore_messages(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    buf = EventStreamBuffer()
    buf.add_data(data)
    return [(m.headers, m.payload) for m in buf]


def ours(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    return [(m.headers, m.payload) for m in EventStreamParser().feed(data)]


CHUNK_HEADERS = [
    (":event-type", "contentBlockDelta"),
    (":content-type", "application/json"),
    (":message-type", "event"),
]


# -- encoding, read back by botocore ---------------------------------------------


def test_the_empty_message_is_the_specified_sixteen_bytes() -> None:
    # Total length 16, no headers: the prelude's and message's CRCs are fixed.
    assert encode_message([], b"") == bytes.fromhex("00000010 00000000 05c248eb 7d98c8ff")


def test_botocore_reads_what_we_encode() -> None:
    payload = b'{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcd"}'
    frame = encode_message(CHUNK_HEADERS, payload)
    assert botocore_messages(frame) == [(dict(CHUNK_HEADERS), payload)]
    assert frame == spec_frame(b"".join(spec_header(n, 7, v) for n, v in CHUNK_HEADERS), payload)


def test_botocore_reads_a_run_of_our_frames() -> None:
    frames = [encode_message(CHUNK_HEADERS, f'{{"n":{i}}}'.encode()) for i in range(50)]
    got = botocore_messages(b"".join(frames))
    assert [p for _, p in got] == [f'{{"n":{i}}}'.encode() for i in range(50)]


@settings(max_examples=60, deadline=None)
@given(
    headers=st.lists(
        st.tuples(
            st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) < 256),
            st.text(max_size=200),
        ),
        max_size=5,
        unique_by=lambda h: h[0],
    ),
    payload=st.binary(max_size=2000),
)
def test_any_frame_we_encode_botocore_and_we_read_alike(
    headers: list[tuple[str, str]], payload: bytes
) -> None:
    frame = encode_message(headers, payload)
    assert botocore_messages(frame) == ours(frame) == [(dict(headers), payload)]


def test_encode_refuses_what_the_format_cannot_hold() -> None:
    with pytest.raises(ValueError, match="header name"):
        encode_message([("", "x")], b"")
    with pytest.raises(ValueError, match="header name"):
        encode_message([("n" * 256, "x")], b"")
    with pytest.raises(ValueError, match="65535"):
        encode_message([("n", "x" * 65536)], b"")


# -- parsing frames built to the specification -------------------------------------


def test_every_header_type_reads_as_botocore_reads_it() -> None:
    uuid = bytes(range(16))
    headers = b"".join(
        [
            spec_header("t", 0, True),
            spec_header("f", 1, False),
            spec_header("byte", 2, -1),
            spec_header("short", 3, -2),
            spec_header("integer", 4, 2**31 - 1),
            spec_header("long", 5, -(2**63)),
            spec_header("bytes", 6, b"\x00\xff"),
            spec_header("string", 7, "héllo ✓"),
            spec_header("timestamp", 8, 1_700_000_000_123),
            spec_header("uuid", 9, uuid),
        ]
    )
    frame = spec_frame(headers, b"{}")
    expected = {
        "t": True,
        "f": False,
        "byte": -1,
        "short": -2,
        "integer": 2**31 - 1,
        "long": -(2**63),
        "bytes": b"\x00\xff",
        "string": "héllo ✓",
        "timestamp": 1_700_000_000_123,
        "uuid": uuid,
    }
    assert ours(frame) == botocore_messages(frame) == [(expected, b"{}")]


def test_a_stream_cut_anywhere_gives_the_same_messages() -> None:
    frames = b"".join(
        [
            spec_frame(spec_header(":event-type", 7, "messageStart"), b'{"role":"assistant"}'),
            spec_frame(b"", b""),
            spec_frame(spec_header("n", 4, 7), b"x" * 300),
        ]
    )
    whole = ours(frames)
    assert len(whole) == 3
    for cut in range(len(frames) + 1):
        parser = EventStreamParser()
        got = parser.feed(frames[:cut]) + parser.feed(frames[cut:])
        assert [(m.headers, m.payload) for m in got] == whole
        assert parser.pending == 0
    parser = EventStreamParser()
    byte_by_byte = [m for i in range(len(frames)) for m in parser.feed(frames[i : i + 1])]
    assert [(m.headers, m.payload) for m in byte_by_byte] == whole


def test_a_partial_message_is_held_back() -> None:
    frame = spec_frame(spec_header("a", 7, "b"), b"payload")
    parser = EventStreamParser()
    assert parser.feed(frame[:-1]) == []
    assert parser.pending == len(frame) - 1
    assert parser.feed(frame[-1:]) == [EventMessage({"a": "b"}, b"payload")]


# -- refusals -------------------------------------------------------------------------


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_a_bad_prelude_crc_is_refused_before_its_lengths_are_trusted() -> None:
    frame = spec_frame(b"", b"abc")
    bad = _flip(frame, 2)  # the total length, now huge
    with pytest.raises(EventStreamError, match="prelude"):
        EventStreamParser().feed(bad[:12])


def test_a_bad_message_crc_is_refused() -> None:
    frame = spec_frame(spec_header("a", 7, "b"), b"payload")
    with pytest.raises(EventStreamError, match="message's CRC"):
        EventStreamParser().feed(_flip(frame, len(frame) - 5))
    with pytest.raises(EventStreamError, match="message's CRC"):
        EventStreamParser().feed(_flip(frame, len(frame) - 1))


def _with_lengths(total: int, head: int, rest: bytes) -> bytes:
    lengths = struct.pack(">II", total, head)
    return lengths + struct.pack(">I", zlib.crc32(lengths)) + rest


def test_lengths_that_cannot_be_are_refused() -> None:
    with pytest.raises(EventStreamError, match="cannot hold"):
        EventStreamParser().feed(_with_lengths(16, 4, b""))
    with pytest.raises(EventStreamError, match="headers of"):
        EventStreamParser().feed(_with_lengths(200_000, 131_073, b""))
    with pytest.raises(EventStreamError, match="payload of"):
        EventStreamParser(max_payload=100).feed(_with_lengths(16 + 101, 0, b""))


def test_a_message_larger_than_the_bounds_is_refused_before_it_is_buffered() -> None:
    parser = EventStreamParser()
    with pytest.raises(EventStreamError, match="payload of"):
        parser.feed(_with_lengths(16 + (16 << 20) + 1, 0, b""))


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (b"\x00", "runs past"),
        (b"\x05ab", "runs past"),
        (b"\x01a\x04\x00\x00", "runs past"),
        (b"\x01a\x07\x00\x09abc", "runs past"),
        (b"\x01a\x0a", "unknown type 10"),
        (b"\x01a\x07\x00\x01\xff", "not UTF-8"),
        (b"\x01a\x00\x01a\x01", "twice"),
        (b"\x01a\x09" + b"\x00" * 8, "runs past"),
    ],
)
def test_bad_headers_are_refused(headers: bytes, reason: str) -> None:
    with pytest.raises(EventStreamError, match=reason):
        EventStreamParser().feed(spec_frame(headers, b""))


def test_the_error_is_a_backend_protocol_error_and_a_value_error() -> None:
    err = EventStreamError("x")
    assert isinstance(err, ValueError)
    assert err.code is codes.BACKEND_PROTOCOL_ERROR


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_our_error(data: bytes) -> None:
    with contextlib.suppress(EventStreamError):
        EventStreamParser().feed(data)


# -- helpers ----------------------------------------------------------------------------


def test_event_and_message_types() -> None:
    event = EventMessage({":message-type": "event", ":event-type": "messageStop"}, b"{}")
    exc = EventMessage(
        {
            ":message-type": "exception",
            ":exception-type": "throttlingException",
            ":event-type": "x",
        },
        b"{}",
    )
    assert (message_type(event), event_type(event)) == ("event", "messageStop")
    assert (message_type(exc), event_type(exc)) == ("exception", "throttlingException")
    assert (message_type(EventMessage({}, b"")), event_type(EventMessage({}, b""))) == ("", "")


def test_headers_parsed_once_are_each_messages_own() -> None:
    # Repeated header blocks are parsed once; each message still gets its own dict.
    frame = encode_message(CHUNK_HEADERS, b"{}")
    first, second = EventStreamParser().feed(frame + frame)
    first.headers[":event-type"] = "changed"
    assert second.headers == dict(CHUNK_HEADERS)
    assert EventStreamParser().feed(frame)[0].headers == dict(CHUNK_HEADERS)
