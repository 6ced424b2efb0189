"""The media the real-client tests send through the gateway, and what the
stub echoes for each: images made with pillow (an encoder flatgate did not
write) in a known color, a PDF, a WAV, and the description the stub puts in
its echo for a part it received (``proxy.backends.dialect.describe_part``'s
format, written out again here from the bytes sent, so that a test proves
the bytes arrived intact: their count and the first 12 hex of their SHA-256).

``image_echo(data)`` is ``[image image/png 120 bytes sha256:0123456789ab 64x32]``
(the size read back with pillow); ``bytes_echo(data, media_type)`` is what
follows the kind for any part carried as bytes (``application/pdf 812 bytes
sha256:...]``), for the parts whose kind a backend may name as a
``document`` or a ``file``; ``url_echo(kind, url)`` a part passed on as a
URL. ``data_url`` and ``b64`` are the encodings the client APIs take.
"""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import time

from PIL import Image

__all__ = [
    "BLUE",
    "RED",
    "b64",
    "bytes_echo",
    "data_url",
    "digest",
    "image_echo",
    "jpeg",
    "pdf",
    "png",
    "url_echo",
    "wav",
]

RED = (220, 20, 60)
BLUE = (30, 80, 200)


def png(color: tuple[int, int, int] = RED, size: tuple[int, int] = (64, 32)) -> bytes:
    """A PNG of one ``color``, ``size`` pixels (width, height)."""
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def jpeg(color: tuple[int, int, int] = BLUE, size: tuple[int, int] = (48, 40)) -> bytes:
    """A JPEG of one ``color``, ``size`` pixels."""
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "JPEG", quality=90)
    return out.getvalue()


def pdf(color: tuple[int, int, int] = BLUE) -> bytes:
    """A one-page PDF (pillow's writer: a page holding one small image),
    the same bytes each time (its dates fixed)."""
    out = io.BytesIO()
    when = time.gmtime(1767225600)  # 2026-01-01
    Image.new("RGB", (32, 32), color).save(out, "PDF", creationDate=when, modDate=when)
    return out.getvalue()


def wav(samples: int = 800) -> bytes:
    """A mono 8 kHz 16-bit WAV of ``samples`` samples of a square wave."""
    frames = b"".join(struct.pack("<h", 8000 if (i // 20) % 2 else -8000) for i in range(samples))
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    chunks = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"data" + struct.pack("<I", len(frames)) + frames
    return b"RIFF" + struct.pack("<I", len(chunks)) + chunks


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{b64(data)}"


def digest(data: bytes) -> str:
    """``sha256:`` and the first 12 hex of the SHA-256 of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()[:12]


def image_echo(data: bytes) -> str:
    """The stub's description of an image part holding ``data``."""
    with Image.open(io.BytesIO(data)) as image:
        media = Image.MIME[image.format or ""]
        width, height = image.size
    return f"[image {media} {len(data)} bytes {digest(data)} {width}x{height}]"


def bytes_echo(data: bytes, media_type: str) -> str:
    """The end of the stub's description of a part carried as ``data``
    (after its kind, which a backend may name ``document`` or ``file``)."""
    return f" {media_type} {len(data)} bytes {digest(data)}]"


def url_echo(kind: str, url: str) -> str:
    """The stub's description of a part passed on as ``url``."""
    return f"[{kind} url {url}]"
