"""``EmbeddingResponse`` -> OpenAI's embeddings answer, as JSON bytes.

Owns ``render``: ``{"object": "list", "data": [{"object": "embedding",
"index": i, "embedding": ...}], "model": ..., "usage": {"prompt_tokens",
"total_tokens"}}``, the vectors in input order, written from the buffer's
views (``wire.embeddings.Embeddings``) with as little work per float as
Python allows:

- ``base64``: each vector's 4 x dimensions bytes (little-endian float32, as
  OpenAI sends them) through ``binascii.b2a_base64`` straight off the
  buffer's memoryview: no float is ever a Python object, and the JSON around
  them is joined once;
- ``float``: the whole matrix read as one ``array('f')`` (one copy of the
  bytes), made a list of Python floats in one ``tolist`` (one float object
  per number: the one per-float cost, which JSON floats cannot avoid), and
  each vector's slice encoded by msgspec in one call. A float32 is written
  as the double it widens to (``0.10000000149011612``, not ``0.1``): exactly
  the vector's value, at about twice the text of its shortest float32 form.

``pieces`` renders an answer a chunk of vectors at a time (about
``CHUNK_FLOATS`` floats), for the edge to stream one larger than
``STREAM_AT``: the float text of 1,024 x 8,192 float32 is about 160 MB, more
than a worker should make of one request (its Python floats as much again).
``size_bound`` says how large an answer's text can be. The envelope's only
text from the caller is the model's name, encoded by msgspec. Pure: no I/O.
"""

from __future__ import annotations

import sys
from array import array
from binascii import b2a_base64
from collections.abc import Iterator

import msgspec

from flatgate.proxy.wire.embeddings import Embeddings

__all__ = ["CHUNK_FLOATS", "STREAM_AT", "pieces", "render", "size_bound"]

_encode = msgspec.json.encode
_BIG_ENDIAN = sys.byteorder == "big"
_OPEN = b'{"object":"list","data":['
_ITEM = b'{"object":"embedding","index":%d,"embedding":'
_QUOTE = b'"'


# Vectors' floats rendered at a time by ``pieces``: about 1.5 MB of JSON.
CHUNK_FLOATS = 65_536
# An answer whose text may be larger (``size_bound``) is streamed in pieces.
STREAM_AT = 1024 * 1024
# The most text one float32 takes as JSON (a double's repr, a comma).
_MAX_FLOAT_TEXT = 25
# A base64 float32: 4 bytes, as 16/3 characters.
_BASE64_PER_FLOAT = 16 / 3


def size_bound(e: Embeddings, *, base64: bool) -> int:
    """At most the bytes ``render`` makes of ``e`` (its vectors; the
    envelope is short): what the edge decides to stream by."""
    floats = e.count * e.dimensions
    per = _BASE64_PER_FLOAT if base64 else _MAX_FLOAT_TEXT
    return int(floats * per) + 64 * e.count + 256 + len(e.model)


def _base64_items(e: Embeddings, start: int, end: int) -> list[bytes]:
    parts: list[bytes] = []
    add = parts.append
    vector = e.vector
    for i in range(start, end):
        if i:
            add(b"},")
        add(_ITEM % i)
        add(_QUOTE)
        add(b2a_base64(vector(i), newline=False))
        add(_QUOTE)
    return parts


def _float_items(e: Embeddings, start: int, end: int) -> list[bytes]:
    n = e.dimensions
    values = array("f")
    # array("f", view) would read each byte as a number
    values.frombytes(e.values[4 * n * start : 4 * n * end])
    if _BIG_ENDIAN:  # the wire's floats are little-endian
        values.byteswap()
    floats = values.tolist()
    parts: list[bytes] = []
    add = parts.append
    for i in range(start, end):
        if i:
            add(b"},")
        add(_ITEM % i)
        at = (i - start) * n
        add(_encode(floats[at : at + n]))
    return parts


def pieces(e: Embeddings, *, model: str, base64: bool, chunk: int = 0) -> Iterator[bytes]:
    """The JSON body of the answer ``e``, in ``model``'s name, its vectors as
    base64 strings or as lists of floats: in pieces of ``chunk`` vectors
    (0: about ``CHUNK_FLOATS`` floats' worth), so that no more than one
    piece's text (and its floats) is held at a time."""
    step = chunk or max(1, CHUNK_FLOATS // max(1, e.dimensions))
    items = _base64_items if base64 else _float_items
    head = [_OPEN]
    for start in range(0, e.count, step):
        yield b"".join(head + items(e, start, min(e.count, start + step)))
        head = []
    tail = [b"}"] if e.count else []
    tail.append(b'],"model":')
    tail.append(_encode(model))
    tail.append(
        b',"usage":{"prompt_tokens":%d,"total_tokens":%d}}' % (e.prompt_tokens, e.total_tokens)
    )
    yield b"".join(head + tail)


def render(e: Embeddings, *, model: str, base64: bool) -> bytes:
    """The JSON body of the answer ``e`` whole (``pieces`` in one)."""
    return b"".join(pieces(e, model=model, base64=base64, chunk=max(1, e.count)))
