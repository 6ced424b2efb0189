"""What the Responses tests share: a request decoded from keyword fields, and
chunks rendered as events or folded into a ``response`` object, every event
and body checked against the openai SDK's own types on the way."""

from __future__ import annotations

import json
from typing import Any

import openai.types.responses as sdk
import pydantic

from flatgate.edge_translator.responses.echo import echo_of
from flatgate.edge_translator.responses.render import Aggregator, StreamRenderer
from flatgate.proxy.apis.openai_responses.request import Decoded, decode_request
from flatgate.proxy.wire.chunk.frames import Chunk

__all__ = [
    "EVENT",
    "Budget",
    "Event",
    "aggregate",
    "decoded",
    "parse_sse",
    "render",
    "renderer",
]

EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(sdk.ResponseStreamEvent)
Event = tuple[str, dict[str, Any]]


class Budget:
    """A ``client_api.Budget`` with no bound, that records what it is charged."""

    def __init__(self) -> None:
        self.charged: list[tuple[int, str]] = []

    def charge(self, nbytes: int, param: str) -> None:
        self.charged.append((nbytes, param))


def decoded(**body: Any) -> Decoded:
    """A request of ``body``'s fields (``model`` and ``input`` given if left out)."""
    body.setdefault("model", "m")
    body.setdefault("input", "hi")
    return decode_request(json.dumps(body).encode())


def parse_sse(raw: bytes) -> list[Event]:
    """(event name, data) per event of an SSE body, checked: the ``event:``
    line names its data's ``type``, the SDK's types take it, and the
    sequence numbers count up by one from the first (a trailing ``data:
    [DONE]``, a whole stream's last bytes, is left out)."""
    out: list[Event] = []
    blocks = raw.decode().split("\n\n")[:-1]
    if blocks and blocks[-1] == "data: [DONE]":
        blocks.pop()  # the terminal event of a whole stream, and only there
    for block in blocks:
        name_line, data_line = block.split("\n")
        name = name_line.removeprefix("event: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        EVENT.validate_python(data)
        out.append((name, data))
    seqs = [d["sequence_number"] for _, d in out]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    return out


def renderer(req: Decoded | None = None) -> StreamRenderer:
    return StreamRenderer(
        response_id="resp_1", created=1700000000, model="m", echo=echo_of(req or decoded())
    )


def render(*chunks: Chunk, req: Decoded | None = None) -> list[Event]:
    """The events ``chunks`` render to, checked (``parse_sse``), from 0."""
    r = renderer(req)
    raw = b"".join(r.feed(c) for c in chunks) + r.end()
    assert r.finished
    assert raw.endswith(b"\n\ndata: [DONE]\n\n") and raw.count(b"[DONE]") == 1
    events = parse_sse(raw)
    assert events[0][1]["sequence_number"] == 0
    return events


def aggregate(*chunks: Chunk, req: Decoded | None = None) -> dict[str, Any]:
    """The ``response`` body ``chunks`` fold into, checked by the SDK's type."""
    a = Aggregator(
        response_id="resp_1", created=1700000000, model="m", echo=echo_of(req or decoded())
    )
    for c in chunks:
        a.feed(c)
    assert a.finished
    body = a.body()
    sdk.Response.model_validate_json(body)
    out: dict[str, Any] = json.loads(body)
    return out
