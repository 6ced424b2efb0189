"""The codecs ``make bench`` compares, one module per format, and their op matrix.

Every codec module has the same surface:

- ``OPS``: the operations it implements, in ``OPS`` order;
- ``inputs(request) -> {op: argument}``: what each op is given, built once from
  the shared ``benchmarks.payloads.make_request`` dict, outside any timing;
- one function per op, taking that one argument: ``route(data)`` (provider and
  model from the received bytes), ``decode(data)`` (every field a backend
  needs, as ``common.Decoded``), ``encode(request)`` (the wire bytes from the
  request the caller holds), ``chunk(delta)`` (one streamed delta's bytes) and
  ``translate(body)`` (the edge's JSON bytes in, wire bytes out); flatgate
  alone has ``verify(data)``; the backend adapters have ``adapt_request(data)``
  (a verified request to the backend's JSON) and ``adapt_chunk(event)`` (one
  backend SSE event to one chunk frame). An op's function is its name with
  ``-`` written ``_``.

Not every format has every op: the msgspec partial Struct can only route, and
only the binary wire formats have a ``translate``. ``cases()`` is the matrix.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, cast

__all__ = ["FORMATS", "LABELS", "OPS", "Codec", "cases", "load"]

OPS = (
    "route",
    "verify",
    "decode",
    "encode",
    "chunk",
    "translate",
    "adapt-request",
    "adapt-chunk",
)

# Format name -> module; the order is the tables' order.
FORMATS: dict[str, str] = {
    "json": "benchmarks.codecs.stdjson",
    "msgspec": "benchmarks.codecs.msgspec_full",
    "msgspec-partial": "benchmarks.codecs.msgspec_partial",
    "protobuf": "benchmarks.codecs.proto",
    "flatbuffers": "benchmarks.codecs.fbs_generated",
    "flatgate": "benchmarks.codecs.flatgate",
    "flatgate-writer": "benchmarks.codecs.flatgate_writer",
    "openai-adapter": "benchmarks.codecs.openai_adapter",
    "anthropic-adapter": "benchmarks.codecs.anthropic_adapter",
    "bedrock-converse-adapter": "benchmarks.codecs.bedrock_converse_adapter",
    "bedrock-invoke-adapter": "benchmarks.codecs.bedrock_invoke_adapter",
    "azure-openai-adapter": "benchmarks.codecs.azure_openai_adapter",
    "gemini-adapter": "benchmarks.codecs.gemini_adapter",
    "vertex-anthropic-adapter": "benchmarks.codecs.vertex_anthropic_adapter",
}

LABELS: dict[str, str] = {
    "json": "stdlib json",
    "msgspec": "msgspec (full)",
    "msgspec-partial": "msgspec (partial)",
    "protobuf": "protobuf (upb)",
    "flatbuffers": "FlatBuffers (generated)",
    "flatgate": "flatgate",
    "flatgate-writer": "flatgate (chunk writer)",
    "openai-adapter": "openai adapter",
    "anthropic-adapter": "anthropic adapter",
    "bedrock-converse-adapter": "bedrock adapter (Converse)",
    "bedrock-invoke-adapter": "bedrock adapter (InvokeModel)",
    "azure-openai-adapter": "openai adapter (Azure)",
    "gemini-adapter": "gemini adapter",
    "vertex-anthropic-adapter": "vertex adapter (Claude)",
}


class Codec(Protocol):
    """What ``load`` returns: a codec module."""

    OPS: tuple[str, ...]

    def inputs(self, request: dict[str, Any]) -> dict[str, object]: ...


def load(fmt: str) -> Codec:
    """The codec module for ``fmt``; ``KeyError`` names an unknown format."""
    if fmt not in FORMATS:
        raise KeyError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    return cast(Codec, importlib.import_module(FORMATS[fmt]))


def operation(codec: Codec, op: str) -> Callable[[Any], object]:
    """The function ``codec`` runs for ``op``."""
    if op not in codec.OPS:
        raise KeyError(f"{codec!r} has no {op!r} op")
    return cast(Callable[[Any], object], getattr(codec, op.replace("-", "_")))


def cases(formats: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """Every ``(format, op)`` the benchmark measures, in table order."""
    return [(f, op) for f in formats or tuple(FORMATS) for op in OPS if op in load(f).OPS]
