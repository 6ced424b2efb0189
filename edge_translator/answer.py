"""The proxy's answer, to the client: SSE events as frames arrive, or one
JSON body, in whichever client API the request came in.

Owns what happens once the proxy has been sent a request: its refusal before
any frame becomes the error it means (``proxy_error``: the proxy's code
and status carry through, with ``Retry-After``); its frames are read in place
(``Frames``) and rendered into the client's ``Sink``; while a stream waits for
its first token, the client gets keep-alives (``Keepalive``). The response
head waits for the first rendered event, so a backend that fails at once
still gets an HTTP error status; after the head, a failure ends the stream
with an error event. What a client API renders is a ``ClientApi``: ``CHAT``
here (OpenAI Chat Completions, ``render``), ``messages.endpoint.MESSAGES``
(Anthropic). Also ``read_body``, a request body within the edge's limit. No
HTTP server objects: it writes through ``plumbing.serve``'s ``Exchange`` and
``Sink``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

import msgspec

from flatgate.edge_translator.errors import (
    EdgeError,
    InvalidRequest,
    ModelNotFound,
    PayloadTooLarge,
    UpstreamFailed,
    UpstreamTimeout,
)
from flatgate.edge_translator.openai.render import Aggregator, StreamRenderer, error_event
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import (
    BodyMalformed,
    BodyPolicy,
    BodyTimeout,
    BodyTooLarge,
    Exchange,
    Sink,
)
from flatgate.proxy.transport.base import Response, retry_after
from flatgate.proxy.transport.base import UpstreamError as _UpstreamError
from flatgate.proxy.transport.base import UpstreamTimeout as _UpstreamTimeout
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.chunks import read_chunk
from flatgate.proxy.wire.frames import Chunk, FrameCutter, MalformedFrame, Usage
from flatgate.proxy.wire.schema import SSE

__all__ = [
    "CHAT",
    "KEEPALIVE",
    "SSE_HEADERS",
    "Asked",
    "ClientApi",
    "Folding",
    "Frames",
    "Keepalive",
    "Rendering",
    "aggregate",
    "proxy_error",
    "read_body",
    "shutting_down",
    "stream",
]

log = logging.getLogger("flatgate.edge")

SSE_HEADERS = [("content-type", SSE), ("cache-control", "no-cache")]
# What a keep-alive tick sends: an SSE comment, which clients skip.
KEEPALIVE = b": keep-alive\n\n"


class Rendering(Protocol):
    """A streamed answer's renderer (``render.StreamRenderer``)."""

    @property
    def finished(self) -> bool: ...

    @property
    def complete(self) -> bool: ...

    @property
    def usage(self) -> Usage | None: ...

    def feed(self, chunk: Chunk) -> bytes: ...

    def end(self) -> bytes: ...


class Folding(Protocol):
    """A whole answer's aggregator (``render.Aggregator``)."""

    @property
    def finished(self) -> bool: ...

    @property
    def complete(self) -> bool: ...

    @property
    def usage(self) -> Usage | None: ...

    def feed(self, chunk: Chunk) -> None: ...

    def body(self) -> bytes: ...


class Asked(Protocol):
    """What an answer needs of its request (never the prompt)."""

    completion_id: str
    model: str
    choices: int
    include_usage: bool


class ClientApi(Protocol):
    """One client API's side of an answer: its keep-alive, its renderers and
    its error event."""

    @property
    def beat(self) -> bytes: ...

    def renderer(self, ask: Asked, created: int) -> Rendering: ...

    def aggregator(self, ask: Asked, created: int) -> Folding: ...

    def error_event(self, err: EdgeError) -> bytes: ...


class _Chat:
    """OpenAI Chat Completions (``render``)."""

    beat = KEEPALIVE

    def renderer(self, ask: Asked, created: int) -> Rendering:
        return StreamRenderer(
            completion_id=ask.completion_id,
            created=created,
            model=ask.model,
            include_usage=ask.include_usage,
            choices=ask.choices,
        )

    def aggregator(self, ask: Asked, created: int) -> Folding:
        return Aggregator(
            completion_id=ask.completion_id, created=created, model=ask.model, choices=ask.choices
        )

    def error_event(self, err: EdgeError) -> bytes:
        return error_event(err)


CHAT: ClientApi = _Chat()


