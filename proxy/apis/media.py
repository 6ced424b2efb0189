"""Media in a client API's request: data URLs and base64 decoded once, at
the edge, and the bytes held to the media type they are declared as.

Every client API's model uses these: ``data_url`` splits OpenAI's
``data:<media type>;base64,<data>`` URLs (Chat's ``image_url`` and
``file_data``, the Responses API's ``image_url`` and ``file_data``),
``decode_base64`` decodes a bare base64 string (OpenAI's ``input_audio``;
Anthropic's ``base64`` sources are decoded by msgspec as they are parsed),
and ``check_declared`` compares the bytes' magic numbers
(``wire.media.sniff``) with the declared type, as Anthropic does: a PNG
declared as JPEG is a 400 naming the part. Each raises ``InvalidRequest``
(code ``invalid_media``) with ``param`` the part's path in the caller's
own notation, never anything else. Base64 is read strictly (RFC 4648's
alphabet, padding required, no whitespace): a string that is not base64 is
refused, not decoded to what its valid characters say. ``encode_data_url``
is the way back, for the adapters that write OpenAI's shapes. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii

from flatgate.proxy.apis.errors import InvalidRequest, shown
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.media import sniff

__all__ = ["check_declared", "data_url", "decode_base64", "encode_data_url"]

_PREFIX = "data:"
_BASE64 = ";base64"


def _invalid(message: str, where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {message}", param=where, code=codes.INVALID_MEDIA)


def decode_base64(text: str, where: str) -> bytes:
    """The bytes base64 ``text`` holds; ``InvalidRequest`` naming ``where``
    for a string that is not base64 (or is empty)."""
    if not text:
        raise _invalid("the base64 data is empty.", where)
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _invalid(f"the data is not valid base64 ({exc}).", where) from None


def data_url(url: str, where: str) -> tuple[str, bytes]:
    """(media type, bytes) of a ``data:<media type>;base64,<data>`` URL;
    ``InvalidRequest`` naming ``where`` for any other (a URL of another
    scheme is the caller's to tell apart first)."""
    head, comma, payload = url.partition(",")
    if not url.startswith(_PREFIX) or not comma:
        raise _invalid(
            "expected a base64-encoded data URL ('data:<media type>;base64,<data>'), got "
            f"'{shown(url[:40])}'.",
            where,
        )
    media, _, params = head[len(_PREFIX) :].partition(";")
    if not params.endswith(_BASE64[1:]) or not media:
        raise _invalid(
            "a data URL must name its media type and be base64-encoded "
            "('data:<media type>;base64,<data>').",
            where,
        )
    return media.strip().lower(), decode_base64(payload, where)


def check_declared(data: bytes, declared: str, where: str) -> None:
    """Refuse bytes whose magic numbers say another media type than the
    declared one (only where ``sniff`` knows the bytes' type: text and
    formats it has no signature for pass as declared)."""
    found = sniff(data)
    if found and declared and found != _ALIASES.get(declared, declared):
        raise _invalid(
            f"The {_kind(declared)} was specified using the {declared} media type, but the "
            f"{_kind(declared)} appears to be a {found} {_kind(found)}.",
            where,
        )


# Media types clients spell another way than ``sniff`` names them.
_ALIASES = {
    "image/jpg": "image/jpeg",
    "audio/mp3": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
}


def _kind(media: str) -> str:
    top = media.partition("/")[0]
    return {"image": "image", "audio": "audio"}.get(top, "file")


def encode_data_url(media_type: str, data: bytes) -> str:
    """``data`` as a ``data:`` URL of ``media_type``."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
