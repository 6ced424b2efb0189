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

The envelope's only text from the caller is the model's name, encoded by
msgspec. Pure: no I/O.
"""

from __future__ import annotations

import sys
from array import array
from binascii import b2a_base64

import msgspec

from flatgate.proxy.wire.embeddings import Embeddings

__all__ = ["render"]

_encode = msgspec.json.encode
_BIG_ENDIAN = sys.byteorder == "big"
_OPEN = b'{"object":"list","data":['
_ITEM = b'{"object":"embedding","index":%d,"embedding":'
_QUOTE = b'"'


def _base64_items(e: Embeddings) -> list[bytes]:
    parts: list[bytes] = []
    add = parts.append
    vector = e.vector
    for i in range(e.count):
        if i:
            add(b"},")
        add(_ITEM % i)
        add(_QUOTE)
        add(b2a_base64(vector(i), newline=False))
        add(_QUOTE)
    return parts


def _float_items(e: Embeddings) -> list[bytes]:
    values = array("f")
    values.frombytes(e.values)  # array("f", view) would read each byte as a number
    if _BIG_ENDIAN:  # the wire's floats are little-endian
        values.byteswap()
    floats = values.tolist()
    n = e.dimensions
    parts: list[bytes] = []
    add = parts.append
    for i in range(e.count):
        if i:
            add(b"},")
        add(_ITEM % i)
        add(_encode(floats[i * n : (i + 1) * n]))
    return parts


def render(e: Embeddings, *, model: str, base64: bool) -> bytes:
    """The JSON body of the answer ``e``, in ``model``'s name, its vectors as
    base64 strings or as lists of floats."""
    parts = [_OPEN]
    parts += _base64_items(e) if base64 else _float_items(e)
    if e.count:
        parts.append(b"}")
    parts.append(b'],"model":')
    parts.append(_encode(model))
    parts.append(
        b',"usage":{"prompt_tokens":%d,"total_tokens":%d}}' % (e.prompt_tokens, e.total_tokens)
    )
    return b"".join(parts)
