"""An incremental server-sent-events parser, for the backends' JSON streams.

``SSEParser.feed`` takes the body bytes as they arrive and returns the events
completed so far, as ``(event name, data)`` pairs (the name is ``b""`` when the
event has none). It follows the WHATWG rules: a leading byte-order mark is
skipped; lines end with CRLF, LF or CR (a CR at the end of one piece and an LF
at the start of the next are one line end); a blank line dispatches the event;
``data`` lines are joined with LF; one space after the colon is dropped;
comment lines (``:``, e.g. ``: keep-alive``) and unknown fields (``id``,
``retry``, a non-standard ``error:``) are ignored; an event without data is
not dispatched. ``end`` flushes an event the stream ended without its blank
line (some servers end with ``data: [DONE]`` and no blank line).

Bytes are buffered once and looked at once per event, however the reads cut
them; an event longer than ``max_event`` bytes raises ``SSEError``, so memory
stays bounded whatever the backend sends. Pure: no I/O.
"""

from __future__ import annotations

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = ["MAX_EVENT_BYTES", "SSEError", "SSEParser"]

MAX_EVENT_BYTES = 16 << 20
_BOM = b"\xef\xbb\xbf"


class SSEError(FlatgateError, ValueError):
    """The stream is not server-sent events flatgate can read."""

    default = codes.BACKEND_PROTOCOL_ERROR


def _event(block: bytes) -> tuple[bytes, bytes] | None:
    """One event's lines (LF-separated, no blank line) as (name, data)."""
    if block[:6] == b"data: " and b"\n" not in block:  # the common shape
        return b"", block[6:]
    name = b""
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line[0] == 0x3A:  # blank, or a ":" comment
            continue
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value
    if not data:
        return None
    return name, data[0] if len(data) == 1 else b"\n".join(data)


class SSEParser:
    """Events out of a byte stream, as it arrives."""

    __slots__ = ("_buf", "_max", "_started")

    def __init__(self, max_event: int = MAX_EVENT_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_event
        self._started = False

    def feed(self, piece: bytes) -> list[tuple[bytes, bytes]]:
        if not self._started:
            if not piece:
                return []
            self._started = True
            if piece[:3] == _BOM:
                piece = piece[3:]
        buf = self._buf
        if not buf:
            data = piece
        else:
            before = len(buf)
            buf += piece
            # Nothing can end an event unless the new bytes (with the three
            # before them, for a split CRLF CRLF) hold a line end pair.
            tail = bytes(buf[max(0, before - 3) :])
            if b"\n\n" not in tail and b"\r" not in tail:
                if len(buf) > self._max:
                    raise SSEError(f"an event longer than {self._max} bytes")
                return []
            data = bytes(buf)
            buf.clear()
        hold = b""
        cr = data.find(b"\r")
        if cr >= 0 and cr == len(data) - 4 and data[cr:] == b"\r\n\r\n":
            # One event ending in CRLF CRLF, its only CRs (Google's servers
            # frame every event so): the blank line as LFs, without the
            # replaces (bytes.replace of a two-byte pattern costs 0.3 us).
            data = data[:cr] + b"\n\n"
        elif cr >= 0:
            if data[-1:] == b"\r":  # maybe the first half of a CRLF
                data, hold = data[:-1], b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = data.split(b"\n\n")
        rest = blocks.pop()
        out = []
        limit = self._max
        for block in blocks:
            if len(block) > limit:
                raise SSEError(f"an event longer than {limit} bytes")
            if block:
                event = _event(block.strip(b"\n"))
                if event is not None:
                    out.append(event)
        if len(rest) > limit:
            raise SSEError(f"an event longer than {limit} bytes")
        if rest or hold:
            buf += rest
            buf += hold
        return out

    def end(self) -> list[tuple[bytes, bytes]]:
        """The event the stream ended in without its blank line, if any."""
        rest = bytes(self._buf)
        self._buf.clear()
        rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        if not rest:
            return []
        event = _event(rest)
        return [] if event is None else [event]

    @property
    def pending(self) -> int:
        """Bytes of an unfinished event held back."""
        return len(self._buf)