async def read_body(ex: Exchange, policy: BodyPolicy, length: str | None) -> bytes:
    """The request body, read within ``policy``: ``PayloadTooLarge`` (413)
    past its bytes (``length``: the ``Content-Length`` the client announced),
    ``body_timeout`` (408) when it stops arriving, ``malformed_body`` (400)
    when it ends early or is framed badly."""
    try:
        return await ex.body(policy)
    except BodyTooLarge:
        limit = policy.max_bytes
        raise PayloadTooLarge(
            f"Request body exceeds the limit of {limit} bytes."
            if length is None
            else f"Request body of {length} bytes exceeds the limit of {limit} bytes."
        ) from None
    except BodyTimeout as exc:
        raise InvalidRequest(f"Request body timed out: {exc}.", code=codes.BODY_TIMEOUT) from None
    except BodyMalformed as exc:
        raise InvalidRequest(f"Malformed request body: {exc}.", code=codes.MALFORMED_BODY) from None


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


def proxy_error(status: int, headers: Mapping[str, str], body: bytes) -> EdgeError:
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
    if detail.code in _MISCONFIGURED:
        log.error("the proxy refused the edge's credential (set [edge] proxy_token): %s", message)
        return UpstreamFailed(
            "The gateway is misconfigured: its proxy refused its credential.",
            code=codes.PROXY_AUTH_FAILED,
            status=502,
        )
    if status == 504:
        return UpstreamTimeout(message, code=code)
    return EdgeError(message, code=code, status=status, retry_after=retry_after(headers))


def shutting_down() -> EdgeError:
    """What a request the drain's deadline ends is told (an HTTP 503 before the
    first event, an error event after it)."""
    return EdgeError(
        "The gateway is shutting down; retry the request.",
        code=codes.DRAINING,
        retry_after=1.0,
    )


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


class Keepalive:
    """SSE comments to a client while its stream waits for its first token.

    A timer, so a request whose answer comes in time costs one ``call_later``:
    the first tick starts the response (200, SSE) and each tick sends a
    comment. ``settle`` stops it and hands over the response it started
    (``None`` if it never ticked); ``close`` ends the bookkeeping.
    """

    __slots__ = ("_beat", "_ex", "_gauge", "_handle", "_headers", "_interval", "_sending", "out")

    def __init__(
        self,
        ex: Exchange,
        headers: list[tuple[str, str]],
        interval: float,
        metrics: Metrics,
        beat: bytes = KEEPALIVE,
    ) -> None:
        self._ex = ex
        self._beat = beat
        self._headers = headers
        self._interval = interval
        self._gauge = metrics.active_streams
        self._sending: asyncio.Future[None] | None = None
        self.out: Sink | None = None
        loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._send())
        self._handle = asyncio.get_running_loop().call_later(self._interval, self._tick)

    async def _send(self) -> None:
        if self.out is None:
            self.out = await self._ex.stream(200, self._headers)
            self._gauge.inc()
        await self.out.send(self._beat)

    async def settle(self) -> Sink | None:
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
        if self._sending is not None:
            self._sending.cancel()
        if self.out is not None:
            self._gauge.dec()


async def stream(
    ex: Exchange,
    resp: Response,
    renderer: Rendering,
    *,
    headers: list[tuple[str, str]],
    keepalive: Keepalive | None,
    metrics: Metrics,
    entry: Entry,
    ending: Ending | None = None,
    fail: Callable[[EdgeError], bytes] = error_event,
    beat: bytes = KEEPALIVE,
) -> int:
    """Render the proxy's frames as SSE events until the completion ends
    (bytes sent, first byte and error noted in ``entry``); a failure is
    ``fail``'s event. Frames that render to nothing (a backend's heartbeat)
    are sent on as ``beat``, the client API's keep-alive."""
    out: Sink | None = None
    started_here = False
    frames = Frames(resp, ending)
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
                    out = await ex.stream(200, headers)
                    metrics.active_streams.inc()
                    started_here = True
                resp.begun()
                entry.first_byte()
            data = b"".join(events) or beat
            entry.bytes_out += len(data)
            await out.send(data)
            events.clear()
            if renderer.finished:
                await out.close()
                return 200
        if renderer.complete and out is not None:  # fewer choices than asked for, all finished
            data = renderer.end()
            entry.bytes_out += len(data)
            await out.send(data)
            await out.close()
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
                out = await ex.stream(200, headers)
                metrics.active_streams.inc()
                started_here = True
        entry.error = err.code
        events.append(fail(err))
        data = b"".join(events)
        entry.bytes_out += len(data)
        await out.send(data)
        await out.close()
        return 200
    finally:
        await frames.aclose()
        if started_here:
            metrics.active_streams.dec()


async def aggregate(resp: Response, aggregator: Folding, ending: Ending | None = None) -> bytes:
    """Every frame of a non-streamed answer folded into one JSON body."""
    frames = Frames(resp, ending)
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
    return aggregator.body()
