"""The server boundary: granian's RSGI and ASGI protocols behind one ``Exchange``.

Owns everything that touches granian's protocol objects, so the proxy and the
stub are written once against ``Exchange`` and run under either interface:

- RSGI is granian's native interface and the cheapest per request, but its
  ``response_stream().send_bytes`` never waits: a client that reads slowly
  makes granian buffer without bound.
- ASGI costs a dict per message, but granian's ASGI ``send`` waits on a bounded
  channel, so a slow reader slows the sender (docs/design.md, "Slow readers").

``ServerApp`` is a granian target that serves both: ``__rsgi__`` for RSGI and
``__call__`` for ASGI, and hands WebSocket upgrades to a socket handler
(``plumbing.websocket``). The body-reading policy and its errors live in
``plumbing.body``. No business logic here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final, Protocol

from granian._granian import RSGIProtocolClosed as ProtocolClosed

from flatgate.proxy.plumbing.accesslog import AccessLog
from flatgate.proxy.plumbing.body import (
    ENDED_EARLY,
    BodyClock,
    BodyMalformed,
    BodyPolicy,
    BodyTooLarge,
    check_pieces,
)
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.head import RequestHead, asgi_header
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.plumbing.websocket import AsgiSocket, RsgiSocket, SocketHandler
from flatgate.proxy.wire.digits import read_decimal
from flatgate.proxy.wire.schema import BACKEND_HEADER

__all__ = [
    "AsgiExchange",
    "CallerWatch",
    "Exchange",
    "RsgiExchange",
    "ServerApp",
    "Sink",
    "Watchlist",
    "is_loopback",
    "valid_request_id",
]

Headers = list[tuple[str, str]]


def is_loopback(peer: str) -> bool:
    """Whether ``peer`` (an ``Exchange.peer``, ``host:port``) is on this
    machine's loopback (127.0.0.0/8, ::1)."""
    host = peer.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# A caller's x-request-id is taken when it is 1..128 printable ASCII
# characters without spaces (both services; logs and upstream headers carry it).
valid_request_id = re.compile(r"[\x21-\x7e]{1,128}").fullmatch


class Sink(Protocol):
    async def send(self, data: bytes) -> None: ...
    async def close(self) -> None: ...


# Bodies up to this size are read in one call under RSGI (its fastest path),
# within the idle timeout; larger ones piece by piece.
_RSGI_WHOLE: Final = 64 << 10


class Exchange(RequestHead, Protocol):
    method: str

    async def body(self, policy: BodyPolicy) -> bytes:
        """The whole request body, read within ``policy``: ``BodyTooLarge``
        once it passes ``max_bytes``, whether or not a ``Content-Length``
        announced them (a chunked upload is counted as it arrives, never
        buffered past the limit); ``BodyTimeout`` when it stops arriving;
        ``BodyMalformed`` when it ends early or is framed badly."""
        ...

    async def respond(self, status: int, headers: Headers, body: bytes) -> None: ...
    async def stream(self, status: int, headers: Headers) -> Sink: ...
    async def disconnected(self) -> None:
        """Returns when the client has gone away (call after ``body``)."""
        ...


class _RsgiSink:
    """Holds granian's stream transport until the handler returns.

    granian's RSGI ends a streamed response when the transport object is
    freed, so ``release`` drops the one reference flatgate holds: a reference
    cycle that still holds this sink can no longer keep the stream open.
    """

    __slots__ = ("_send",)

    def __init__(self, transport: Any) -> None:
        self._send: Callable[[bytes], Awaitable[None]] | None = transport.send_bytes

    async def send(self, data: bytes) -> None:
        if self._send is None:
            raise ConnectionError("response stream already ended")
        await self._send(data)

    async def close(self) -> None:
        self._send = None


class RsgiExchange:
    __slots__ = ("_proto", "_scope", "_sink", "method", "path")

    def __init__(self, scope: Any, proto: Any) -> None:
        self._scope = scope
        self._proto = proto
        self._sink: _RsgiSink | None = None
        self.method: str = scope.method
        self.path: str = scope.path

    @property
    def query(self) -> str:
        return str(self._scope.query_string or "")

    def release(self) -> None:
        """Drop the references to granian's objects (see ``_RsgiSink``)."""
        if self._sink is not None:
            self._sink._send = None
        self._proto = self._scope = None

    def header(self, name: str) -> str | None:
        value: str | None = self._scope.headers.get(name)
        return value

    @property
    def peer(self) -> str:
        client: str = self._scope.client
        return client

    async def body(self, policy: BodyPolicy) -> bytes:
        limit = policy.max_bytes
        clock = BodyClock(policy)
        header = self._scope.headers.get("content-length")
        length = read_decimal(header) if header is not None else None
        try:
            async with asyncio.timeout_at(clock.next()) as deadline:
                if length is not None:
                    if length > limit:
                        raise BodyTooLarge(limit)
                    if length <= _RSGI_WHOLE:
                        data: bytes = await self._proto()
                        if len(data) > limit:  # the peer sent more than it announced
                            raise BodyTooLarge(limit)
                        return data
                pieces = []
                total = 0
                async for piece in self._proto:
                    total += len(piece)
                    if total > limit:
                        raise BodyTooLarge(limit)
                    pieces.append(piece)
                    check_pieces(len(pieces), total)
                    deadline.reschedule(clock.next())
                return b"".join(pieces)
        except TimeoutError:
            raise clock.expired() from None
        except ProtocolClosed:
            raise BodyMalformed(ENDED_EARLY) from None

    async def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self._proto.response_bytes(status, headers, body)

    async def stream(self, status: int, headers: Headers) -> Sink:
        self._sink = _RsgiSink(self._proto.response_stream(status, headers))
        return self._sink

    async def disconnected(self) -> None:
        await self._proto.client_disconnect()


AsgiReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
AsgiSend = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _AsgiSink:
    __slots__ = ("_closed", "_send")

    def __init__(self, send: AsgiSend) -> None:
        self._send = send
        self._closed = False

    async def send(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})


# Header names the services ask for and answer with, encoded once.
_KEYS = {
    name: name.encode("latin-1")
    for name in (
        "accept",
        "authorization",
        "cache-control",
        "connection",
        "content-length",
        "content-type",
        "retry-after",
        BACKEND_HEADER,
        "x-request-id",
    )
}


def _asgi_headers(headers: Headers) -> list[tuple[bytes, bytes]]:
    keys = _KEYS
    return [(keys.get(k) or k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


class AsgiExchange:
    __slots__ = ("_receive", "_scope", "_send", "method", "path")

    def __init__(self, scope: MutableMapping[str, Any], receive: AsgiReceive, send: AsgiSend):
        self._scope = scope
        self._receive = receive
        self._send = send
        self.method: str = scope["method"]
        self.path: str = scope["path"]

    @property
    def query(self) -> str:
        return bytes(self._scope.get("query_string") or b"").decode("latin-1")

    def header(self, name: str) -> str | None:
        return asgi_header(self._scope, name, _KEYS.get(name))

    @property
    def peer(self) -> str:
        client = self._scope.get("client")
        return f"{client[0]}:{client[1]}" if client else ""

    async def body(self, policy: BodyPolicy) -> bytes:
        limit = policy.max_bytes
        length = self.header("content-length")
        declared = read_decimal(length) if length is not None else None
        if declared is not None and declared > limit:  # refused before it is read
            raise BodyTooLarge(limit)
        receive = self._receive
        clock = BodyClock(policy)
        try:
            async with asyncio.timeout_at(clock.next()) as deadline:
                message = await receive()
                first: bytes = message.get("body", b"")
                if len(first) > limit:
                    raise BodyTooLarge(limit)
                if not message.get("more_body"):
                    if message["type"] == "http.disconnect":
                        raise BodyMalformed(ENDED_EARLY)
                    return first
                parts = [first]
                total = len(first)
                while True:
                    deadline.reschedule(clock.next())
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise BodyMalformed(ENDED_EARLY)
                    piece = message.get("body", b"")
                    total += len(piece)
                    if total > limit:
                        raise BodyTooLarge(limit)
                    parts.append(piece)
                    check_pieces(len(parts), total)
                    if not message.get("more_body"):
                        return b"".join(parts)
        except TimeoutError:
            raise clock.expired() from None

    async def respond(self, status: int, headers: Headers, body: bytes) -> None:
        await self._send(
            {"type": "http.response.start", "status": status, "headers": _asgi_headers(headers)}
        )
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def stream(self, status: int, headers: Headers) -> Sink:
        await self._send(
            {"type": "http.response.start", "status": status, "headers": _asgi_headers(headers)}
        )
        return _AsgiSink(self._send)

    async def disconnected(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return


class CallerWatch:
    """Cancels the task that made it when the caller goes away.

    ``disconnected`` is the server's "caller gone" awaitable
    (``Exchange.disconnected``). ``start`` watches from now; ``Watchlist.add``
    from a tick or two on, so that an answer that comes sooner costs no task
    and no timer of its own. In the handler's ``except asyncio.CancelledError``,
    ``caught()`` says whether the watch caused it (and then absorbs it);
    ``stop`` in its ``finally``.
    """

    __slots__ = ("_disconnected", "_future", "_task", "fired", "stopped")

    def __init__(self, disconnected: Callable[[], Awaitable[object]]) -> None:
        self._disconnected: Callable[[], Awaitable[object]] | None = disconnected
        self._future: asyncio.Future[object] | None = None
        try:
            self._task: asyncio.Task[object] | None = asyncio.current_task()
        except RuntimeError:  # no running loop (a coroutine driven by hand): nothing to cancel
            self._task = None
        self.fired = False
        self.stopped = False

    @property
    def pending(self) -> bool:
        """Neither started nor stopped (what ``Watchlist`` starts)."""
        return self._future is None and not self.stopped

    def start(self) -> None:
        if self._future is None and self._disconnected is not None and self._task is not None:
            self._future = asyncio.ensure_future(self._disconnected())
            self._future.add_done_callback(self._gone)

    def _gone(self, _: object) -> None:
        self.fired = True
        if self._task is not None:
            self._task.cancel()

    def caught(self) -> bool:
        """Whether the caller's leaving cancelled the task; if so, absorb it."""
        if not self.fired:
            return False
        if self._task is not None:
            self._task.uncancel()
        return True

    def stop(self) -> None:
        self.stopped = True
        fut = self._future
        if fut is not None:
            fut.remove_done_callback(self._gone)
            if not fut.done():
                fut.cancel()
        # A stopped watch may sit in a Watchlist a little longer: hold nothing.
        self._disconnected = None
        self._task = None


class Watchlist:
    """Starts the ``CallerWatch`` of each request still running one to two
    ticks after it was added: one timer per worker, not one per request.

    A request that ends sooner costs a list append. The lists hold at most two
    ticks' worth of requests; stopped watches in them hold nothing.
    """

    __slots__ = ("_handle", "_old", "_young", "tick")

    def __init__(self, tick: float = 0.05) -> None:
        self.tick = tick
        self._young: list[CallerWatch] = []
        self._old: list[CallerWatch] = []
        self._handle: asyncio.TimerHandle | None = None

    def add(self, watch: CallerWatch) -> None:
        self._young.append(watch)
        if self._handle is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # driven by hand, no loop: nothing to watch with
                return
            self._handle = loop.call_later(self.tick, self._sweep)

    def _sweep(self) -> None:
        for watch in self._old:
            if watch.pending:
                watch.start()
        self._old, self._young = self._young, []
        self._handle = (
            asyncio.get_running_loop().call_later(self.tick, self._sweep) if self._old else None
        )


Handler = Callable[[Exchange], Awaitable[None]]


class ServerApp:
    """A granian target over a ``Handler``, for RSGI and ASGI alike.

    Per-worker resources (upstream pools) are made lazily by the handler's
    owner on the first request, inside the worker's running loop. A ``drain``
    and the ``metrics`` snapshots are installed once per worker when its loop
    starts (RSGI's ``__rsgi_init__``, ASGI's ``lifespan.startup``), or on the
    first request if neither came (tests, ASGI without lifespan).

    The handler's ``access_logs`` write each line at once from the drain's
    beginning on, and what they keep is written when the worker stops (RSGI's
    ``__rsgi_del__``, ASGI's ``lifespan.shutdown``): a forked worker leaves
    through ``os._exit``, which runs no ``atexit``.
    """

    def __init__(
        self,
        handler: Handler,
        drain: Drain | None = None,
        *,
        metrics: Metrics | None = None,
        on_start: Sequence[Callable[[asyncio.AbstractEventLoop], None]] = (),
        access_logs: Sequence[AccessLog] = (),
        sockets: SocketHandler | None = None,
    ) -> None:
        """``on_start``: more per-worker starts, each given the worker's loop
        (a config watch). ``sockets``: the WebSocket upgrades' handler; without
        one, an upgrade is refused 404."""
        self._handler = handler
        self._sockets = sockets
        self._drain = drain
        self._metrics = metrics
        self._on_start = tuple(on_start)
        self._access_logs = tuple(access_logs)
        self._installed = drain is None and metrics is None and not self._on_start
        if drain is not None:
            for access in self._access_logs:
                drain.on_begin(access.unbatch)

    def _install(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._installed:
            self._installed = True
            if self._drain is not None:
                self._drain.install(loop)
            if self._metrics is not None:
                self._metrics.install(loop)
            for start in self._on_start:
                start(loop)

    def _stop(self) -> None:
        for access in self._access_logs:
            access.flush()

    async def _socket(self, socket: RsgiSocket | AsgiSocket) -> None:
        try:
            if self._sockets is None:
                await socket.refuse(404, [("content-type", "text/plain")], b"not found\n")
            else:
                await self._sockets(socket)
        finally:
            await socket.close()  # a no-op when the handler closed or refused it

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._install(loop)

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._stop()

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if not self._installed:
            self._install(asyncio.get_running_loop())
        if scope.proto == "ws":
            await self._socket(RsgiSocket(scope, proto))
            return
        ex = RsgiExchange(scope, proto)
        try:
            await self._handler(ex)
        finally:
            ex.release()

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: AsgiReceive, send: AsgiSend
    ) -> None:
        kind = scope["type"]
        if kind == "http":
            if not self._installed:
                self._install(asyncio.get_running_loop())
            await self._handler(AsgiExchange(scope, receive, send))
        elif kind == "websocket":
            if not self._installed:
                self._install(asyncio.get_running_loop())
            await self._socket(AsgiSocket(scope, receive, send))
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._install(asyncio.get_running_loop())
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
