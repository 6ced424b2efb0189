"""The proxy's HTTP surface: route from the buffer, forward the bytes, relay frames.

``POST /v1/completions`` takes a ``CompletionRequest`` FlatBuffer, reads
``(provider, model)`` with ``proxy.wire.read_route`` (a memoryview into the
body, nothing decoded), picks backends with ``proxy.balancer``, forwards the
very ``bytes`` object the server handed over, and streams the backend's
``CompletionChunk`` frames back: size-prefixed frames relayed as they arrive
(``Accept: application/x-flatbuffers-stream``), or re-framed as SSE.

Errors before the first byte are an HTTP status with
``{"error": {"code", "message"}}``; after it, one error chunk with
``finish_reason`` error ends the stream. ``ProxyError`` is the root of the
errors this module raises and the one place they become responses.

Also ``/healthz``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time

from flatgate.proxy.backends.fbs import request_headers
from flatgate.proxy.plumbing.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import CallerWatch, Exchange, ServerApp, Sink
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.service.settings import GatewayConfig, load_config
from flatgate.proxy.transport.base import (
    Response,
    Timeouts,
    Transport,
    UpstreamError,
    UpstreamTimeout,
)
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.codes import ErrorCode, error_body
from flatgate.proxy.wire.frames import (
    ChunkError,
    FrameCutter,
    MalformedFrame,
    build_chunk,
    sse_event,
)
from flatgate.proxy.wire.pool import BuilderPool
from flatgate.proxy.wire.route import read_route
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, JSON, PROVIDERS, SSE, FinishReason
from flatgate.proxy.wire.verify import MalformedBuffer

__all__ = ["ProxyError", "ProxyServer", "create_app"]

_JSON = [("content-type", JSON)]
_PROVIDER_NAMES = {v: k for k, v in PROVIDERS.items()}


class ProxyError(Exception):
    """An error answered before the first byte: its registered code, a message,
    and the status (the code's own unless a backend's is passed through)."""

    def __init__(self, code: ErrorCode, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status or code.status
        self.message = message

    def body(self) -> bytes:
        return error_body(self.code, self.message)


class _StreamCut(Exception):
    """The backend's stream ended or broke before its final chunk."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


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
        for r in config.routes:
            target = RouteTarget(
                label=r.model,
                backends=tuple(self.backends[n] for n in r.backends),
                fallbacks=tuple(self.backends[n] for n in r.fallbacks),
            )
            provider = None if r.provider is None else PROVIDERS[r.provider]
            entries.append(Route(model=r.model, target=target, provider=provider))
        self.routes: RouteTable[RouteTarget] = RouteTable(entries)
        self._transport: Transport | None = None
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
            backend, resp, started = await self._open(ex, target, body, rid)
        except ProxyError as err:
            self.metrics.count(label, err.status)
            await ex.respond(err.status, _JSON, err.body())
            return
        if resp.status != 200:
            await self._pass_error(ex, resp, label)
            backend.outstanding -= 1
            return
        self.metrics.count(label, 200)
        await self._stream(ex, backend, resp, started=started, rid=rid, binary=binary)

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
        body = await ex.body()
        if len(body) > self.max_body:
            raise ProxyError(codes.BODY_TOO_LARGE, f"body over {self.max_body} bytes")
        return body, FRAMES in (ex.header("accept") or "")

    async def _open(
        self, ex: Exchange, target: RouteTarget, body: bytes, rid: str
    ) -> tuple[Backend, Response, float]:
        """Send ``body`` to the first backend that answers; fail over before the first byte."""
        plan = self.balancer.plan(target)
        if not plan:
            raise ProxyError(codes.BACKENDS_BUSY, "every backend of this route is at its limit")
        auth = ex.header("authorization")
        # What the caller is told when no backend answers: a backend's 5xx over
        # a timeout over an unreachable backend, whatever the order tried.
        failure: ProxyError | None = None
        transport = self.transport
        for backend in plan:
            send = request_headers(rid, auth if backend.forward_credentials else None)
            started = time.perf_counter()
            backend.outstanding += 1
            try:
                resp = await transport.request(
                    "POST",
                    backend.completions_url,
                    body=body,
                    headers=send,
                    timeouts=backend.timeouts,
                )
            except UpstreamError as exc:
                backend.outstanding -= 1
                self.balancer.failed(backend)
                self.metrics.upstream_failure_of(backend.name, type(exc).__name__).inc()
                err = _upstream_failure(exc)
                if failure is None or _RANK[failure.code.code] < _RANK[err.code.code]:
                    failure = err
                continue
            except BaseException:
                backend.outstanding -= 1
                raise
            if resp.status >= 500:
                await resp.aclose()
                backend.outstanding -= 1
                self.balancer.failed(backend)
                self.metrics.upstream_failure_of(backend.name, f"http_{resp.status}").inc()
                failure = ProxyError(
                    codes.BACKEND_ERROR, f"backend {backend.name} answered {resp.status}"
                )
                continue
            self.balancer.succeeded(backend)
            self.metrics.upstream_ttfb_of(backend.name).observe(time.perf_counter() - started)
            return backend, resp, started
        assert failure is not None
        raise failure

    async def _pass_error(self, ex: Exchange, resp: Response, label: str) -> None:
        """A 4xx from the backend goes to the caller as it is (capped)."""
        try:
            body = await resp.read()
        except UpstreamError:
            body = b""
        finally:
            await resp.aclose()
        if not body.startswith(b"{"):
            body = error_body(codes.BACKEND_REJECTED, body[:200].decode("utf-8", "replace"))
        self.metrics.count(label, resp.status)
        await ex.respond(resp.status, _JSON, body[:65536])

    async def _stream(
        self,
        ex: Exchange,
        backend: Backend,
        resp: Response,
        *,
        started: float,
        rid: str,
        binary: bool,
    ) -> None:
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
        pieces = resp.iter_bytes()
        cutter = FrameCutter()
        relayed = 0
        try:
            if not resp.ready():
                watch.start()  # the first read may wait: watch for the caller leaving
            try:
                ready = cutter.feed(await anext(pieces, b""))
            except (UpstreamError, MalformedFrame) as exc:
                err = (
                    _upstream_failure(exc)
                    if isinstance(exc, UpstreamError)
                    else ProxyError(codes.BACKEND_PROTOCOL_ERROR, str(exc))
                )
                self.metrics.count("-", err.status)
                await ex.respond(err.status, _JSON, err.body())
                return
            if cutter.finished():
                out = ready if binary else self._sse(cutter, ready)
                relayed = len(out)
                await ex.respond(200, headers, out)
                return
            watch.start()
            sink = await ex.stream(200, headers)
            try:
                if ready:
                    out = ready if binary else self._sse(cutter, ready)
                    relayed += len(out)
                    await sink.send(out)
                async for piece in pieces:
                    ready = cutter.feed(piece)
                    if not ready:
                        continue
                    out = ready if binary else self._sse(cutter, ready)
                    relayed += len(out)
                    await sink.send(out)
                if not cutter.finished():
                    raise _StreamCut(
                        codes.BACKEND_STREAM_TRUNCATED, "backend ended the stream early"
                    )
            except UpstreamError as exc:
                code = (
                    codes.BACKEND_TIMEOUT
                    if isinstance(exc, UpstreamTimeout)
                    else codes.BACKEND_DISCONNECTED
                )
                await self._send_error(sink, binary, rid, code, str(exc))
            except _StreamCut as exc:
                await self._send_error(sink, binary, rid, exc.code, str(exc))
            except MalformedFrame as exc:
                await self._send_error(sink, binary, rid, codes.BACKEND_PROTOCOL_ERROR, str(exc))
            await sink.close()
        except asyncio.CancelledError:
            if not watch.caught():
                raise
            # The caller went away: the finally below aborts the upstream exchange.
        finally:
            watch.stop()
            await pieces.aclose()  # type: ignore[attr-defined]
            await resp.aclose()
            backend.outstanding -= 1
            metrics.relayed_bytes.inc(relayed)
            metrics.active_streams.dec()
            metrics.upstream_duration_of(backend.name).observe(time.perf_counter() - started)

    @staticmethod
    def _sse(cutter: FrameCutter, ready: bytes) -> bytes:
        view = memoryview(ready)
        return b"".join([sse_event(view[start:end]) for start, end in cutter.spans(ready)])

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
        """200 when every route has a backend answering ``/healthz`` (cached 1 s)."""
        now = time.monotonic()
        if now - self._ready_at < 1.0:
            return self._ready
        healthy: dict[str, bool] = {}

        async def probe(b: Backend) -> None:
            try:
                resp = await self.transport.request(
                    "GET", f"{b.url}/healthz", body=b"", headers=[], timeouts=_PROBE
                )
                await resp.read()
                healthy[b.name] = resp.status == 200
            except UpstreamError:
                healthy[b.name] = False

        await asyncio.gather(*(probe(b) for b in self.backends.values()))
        routes = {}
        for route in self.routes.routes:
            t = route.target
            routes[t.label] = any(healthy[b.name] for b in (*t.backends, *t.fallbacks))
        ok = all(routes.values())
        body = json.dumps({"ready": ok, "routes": routes, "backends": healthy}).encode()
        self._ready_at, self._ready = now, (200 if ok else 503, body)
        return self._ready


def _upstream_failure(exc: UpstreamError) -> ProxyError:
    if isinstance(exc, UpstreamTimeout):
        return ProxyError(codes.BACKEND_TIMEOUT, f"no backend answered in time: {exc}")
    return ProxyError(codes.BACKEND_UNAVAILABLE, f"no backend reachable: {exc}")


# Which failure a caller hears of when every backend failed (highest wins).
_RANK = {
    codes.BACKEND_UNAVAILABLE.code: 1,
    codes.BACKEND_TIMEOUT.code: 2,
    codes.BACKEND_ERROR.code: 3,
}
_PROBE = Timeouts(connect=0.5, read=1.0, total=1.5)


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_PROXY_*``."""
    return ServerApp(ProxyServer(load_config()))
