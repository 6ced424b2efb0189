"""The edge's HTTP surface: a granian RSGI app speaking the OpenAI API.

``POST /v1/chat/completions`` authenticates the caller (``auth``), reads the
body within ``max_body_bytes``, decodes and validates it once (``models``),
writes the ``CompletionRequest`` FlatBuffer (``translate``), sends it to the
proxy's ``POST /v1/completions`` through ``proxy.upstream`` asking for
size-prefixed frames, and turns the frames into OpenAI JSON (``render``):
SSE events as they arrive, or one ``chat.completion``. Also ``GET /v1/models``,
``GET /healthz`` and ``GET /metrics`` (``flatgate_edge_*``).

Errors are ``EdgeError``s and become responses in one place
(``_send_error``). The response head waits for the first frame, so a backend
that fails at once still gets an HTTP error status; after the head, a failure
ends the stream with an ``error`` event. A client that disconnects cancels the
request to the proxy. The granian protocol objects are used here and nowhere
else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec
from prometheus_client import Histogram

from flatgate.edge_translator.auth import KeyRing
from flatgate.edge_translator.config import EdgeSettings, load_edge_settings
from flatgate.edge_translator.errors import (
    EdgeError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    UpstreamFailed,
    UpstreamTimeout,
)
from flatgate.edge_translator.mapping import new_request_id, resolve_model
from flatgate.edge_translator.models import ChatCompletionRequest, decode_request
from flatgate.edge_translator.render import Aggregator, StreamRenderer, error_event
from flatgate.edge_translator.translate import write_request
from flatgate.proxy.plumbing.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import CallerWatch
from flatgate.proxy.transport.base import Response, Timeouts, Transport, retry_after
from flatgate.proxy.transport.base import UpstreamError as _UpstreamError
from flatgate.proxy.transport.base import UpstreamTimeout as _UpstreamTimeout
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.chunks import read_chunk
from flatgate.proxy.wire.frames import Chunk, FrameCutter, MalformedFrame
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, JSON, SSE

__all__ = ["EdgeApp", "create_app"]

log = logging.getLogger("flatgate.edge")

_SSE = [("content-type", SSE), ("cache-control", "no-cache")]
_TRANSLATE_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2)
_MAX_REQUEST_ID = 128


class _Scope(Protocol):
    method: str
    path: str

    @property
    def headers(self) -> Any: ...


class _Model(msgspec.Struct):
    id: str
    owned_by: str
    object: str = "model"
    created: int = 0


class _ModelList(msgspec.Struct):
    data: list[_Model]
    object: str = "list"


class _ProxyError(msgspec.Struct):
    code: str = ""
    message: str = ""


class _ProxyErrorBody(msgspec.Struct):
    error: _ProxyError = msgspec.field(default_factory=_ProxyError)


_decode_proxy_error = msgspec.json.Decoder(_ProxyErrorBody).decode


# Proxy statuses that mean the edge and the proxy disagree (an edge bug, or a
# proxy of another version): the client sees a gateway failure.
_DISAGREEMENT = frozenset({405, 411, 415})


def _proxy_error(status: int, headers: Mapping[str, str], body: bytes) -> EdgeError:
    """The OpenAI error for a proxy that answered ``status`` before any frame.

    The proxy's code and status carry through (a backend's 400 stays a 400, a
    429 stays a 429 with its ``Retry-After``), so that the client's SDK raises
    the matching exception and retries only what can succeed.
    """
    try:
        detail = _decode_proxy_error(body).error
    except msgspec.DecodeError:
        detail = _ProxyError()
    message = detail.message or f"the proxy answered HTTP {status}"
    if status == 404 and detail.code in ("", codes.NO_ROUTE.code):
        return ModelNotFound(f"No route to the model: {message}", param="model")
    if status == 413:
        return PayloadTooLarge(f"Request too large for the proxy: {message}")
    code = codes.peer_code(detail.code, status) if detail.code else codes.PROXY_PROTOCOL_ERROR
    if status in _DISAGREEMENT or not detail.code:
        return UpstreamFailed(message, code=code, status=502)
    if status == 504:
        return UpstreamTimeout(message, code=code)
    return EdgeError(message, code=code, status=status, retry_after=retry_after(headers))


class EdgeApp:
    """One edge app per worker: ``__rsgi_init__`` opens the transport to the proxy."""

    def __init__(
        self,
        settings: EdgeSettings,
        *,
        transport_factory: Callable[[], Transport] | None = None,
    ) -> None:
        self.settings = settings
        e = settings.edge
        self._models = settings.model_index()
        self._keys = KeyRing(settings.keys)
        self._url = e.proxy_url.rstrip("/") + "/v1/completions"
        self._max_body = e.max_body_bytes
        self._timeouts = Timeouts(
            connect=e.connect_timeout,
            read=e.read_timeout,
            total=e.total_timeout or None,
            first_byte=e.first_byte_timeout,
        )
        self._keepalive = e.keepalive_seconds
        self._transport_factory = transport_factory or (
            lambda: make_transport(e.transport, limit=e.pool_limit)
        )
        self._transport: Transport | None = None
        self.metrics = Metrics("flatgate_edge")
        self._translate_time = Histogram(
            "flatgate_edge_translate_seconds",
            "Time to decode a request's JSON and write its FlatBuffer.",
            buckets=_TRANSLATE_BUCKETS,
            registry=self.metrics.registry,
        )
        # Upstream metrics children, labelled once ("proxy": the edge has one upstream).
        self._ttfb = self.metrics.upstream_ttfb_of("proxy")
        self._failures_timeout = self.metrics.upstream_failure_of("proxy", "timeout")
        self._failures_other = self.metrics.upstream_failure_of("proxy", "unreachable")
        models = [
            _Model(name, m.owned_by) for m in settings.models for name in (m.name, *m.aliases)
        ]
        self._models_body = msgspec.json.encode(_ModelList(models))

    # -- RSGI ---------------------------------------------------------------

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = self._transport_factory()

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        transport, self._transport = self._transport, None
        if transport is not None and not loop.is_closed():
            with contextlib.suppress(Exception):
                loop.run_until_complete(transport.aclose())

    async def aclose(self) -> None:
        """Close the transport (for embedding and tests)."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.aclose()

    async def __rsgi__(self, scope: _Scope, protocol: Any) -> None:
        path = scope.path
        method = scope.method
        route = path
        status = 500
        try:
            if path == "/v1/chat/completions":
                if method != "POST":
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use POST.")
                status = await self._completions(scope, protocol)
            elif path in ("/v1/models", "/healthz", "/metrics"):
                if method not in ("GET", "HEAD"):
                    raise MethodNotAllowed(f"Method {method} not allowed on {path}; use GET.")
                status = self._get(path, scope, protocol)
            else:
                route = "other"
                raise NotFound(f"Unknown request URL: {method} {path}.")
        except EdgeError as err:
            status = err.status
            self._send_error(protocol, err, scope)
        except Exception:
            log.exception("edge: unexpected error on %s %s", method, path)
            internal = EdgeError("The server had an error while processing your request.")
            status = internal.status
            self._send_error(protocol, internal, scope)
        self.metrics.count(route, status)

    def _send_error(self, protocol: Any, err: EdgeError, scope: _Scope) -> None:
        headers = [("content-type", JSON)]
        if err.retry_after is not None:
            headers.append(("retry-after", str(max(1, math.ceil(err.retry_after)))))
        if err.status == 405:
            headers.append(("allow", "POST" if scope.path == "/v1/chat/completions" else "GET"))
        protocol.response_bytes(err.status, headers, err.body())

    def _get(self, path: str, scope: _Scope, protocol: Any) -> int:
        if path == "/healthz":
            protocol.response_bytes(200, [("content-type", JSON)], b'{"status":"ok"}')
        elif path == "/metrics":
            protocol.response_bytes(
                200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render()
            )
        else:
            self._keys.tenant_for(scope.headers.get("authorization"))
            protocol.response_bytes(200, [("content-type", JSON)], self._models_body)
        return 200

    # -- POST /v1/chat/completions -------------------------------------------

    async def _read_body(self, scope: _Scope, protocol: Any) -> bytes:
        limit = self._max_body
        length = scope.headers.get("content-length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                raise InvalidRequest("Invalid Content-Length header.") from None
            if size > limit:
                raise PayloadTooLarge(
                    f"Request body of {size} bytes exceeds the limit of {limit} bytes."
                )
            body: bytes = await protocol()
            if len(body) > limit:  # the peer sent more than it announced
                raise PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes.")
            return body
        pieces = []
        total = 0
        async for piece in protocol:
            total += len(piece)
            if total > limit:
                raise PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes.")
            pieces.append(piece)
        return b"".join(pieces)

    async def _completions(self, scope: _Scope, protocol: Any) -> int:
        headers = scope.headers
        tenant = self._keys.tenant_for(headers.get("authorization"))
        body = await self._read_body(scope, protocol)
        started = time.perf_counter()
        req = decode_request(body)
        model = resolve_model(self._models, req.model)
        completion_id = new_request_id()
        request_id = headers.get("x-request-id") or completion_id
        if len(request_id) > _MAX_REQUEST_ID or not request_id.isprintable():
            raise InvalidRequest("Invalid x-request-id header.", param="x-request-id")
        frame = write_request(
            req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
        )
        self._translate_time.observe(time.perf_counter() - started)

        watch = CallerWatch(protocol.client_disconnect)
        watch.start()
        try:
            return await self._exchange(
                protocol,
                req,
                frame,
                model=model.name,
                completion_id=completion_id,
                request_id=request_id,
            )
        except asyncio.CancelledError:
            if not watch.caught():
                raise
            return 499  # nginx's "client closed request", for the metrics only
        finally:
            watch.stop()

    async def _exchange(
        self,
        protocol: Any,
        req: ChatCompletionRequest,
        frame: bytes,
        *,
        model: str,
        completion_id: str,
        request_id: str,
    ) -> int:
        transport = self._transport
        if transport is None:
            transport = self._transport = self._transport_factory()
        reply = [("x-request-id", request_id)]
        keepalive = None
        if req.stream and self._keepalive:
            keepalive = _Keepalive(protocol, [*_SSE, *reply], self._keepalive, self.metrics)
        try:
            return await self._answer(
                transport,
                protocol,
                req,
                frame,
                keepalive=keepalive,
                reply=reply,
                model=model,
                completion_id=completion_id,
                request_id=request_id,
            )
        except EdgeError as err:
            if keepalive is None or keepalive.out is None:
                raise
            # The stream began with keep-alives: the error can only be an event.
            out = await keepalive.settle()
            await out.send_bytes(error_event(err))
            return 200
        finally:
            if keepalive is not None:
                keepalive.close()

    async def _answer(
        self,
        transport: Transport,
        protocol: Any,
        req: ChatCompletionRequest,
        frame: bytes,
        *,
        keepalive: _Keepalive | None,
        reply: list[tuple[str, str]],
        model: str,
        completion_id: str,
        request_id: str,
    ) -> int:
        sent = time.perf_counter()
        try:
            resp = await transport.request(
                "POST",
                self._url,
                body=frame,
                headers=[
                    ("content-type", FLATBUFFERS),
                    ("accept", FRAMES),
                    ("x-request-id", request_id),
                ],
                timeouts=self._timeouts,
            )
        except _UpstreamTimeout as exc:
            self._failures_timeout.inc()
            raise UpstreamTimeout(f"The proxy did not answer in time: {exc}") from exc
        except _UpstreamError as exc:
            self._failures_other.inc()
            raise UpstreamFailed(f"The proxy could not be reached: {exc}") from exc
        self._ttfb.observe(time.perf_counter() - sent)
        try:
            if resp.status != 200:
                try:
                    detail = await resp.read()
                except _UpstreamError:
                    detail = b""
                raise _proxy_error(resp.status, resp.headers, detail)
            created = int(time.time())
            if req.stream:
                renderer = StreamRenderer(
                    completion_id=completion_id,
                    created=created,
                    model=model,
                    include_usage=bool(req.stream_options and req.stream_options.include_usage),
                    choices=req.n or 1,
                )
                return await self._stream(protocol, resp, renderer, reply, keepalive)
            aggregator = Aggregator(
                completion_id=completion_id, created=created, model=model, choices=req.n or 1
            )
            frames = _Frames(resp)
            try:
                while not aggregator.finished:
                    chunks = await frames.next()
                    if chunks is None:
                        if aggregator.complete:
                            break
                        raise UpstreamFailed(
                            "The proxy closed the stream before the completion ended.",
                            code=codes.PROXY_PROTOCOL_ERROR,
                        )
                    for chunk in chunks:
                        aggregator.feed(chunk)
            finally:
                await frames.aclose()
            protocol.response_bytes(200, [("content-type", JSON), *reply], aggregator.body())
            return 200
        finally:
            await resp.aclose()

    async def _stream(
        self,
        protocol: Any,
        resp: Response,
        renderer: StreamRenderer,
        reply: list[tuple[str, str]],
        keepalive: _Keepalive | None,
    ) -> int:
        out: Any = None
        gauge = self.metrics.active_streams
        frames = _Frames(resp)
        events: list[bytes] = []
        try:
            while (chunks := await frames.next()) is not None:
                for chunk in chunks:
                    events.append(renderer.feed(chunk))
                    if renderer.finished:
                        events.append(renderer.end())
                        break
                if out is None:
                    if keepalive is not None:
                        out = await keepalive.settle()
                    if out is None:
                        out = protocol.response_stream(200, [*_SSE, *reply])
                        gauge.inc()
                    resp.begun()
                await out.send_bytes(b"".join(events))
                events.clear()
                if renderer.finished:
                    return 200
            if renderer.complete:  # fewer choices than asked for, each one finished
                await out.send_bytes(renderer.end())
                return 200
            raise UpstreamFailed(
                "The proxy closed the stream before the completion ended.",
                code=codes.PROXY_PROTOCOL_ERROR,
            )
        except EdgeError as err:
            if out is None:
                if keepalive is not None:
                    out = await keepalive.settle()
                if out is None:
                    if not any(events):
                        raise  # nothing rendered yet: still time for an HTTP error status
                    out = protocol.response_stream(200, [*_SSE, *reply])
                    gauge.inc()
            events.append(error_event(err))
            await out.send_bytes(b"".join(events))
            return 200
        finally:
            await frames.aclose()
            if out is not None and (keepalive is None or keepalive.out is None):
                gauge.dec()


# What a keep-alive tick sends: an SSE comment, which clients skip.
KEEPALIVE = b": keep-alive\n\n"


class _Keepalive:
    """SSE comments to a client while its stream waits for its first token.

    A timer, so a request whose answer comes in time costs one ``call_later``:
    the first tick starts the response (200, SSE) and each tick sends a
    comment. ``settle`` stops it and hands over the response it started
    (``None`` if it never ticked); ``close`` ends the bookkeeping.
    """

    __slots__ = ("_gauge", "_handle", "_headers", "_interval", "_protocol", "_sending", "out")

    def __init__(
        self, protocol: Any, headers: list[tuple[str, str]], interval: float, metrics: Metrics
    ) -> None:
        self._protocol = protocol
        self._headers = headers
        self._interval = interval
        self._gauge = metrics.active_streams
        self._sending: asyncio.Future[Any] | None = None
        self.out: Any = None
        loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        if self.out is None:
            self.out = self._protocol.response_stream(200, self._headers)
            self._gauge.inc()
        self._sending = asyncio.ensure_future(self.out.send_bytes(KEEPALIVE))
        self._handle = asyncio.get_running_loop().call_later(self._interval, self._tick)

    async def settle(self) -> Any:
        """Stop ticking; the response the ticks started (after their last write)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._sending is not None:
            with contextlib.suppress(Exception):
                await self._sending
            self._sending = None
        return self.out

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.out is not None:
            self._gauge.dec()


class _Frames:
    """Decoded chunks from the proxy's response, in the batches its bytes arrived in.

    Chunks are read in place in the pieces as they arrived (``FrameCutter``
    copies only a frame that spans pieces).
    """

    __slots__ = ("_cutter", "_pieces")

    def __init__(self, resp: Response) -> None:
        self._pieces = resp.iter_bytes().__aiter__()
        self._cutter = FrameCutter()

    async def next(self) -> list[Chunk] | None:
        """The next non-empty batch, or ``None`` at the end of the body."""
        try:
            while True:
                piece = await anext(self._pieces, None)
                if piece is None:
                    return None
                ready = self._cutter.feed(piece)
                if ready:
                    return [read_chunk(ready, a, b) for a, b in FrameCutter.spans(ready)]
        except _UpstreamTimeout as exc:
            raise UpstreamTimeout(f"The proxy stopped answering: {exc}") from exc
        except _UpstreamError as exc:
            raise UpstreamFailed(
                f"The proxy connection failed: {exc}", code=codes.PROXY_PROTOCOL_ERROR
            ) from exc
        except MalformedFrame as exc:
            raise UpstreamFailed(
                f"The proxy sent a malformed frame: {exc}", code=codes.PROXY_PROTOCOL_ERROR
            ) from exc

    async def aclose(self) -> None:
        close = getattr(self._pieces, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


def create_app(environ: Mapping[str, str] | None = None) -> EdgeApp:
    """The app granian serves (``edge_translator.app:create_app``, factory mode):
    settings from ``$FLATGATE_CONFIG`` (or the embedded default) and
    ``FLATGATE_EDGE_*`` variables."""
    env = os.environ if environ is None else environ
    return EdgeApp(load_edge_settings(None, environ=env))
