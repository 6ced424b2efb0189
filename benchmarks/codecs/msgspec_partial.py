"""The ``msgspec`` partial codec: a Struct with only the routing fields.

msgspec skips every field a Struct does not declare without building it, so
this is the fastest way to route a JSON body: it still scans every byte (the
skipped strings must be walked to find where they end), but allocates almost
nothing. It can only route; it has nothing else to decode or encode. No I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from benchmarks.codecs.common import json_body

__all__ = ["OPS", "Route", "inputs", "route"]

OPS = ("route",)


class Route(msgspec.Struct, gc=False):
    model: str
    # The OpenAI body carries no provider: the default, as the wire's absent field.
    provider: int = 0


_DECODER = msgspec.json.Decoder(Route)


def inputs(request: dict[str, Any]) -> dict[str, object]:
    return {"route": json_body(request)}


def route(data: bytes) -> tuple[int, str]:
    found = _DECODER.decode(data)
    return found.provider, found.model
