"""The load bench's baselines: the proxy with its route read from JSON or protobuf.

Owns three granian factories (``create_json_app``, ``create_msgspec_app``,
``create_protobuf_app``) that run the product's ``service.app.ProxyServer``,
server boundary and upstream transport unchanged, in subclasses that set only
the route reader and the request content type. Each reader parses the whole body, as a proxy
that routes on a JSON or protobuf body must, then returns ``(provider, model)``:

- ``json_route``: ``json.loads`` into dicts and lists;
- ``msgspec_route``: a typed ``msgspec`` decode into Structs (OpenAI's request
  shape, every field a backend uses);
- ``protobuf_route``: ``CompletionRequest.FromString`` (``schema/gateway.proto``).

They differ from ``proxy`` only in how the route is read, so the load bench's
"vs. json-route" ratios measure exactly that. Benchmark fixtures, not product
code: nothing outside ``benchmarks/`` imports them. Any bad input raises
``proxy.wire.MalformedBuffer`` (the proxy answers 400). No I/O beyond reading
the config at start-up.
"""

from __future__ import annotations

import json

import msgspec
from google.protobuf.message import DecodeError

from benchmarks.codecs import msgspec_full
from flatgate.generated import gateway_pb2 as pb
from flatgate.proxy.plumbing.serve import ServerApp
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import load_config
from flatgate.proxy.wire.schema import JSON
from flatgate.proxy.wire.verify import MalformedBuffer

__all__ = [
    "PROTOBUF_TYPE",
    "create_json_app",
    "create_msgspec_app",
    "create_protobuf_app",
    "json_route",
    "msgspec_route",
    "protobuf_route",
]

PROTOBUF_TYPE = "application/x-protobuf"


def json_route(body: bytes) -> tuple[int, bytes]:
    """``(provider, model)`` of an OpenAI-shape JSON body, via ``json.loads``.

    ``provider`` is an optional integer member (``ModelProvider``; 0 when
    absent), ``model`` the request's model name.
    """
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedBuffer(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MalformedBuffer("body is not a JSON object")
    model = doc.get("model")
    provider = doc.get("provider", 0)
    if not isinstance(model, str) or not model:
        raise MalformedBuffer("model: expected a non-empty string")
    if not isinstance(provider, int) or isinstance(provider, bool):
        raise MalformedBuffer("provider: expected an integer")
    return provider, model.encode()


class _Request(msgspec_full.Request, gc=False, omit_defaults=True):
    """The micro benchmark's typed request (``benchmarks.codecs.msgspec_full``),
    plus the optional routing member the JSON bodies here may carry."""

    provider: int = 0


_DECODER = msgspec.json.Decoder(_Request)


def msgspec_route(body: bytes) -> tuple[int, bytes]:
    """``(provider, model)`` of an OpenAI-shape JSON body, decoded whole into Structs."""
    try:
        req = _DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise MalformedBuffer(f"bad request body: {exc}") from None
    if not req.model:
        raise MalformedBuffer("model: expected a non-empty string")
    return req.provider, req.model.encode()


def protobuf_route(body: bytes) -> tuple[int, bytes]:
    """``(provider, model)`` of a protobuf ``CompletionRequest``, parsed whole."""
    try:
        msg = pb.CompletionRequest.FromString(body)
    except DecodeError as exc:
        raise MalformedBuffer(f"body is not a CompletionRequest: {exc}") from None
    if not msg.model_name:
        raise MalformedBuffer("model_name: missing")
    return int(msg.provider), str(msg.model_name).encode()


class JsonRouteProxy(ProxyServer):
    request_type = JSON

    def route_of(self, body: bytes) -> tuple[int, bytes]:
        return json_route(body)


class MsgspecRouteProxy(ProxyServer):
    request_type = JSON

    def route_of(self, body: bytes) -> tuple[int, bytes]:
        return msgspec_route(body)


class ProtobufRouteProxy(ProxyServer):
    request_type = PROTOBUF_TYPE

    def route_of(self, body: bytes) -> tuple[int, bytes]:
        return protobuf_route(body)


def create_json_app() -> ServerApp:
    """granian factory: the proxy routing on ``json.loads`` of a JSON body."""
    return ServerApp(JsonRouteProxy(load_config()))


def create_msgspec_app() -> ServerApp:
    """granian factory: the proxy routing on a typed msgspec decode of a JSON body."""
    return ServerApp(MsgspecRouteProxy(load_config()))


def create_protobuf_app() -> ServerApp:
    """granian factory: the proxy routing on a parsed protobuf body."""
    return ServerApp(ProtobufRouteProxy(load_config()))
