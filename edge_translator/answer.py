"""The proxy's answer, to the client: SSE events as frames arrive, or one
JSON body, in whichever client API the request came in.

Owns the render loop once the proxy has said 200: its frames (read by
``proxy_link.Frames``) are rendered by the client API's renderer
(``client_api.Rendering``) into the client's ``Sink`` (``stream``), or folded
by its aggregator into one body (``aggregate``); while a stream waits for its
first token, the client gets the API's keep-alives (``Keepalive``). The
response head waits for the first rendered event, so a backend that fails at
once still gets an HTTP error status; after the head, a failure ends the
stream with the API's error event. No client API's shapes of its own, and no
HTTP server objects: it writes through ``plumbing.serve``'s ``Exchange`` and
``Sink``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from flatgate.edge_translator.client_api import Folding, Rendering
from flatgate.edge_translator.errors import ProxyFailed
from flatgate.edge_translator.proxy_link import Frames
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.serve import Exchange, Sink
from flatgate.proxy.transport.base import Response
from flatgate.proxy.wire.schema import SSE

__all__ = ["SSE_HEADERS", "Keepalive", "aggregate", "stream"]

SSE_HEADERS = [("content-type", SSE), ("cache-control", "no-cache")]


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
        beat: bytes,
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
    ending: Ending | None,
    fail: Callable[[FlatgateError], bytes],
    beat: bytes,
    finish: Callable[[], Awaitable[None]],
) -> int:
    """Render the proxy's frames as SSE events until the completion ends
    (bytes sent, first byte and error noted in ``entry``); a failure is
    ``fail``'s event. Frames that render to nothing (a backend's heartbeat)
    are sent on as ``beat``, the client API's keep-alive. ``finish`` is
    awaited once the answer has ended, before its last bytes are sent."""
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
            if renderer.finished:
                await finish()
            await out.send(data)
            events.clear()
            if renderer.finished:
                await out.close()
                return 200
        if renderer.complete and out is not None:  # fewer choices than asked for, all finished
            data = renderer.end()
            entry.bytes_out += len(data)
            await finish()
            await out.send(data)
            await out.close()
            return 200
        raise ProxyFailed(
            "The proxy closed the stream before the completion ended.",
            code=codes.PROXY_PROTOCOL_ERROR,
        )
    except FlatgateError as err:
        if out is None:
            if keepalive is not None:
                out = await keepalive.settle()
            if out is None:
                if not any(events):
                    raise  # nothing rendered yet: still time for an HTTP error status
                out = await ex.stream(200, headers)
                metrics.active_streams.inc()
                started_here = True
        entry.error = err.code.code
        events.append(fail(err))
        data = b"".join(events)
        entry.bytes_out += len(data)
        await finish()
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
                raise ProxyFailed(
                    "The proxy closed the stream before the completion ended.",
                    code=codes.PROXY_PROTOCOL_ERROR,
                )
            for chunk in chunks:
                aggregator.feed(chunk)
    finally:
        await frames.aclose()
    return aggregator.body()
