"""The proxy's router as a transport: the one-process gateway's hop from edge to proxy.

``InProcessTransport`` is a ``transport.base.Transport`` whose ``request``
does what ``POST /v1/completions`` does on the proxy's HTTP surface, without
HTTP: it reads ``(provider, model)`` from the very ``CompletionRequest`` bytes
the edge wrote (``ProxyServer.target_of``, in place), has the dispatcher open
an answer from a backend (the untouched bytes to an ``fbs`` backend, the
adapter's JSON to the others), and returns a ``Response`` whose body is the
chunk frames, as the proxy would have sent them with ``Accept:
application/x-flatbuffers-stream``. The edge reads it exactly as it reads the
proxy's HTTP answer, so both shapes share every line past the HTTP boundary.

- A refusal before any frame (no route, every backend down, ...) is a
  ``Response`` with the proxy's status, headers and JSON error body
  (``service.errors.answer_of``, as the HTTP surface answers).
- Otherwise the frames come from the proxy's one relay (``service.relay``):
  an upstream failure is one error chunk, as over HTTP.
- Closing the response (the edge's client left, or its drain ended it)
  closes the backend's answer, which aborts its connection.

An ``EmbeddingRequest`` body (``wire.embeddings.is_embedding_request``) is
answered as ``POST /v1/embeddings`` answers it (``service.embed``): a
``Response`` whose body is the one ``EmbeddingResponse`` buffer (status 200,
the backend's name in ``x-flatgate-backend``), or the refusal's as above.

The edge and this process are one trust domain: the edge wrote the buffer and
its tenant, so no caller token is checked and none is forwarded, and an
adapter reads the buffer without the verifier's walk (the edge's writer made
it, from a body the edge bounded; ``dispatch._Decoded``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping

from flatgate.proxy.backends.extras import omitted_header
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.errors import ANSWERABLE, ProxyError, answer_of, proxy_error
from flatgate.proxy.service.relay import Relay
from flatgate.proxy.transport.base import Response, Upstream
from flatgate.proxy.wire.chunk.reader import last_outcome
from flatgate.proxy.wire.embeddings import is_embedding_request
from flatgate.proxy.wire.schema import BACKEND_HEADER, FLATBUFFERS, OMITTED_HEADER

__all__ = ["InProcessTransport"]


class _Whole:
    """An answer in one piece: the proxy's refusal before any frame (its
    status, headers and JSON error, as ``errors.answer_of`` writes them for
    the HTTP surface: ``refused``), or an embeddings answer (one
    ``EmbeddingResponse`` buffer)."""

    __slots__ = ("_body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self._body = body

    @classmethod
    def refused(cls, err: ProxyError) -> _Whole:
        status, headers, body = answer_of(err)
        return cls(status, dict(headers), body)

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
                tokens = last_outcome(relay.last)[0] if relay.last else None
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


class InProcessTransport:
    """``transport.base.Transport`` over a ``ProxyServer``'s router, in process.

    Of the ``Upstream``, only ``body`` and the ``x-request-id`` header are
    read: ``url`` is ignored (there is one router), and ``timeouts`` are the
    backends' own, from the proxy's configuration.
    """

    def __init__(self, proxy: ProxyServer) -> None:
        self._proxy = proxy

    async def request(self, req: Upstream) -> Response:
        body = req.body
        started = time.perf_counter()
        proxy = self._proxy
        rid = ""
        for name, value in req.headers:
            if name == "x-request-id":
                rid = value
        if is_embedding_request(body):
            return await self._embeddings(body, rid)
        label = "-"
        try:
            target = proxy.target_of(body)
            label = target.label
            opened = await proxy.dispatcher.open(target, body, rid, "", trusted=True)
        except ANSWERABLE as exc:
            # Named nowhere: the error's traceback holds this frame, and the body.
            refused = _Whole.refused(proxy_error(exc))
            proxy.metrics.count(label, refused.status)
            return refused
        relay = Relay(opened, rid, True, proxy.metrics)
        return _Relayed(proxy, relay, opened.backend.name, label, started)

    async def _embeddings(self, body: bytes, rid: str) -> Response:
        """An ``EmbeddingRequest``'s answer (see the module docstring)."""
        proxy = self._proxy
        embedder = proxy.embedder
        label = "-"
        try:
            target = proxy.target_of(body)
            label = target.label
            embedded = await embedder.embed(target, body, rid)
        except ANSWERABLE as exc:
            # Named nowhere: the error's traceback holds this frame, and the body.
            refused = _Whole.refused(proxy_error(exc))
            embedder.count(label, refused.status)
            return refused
        embedder.count(label, 200)
        headers = {"content-type": FLATBUFFERS, BACKEND_HEADER: embedded.backend}
        return _Whole(200, headers, embedded.body)

    def stats(self) -> dict[str, int]:
        """The router's own upstream pool (what this hop holds is nothing)."""
        return self._proxy.transport.stats()

    async def aclose(self) -> None:
        await self._proxy.transport.aclose()
