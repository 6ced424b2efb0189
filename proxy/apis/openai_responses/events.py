"""A Responses stream's events, as one msgspec Struct: ``Event``.

Owns the fields flatgate reads of the events a Responses server streams
(``event:`` + ``data:`` pairs whose JSON names its own ``type``): the
deltas (``delta``, a text delta's ``logprobs``, the indices), the items of
``response.output_item.added`` / ``.done`` (kept as sent), a call's whole
``arguments``, the ``response`` of the lifecycle events
(``answer.Response``), and an ``error`` event's code and message. One Struct
for every event type: the per-delta decode is one lookup of a type-free
Struct, with nothing to dispatch on first. Every field has a default and
unknown fields are ignored (servers add event types and fields). The
``openai-responses`` adapter reads its stream with it (its translator says
what each event becomes). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.openai_responses.answer import Response, ResponseError

__all__ = ["Event", "decode_event"]


class Event(msgspec.Struct, gc=False):
    type: str = ""
    delta: str | None = None
    # A text delta's logprobs, as sent (empty: none; ``[]`` when not asked for).
    logprobs: msgspec.Raw = msgspec.Raw()
    output_index: int = 0
    summary_index: int = 0
    # Kept as sent: decoded as an ``OutputItem`` only on the few item events, and
    # relayed as it is when it is a hosted tool's.
    item: msgspec.Raw = msgspec.Raw()  # empty: none
    arguments: str | None = None
    response: Response | None = None
    # ``error`` events: the fields at the top level (the reference), or an
    # ``error`` object (the WebSocket mode's shape, which some servers send).
    code: str | int | None = None
    message: str | None = None
    error: ResponseError | None = None


decode_event = msgspec.json.Decoder(Event).decode
