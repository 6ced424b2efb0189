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
  ``Response`` with the proxy's status, ``Retry-After`` and JSON error body.
- After the first frame, an upstream failure is one error chunk, as the
  proxy's relay writes it.
- Closing the response (the edge's client left, or its drain ended it)
  closes the backend's answer, which aborts its connection.

The edge and this process are one trust domain: the edge wrote the buffer and
its tenant, so no caller token is checked and none is forwarded.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping, Sequence

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.service.app import ProxyServer, upstream_failure
from flatgate.proxy.service.dispatch import Opened, ProxyError
from flatgate.proxy.transport.base import Response, Timeouts, UpstreamError, UpstreamTimeout
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.codes import ErrorCode
from flatgate.proxy.wire.frames import ChunkError
from flatgate.proxy.wire.schema import BACKEND_HEADER, FinishReason
from flatgate.proxy.wire.stock import build_chunk

__all__ = ["InProcessTransport"]


class _Refused:
    """The proxy's answer before any frame: a status and its JSON error."""

    __slots__ = ("_body", "headers", "status")

    def __init__(self, err: ProxyError) -> None:
        self.status = err.status
        self.headers: Mapping[str, str] = (
            {} if err.retry_after is None else {"retry-after": str(max(1, round(err.retry_after)))}
        )
        self._body = err.body()

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
    """A backend's answer, as chunk frames, relayed as they are ready."""

    __slots__ = ("_label", "_opened", "_proxy", "_rid", "_started", "headers", "status")

    def __init__(self, proxy: ProxyServer, opened: Opened, rid: str, label: str) -> None:
        self.status = 200
        self.headers: Mapping[str, str] = {BACKEND_HEADER: opened.backend.name}
        self._proxy = proxy
        self._opened = opened
        self._rid = rid
        self._label = label
        self._started = False

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        opened = self._opened
        translator = opened.translator
        pieces = opened.response.iter_bytes()
        metrics = self._proxy.metrics
        metrics.active_streams.inc()
        relayed = 0
        status = 200
        try:
            try:
                async for piece in pieces:
                    ready = translator.feed(piece)
                    if ready:
                        relayed += len(ready)
                        yield ready
                    if translator.done:
                        return
                tail = translator.end()
                if tail:
                    relayed += len(tail)
                    yield tail
            except UpstreamError as exc:
                if not translator.done:
                    code = (
                        codes.BACKEND_TIMEOUT
                        if isinstance(exc, UpstreamTimeout)
                        else codes.BACKEND_DISCONNECTED
                    )
                    status = 200 if relayed else upstream_failure(exc).status
                    yield self._error(code, str(exc))
            except TranslatorError as exc:
                status = 200 if relayed else codes.BACKEND_PROTOCOL_ERROR.status
                yield self._error(codes.BACKEND_PROTOCOL_ERROR, str(exc))
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
            await opened.close()
            metrics.relayed_bytes.inc(relayed)
            metrics.active_streams.dec()
            metrics.count(self._label, status)

    def _error(self, code: ErrorCode, message: str) -> bytes:
        return build_chunk(
            self._proxy.pool,
            request_id=self._rid,
            error=ChunkError(code.code, message),
            finish_reason=FinishReason.ERROR,
        )

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.iter_bytes()])

    def ready(self) -> bool:
        return self._opened.response.ready()

    def begun(self) -> None:
        self._opened.response.begun()

    async def aclose(self) -> None:
        await self._opened.close()


class InProcessTransport:
    """``transport.base.Transport`` over a ``ProxyServer``'s router, in process.

    ``url`` is ignored (there is one router); ``timeouts`` are the backends'
    own, from the proxy's configuration.
    """

    def __init__(self, proxy: ProxyServer) -> None:
        self._proxy = proxy

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        timeouts: Timeouts,
        tls: ssl.SSLContext | None = None,
    ) -> Response:
        proxy = self._proxy
        rid = ""
        for name, value in headers:
            if name == "x-request-id":
                rid = value
        label = "-"
        try:
            target = proxy.target_of(body)
            label = target.label
            opened = await proxy.dispatcher.open(target, body, rid, "")
        except ProxyError as err:
            proxy.metrics.count(label, err.status)
            return _Refused(err)
        return _Relayed(proxy, opened, rid, label)

    def stats(self) -> dict[str, int]:
        """The router's own upstream pool (what this hop holds is nothing)."""
        return self._proxy.transport.stats()

    async def aclose(self) -> None:
        await self._proxy.transport.aclose()
