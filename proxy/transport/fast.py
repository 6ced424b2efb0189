"""The fast upstream transport: an asyncio keep-alive connection pool on llhttp.

Why it exists: on the forwarding hot path a shared ``httpx.AsyncClient`` costs
over a millisecond of CPU per request under concurrency (lock contention in its
pool), which would dwarf everything the zero-copy route read saves. This pool
does the least an HTTP/1.1 client can: one ``asyncio.Protocol`` per
connection, responses parsed by ``httptools`` (llhttp, the parser Node.js
uses; nothing here parses HTTP by hand), idle connections reused LIFO.

What it guarantees:
- the request body is the caller's ``bytes`` object, handed to the socket
  transport as is, beside the head (``writelines``: one ``writev`` under
  uvloop; plain asyncio joins them);
- a body of known length (``Content-Length``) that spans several reads is
  taken as uvloop reads it, not through llhttp (which copies every piece
  into a new ``bytes``), and a large piece goes to the consumer alone, not
  joined with the next: a large whole answer is copied once on its way, by
  the consumer's join (``transport.base.read_whole``);
- a response body is read only as fast as its consumer takes it: past
  ``HIGH_WATER`` buffered bytes the socket stops being read (``pause_reading``),
  so a slow consumer slows the backend instead of growing memory;
- a connection goes back to the pool only after a complete response that
  allows keep-alive; anything else (error, early close, ``Connection: close``,
  cancellation) closes it;
- connect, first-byte (head, and pieces until the consumer says the answer has
  ``begun``), read (between later pieces) and total timeouts; a bounded number
  of connections per host, callers beyond it wait in order, up to the pool
  timeout (``UpstreamPoolTimeout``: the pool's limit, not the backend's
  failure);
- ``https``: TLS with certificate verification (the system CA store, or the
  ``ssl.SSLContext`` a backend brings for its own CA), SNI, and the same
  keep-alive pooling; connections are pooled per host, port and context.

Errors are ``transport.base`` errors. HTTP/1.1 only.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from flatgate.proxy.transport.base import (
    Response,
    Upstream,
    UpstreamConnectError,
    UpstreamError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
)

__all__ = ["HIGH_WATER", "LOW_WATER", "PoolTransport"]

HIGH_WATER = 256 << 10
LOW_WATER = 64 << 10

# host, port, and the TLS context (None: plain http)
_Key = tuple[str, int, ssl.SSLContext | None]


class _Conn(asyncio.Protocol):
    """One keep-alive connection; feeds bytes to llhttp and llhttp to the response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.resp: _PoolResponse | None = None
        self.closed = False
        self.paused = False
        self.used = 0
        # A body of known length past the first read: its bytes still due,
        # taken as uvloop reads them, not through llhttp (which would copy
        # each into a new ``bytes``); and whether the connection stays open.
        self.due = 0
        self.keep_alive = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; same interface.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        resp = self.resp
        if resp is None:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        parser = self.parser
        if parser is None:  # the connection is already lost
            return
        resp.got_bytes = True
        if self.due:
            self._take(resp, data)
            return
        rest = None
        if not resp.status and len(data) > LOW_WATER:
            # A large read with the head: llhttp is given the head alone, so
            # that a body of known length after it is taken as a view, not
            # copied by llhttp.
            end = data.find(b"\r\n\r\n") + 4
            if end > 3:
                data, rest = data[:end], memoryview(data)[end:]
        try:
            parser.feed_data(data)
            if rest is not None:
                if self.due:
                    self._take(resp, rest)
                else:
                    parser.feed_data(rest)
        except httptools.HttpParserError as exc:
            resp.fail(UpstreamProtocolError(f"backend sent invalid HTTP: {exc}"))
            self.close()

    def _take(self, resp: _PoolResponse, data: bytes | memoryview) -> None:
        """The next bytes of a body of known length, as read."""
        due = self.due - len(data)
        if due < 0:  # bytes past the body: nothing was asked for them
            self.due = 0
            resp.fail(UpstreamProtocolError("backend sent more than its Content-Length"))
            self.close()
            return
        self.due = due
        self._fed(resp, data)
        if not due:
            # llhttp saw this message's head and first bytes only: a new
            # parser for the connection's next response.
            self.parser = httptools.HttpResponseParser(self)
            resp.finish(keep_alive=self.keep_alive)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        resp = self.resp
        if resp is not None and not resp.complete:
            if resp.status and resp.until_eof and exc is None:
                resp.finish(keep_alive=False)
            elif resp.got_bytes:
                resp.fail(UpstreamProtocolError("backend closed the connection mid-response"))
            else:
                resp.fail(UpstreamConnectError("backend closed the connection before answering"))
        # The parser holds this protocol and the transport holds it too: drop
        # both links so a closed connection is freed by reference counting,
        # not left as a cycle for the garbage collector.
        self.parser = None
        self.transport = None

    # llhttp callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.resp is not None
        self.resp.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        resp, parser = self.resp, self.parser
        assert resp is not None and parser is not None
        status = parser.get_status_code()
        resp.head_done(status)
        if resp.length and status >= 200 and status not in (204, 304):
            self.due = resp.length
            self.keep_alive = parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        resp = self.resp
        assert resp is not None
        if self.due:  # llhttp's share of a body of known length
            self.due -= len(body)
        self._fed(resp, body)

    def _fed(self, resp: _PoolResponse, body: bytes | memoryview) -> None:
        resp.feed(body)
        if resp.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        assert self.resp is not None and self.parser is not None
        self.due = 0
        self.resp.finish(keep_alive=self.parser.should_keep_alive())

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _PoolResponse:
    """A response being received on a pooled connection (``transport.base.Response``)."""

    def __init__(
        self,
        pool: _HostPool,
        conn: _Conn,
        loop: asyncio.AbstractEventLoop,
        read_timeout: float,
        deadline: float | None,
        *,
        first_byte: float,
    ) -> None:
        self._pool = pool
        self._conn = conn
        self._loop = loop
        self._read_timeout = first_byte
        self._later_timeout = read_timeout
        self._deadline = deadline
        self._pieces: collections.deque[bytes | memoryview] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._due = 0.0
        self._error: UpstreamError | None = None
        self._released = False
        self.buffered = 0
        self.status = 0
        self._headers: dict[str, str] | None = None
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.keep_alive = False
        self.until_eof = False
        self.got_bytes = False
        self.length = 0  # the body's Content-Length, when the head gives one

    # Called by the connection.
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def head_done(self, status: int) -> None:
        self.status = status
        framed = coded = False
        length = 0
        for name, value in self.raw_headers:
            lname = name.lower()
            if lname == b"content-length":
                framed = True
                length = int(value) if value.isdigit() else 0
            elif lname == b"transfer-encoding":
                coded = True  # llhttp reads the body as it says, whatever a length says
                framed = framed or b"chunked" in value.lower()
        self.until_eof = not framed
        self.length = 0 if coded else length
        self._wake()

    @property
    def headers(self) -> Mapping[str, str]:
        """Lower-case names; decoded on first use (the relay never needs them)."""
        if self._headers is None:
            self._headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self.raw_headers
            }
        return self._headers

    def feed(self, body: bytes | memoryview) -> None:
        self._pieces.append(body)
        self.buffered += len(body)
        self._wake()

    def finish(self, *, keep_alive: bool) -> None:
        self.complete = True
        self.keep_alive = keep_alive
        self._wake()

    def fail(self, error: UpstreamError) -> None:
        if self._error is None and not self.complete:
            self._error = error
        self._wake()

    def _failure(self) -> UpstreamError:
        """A fresh exception for the stored failure.

        Raising the stored one would hang its traceback (and every frame on
        it, with their locals) on this response: a reference cycle that keeps
        the caller's objects alive until the next GC. granian's RSGI ends a
        streamed response only when its transport object is freed, so such a
        cycle would leave the caller's stream open.
        """
        assert self._error is not None
        return type(self._error)(*self._error.args)

    # Waiting. One timer per response, not one per wait: each wait moves the
    # due time forward (a float), and the timer, when it fires early, re-arms
    # itself for the due time. A token stream waits once per token, and a
    # timer scheduled and cancelled per token was a measurable share of it.
    async def _wait(self, what: str) -> None:
        loop = self._loop
        now = loop.time()
        timeout = self._read_timeout
        if self._deadline is not None:
            timeout = min(timeout, self._deadline - time.monotonic())
            if timeout <= 0:
                raise UpstreamTimeout(f"total timeout exceeded waiting for the {what}")
        fut: asyncio.Future[None] = loop.create_future()
        self._waiter = fut
        self._due = due = now + timeout
        if self._timer is None or self._timer_at > due:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = due
            self._timer = loop.call_at(due, self._check)
        try:
            await fut
        finally:
            self._waiter = None

    def _check(self) -> None:
        self._timer = None
        fut = self._waiter
        if fut is None or fut.done():
            return  # nobody waits: the next wait arms a timer again
        if self._loop.time() >= self._due:
            fut.set_exception(TimeoutError())
        else:
            self._timer_at = self._due
            self._timer = self._loop.call_at(self._due, self._check)

    async def wait_head(self) -> None:
        while not self.status:
            if self._error is not None:
                raise self._failure()
            try:
                await self._wait("response head")
            except TimeoutError:
                raise UpstreamTimeout("backend sent no response head in time") from None

    # Response protocol.
    async def iter_bytes(self) -> AsyncIterator[bytes]:
        async for piece in self.uncopied():
            yield piece if type(piece) is bytes else bytes(piece)

    async def uncopied(self) -> AsyncIterator[bytes | memoryview]:
        """The body as it comes, never copied but to join small pieces: a
        piece may be a view of what was read (``transport.base.read_whole``
        joins them; ``iter_bytes`` makes each a ``bytes``)."""
        pieces = self._pieces
        try:
            while True:
                if pieces:
                    # Small pieces that came together go on joined (one step
                    # for the consumer); a large one alone, as a join would
                    # copy it.
                    if len(pieces) == 1 or len(pieces[0]) >= LOW_WATER:
                        piece = pieces.popleft()
                        self.buffered -= len(piece)
                    else:
                        piece = b"".join(pieces)
                        pieces.clear()
                        self.buffered = 0
                    if self.buffered <= LOW_WATER:
                        self._conn.resume()
                    yield piece
                    continue
                if self._error is not None:
                    raise self._failure()
                if self.complete:
                    break
                try:
                    await self._wait("next body bytes")
                except TimeoutError:
                    raise UpstreamTimeout("backend stalled mid-response") from None
        finally:
            self._release()

    async def read(self) -> bytes:
        return b"".join([p async for p in self.iter_bytes()])

    def ready(self) -> bool:
        return bool(self._pieces) or self.complete or self._error is not None

    def begun(self) -> None:
        self._read_timeout = self._later_timeout

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        conn = self._conn
        reusable = self.complete and self.keep_alive and not self._pieces and not conn.closed
        conn.resp = None
        if not reusable:
            conn.close()
        self._pool.put(conn, reusable=reusable)


