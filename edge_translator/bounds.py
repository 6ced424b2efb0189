"""``within_wire``: a written request the proxy would take, or a 400 naming
the client's field, once for every client API.

The proxy's verifier (``wire.request.verify``) bounds what it decodes: at
most ``MAX_OBJECTS`` tables, vectors and strings, nested no deeper than it
allows. A request past that, written at the edge and refused at the proxy,
was a 400 about "the internal buffer" naming no field, after its input had
been kept. Here the edge verifies what it wrote the way the proxy will,
before anything of it is kept or sent, and names the client's field.

``count_tokens``, which the edge answers itself, verifies every request
(it counts no prompt ``messages`` would refuse); a completion only when it
is large enough to pass a bound (``COUNTED_FROM``): a smaller one cannot,
for each object takes 4 bytes at the least and the edge's writers share
none. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.buffer import MAX_BUFFER_BYTES, MalformedBuffer
from flatgate.proxy.wire.request.verify import MAX_OBJECTS, verify_request

__all__ = ["COUNTED_FROM", "within_wire"]

# A written request smaller than this holds at most MAX_OBJECTS objects.
COUNTED_FROM: Final = 4 * MAX_OBJECTS


def within_wire(frame: bytes, param: str) -> bytes:
    """``frame`` if the proxy's verifier takes it; else a 400
    ``malformed_request`` naming ``param`` (``messages``, ``input``). Its
    expansion bound is left at FlatBuffers' own: that one is against shared
    references, which the edge's writers never make."""
    try:
        verify_request(frame, max_bytes=MAX_BUFFER_BYTES)
    except MalformedBuffer as exc:
        raise InvalidRequest(
            f"Invalid value for '{param}': the request holds more than the wire carries "
            f"(at most {MAX_OBJECTS} messages, content parts, tool calls and tools in "
            f"all): {exc}.",
            param=param,
            code=codes.MALFORMED_REQUEST,
        ) from None
    return frame
