"""AWS's binary event-stream framing (``application/vnd.amazon.eventstream``),
both ways, for Bedrock's ConverseStream and InvokeModelWithResponseStream.

A message is a 12-byte prelude (total length, headers length, both unsigned
32-bit big-endian, then the CRC32 of those 8 bytes), the headers, the payload
and the CRC32 of everything before it. A header is a 1-byte name length, the
name (UTF-8), a 1-byte value type and the value: 0 true, 1 false (no value
bytes), 2 byte, 3 short, 4 integer, 5 long (signed big-endian), 6 byte array
and 7 string (a 2-byte length, then the bytes), 8 timestamp (milliseconds since
the epoch, a signed 64-bit integer), 9 UUID (16 bytes).

``encode_message`` (or ``encode_headers`` once, then ``encode_frame`` per
message) writes string-valued headers only (``:event-type``,
``:content-type``, ``:message-type``, ``:exception-type`` are all AWS sends on
these streams). ``EventStreamParser.feed`` takes the body as it arrives and
returns the messages completed so far; it reads every header type (a
timestamp as its integer milliseconds, a UUID as its 16 bytes), checks both
CRCs and bounds each message (``max_message`` bytes, 16 MiB of payload and
128 KiB of headers by default, botocore's limits), so memory stays bounded
whatever the backend sends. A bad length or CRC raises ``EventStreamError``
(a ``ValueError`` under the one error root, ``backend_protocol_error``).
botocore's ``EventStreamBuffer`` is the reference the tests hold it to. Pure:
no I/O.
"""

from __future__ import annotations

import struct
from binascii import crc32
from collections.abc import Sequence
from dataclasses import dataclass

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = [
    "CONTENT_TYPE",
    "MAX_HEADERS_BYTES",
    "MAX_PAYLOAD_BYTES",
    "EventMessage",
    "EventStreamError",
    "EventStreamParser",
    "encode_frame",
    "encode_headers",
    "encode_message",
    "event_type",
    "message_type",
]

CONTENT_TYPE = "application/vnd.amazon.eventstream"
MAX_PAYLOAD_BYTES = 16 << 20
MAX_HEADERS_BYTES = 128 << 10
_PRELUDE = 12
_OVERHEAD = _PRELUDE + 4  # the prelude and the message CRC
_U32 = struct.Struct(">I")
_PRELUDE_LENGTHS = struct.Struct(">II")
_PRELUDE_FIELDS = struct.Struct(">III")  # total length, headers length, prelude CRC
_STRING = 7


class EventStreamError(FlatgateError, ValueError):
    """The body is not an event stream flatgate can read."""

    default = codes.BACKEND_PROTOCOL_ERROR


HeaderValue = str | bytes | int | bool


# Not frozen: one is made per message (a token, on a stream), and a frozen
# dataclass's __init__ costs more than twice a plain one's (280 against 120 ns).
@dataclass(slots=True)
class EventMessage:
    """One message: its headers by name and its payload (not changed after)."""

    headers: dict[str, HeaderValue]
    payload: bytes


def encode_headers(headers: Sequence[tuple[str, str]]) -> bytes:
    """String-valued headers as a message carries them (``encode_frame``'s
    ``head``: a writer that sends many messages with the same headers
    encodes them once)."""
    out = bytearray()
    for name, value in headers:
        raw_name = name.encode()
        raw_value = value.encode()
        if not 0 < len(raw_name) < 256:
            raise ValueError(f"a header name of {len(raw_name)} bytes: {name!r}")
        if len(raw_value) > 0xFFFF:
            raise ValueError(f"header {name!r}: a value longer than 65535 bytes")
        out.append(len(raw_name))
        out += raw_name
        out.append(_STRING)
        out += len(raw_value).to_bytes(2, "big")
        out += raw_value
    return bytes(out)


def encode_message(headers: Sequence[tuple[str, str]], payload: bytes) -> bytes:
    """One message with string-valued ``headers`` and ``payload``."""
    return encode_frame(encode_headers(headers), payload)


def encode_frame(head: bytes, payload: bytes) -> bytes:
    """One message with the encoded headers ``head`` (``encode_headers``)."""
    lengths = _PRELUDE_LENGTHS.pack(_OVERHEAD + len(head) + len(payload), len(head))
    prelude = lengths + _U32.pack(crc32(lengths))
    body = prelude + head + payload
    return body + _U32.pack(crc32(body))


_WIDTHS = {2: 1, 3: 2, 4: 4, 5: 8, 8: 8}  # byte, short, integer, long, timestamp


# Parsed header blocks by their bytes: a stream repeats a handful of blocks
# (one per event type), so each is parsed once and copied after (a copy of
# a small dict costs a tenth of the parse). Bounded: cleared when full.
_SEEN: dict[bytes, dict[str, HeaderValue]] = {}
_SEEN_MAX = 256


def _headers(raw: bytes) -> dict[str, HeaderValue]:
    known = _SEEN.get(raw)
    if known is not None:
        return known.copy()
    parsed = _parse_headers(raw)
    if len(raw) <= 512:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[raw] = parsed.copy()
    return parsed


