"""What the load bench compares: its rows, their servers and their request bodies.

Owns the row table (who the client talks to, in which body format, which
servers make up the hop whose CPU, memory and GC are charged to the row) and
the request bodies each row sends, all built from the one seeded generator
(``benchmarks.payloads.make_request``) so every row carries the same request:

- ``fbs``: the ``CompletionRequest`` FlatBuffer (``to_flatbuffer``);
- ``fbs-openai``: the same FlatBuffer for the model routed to an ``openai``
  backend (the stub speaking the OpenAI API, canned), so the proxy's adapter
  translates it to JSON and the backend's SSE back to frames;
- ``json``: the OpenAI JSON body (what json-route and msgspec-route read, and
  what the edge takes);
- ``protobuf``: ``schema/gateway.proto``'s ``CompletionRequest``.

The ``floor`` row (issue 43) is a granian RSGI app that parses nothing
(``benchmarks.load.floor_app`` with ``FLOOR_BODY=fbs``) in front of the same
canned stub: it sends the FlatBuffer on as it came and answers the stub's
frames as they came, so every proxied row's CPU and added latency can be
read against the least a Python server on granian in its place costs.

The OpenAI workload's kinds (``openai``, ``responses``, ``anthropic``: the
client APIs' JSON; ``converse``: Bedrock's Converse request, for the rows
straight to the Bedrock stub; ``gemini``: the Gemini API's generateContent
request, for the rows straight to the Gemini stub) are built by
``benchmarks.load.openai_bodies``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from benchmarks.baselines import PROTOBUF_TYPE
from benchmarks.codecs.common import edge_request
from benchmarks.codecs.proto import to_message
from benchmarks.payloads import make_request, to_flatbuffer
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, JSON

__all__ = [
    "ADAPTER_MODEL",
    "CANNED_DELTAS",
    "ECHO_MODEL",
    "FLOOR_NOTE",
    "PROXY_SECTION",
    "ROWS",
    "STREAM_TEXT",
    "Body",
    "BodyKind",
    "Row",
    "request_body",
    "row_names",
    "stream_body",
]

BodyKind = Literal[
    "fbs",
    "fbs-openai",
    "json",
    "protobuf",
    "openai",
    "responses",
    "anthropic",
    "converse",
    "gemini",
]
ECHO_MODEL = "bench-echo"
# Routed to the canned stub that speaks the OpenAI API.
ADAPTER_MODEL = "bench-openai"
# Deltas the canned stub answers every non-streamed request with.
CANNED_DELTAS = 8
# The proxy's section of every load config: room for the 1 MB prompt, a pool
# for wrk's connections.
PROXY_SECTION = "[proxy]\nmax_body_bytes = 8388608\npool_limit = 256\n"
# What the echo stub streams back, one word a token.
STREAM_TEXT = " ".join(f"token{i:02d}" for i in range(32))
_SEED = 7
FLOOR_NOTE = "granian RSGI pass-through, no parse (benchmarks.load.floor_app): the floor"


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    server: str  # the server the client calls
    path: str
    body: BodyKind
    hop: tuple[str, ...]  # servers charged to the row (CPU, RSS, GC)
    stream_server: str | None  # where the streaming client goes; None: not measured
    note: str = ""


_C = "/v1/completions"


def _row(name: str, body: BodyKind = "fbs", note: str = "", streams: bool = True) -> Row:
    """A row whose client calls (and streams from) the one server it is charged for."""
    return Row(name, name, _C, body, (name,), name if streams else None, note)


ROWS: tuple[Row, ...] = (
    Row("direct", "stub", _C, "fbs", (), "echo", "client to the stub"),
    # A granian app that parses nothing: the least flatgate's place costs.
    Row("floor", "floor", _C, "fbs", ("floor",), None, FLOOR_NOTE),
    _row("proxy-rsgi"),
    _row("proxy-asgi"),
    _row("proxy-httpx", note="RSGI, httpx transport (the reference)"),
    Row(
        "proxy-openai",
        "proxy-rsgi",
        _C,
        "fbs-openai",
        ("proxy-rsgi",),
        None,
        "RSGI; an openai backend: FlatBuffer -> JSON, SSE -> frames",
    ),
    _row("json-route", "json", "RSGI, json.loads", streams=False),
    _row("msgspec-route", "json", "RSGI, msgspec Structs", streams=False),
    _row("protobuf-route", "protobuf", "RSGI, protobuf FromString", streams=False),
    Row(
        "edge",
        "edge",
        "/v1/chat/completions",
        "openai",
        ("edge", "proxy-edge"),
        "edge",
        "OpenAI JSON -> edge -> proxy (RSGI) -> stub",
    ),
    Row("nginx", "nginx", _C, "fbs", ("nginx",), "nginx-echo", "proxy_pass, buffering off"),
)


def row_names() -> list[str]:
    return [r.name for r in ROWS]


@dataclass(frozen=True, slots=True)
class Body:
    data: bytes
    headers: tuple[tuple[str, str], ...]
    # The answer's text the spot check wants (``clients.answer_text``); ``None``:
    # the canned stub's ``CANNED_DELTAS`` tokens, in the row's own format.
    expect: str | None = None
    # A spot check of the whole answer's bytes, in place of ``expect`` (the
    # embeddings workload's: vectors, not text).
    check: Callable[[bytes], bool] | None = None


_HEADERS: dict[BodyKind, tuple[tuple[str, str], ...]] = {
    "fbs": (("content-type", FLATBUFFERS), ("accept", FRAMES)),
    "fbs-openai": (("content-type", FLATBUFFERS), ("accept", FRAMES)),
    "json": (("content-type", JSON), ("accept", FRAMES)),
    "protobuf": (("content-type", PROTOBUF_TYPE), ("accept", FRAMES)),
    "openai": (("content-type", "application/json"),),
}


def _encode(kind: BodyKind, request: dict[str, Any]) -> bytes:
    if kind == "fbs":
        return to_flatbuffer(request)
    if kind == "fbs-openai":
        return to_flatbuffer({**request, "model": ADAPTER_MODEL})
    if kind in ("json", "openai"):
        return msgspec.json.encode(request)

    out: bytes = to_message(edge_request(request)).SerializeToString()
    return out


def request_body(kind: BodyKind, size_bytes: int) -> Body:
    """The non-streamed request of ``size_bytes`` of prompt, in ``kind``'s format."""
    request = make_request(size_bytes, _SEED)
    request["stream"] = False
    request.pop("stream_options", None)
    return Body(_encode(kind, request), _HEADERS[kind])


def stream_body(kind: BodyKind, size_bytes: int) -> Body:
    """A streamed request for the echo stub: it answers ``STREAM_TEXT`` word by word."""
    request = make_request(size_bytes, _SEED)
    request["model"] = ECHO_MODEL
    request["messages"].append({"role": "user", "content": STREAM_TEXT})
    return Body(_encode(kind, request), _HEADERS[kind])
