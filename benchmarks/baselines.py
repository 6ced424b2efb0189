"""The load bench's baselines: the proxy with its route read from JSON or protobuf.

Owns three granian factories (``create_json_app``, ``create_msgspec_app``,
``create_protobuf_app``) that run the product's ``service.app.ProxyServer``,
server boundary and upstream transport unchanged, in subclasses that change
only how the route is read (``target_of``: the format's reader, then the
product's own ``ProxyServer.target_for``), behind a wrapper of each exchange that
shows the format's content type to the proxy as the one it accepts. Each
reader parses the whole body, as a proxy that routes on a JSON or protobuf
body must, then returns ``(provider, model)``:

- ``json_route``: ``json.loads`` into dicts and lists;
- ``msgspec_route``: a typed ``msgspec`` decode into Structs (OpenAI's request
  shape, every field a backend uses);
- ``protobuf_route``: ``CompletionRequest.FromString`` (``schema/gateway.proto``).

They differ from ``proxy`` only in how the route is read, so the load bench's
"vs. json-route" ratios measure exactly that. A body in these formats has no
tenant, so the baselines refuse a configuration with tenants' limits or a
caller token. Benchmark fixtures, not product code: nothing outside
``benchmarks/`` imports them. Any bad input raises ``MalformedBuffer`` (the
proxy answers 400). No I/O beyond reading the config at start-up.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec
from google.protobuf.message import DecodeError

from benchmarks.codecs import msgspec_full
from flatgate.generated import gateway_pb2 as pb
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.serve import Exchange, ServerApp
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.balancer import RouteTarget
from flatgate.proxy.service.settings import ProxySettings, load_config
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.schema import FLATBUFFERS, JSON

__all__ = [
    "PROTOBUF_TYPE",
    "RouteBaseline",
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


Reader = Callable[[bytes], tuple[int, bytes]]


class RouteBaseline(ProxyServer):
    """The product's proxy, its route read by ``reader`` from a body of
    ``content_type``. Serve it through ``handler``."""

    def __init__(self, config: ProxySettings, reader: Reader, content_type: str) -> None:
        if config.proxy.auth_token_sha256 or config.limits:
            raise ValueError("a route baseline reads no tenant: no caller token, no [[limits]]")
        super().__init__(config)
        self.reader = reader
        self.content_type = content_type

    def target_of(self, body: bytes, entry: Entry | None = None) -> RouteTarget:
        provider, model = self.reader(body)
        return self.target_for(provider, model, entry)

    async def handler(self, ex: Exchange) -> None:
        """The proxy, given ``ex`` as an exchange of the type it accepts."""
        await self(_Typed(ex, self.content_type))


class _Typed:
    """An exchange whose ``content_type`` body is shown to the proxy as the
    FlatBuffers it accepts: its one check of the type, made for the format."""

    __slots__ = (
        "_ex",
        "_type",
        "body",
        "disconnected",
        "method",
        "path",
        "query",
        "respond",
        "stream",
    )

    def __init__(self, ex: Exchange, content_type: str) -> None:
        self._ex = ex
        self._type = content_type
        self.method = ex.method
        self.path = ex.path
        self.query = ex.query
        self.body = ex.body
        self.respond = ex.respond
        self.stream = ex.stream
        self.disconnected = ex.disconnected

    @property
    def peer(self) -> str:
        return self._ex.peer

    def header(self, name: str) -> str | None:
        value = self._ex.header(name)
        if name == "content-type" and value is not None:
            if value.partition(";")[0].strip().lower() == self._type:
                return FLATBUFFERS
            return None  # any other type is refused, as the proxy refuses it
        return value


def _app(reader: Reader, content_type: str) -> ServerApp:
    return ServerApp(RouteBaseline(load_config(), reader, content_type).handler)


def create_json_app() -> ServerApp:
    """granian factory: the proxy routing on ``json.loads`` of a JSON body."""
    return _app(json_route, JSON)


def create_msgspec_app() -> ServerApp:
    """granian factory: the proxy routing on a typed msgspec decode of a JSON body."""
    return _app(msgspec_route, JSON)


def create_protobuf_app() -> ServerApp:
    """granian factory: the proxy routing on a parsed protobuf body."""
    return _app(protobuf_route, PROTOBUF_TYPE)
