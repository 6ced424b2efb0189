"""What a content part's bytes are, read from their first bytes in place:
the media type their magic numbers say (``sniff``) and an image's size in
pixels (``image_size``), for PNG, JPEG, GIF and WebP, without decoding the
image. Both read a bounded prefix (a JPEG's frame header is found by
walking its segment markers, at most ``JPEG_SCAN`` bytes in), so their cost
does not grow with the image. Pure: no I/O.
"""

from __future__ import annotations

import struct

__all__ = ["IMAGE_TYPES", "JPEG_SCAN", "image_size", "sniff"]

# The image media types every client API documents (Anthropic's four,
# OpenAI's four).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# How far into a JPEG the frame header is looked for (EXIF thumbnails and
# ICC profiles come first; 64 KiB each at most).
JPEG_SCAN = 1 << 20

_BE16 = struct.Struct(">H").unpack_from
_BE32 = struct.Struct(">I").unpack_from
_LE16 = struct.Struct("<H").unpack_from
_LE32 = struct.Struct("<I").unpack_from

# (prefix, offset, media type), checked in order.
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"%PDF-", 0, "application/pdf"),
    (b"ID3", 0, "audio/mpeg"),
    (b"fLaC", 0, "audio/flac"),
    (b"OggS", 0, "audio/ogg"),
)
# MPEG audio frame sync without an ID3 tag: 11 set bits.
_MP3_SYNC = 0xFFE0
# SOF markers that carry a frame's size (not DHT 0xC4, JPG 0xC8, DAC 0xCC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def sniff(data: bytes | memoryview) -> str:
    """The media type ``data``'s magic numbers say ("" when none this
    module knows: text, or a format it has no signature for)."""
    head = bytes(data[:16])
    for magic, at, media in _MAGIC:
        if head.startswith(magic, at):
            return media
    if head[:4] == b"RIFF" and len(head) >= 12:
        kind = head[8:12]
        if kind == b"WEBP":
            return "image/webp"
        if kind == b"WAVE":
            return "audio/wav"
    if len(head) >= 2 and _BE16(head, 0)[0] & _MP3_SYNC == _MP3_SYNC:
        return "audio/mpeg"
    return ""


def _png(data: bytes | memoryview) -> tuple[int, int] | None:
    # The IHDR chunk comes first: length, "IHDR", width, height.
    if len(data) < 24 or bytes(data[12:16]) != b"IHDR":
        return None
    return _BE32(data, 16)[0], _BE32(data, 20)[0]


def _gif(data: bytes | memoryview) -> tuple[int, int] | None:
    if len(data) < 10:
        return None
    return _LE16(data, 6)[0], _LE16(data, 8)[0]


def _webp(data: bytes | memoryview) -> tuple[int, int] | None:
    if len(data) < 30:
        return None
    chunk = bytes(data[12:16])
    if chunk == b"VP8 ":  # lossy: a key frame's 14-bit sizes at 26
        return _LE16(data, 26)[0] & 0x3FFF, _LE16(data, 28)[0] & 0x3FFF
    if chunk == b"VP8L":  # lossless: 14-bit sizes minus one, packed after 0x2f
        bits = _LE32(data, 21)[0]
        return (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1
    if chunk == b"VP8X":  # extended: 24-bit sizes minus one at 24 and 27
        w = int.from_bytes(bytes(data[24:27]), "little") + 1
        h = int.from_bytes(bytes(data[27:30]), "little") + 1
        return w, h
    return None


def _jpeg(data: bytes | memoryview) -> tuple[int, int] | None:
    # Walk the segments: marker (0xFF, kind), then a 16-bit length that
    # counts itself; a SOF segment holds precision, height, width.
    n = min(len(data), JPEG_SCAN)
    at = 2
    while at + 9 <= n:
        if data[at] != 0xFF:
            return None
        kind = data[at + 1]
        if kind == 0xFF:  # fill byte
            at += 1
            continue
        if kind in _SOF:
            return _BE16(data, at + 7)[0], _BE16(data, at + 5)[0]
        if kind == 0xD8 or 0xD0 <= kind <= 0xD7:  # no length
            at += 2
            continue
        at += 2 + _BE16(data, at + 2)[0]
    return None


_SIZE_OF = {"image/png": _png, "image/gif": _gif, "image/webp": _webp, "image/jpeg": _jpeg}


def image_size(data: bytes | memoryview, media_type: str = "") -> tuple[int, int] | None:
    """(width, height) in pixels of the image in ``data`` (of ``media_type``,
    or what ``sniff`` says); ``None`` when its header does not say (not an
    image this module reads, or cut short)."""
    read = _SIZE_OF.get(media_type or sniff(data))
    if read is None:
        return None
    try:
        return read(data)
    except (struct.error, IndexError):
        return None