class _HostPool:
    """Connections to one host:port: idle ones (LIFO) and a bound on all of them."""

    def __init__(self, host: str, port: int, limit: int, tls: ssl.SSLContext | None) -> None:
        self.host = host
        self.port = port
        self.limit = limit
        self.tls = tls
        self.idle: list[_Conn] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.waits = 0
        self.timeouts = 0

    async def get(
        self, loop: asyncio.AbstractEventLoop, connect_timeout: float, pool_timeout: float
    ) -> tuple[_Conn, bool]:
        while True:
            while self.idle:
                conn = self.idle.pop()
                if not conn.closed:
                    return conn, True
                self.open -= 1
            if self.open < self.limit:
                break
            fut: asyncio.Future[None] = loop.create_future()
            self.waiters.append(fut)
            self.waits += 1
            try:
                await asyncio.wait_for(fut, pool_timeout)
            except TimeoutError:
                self.timeouts += 1
                raise UpstreamPoolTimeout(
                    f"no free connection to {self.host}:{self.port} "
                    f"({self.limit} in use) within {pool_timeout}s"
                ) from None
            finally:
                if fut in self.waiters:
                    self.waiters.remove(fut)
        self.open += 1
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    _Conn,
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                ),
                connect_timeout,
            )
        except TimeoutError:
            self._forget()
            raise UpstreamConnectError(
                f"connect to {self.host}:{self.port} timed out after {connect_timeout}s"
            ) from None
        except OSError as exc:
            self._forget()
            raise UpstreamConnectError(
                f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        except BaseException:
            self._forget()
            raise
        return conn, False

    def _forget(self) -> None:
        self.open -= 1
        self._notify()

    def _notify(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def put(self, conn: _Conn, *, reusable: bool) -> None:
        if reusable:
            self.idle.append(conn)
        else:
            self.open -= 1
        self._notify()

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class PoolTransport:
    """``transport.base.Transport`` over per-host ``_HostPool``s. One per event loop."""

    def __init__(self, *, limit: int = 4096, pool_timeout: float = 5.0) -> None:
        self._limit = limit
        self._pool_timeout = pool_timeout
        self._pools: dict[_Key, _HostPool] = {}
        self._targets: dict[tuple[str, ssl.SSLContext | None], tuple[_Key, bytes]] = {}
        self._system_tls: ssl.SSLContext | None = None

    def _target(self, url: str, tls: ssl.SSLContext | None) -> tuple[_Key, bytes]:
        hit = self._targets.get((url, tls))
        if hit is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UpstreamConnectError(f"not an http(s) URL: {url!r}")
            context = None
            if parts.scheme == "https":
                if tls is None:
                    if self._system_tls is None:
                        self._system_tls = ssl.create_default_context()
                    tls = self._system_tls
                context = tls
            port = parts.port or (443 if context is not None else 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.hostname if parts.port is None else f"{parts.hostname}:{port}"
            hit = (
                (parts.hostname, port, context),
                f" {path} HTTP/1.1\r\nhost: {host}\r\n".encode(),
            )
            if len(self._targets) < 1024:
                self._targets[url, tls] = hit
        return hit

    def stats(self) -> dict[str, int]:
        pools = self._pools.values()
        return {
            "open": sum(p.open for p in pools),
            "idle": sum(len(p.idle) for p in pools),
            "waiting": sum(len(p.waiters) for p in pools),
            "waits": sum(p.waits for p in pools),
            "pool_timeouts": sum(p.timeouts for p in pools),
        }

    async def request(self, req: Upstream) -> Response:
        url, body, timeouts = req.url, req.body, req.timeouts
        key, line = self._target(url, req.tls)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _HostPool(key[0], key[1], self._limit, key[2])
        loop = asyncio.get_running_loop()
        deadline = None if timeouts.total is None else time.monotonic() + timeouts.total
        head = b"".join(
            (
                req.method.encode("ascii"),
                line,
                "".join(f"{k}: {v}\r\n" for k, v in req.headers).encode("latin-1"),
                b"content-length: %d\r\n\r\n" % len(body),
            )
        )
        for attempt in (0, 1):
            conn, reused = await pool.get(loop, timeouts.connect, self._pool_timeout)
            resp = _PoolResponse(
                pool,
                conn,
                loop,
                timeouts.read,
                deadline,
                first_byte=timeouts.first_byte or timeouts.read,
            )
            conn.resp = resp
            conn.used += 1
            transport = conn.transport
            assert transport is not None
            try:
                # One writev with uvloop; the body object is handed over as is.
                transport.writelines((head, body))
                await resp.wait_head()
            except UpstreamConnectError:
                resp._release()
                # A kept-alive connection the backend closed just now: try a fresh one once.
                if reused and attempt == 0 and not resp.got_bytes:
                    continue
                raise
            except BaseException:
                resp._release()
                raise
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
