"""A message's content parts (``ContentPart`` tables) written by hand, for
``writer.RequestWriter``: the rare shape (an image, a document, audio, a
file), so written field by field, its vtable shared by the fields present.

Each part is its table, then its strings and its ``data`` bytes (a
``[ubyte]`` vector: a length word, the raw bytes, padding, laid out as a
string is) in slot order. The bytes are copied once into the buffer, never
encoded. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from flatgate.proxy.wire.buffer import PACK_U32_INTO
from flatgate.proxy.wire.layout import CONTENT_PART
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.tables import (
    offset_vector,
    shared_vtable,
    strings_after,
    vtable_of,
)

__all__ = ["write_parts"]

_PACK = CONTENT_PART.packer(
    "text data media_type url file_id detail filename title context span extras "
    "kind dialect citations"
)
_AT = CONTENT_PART.inline
_OFFSETS = tuple(_AT[f] for f in CONTENT_PART.fields)
# The variable-length fields, in slot order (the order they follow the table in).
_VARIABLE = (
    *("text", "data", "media_type", "url", "file_id"),
    *("detail", "filename", "title", "context", "extras"),
)
_VAR_SLOTS = tuple(CONTENT_PART.slot(f) for f in _VARIABLE)
_VAR_AT = tuple(_AT[f] for f in _VARIABLE)
_KIND, _DIALECT, _CITATIONS, _SPAN = (
    CONTENT_PART.slot(f) for f in ("kind", "dialect", "citations", "span")
)
# Keys of the shared vtables: above every other table kind's (kind << 8 | mask).
_KEY = 1 << 24


@lru_cache(maxsize=512)
def _vtable(present: int) -> bytes:
    return vtable_of(_PACK.size, _OFFSETS, present)


def _part(buf: bytearray, vt_pos: dict[int, int], part: ContentPart) -> int:
    """One part: its table, then its strings and bytes; returns the table position."""
    values = (
        part.text.encode(),
        part.data,
        part.media_type.encode(),
        part.url.encode(),
        part.file_id.encode(),
        part.detail.encode(),
        part.filename.encode(),
        part.title.encode(),
        part.context.encode(),
        part.extras.encode(),
    )
    present = (
        (1 << _KIND if part.kind else 0)
        | (1 << _DIALECT if part.dialect else 0)
        | (1 << _CITATIONS if part.citations else 0)
        | (1 << _SPAN if part.span else 0)
    )
    for slot, data in zip(_VAR_SLOTS, values, strict=True):
        if data:
            present |= 1 << slot
    vpos = shared_vtable(buf, vt_pos, _KEY | present, _vtable(present))
    tpos = len(buf)
    at = tpos + _PACK.size
    offs = []
    for field, value in zip(_VAR_AT, values, strict=True):
        if value:
            offs.append(at - (tpos + field))
            at += len(value) + 8 - (len(value) & 3)
        else:
            offs.append(0)
    text, data_at, media, url, file_id, detail, filename, title, context, extras = offs
    buf += _PACK.pack(
        tpos - vpos,
        text,
        data_at,
        media,
        url,
        file_id,
        detail,
        filename,
        title,
        context,
        part.span,
        extras,
        part.kind,
        part.dialect,
        part.citations,
    )
    strings_after(buf, values)
    return tpos


def write_parts(buf: bytearray, vt_pos: dict[int, int], parts: Sequence[ContentPart]) -> int:
    """Append the vector of ``parts`` and each part after it; returns the
    vector's position."""
    vec = offset_vector(buf, len(parts))
    for i, part in enumerate(parts):
        ppos = _part(buf, vt_pos, part)
        PACK_U32_INTO(buf, vec + 4 + 4 * i, ppos - (vec + 4 + 4 * i))
    return vec
