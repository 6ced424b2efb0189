"""The edge's router over HTTP, and what the edge does with any router's answer.

``ProxyLink`` is ``transport.router.Router`` over a separate proxy: a
translated request goes to its ``POST /v1/completions`` (``complete``), and
an ``EmbeddingRequest`` to its ``POST /v1/embeddings`` (``embed``), whose one
``EmbeddingResponse`` buffer is read whole, at most ``[edge]
max_response_bytes`` of it (more is ``proxy_protocol_error``, and the
connection is dropped: ``whole``). ``Frames`` reads a completion's chunk frames,
whichever router answered.

Owns the boundary between the transport and the edge: the transport's
exceptions (``transport.base.UpstreamError`` and kin) become the edge's errors
here and nowhere else (``proxy_failure``): before the proxy answers, a pool
that had no connection free is ``pool_exhausted`` (503, retry shortly), a
timeout ``ProxyTimedOut`` (504), anything else ``ProxyFailed`` (502); once
its frames are being read, a timeout is still ``ProxyTimedOut`` and a broken
connection or a malformed frame ``proxy_protocol_error``. A router's refusal
before any frame becomes the error it means (``refused``: its code and status
carry through, with ``Retry-After``): over HTTP from the proxy's JSON error
(``proxy_error``), in process from the router's ``transport.router.Refused``
(``complete`` and ``embed``, the edge's two calls of a router). A request
the drain ends while it waits on the router is told ``draining``. Also the
upstream's metrics (time to the response head, failures by kind).

No HTTP server objects; no client API's shapes (the errors it makes are
rendered by the caller's API).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from flatgate.edge_translator.errors import (
    BUSY_RETRY_AFTER,
    ModelNotFound,
    PayloadTooLarge,
    ProxyFailed,
    ProxyTimedOut,
    shutting_down,
)
from flatgate.edge_translator.settings import EdgeSection
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.telemetry import headers as trace_headers
from flatgate.proxy.transport.base import (
    Response,
    ResponseTooLarge,
    Timeouts,
    Transport,
    Upstream,
    UpstreamError,
    UpstreamPoolTimeout,
    UpstreamTimeout,
    read_whole,
    retry_after,
    retry_after_value,
)
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.transport.router import Refused, Router
from flatgate.proxy.wire.chunk.frames import Chunk, FrameCutter, MalformedFrame
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.schema import (
    ADMITTED_HEADER,
    COMPLETIONS_PATH,
    EMBEDDINGS_PATH,
    FLATBUFFERS,
    FRAMES,
)

__all__ = [
    "Frames",
    "ProxyLink",
    "complete",
    "embed",
    "proxy_error",
    "proxy_failure",
    "refused",
    "watch",
    "whole",
]

log = logging.getLogger("flatgate.edge")

_ADMITTED = ((ADMITTED_HEADER, "1"),)


def proxy_failure(exc: UpstreamError, *, begun: bool = False) -> FlatgateError:
    """The edge's error for the transport's ``exc`` (``begun``: while the
    proxy's frames were being read): the one place the transport's errors
    become the edge's."""
    if begun:
        if isinstance(exc, UpstreamTimeout):
            return ProxyTimedOut(f"The proxy stopped answering: {exc}")
        return ProxyFailed(f"The proxy connection failed: {exc}", code=codes.PROXY_PROTOCOL_ERROR)
    if isinstance(exc, UpstreamPoolTimeout):
        return FlatgateError(
            f"No connection to the proxy came free in time; retry shortly: {exc}",
            code=codes.POOL_EXHAUSTED,
            retry_after=BUSY_RETRY_AFTER,
        )
    if isinstance(exc, UpstreamTimeout):
        return ProxyTimedOut(f"The proxy did not answer in time: {exc}")
    return ProxyFailed(f"The proxy could not be reached: {exc}")


def watch(metrics: Metrics, pool: Callable[[], Transport | None]) -> tuple[Any, Any]:
    """The upstream's figures the edge reports, whichever its router: the
    pool ``pool()`` returns (``None`` until made), and its failures by kind
    (labelled once: the edge has one upstream); those two counters."""
    metrics.watch_transport(pool)
    return (
        metrics.upstream_failure_of("proxy", "timeout"),
        metrics.upstream_failure_of("proxy", "unreachable"),
    )


async def _begun(opening: Awaitable[Response], ending: Ending) -> Response:
    """The router's answer ``opening`` awaits, begun: its refusal raised as
    the edge's error, a wait the drain ends ``draining``."""
    try:
        return await opening
    except asyncio.CancelledError:
        if not ending.absorb():
            raise
        raise shutting_down() from None
    except Refused as err:  # the router's own refusal, in process
        raise refused(err) from None


async def complete(
    router: Router, frame: bytes, request_id: str, ending: Ending, *, admitted: bool
) -> Response:
    """``router``'s answer to the ``CompletionRequest`` ``frame``, begun (``_begun``)."""
    return await _begun(router.complete(frame, request_id, admitted=admitted), ending)


async def embed(
    router: Router, frame: bytes, request_id: str, ending: Ending, *, admitted: bool
) -> Response:
    """``router``'s answer to the ``EmbeddingRequest`` ``frame`` (read it with
    ``whole``), begun (``_begun``)."""
    return await _begun(router.embed(frame, request_id, admitted=admitted), ending)


class ProxyLink:
    """``Router`` over a separate proxy's ``POST /v1/completions`` and
    ``/v1/embeddings``, over a transport made on first use (in the worker's
    loop)."""

    __slots__ = (
        "_auth",
        "_embeddings_url",
        "_factory",
        "_timed_out",
        "_timeouts",
        "_transport",
        "_ttfb",
        "_unreachable",
        "_url",
        "traced",
    )

    def __init__(
        self,
        e: EdgeSection,
        metrics: Metrics,
        *,
        transport_factory: Callable[[], Transport] | None = None,
        traced: bool = False,
    ) -> None:
        """``traced``: telemetry is on, each request to the proxy carries the
        task's current span in ``traceparent``."""
        self.traced = traced
        base = e.proxy_url.rstrip("/")
        self._url = base + COMPLETIONS_PATH
        self._embeddings_url = base + EMBEDDINGS_PATH
        self._timeouts = Timeouts(
            connect=e.connect_timeout,
            read=e.read_timeout,
            total=e.total_timeout or None,
            first_byte=e.first_byte_timeout,
        )
        self._factory = transport_factory or (
            lambda: make_transport(e.transport, limit=e.pool_limit, pool_timeout=e.pool_timeout)
        )
        self._transport: Transport | None = None
        # Presented to the proxy when it authenticates its callers.
        self._auth = [("authorization", f"Bearer {e.proxy_token}")] if e.proxy_token else []
        self._timed_out, self._unreachable = watch(metrics, self.pool)
        # Labelled once ("proxy": the edge has one upstream).
        self._ttfb = metrics.upstream_ttfb_of("proxy")

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            self._transport = self._factory()
        return self._transport

    def pool(self) -> Transport | None:
        return self._transport

    async def aclose(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.aclose()

    async def complete(self, frame: bytes, request_id: str, *, admitted: bool) -> Response:
        """``frame`` to the proxy, asking for size-prefixed frames; its
        response once the head arrived, or its refusal raised."""
        resp = await self._post(self._url, FRAMES, frame, request_id, admitted=admitted)
        if resp.status != 200:
            try:
                raise await refusal(resp)
            finally:
                await resp.aclose()
        return resp

    async def embed(self, frame: bytes, request_id: str, *, admitted: bool) -> Response:
        """The ``EmbeddingRequest`` ``frame`` to the proxy's embeddings
        endpoint; its response once the head arrived (read it with
        ``whole``), or its refusal raised."""
        resp = await self._post(
            self._embeddings_url, FLATBUFFERS, frame, request_id, admitted=admitted
        )
        if resp.status != 200:
            try:
                raise await refusal(resp)
            finally:
                await resp.aclose()
        return resp

    async def _post(
        self, url: str, accept: str, frame: bytes, request_id: str, *, admitted: bool
    ) -> Response:
        sent = time.perf_counter()
        try:
            resp = await self.transport.request(
                Upstream(
                    "POST",
                    url,
                    body=frame,
                    headers=[
                        ("content-type", FLATBUFFERS),
                        ("accept", accept),
                        ("x-request-id", request_id),
                        *self._auth,
                        *(_ADMITTED if admitted else ()),
                        *(trace_headers() if self.traced else ()),
                    ],
                    timeouts=self._timeouts,
                )
            )
        except UpstreamError as exc:
            if isinstance(exc, UpstreamTimeout):
                self._timed_out.inc()
            elif not isinstance(exc, UpstreamPoolTimeout):  # the edge's own limit
                self._unreachable.inc()
            raise proxy_failure(exc) from exc
        self._ttfb.observe(time.perf_counter() - sent)
        return resp


async def whole(resp: Response, max_bytes: int, ending: Ending | None = None) -> bytes:
    """The body of the proxy's 200 answer, read to its end: at most
    ``max_bytes`` (a ``Content-Length`` over it is refused before a byte is
    read, and a body that grows past it as soon as it does)."""
    try:
        return await read_whole(resp, max_bytes)
    except ResponseTooLarge:
        raise _too_large(max_bytes) from None
    except UpstreamError as exc:
        raise proxy_failure(exc, begun=True) from exc
    except asyncio.CancelledError:
        if ending is None or not ending.absorb():
            raise
        raise shutting_down() from None


def _too_large(max_bytes: int) -> FlatgateError:
    return ProxyFailed(
        f"The proxy's answer is larger than the edge takes ([edge] max_response_bytes = "
        f"{max_bytes}); ask for fewer inputs or dimensions.",
        code=codes.PROXY_PROTOCOL_ERROR,
    )


async def refusal(resp: Response) -> FlatgateError:
    """The error a proxy's non-200 answer means (its body read, if it comes)."""
    try:
        detail = await resp.read()
    except UpstreamError:
        detail = b""
    return proxy_error(resp.status, resp.headers, detail)


class _ProxyError(msgspec.Struct):
    code: str = ""
    message: str = ""


class _ProxyErrorBody(msgspec.Struct):
    error: _ProxyError = msgspec.field(default_factory=_ProxyError)


_decode_proxy_error = msgspec.json.Decoder(_ProxyErrorBody).decode
# Proxy statuses that mean the edge and the proxy disagree (an edge bug, or a
# proxy of another version): the client sees a gateway failure.
_DISAGREEMENT = frozenset({405, 411, 415})
# The proxy refused the edge's own credential: the gateway's configuration is
# wrong, which the client can neither fix nor retry away.
_MISCONFIGURED = frozenset({codes.UNAUTHORIZED.code, codes.TENANT_FORBIDDEN.code})


def proxy_error(status: int, headers: Mapping[str, str], body: bytes) -> FlatgateError:
    """The error for a proxy that answered ``status`` before any frame, with
    its JSON error ``body`` (``refused``'s)."""
    detail = _detail(body)
    return _refused(status, detail.code, detail.message, lambda: retry_after(headers))


def refused(err: Refused) -> FlatgateError:
    """The error for the router's refusal ``err``, in process: what its
    answer over HTTP means (``proxy_error``), read from the object."""
    wait = err.retry_after
    # As the proxy's Retry-After header would carry it: whole seconds.
    seconds = None if wait is None else float(retry_after_value(wait))
    if err.raw:  # a backend's own JSON error, passed through: read as over HTTP
        detail = _detail(err.raw)
        return _refused(err.status, detail.code, detail.message, lambda: seconds)
    return _refused(err.status, err.code.code, err.message, lambda: seconds)


def _detail(body: bytes) -> _ProxyError:
    try:
        return _decode_proxy_error(body).error
    except msgspec.DecodeError:
        return _ProxyError()


def _refused(
    status: int, code: str, message: str, wait: Callable[[], float | None]
) -> FlatgateError:
    """The error for a router that refused with ``status``, ``code`` and
    ``message`` (``wait``: its Retry-After, in seconds).

    The router's code and status carry through (a backend's 400 stays a 400,
    a 429 stays a 429 with its ``Retry-After``), so that the client's SDK
    raises the matching exception and retries only what can succeed.
    """
    message = message or f"the proxy answered HTTP {status}"
    if status == 404 and code in ("", codes.NO_ROUTE.code):
        return ModelNotFound(f"No route to the model: {message}", param="model")
    if status == 413:
        return PayloadTooLarge(f"Request too large for the proxy: {message}")
    error_code = codes.peer_code(code, status) if code else codes.PROXY_PROTOCOL_ERROR
    if status in _DISAGREEMENT or not code:
        return ProxyFailed(message, code=error_code, status=502)
    if code in _MISCONFIGURED:
        log.error("the proxy refused the edge's credential (set [edge] proxy_token): %s", message)
        return ProxyFailed(
            "The gateway is misconfigured: its proxy refused its credential.",
            code=codes.PROXY_AUTH_FAILED,
            status=502,
        )
    if status == 504:
        return ProxyTimedOut(message, code=error_code)
    return FlatgateError(message, code=error_code, status=status, retry_after=wait())


class Frames:
    """Decoded chunks from the proxy's response, in the batches its bytes arrived in.

    Chunks are read in place in the pieces as they arrived (``FrameCutter``
    copies only a frame that spans pieces).
    """

    __slots__ = ("_cutter", "_ending", "_pieces")

    def __init__(self, resp: Response, ending: Ending | None = None) -> None:
        self._pieces = resp.iter_bytes().__aiter__()
        self._cutter = FrameCutter()
        self._ending = ending

    async def next(self) -> list[Chunk] | None:
        """The next non-empty batch, or ``None`` at the end of the body."""
        try:
            while True:
                try:
                    piece = await self._pieces.__anext__()
                except StopAsyncIteration:
                    return None
                ready = self._cutter.feed(piece)
                if ready:
                    return [read_chunk(ready, a, b) for a, b in FrameCutter.spans(ready)]
        except UpstreamError as exc:
            raise proxy_failure(exc, begun=True) from exc
        except MalformedFrame as exc:
            raise ProxyFailed(
                f"The proxy sent a malformed frame: {exc}", code=codes.PROXY_PROTOCOL_ERROR
            ) from exc
        except asyncio.CancelledError:
            if self._ending is None or not self._ending.absorb():
                raise
            raise shutting_down() from None

    async def aclose(self) -> None:
        close = getattr(self._pieces, "aclose", None)
        if close is not None:
            # Not contextlib.suppress: this runs once per request, and its
            # context manager costs more than the try.
            try:  # noqa: SIM105
                await close()
            except Exception:
                pass
