"""The proxy's HTTP surface: route from the buffer, dispatch, relay frames.

``POST /v1/completions`` takes a ``CompletionRequest`` FlatBuffer, reads
``(provider, model)`` with ``wire.route.read_route`` (a memoryview into the
body, nothing decoded), finds the route, and has the dispatcher
(``service.dispatch``) open an answer from one of its backends: an ``fbs``
backend is sent the very ``bytes`` object the server handed over, a JSON
backend its adapter's translation. The answer's chunk frames stream back:
size-prefixed frames relayed as they arrive (``Accept:
application/x-flatbuffers-stream``), or re-framed as SSE.

Errors before the first byte are an HTTP status with
``{"error": {"code", "message"}}`` (and ``Retry-After`` when a backend asked
for a wait); after it, one error chunk with ``finish_reason`` error ends the
stream. This module is the one place errors become responses.

Also ``/healthz``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.plumbing.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import BodyTooLarge, CallerWatch, Exchange, ServerApp, Sink
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget
from flatgate.proxy.service.dispatch import Dispatcher, Opened, ProxyError
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.service.settings import GatewayConfig, load_config
from flatgate.proxy.transport.base import Transport, UpstreamError, UpstreamTimeout
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.codes import ErrorCode
from flatgate.proxy.wire.frames import ChunkError, FrameCutter, sse_event
from flatgate.proxy.wire.pool import BuilderPool
from flatgate.proxy.wire.route import read_route
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, JSON, PROVIDERS, SSE, FinishReason
from flatgate.proxy.wire.stock import build_chunk
from flatgate.proxy.wire.verify import MalformedBuffer

__all__ = ["ProxyError", "ProxyServer", "create_app"]

_JSON = [("content-type", JSON)]
_PROVIDER_NAMES = {v: k for k, v in PROVIDERS.items()}


def _error_headers(err: ProxyError) -> list[tuple[str, str]]:
    if err.retry_after is None:
        return _JSON
    return [*_JSON, ("retry-after", str(max(1, math.ceil(err.retry_after))))]


class ProxyServer:
    """The proxy's request handler; one per granian worker.

    ``request_type`` and ``route_of`` are what a request body is and how its
    route is read: FlatBuffers and ``wire.route.read_route``. A subclass may
    read another format (the load bench's JSON and protobuf baselines do).
    """

    request_type: str = FLATBUFFERS

    def route_of(self, body: bytes) -> tuple[int, bytes | memoryview]:
        """``(provider, model)`` of a request body; ``MalformedBuffer`` if bad."""
        return read_route(body)

    def __init__(self, config: GatewayConfig, *, worker: str = "") -> None:
        self.config = config
        p = config.proxy
        self.max_body = p.max_body_bytes
        self.pool = BuilderPool()
        self.metrics = Metrics("flatgate", self.pool)
        self.balancer = Balancer(p.cooldown_seconds)
        self.backends = {b.name: Backend.from_config(b) for b in config.backends}
        entries = []
        self.targets: list[RouteTarget] = []
        for r in config.routes:
            target = RouteTarget(
                label=r.model,
                backends=tuple(self.backends[n] for n in r.backends),
                fallbacks=tuple(self.backends[n] for n in r.fallbacks),
            )
            self.targets.append(target)
            provider = None if r.provider is None else PROVIDERS[r.provider]
            entries.append(Route(model=r.model, target=target, provider=provider))
        self.routes: RouteTable[RouteTarget] = RouteTable(entries)
        self._transport: Transport | None = None
        self.dispatcher = Dispatcher(self.balancer, self.metrics, lambda: self.transport)
        self._ids = itertools.count(1)
        self._id_prefix = f"fg-{worker or os.getpid()}-"
        self._ready_at = 0.0
        self._ready: tuple[int, bytes] = (503, b"")

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = make_transport(
                self.config.proxy.transport, limit=self.config.proxy.pool_limit
            )
        return self._transport

    async def __call__(self, ex: Exchange) -> None:
        path = ex.path
        if path == "/v1/completions":
            await self.completions(ex)
        elif path == "/healthz":
            await ex.respond(200, [("content-type", "text/plain")], b"ok\n")
        elif path == "/readyz":
            status, body = await self.readiness()
            await ex.respond(status, _JSON, body)
        elif path == "/metrics":
            await ex.respond(200, [("content-type", METRICS_CONTENT_TYPE)], self.metrics.render())
        else:
            err = ProxyError(codes.NOT_FOUND, f"no such path: {path}")
            await ex.respond(err.status, _JSON, err.body())

    # POST /v1/completions
    async def completions(self, ex: Exchange) -> None:
        label = "-"
        try:
            body, binary = await self._accept(ex)
            try:
                provider, model = self.route_of(body)
            except MalformedBuffer as exc:
                raise ProxyError(codes.MALFORMED_REQUEST, str(exc)) from None
            target = self.routes.lookup(provider, model)
            if target is None:
                name = bytes(model).decode("utf-8", "replace")
                pname = _PROVIDER_NAMES.get(provider, str(provider))
                raise ProxyError(codes.NO_ROUTE, f"no route for provider {pname} model {name!r}")
            # The view (a GC-tracked object over the body) is not needed past the
            # lookup; dropping it now keeps it out of the GC's young generation
            # while the request waits on the backend.
            del model
            label = target.label
            rid = ex.header("x-request-id") or f"{self._id_prefix}{next(self._ids)}"
            opened = await self.dispatcher.open(target, body, rid, ex.header("authorization") or "")
        except ProxyError as err:
            self.metrics.count(label, err.status)
            await ex.respond(err.status, _error_headers(err), err.body())
            return
        self.metrics.count(label, 200)
        await self._stream(ex, opened, rid=rid, binary=binary)

    async def _accept(self, ex: Exchange) -> tuple[bytes, bool]:
        if ex.method != "POST":
            raise ProxyError(codes.METHOD_NOT_ALLOWED, "POST a CompletionRequest here")
        ctype = (ex.header("content-type") or "").partition(";")[0].strip().lower()
        if ctype != self.request_type:
            raise ProxyError(
                codes.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be {self.request_type}"
            )
        length = ex.header("content-length")
        if length is None:
            raise ProxyError(codes.LENGTH_REQUIRED, "send a Content-Length")
        try:
            size = int(length)
        except ValueError:
            raise ProxyError(codes.BAD_CONTENT_LENGTH, "Content-Length is not a number") from None
        if size > self.max_body:
            raise ProxyError(codes.BODY_TOO_LARGE, f"body over {self.max_body} bytes")
        try:
            body = await ex.body(self.max_body)
        except BodyTooLarge:
            raise ProxyError(codes.BODY_TOO_LARGE, f"body over {self.max_body} bytes") from None
        return body, FRAMES in (ex.header("accept") or "")

    async def _stream(self, ex: Exchange, opened: Opened, *, rid: str, binary: bool) -> None:
        """Relay frames until the final chunk; cancel upstream if the caller goes away.

        When the first body read already holds the final chunk (a non-streamed
        answer, or a fast backend), it goes out as one plain response: granian's
        streamed responses cost several times more per request.
        """
        metrics = self.metrics
        metrics.active_streams.inc()
        watch = CallerWatch(ex.disconnected)
        headers = [
            ("content-type", FRAMES if binary else SSE),
            ("cache-control", "no-cache"),
            ("x-request-id", rid),
        ]
        resp = opened.response
        translator = opened.translator
        pieces = resp.iter_bytes()
        relayed = 0
        try:
            # Until the first frame: the caller may leave while the backend
            # thinks, and the first-byte timeout is in force.
            ended = False
            try:
                ready = b""
                while not ready:
                    if not resp.ready():
                        watch.start()
                    piece = await anext(pieces, None)
                    if piece is None:
                        ready = translator.end()
                        ended = True
                        break
                    ready = translator.feed(piece)
            except (UpstreamError, TranslatorError) as exc:
                err = _upstream_failure(exc)
                self.metrics.count("-", err.status)
                await ex.respond(err.status, _JSON, err.body())
                return
            resp.begun()
            if ended or translator.done:
                out = ready if binary else self._sse(ready)
                relayed = len(out)
                await ex.respond(200, headers, out)
                return
            watch.start()
            sink = await ex.stream(200, headers)
            try:
                out = ready if binary else self._sse(ready)
                relayed += len(out)
                await sink.send(out)
                async for piece in pieces:
                    ready = translator.feed(piece)
                    if ready:
                        out = ready if binary else self._sse(ready)
                        relayed += len(out)
                        await sink.send(out)
                    if translator.done:
                        break
                else:
                    tail = translator.end()
                    if tail:
                        await sink.send(tail if binary else self._sse(tail))
            except UpstreamError as exc:
                if not translator.done:
                    code = (
                        codes.BACKEND_TIMEOUT
                        if isinstance(exc, UpstreamTimeout)
                        else codes.BACKEND_DISCONNECTED
                    )
                    await self._send_error(sink, binary, rid, code, str(exc))
            except TranslatorError as exc:
                await self._send_error(sink, binary, rid, codes.BACKEND_PROTOCOL_ERROR, str(exc))
            await sink.close()
        except asyncio.CancelledError:
            if not watch.caught():
                raise
            # The caller went away: the finally below aborts the upstream exchange.
        finally:
            watch.stop()
            await pieces.aclose()  # type: ignore[attr-defined]
            await opened.close()
            metrics.relayed_bytes.inc(relayed)
            metrics.active_streams.dec()

    @staticmethod
    def _sse(ready: bytes) -> bytes:
        view = memoryview(ready)
        return b"".join([sse_event(view[start:end]) for start, end in FrameCutter.spans(ready)])

    async def _send_error(
        self, sink: Sink, binary: bool, rid: str, code: ErrorCode, message: str
    ) -> None:
        # Rare (one per failed stream): built with the pool, whose figures
        # /metrics reports.
        frame = build_chunk(
            self.pool,
            request_id=rid,
            error=ChunkError(code.code, message),
            finish_reason=FinishReason.ERROR,
        )
        await sink.send(frame if binary else sse_event(memoryview(frame)[4:]))

    async def readiness(self) -> tuple[int, bytes]:
        """200 when every route has a ready backend (cached 1 s): an fbs backend
        answering ``/healthz``, an openai one ``/models``, an anthropic one
        accepting a connection, or a backend's own ``health_path``."""
        now = time.monotonic()
        if now - self._ready_at < 1.0:
            return self._ready
        body = await self.dispatcher.readiness(self.targets, list(self.backends.values()))
        ok = body.startswith(b'{"ready": true')
        self._ready_at, self._ready = now, (200 if ok else 503, body)
        return self._ready


def _upstream_failure(exc: Exception) -> ProxyError:
    if isinstance(exc, UpstreamTimeout):
        return ProxyError(codes.BACKEND_TIMEOUT, f"no backend answered in time: {exc}")
    if isinstance(exc, TranslatorError):
        return ProxyError(codes.BACKEND_PROTOCOL_ERROR, str(exc))
    return ProxyError(codes.BACKEND_UNAVAILABLE, f"no backend reachable: {exc}")


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_PROXY_*``."""
    return ServerApp(ProxyServer(load_config()))
