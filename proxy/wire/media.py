"""What a content part's bytes are, read from their first bytes in place:
the media type their magic numbers say (``sniff``), an image's size in
pixels (``image_size``), for PNG, JPEG, GIF and WebP, without decoding the
image, and how many bytes a second of audio takes (``audio_byte_rate``:
a WAV's format chunk, an MP3's first frame header). All read a bounded
prefix (a JPEG's frame header is found by walking at most ``JPEG_SEGMENTS``
of its segment markers, at most ``JPEG_SCAN`` bytes in), so their cost does
not grow with the data, whatever a hostile caller puts in it. Pure: no I/O.
"""

from __future__ import annotations

import struct

__all__ = ["IMAGE_TYPES", "JPEG_SCAN", "JPEG_SEGMENTS", "audio_byte_rate", "image_size", "sniff"]

# The image media types every client API documents (Anthropic's four,
# OpenAI's four).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# How far into a JPEG the frame header is looked for (EXIF thumbnails and
# ICC profiles come first; 64 KiB each at most).
JPEG_SCAN = 1 << 20
# How many markers (fill bytes included) are walked before the frame header
# is given up on: a camera's JPEG has about ten segments before it, and a
# buffer of fill bytes or empty segments would otherwise cost a step per
# byte of JPEG_SCAN.
JPEG_SEGMENTS = 256

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
    for _ in range(JPEG_SEGMENTS):
        if at + 9 > n:
            return None
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


# MPEG audio layer III bitrates in kbit/s by the frame header's 4-bit index:
# MPEG-1, then MPEG-2 and 2.5 (ISO 11172-3, ISO 13818-3).
_MP3_KBPS = (
    (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0),
    (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0),
)


def _wav_rate(data: bytes | memoryview) -> int | None:
    # RIFF, size, WAVE, then chunks; "fmt " holds the byte rate at 8 in its body.
    at = 12
    for _ in range(8):  # LIST and other chunks may come before "fmt "
        if len(data) < at + 8:
            return None
        size = _LE32(data, at + 4)[0]
        if bytes(data[at : at + 4]) == b"fmt ":
            return int(_LE32(data, at + 16)[0]) if len(data) >= at + 20 else None
        at += 8 + size + (size & 1)
    return None


def _mp3_rate(data: bytes | memoryview) -> int | None:
    at = 0
    if bytes(data[:3]) == b"ID3" and len(data) >= 10:  # skip the tag: a syncsafe size
        size = data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9]
        at = 10 + size
    if len(data) < at + 4:
        return None
    head = _BE32(data, at)[0]
    if head >> 21 != 0x7FF or head >> 17 & 3 != 1:  # frame sync, layer III
        return None
    mpeg1 = head >> 19 & 3 == 3
    kbps = _MP3_KBPS[0 if mpeg1 else 1][head >> 12 & 15]
    return kbps * 125 if kbps else None


_RATE_OF = {"audio/wav": _wav_rate, "audio/mpeg": _mp3_rate}


def audio_byte_rate(data: bytes | memoryview, media_type: str = "") -> int | None:
    """Bytes per second of the audio in ``data`` (of ``media_type``, or what
    ``sniff`` says), from its header: a WAV's format chunk, an MP3's first
    frame (its bitrate: a variable-bitrate file's first frame speaks for the
    whole); ``None`` when its header does not say."""
    read = _RATE_OF.get(media_type or sniff(data))
    if read is None:
        return None
    try:
        rate = read(data)
    except (struct.error, IndexError):
        return None
    return rate if rate and rate > 0 else None
