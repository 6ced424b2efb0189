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
from collections.abc import Callable

from flatgate.proxy.plumbing.config import PROVIDERS, GatewayConfig, load_config
from flatgate.proxy.plumbing.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import CallerWatch, Exchange, ServerApp, Sink
from flatgate.proxy.service.balancer import Backend, Balancer, RouteTarget
from flatgate.proxy.service.routes import Route, RouteTable
from flatgate.proxy.transport.base import (
    Response,
    Timeouts,
    Transport,
    UpstreamError,
    UpstreamTimeout,
)
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire.frames import (
    ChunkError,
    FinishReason,
    FrameCutter,
    MalformedFrame,
    build_chunk,
    sse_event,
)
from flatgate.proxy.wire.pool import BuilderPool
from flatgate.proxy.wire.route import read_route
from flatgate.proxy.wire.verify import MalformedBuffer

__all__ = ["BINARY", "SSE", "ProxyError", "ProxyServer", "RouteReader", "create_app"]

BINARY = "application/x-flatbuffers-stream"
SSE = "text/event-stream"
REQUEST_TYPE = "application/x-flatbuffers"
_JSON = [("content-type", "application/json")]
_PROVIDER_NAMES = {v: k for k, v in PROVIDERS.items()}
# body -> (provider, model name as bytes or a read-only view); MalformedBuffer if bad.
RouteReader = Callable[[bytes], tuple[int, "bytes | memoryview"]]


class ProxyError(Exception):
    """An error answered before the first byte: status, code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> bytes:
        return json.dumps({"error": {"code": self.code, "message": self.message}}).encode()


class _StreamCut(Exception):
    """The backend's stream ended or broke before its final chunk."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProxyServer:
    """The proxy's request handler; one per granian worker."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        worker: str = "",
        route_reader: RouteReader = read_route,
        request_type: str = REQUEST_TYPE,
    ) -> None:
        """``route_reader`` and ``request_type`` are for the load bench's
        baselines (route read from JSON or protobuf bodies); the product reads
        FlatBuffers with ``proxy.wire.read_route``."""
        self.config = config
        self.route_reader = route_reader
        self.request_type = request_type
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
            err = ProxyError(404, "not_found", f"no such path: {path}")
            await ex.respond(err.status, _JSON, err.body())

    # POST /v1/completions
    async def completions(self, ex: Exchange) -> None:
        label = "-"
        try:
            body, binary = await self._accept(ex)
            try:
                provider, model = self.route_reader(body)
            except MalformedBuffer as exc:
                raise ProxyError(400, "malformed_request", str(exc)) from None
            target = self.routes.lookup(provider, model)
            if target is None:
                name = bytes(model).decode("utf-8", "replace")
                pname = _PROVIDER_NAMES.get(provider, str(provider))
                raise ProxyError(404, "no_route", f"no route for provider {pname} model {name!r}")
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
            raise ProxyError(405, "method_not_allowed", "POST a CompletionRequest here")
        ctype = (ex.header("content-type") or "").partition(";")[0].strip().lower()
        if ctype != self.request_type:
            raise ProxyError(
                415, "unsupported_media_type", f"Content-Type must be {self.request_type}"
            )
        length = ex.header("content-length")
        if length is None:
            raise ProxyError(411, "length_required", "send a Content-Length")
        try:
            size = int(length)
        except ValueError:
            raise ProxyError(400, "bad_content_length", "Content-Length is not a number") from None
        if size > self.max_body:
            raise ProxyError(413, "body_too_large", f"body over {self.max_body} bytes")
        body = await ex.body()
        if len(body) > self.max_body:
            raise ProxyError(413, "body_too_large", f"body over {self.max_body} bytes")
        return body, BINARY in (ex.header("accept") or "")

    async def _open(
        self, ex: Exchange, target: RouteTarget, body: bytes, rid: str
    ) -> tuple[Backend, Response, float]:
        """Send ``body`` to the first backend that answers; fail over before the first byte."""
        plan = self.balancer.plan(target)
        if not plan:
            raise ProxyError(503, "backends_busy", "every backend of this route is at its limit")
        headers = [
            ("content-type", self.request_type),
            ("accept", BINARY),
            ("x-request-id", rid),
        ]
        auth = ex.header("authorization")
        last: Exception | None = None
        transport = self.transport
        for backend in plan:
            send = headers
            if auth and backend.forward_credentials:
                send = [*headers, ("authorization", auth)]
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
                last = exc
                continue
            except BaseException:
                backend.outstanding -= 1
                raise
            if resp.status >= 500:
                await resp.aclose()
                backend.outstanding -= 1
                self.balancer.failed(backend)
                self.metrics.upstream_failure_of(backend.name, f"http_{resp.status}").inc()
                last = ProxyError(
                    502, "backend_error", f"backend {backend.name} answered {resp.status}"
                )
                continue
            self.balancer.succeeded(backend)
            self.metrics.upstream_ttfb_of(backend.name).observe(time.perf_counter() - started)
            return backend, resp, started
        if isinstance(last, UpstreamError):
            raise _upstream_failure(last)
        raise ProxyError(502, "backend_unavailable", f"no backend reachable: {last}")

    async def _pass_error(self, ex: Exchange, resp: Response, label: str) -> None:
        """A 4xx from the backend goes to the caller as it is (capped)."""
        try:
            body = await resp.read()
        except UpstreamError:
            body = b""
        finally:
            await resp.aclose()
        if not body.startswith(b"{"):
            body = ProxyError(
                resp.status, "backend_rejected", body[:200].decode("utf-8", "replace")
            ).body()
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
            ("content-type", BINARY if binary else SSE),
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
                    else ProxyError(502, "backend_protocol_error", str(exc))
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
                    raise _StreamCut("backend_stream_truncated", "backend ended the stream early")
            except UpstreamError as exc:
                code = (
                    "backend_timeout"
                    if isinstance(exc, UpstreamTimeout)
                    else "backend_disconnected"
                )
                await self._send_error(sink, binary, rid, code, str(exc))
            except _StreamCut as exc:
                await self._send_error(sink, binary, rid, exc.code, str(exc))
            except MalformedFrame as exc:
                await self._send_error(sink, binary, rid, "backend_protocol_error", str(exc))
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
        self, sink: Sink, binary: bool, rid: str, code: str, message: str
    ) -> None:
        # Rare (one per failed stream): built with the pool, whose figures
        # /metrics reports.
        frame = build_chunk(
            self.pool,
            request_id=rid,
            error=ChunkError(code, message),
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
        return ProxyError(504, "backend_timeout", f"no backend answered in time: {exc}")
    return ProxyError(502, "backend_unavailable", f"no backend reachable: {exc}")


_PROBE = Timeouts(connect=0.5, read=1.0, total=1.5)


def create_app() -> ServerApp:
    """granian factory: settings from ``$FLATGATE_CONFIG`` and ``FLATGATE_PROXY_*``."""
    return ServerApp(ProxyServer(load_config()))
