"""The proxy's router, in process: what the one-process gateway's edge calls.

``InProcessRouter`` is ``transport.router.Router`` over a ``ProxyServer``:
its ``complete`` does what ``POST /v1/completions`` does on the proxy's HTTP
surface, without HTTP. It reads ``(provider, model)`` from the very
``CompletionRequest`` bytes the edge wrote (``ProxyServer.target_of``, in
place), has the dispatcher open an answer from a backend (the untouched bytes
to an ``fbs`` backend, the adapter's JSON to the others), and returns a
``Response`` whose body is the chunk frames, as the proxy would have sent
them with ``Accept: application/x-flatbuffers-stream``. The edge reads it
exactly as it reads the proxy's HTTP answer, so both shapes share every line
past the HTTP boundary.

- A refusal before any frame (no route, every backend down, ...) is raised
  as ``transport.router.Refused``: the router's error
  (``service.errors.proxy_error``'s), as the HTTP surface would answer it,
  and counted in the router's metrics as there.
- Otherwise the frames come from the proxy's one relay (``service.relay``):
  an upstream failure is one error chunk, as over HTTP.
- Closing the response (the edge's client left, or its drain ended it)
  closes the backend's answer, which aborts its connection.

``embed`` answers an ``EmbeddingRequest`` as ``POST /v1/embeddings`` answers
it (``service.embed``): a ``Response`` whose body is the one
``EmbeddingResponse`` buffer (status 200, the backend's name in
``x-flatgate-backend``), or the refusal raised as above.

The edge and this process are one trust domain: the edge wrote the buffer and
its tenant, so no caller token is checked and none is forwarded, and an
adapter reads the buffer without the verifier's walk (the edge's writer made
it, from a body the edge bounded; ``dispatch._Decoded``); the route read
keeps its bounds checks. The edge charged the tenant's limits, so the router
charges none (its ``ProxyServer`` is built with ``limits=False``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping

from flatgate.proxy.backends.extras import omitted_header
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.errors import ANSWERABLE, ProxyError, proxy_error
from flatgate.proxy.service.relay import Relay
from flatgate.proxy.transport.base import Response, Transport
from flatgate.proxy.transport.router import Refused
from flatgate.proxy.wire.schema import BACKEND_HEADER, FLATBUFFERS, OMITTED_HEADER

__all__ = ["InProcessRouter"]


class _Whole:
    """An embeddings answer in one piece: one ``EmbeddingResponse`` buffer."""

    __slots__ = ("_body", "headers", "status")

    def __init__(self, headers: Mapping[str, str], body: bytes) -> None:
        self.status = 200
        self.headers = headers
        self._body = body

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        yield self._body

    async def read(self) -> bytes:
        return self._body

    def ready(self) -> bool:
        return True

    def begun(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class _Relayed:
    """A backend's answer, as chunk frames, relayed as they are ready
    (``service.relay``: the edge reads the first frame, and so sets the
    first-byte timeout aside, itself)."""

    __slots__ = ("_backend", "_label", "_proxy", "_relay", "_started", "headers", "status")

    def __init__(
        self, proxy: ProxyServer, relay: Relay, backend: str, label: str, started: float
    ) -> None:
        self.status = 200
        self.headers: Mapping[str, str] = {BACKEND_HEADER: backend}
        omitted = relay.opened.omitted
        if omitted:
            self.headers = {BACKEND_HEADER: backend, OMITTED_HEADER: omitted_header(omitted)}
        self._proxy = proxy
        self._relay = relay
        self._label = label
        self._backend = backend
        self._started = started

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        relay = self._relay
        first = True
        ttft: float | None = None  # none when the first frame was an error
        streamed = True
        try:
            async for out in relay.frames():
                if first:
                    first = False
                    if relay.error is None:
                        ttft = time.perf_counter() - self._started
                        streamed = not relay.opened.translator.done
                yield out
        finally:
            await relay.close()
            error = relay.error
            status = 200 if relay.relayed or error is None else error.status
            metrics = self._proxy.metrics
            metrics.count(self._label, status)
            if ttft is not None:
                tokens = relay.outcome()[0]
                metrics.answers_of(self._label, self._backend).observe(
                    ttft, time.perf_counter() - self._started, tokens, streamed
                )

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.iter_bytes()])

    def ready(self) -> bool:
        return self._relay.opened.response.ready()

    def begun(self) -> None:
        self._relay.opened.response.begun()

    async def aclose(self) -> None:
        await self._relay.close()


class InProcessRouter:
    """``transport.router.Router`` over a ``ProxyServer``'s router, in process
    (see the module docstring). The backends' timeouts are their own, from
    the proxy's configuration; ``admitted`` is moot (the router charges no
    limits)."""

    __slots__ = ("_proxy",)

    def __init__(self, proxy: ProxyServer) -> None:
        self._proxy = proxy

    async def complete(self, frame: bytes, request_id: str, *, admitted: bool) -> Response:
        started = time.perf_counter()
        proxy = self._proxy
        label = "-"
        try:
            target = proxy.target_of(frame)
            label = target.label
            opened = await proxy.dispatcher.open(target, frame, request_id, "", trusted=True)
        except ANSWERABLE as exc:
            # Named nowhere: the error's traceback holds this frame, and the body.
            raise self._refused(label, proxy_error(exc), proxy.metrics.count) from None
        relay = Relay(opened, request_id, True, proxy.metrics)
        return _Relayed(proxy, relay, opened.backend.name, label, started)

    async def embed(self, frame: bytes, request_id: str, *, admitted: bool) -> Response:
        proxy = self._proxy
        embedder = proxy.embedder
        label = "-"
        try:
            target = proxy.target_of(frame)
            label = target.label
            embedded = await embedder.embed(target, frame, request_id)
        except ANSWERABLE as exc:
            # Named nowhere: the error's traceback holds this frame, and the body.
            raise self._refused(label, proxy_error(exc), embedder.count) from None
        embedder.count(label, 200)
        headers = {"content-type": FLATBUFFERS, BACKEND_HEADER: embedded.backend}
        return _Whole(headers, embedded.body)

    @staticmethod
    def _refused(label: str, err: ProxyError, count: Callable[[str, int], None]) -> Refused:
        """``err`` as the router's refusal, counted under ``label`` as the
        HTTP surface counts one."""
        count(label, err.status)
        return Refused.of(err)

    def pool(self) -> Transport | None:
        """The router's own upstream pool, once a request has made it (what
        this hop holds is nothing)."""
        return self._proxy._transport

    async def aclose(self) -> None:
        await self._proxy.transport.aclose()