def _parse_headers(raw: bytes) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    at, end = 0, len(raw)
    while at < end:
        size = raw[at]
        at += 1
        if size == 0 or at + size + 1 > end:
            raise EventStreamError("a header name runs past the headers")
        try:
            name = raw[at : at + size].decode()
        except UnicodeDecodeError as exc:
            raise EventStreamError("a header name that is not UTF-8") from exc
        at += size
        kind = raw[at]
        at += 1
        value: HeaderValue
        if kind in {0, 1}:
            value = kind == 0
        elif kind in _WIDTHS:
            width = _WIDTHS[kind]
            if at + width > end:
                raise EventStreamError(f"header {name!r} runs past the headers")
            value = int.from_bytes(raw[at : at + width], "big", signed=True)
            at += width
        elif kind in {6, 7}:
            if at + 2 > end:
                raise EventStreamError(f"header {name!r} runs past the headers")
            length = int.from_bytes(raw[at : at + 2], "big")
            at += 2
            if at + length > end:
                raise EventStreamError(f"header {name!r} runs past the headers")
            chunk = raw[at : at + length]
            at += length
            if kind == 6:
                value = chunk
            else:
                try:
                    value = chunk.decode()
                except UnicodeDecodeError as exc:
                    raise EventStreamError(f"header {name!r} is not UTF-8") from exc
        elif kind == 9:
            if at + 16 > end:
                raise EventStreamError(f"header {name!r} runs past the headers")
            value = raw[at : at + 16]
            at += 16
        else:
            raise EventStreamError(f"header {name!r} has an unknown type {kind}")
        if name in headers:
            raise EventStreamError(f"header {name!r} twice")
        headers[name] = value
    return headers


class EventStreamParser:
    """Messages out of an event-stream body, as it arrives.

    A read that holds whole messages is parsed where it lies (no copy into
    a buffer); the bytes of an unfinished message are kept, and while the
    message's length (its prelude's) is not reached, a read is only
    appended: a large message in many reads is joined once, not per read.
    """

    __slots__ = ("_buf", "_max_headers", "_max_payload", "_need")

    def __init__(
        self,
        max_payload: int = MAX_PAYLOAD_BYTES,
        max_headers: int = MAX_HEADERS_BYTES,
    ) -> None:
        self._buf = bytearray()
        self._max_payload = max_payload
        self._max_headers = max_headers
        # The bytes the held message needs in all (0: its prelude is not in yet).
        self._need = 0

    def _check(self, total: int, head_len: int) -> None:
        """The prelude's lengths within bounds, or ``EventStreamError``."""
        if head_len > self._max_headers:
            raise EventStreamError(f"headers of {head_len} bytes, over {self._max_headers}")
        payload_len = total - _OVERHEAD - head_len
        if payload_len < 0:
            raise EventStreamError(f"a message of {total} bytes cannot hold {head_len} of headers")
        if payload_len > self._max_payload:
            raise EventStreamError(f"a payload of {payload_len} bytes, over {self._max_payload}")

    def feed(self, piece: bytes) -> list[EventMessage]:
        buf = self._buf
        if buf:
            buf += piece
            if len(buf) < self._need:
                return []
            data = bytes(buf)
            buf.clear()
        else:
            data = piece
        out: list[EventMessage] = []
        at = 0
        size = len(data)
        self._need = 0
        # Once per message (a token's, on a stream): inline, one unpack of the
        # prelude, the message's CRC continued from the prelude's.
        view = memoryview(data)
        max_headers = self._max_headers
        limit = self._max_payload + _OVERHEAD
        seen = _SEEN
        while size - at >= _PRELUDE:
            total, head_len, prelude_crc = _PRELUDE_FIELDS.unpack_from(data, at)
            # The prelude is checked before its lengths are trusted.
            head_crc = crc32(view[at : at + 8])
            if head_crc != prelude_crc:
                raise EventStreamError("the prelude's CRC does not match")
            if head_len > max_headers or not _OVERHEAD + head_len <= total <= limit + head_len:
                self._check(total, head_len)
            if size - at < total:
                self._need = total
                break
            end = at + total
            (msg_crc,) = _U32.unpack_from(data, end - 4)
            if crc32(view[at + 8 : end - 4], head_crc) != msg_crc:
                raise EventStreamError("the message's CRC does not match")
            head_end = at + _PRELUDE + head_len
            raw = data[at + _PRELUDE : head_end]
            known = seen.get(raw)  # _headers, its common case inline
            headers = _headers(raw) if known is None else known.copy()
            out.append(EventMessage(headers, data[head_end : end - 4]))
            at = end
        if at < size:
            buf += view[at:]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished message held back."""
        return len(self._buf)


def _text(msg: EventMessage, name: str) -> str:
    value = msg.headers.get(name)
    return value if isinstance(value, str) else ""


def event_type(msg: EventMessage) -> str:
    """The ``:event-type`` (or, for an exception, ``:exception-type``) header."""
    if _text(msg, ":message-type") == "exception":
        return _text(msg, ":exception-type")
    return _text(msg, ":event-type")


def message_type(msg: EventMessage) -> str:
    """``event``, ``exception`` or ``error`` (``:message-type``)."""
    return _text(msg, ":message-type")
