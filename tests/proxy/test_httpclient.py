"""The fast upstream transport against raw asyncio servers that misbehave on cue."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from flatgate.proxy.transport.base import (
    Response,
    Timeouts,
    Transport,
    Upstream,
    UpstreamConnectError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.transport.fast import PoolTransport
from flatgate.proxy.transport.reference import HttpxTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
FAST = Timeouts(connect=1.0, read=1.0)


class RawServer:
    """A loopback TCP server running ``handler`` per connection; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(r, w)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            w.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/completions"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def read_request(r: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await r.readexactly(length)


def keepalive_echo(times: int = 100) -> Handler:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(times):
            _, body = await read_request(r)
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
            await w.drain()

    return handler


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
OK_THEN_CLOSE = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
# Three bytes of the ten it announces.
PART = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"


def answers(raw: bytes, *, times: int | None = 1, then: float = 0) -> Handler:
    """A handler that reads a request and writes ``raw``, ``times`` times on
    one connection (``None``: for as many as come), then waits ``then`` s
    before the connection closes."""

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        count = 0
        while times is None or count < times:
            await read_request(r)
            w.write(raw)
            await w.drain()
            count += 1
        await asyncio.sleep(then)

    return handler


def held_until(gate: asyncio.Event) -> Handler:
    """A keep-alive handler that answers ``OK`` to each request once ``gate`` is set."""

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            await read_request(r)
            await gate.wait()
            w.write(OK)
            await w.drain()

    return handler


async def post(t: Transport, url: str, timeouts: Timeouts = FAST) -> Response:
    """An empty POST to ``url``."""
    return await t.request(Upstream("POST", url, body=b"", headers=[], timeouts=timeouts))


@pytest.fixture(params=["fast", "httpx"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    t = make_transport(request.param, limit=4)
    yield t
    await t.aclose()


async def test_body_round_trip_and_keepalive_reuse(transport: Transport) -> None:
    server = RawServer(keepalive_echo())
    async with server as url:
        for i in range(5):
            body = b"x" * (i * 1000)
            resp = await transport.request(
                Upstream("POST", url, body=body, headers=[], timeouts=FAST)
            )
            assert resp.status == 200
            assert await resp.read() == body
    assert server.connections == 1


async def test_sends_headers_and_the_body_object() -> None:
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head, body = await read_request(r)
        seen.extend((head, body))
        w.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await w.drain()

    t = PoolTransport()
    async with RawServer(handler) as url:
        resp = await t.request(
            Upstream("POST", url, body=b"abc", headers=[("x-request-id", "r-1")], timeouts=FAST)
        )
        assert resp.status == 204
        assert await resp.read() == b""
    assert b"POST /v1/completions HTTP/1.1\r\n" in seen[0]
    assert b"x-request-id: r-1\r\n" in seen[0]
    assert b"content-length: 3\r\n" in seen[0]
    assert seen[1] == b"abc"
    await t.aclose()


async def test_chunked_body_in_partial_reads(transport: Transport) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        raw += b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        for i in range(len(raw)):  # one byte at a time
            w.write(raw[i : i + 1])
            await w.drain()
            await asyncio.sleep(0)

    async with RawServer(handler) as url:
        resp = await post(transport, url)
        assert resp.headers["transfer-encoding"] == "chunked"
        assert b"".join([p async for p in resp.iter_bytes()]) == b"hello world"


async def test_connection_close_is_not_reused() -> None:
    server = RawServer(answers(OK_THEN_CLOSE))
    t = PoolTransport()
    async with server as url:
        for _ in range(3):
            resp = await post(t, url)
            assert await resp.read() == b"ok"
    assert server.connections == 3
    assert t.stats()["open"] == t.stats()["idle"] == 0
    await t.aclose()


async def test_body_until_eof() -> None:
    t = PoolTransport()
    async with RawServer(answers(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")) as url:
        resp = await post(t, url)
        assert await resp.read() == b"until the end"
    await t.aclose()


async def test_peer_closes_mid_response(transport: Transport) -> None:
    handler = answers(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
    async with RawServer(handler) as url:
        resp = await post(transport, url)
        with pytest.raises(UpstreamProtocolError):
            await resp.read()


async def test_peer_closes_before_answering(transport: Transport) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)

    async with RawServer(handler) as url:
        with pytest.raises((UpstreamConnectError, UpstreamProtocolError)):
            await post(transport, url)


async def test_invalid_http_is_a_protocol_error() -> None:
    t = PoolTransport()
    async with RawServer(answers(b"SPDY/9 nonsense\r\n\r\n", then=0.5)) as url:
        with pytest.raises(UpstreamProtocolError):
            await post(t, url)
    await t.aclose()


async def test_connect_refused(transport: Transport) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamConnectError):
        await post(transport, f"http://127.0.0.1:{port}/")


async def test_read_timeouts(transport: Transport) -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        await asyncio.sleep(5)

    quick = Timeouts(connect=1.0, read=0.2)
    async with RawServer(silent) as url:
        with pytest.raises(UpstreamTimeout):
            await post(transport, url, quick)
    async with RawServer(answers(PART, then=5)) as url:  # stalls mid-body
        resp = await post(transport, url, quick)
        with pytest.raises(UpstreamTimeout):
            await resp.read()
        await resp.aclose()


async def test_total_timeout() -> None:
    async def trickle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(50):
            w.write(b"1\r\nx\r\n")
            await w.drain()
            await asyncio.sleep(0.05)

    t = PoolTransport()
    async with RawServer(trickle) as url:
        resp = await post(t, url, Timeouts(connect=1, read=1, total=0.3))
        with pytest.raises(UpstreamTimeout):
            await resp.read()
    await t.aclose()


async def test_pool_limit_makes_callers_wait() -> None:
    gate = asyncio.Event()
    server = RawServer(held_until(gate))
    t = PoolTransport(limit=2)
    async with server as url:

        async def one() -> bytes:
            resp = await post(t, url)
            return await resp.read()

        tasks = [asyncio.ensure_future(one()) for _ in range(6)]
        await asyncio.sleep(0.1)
        assert server.connections == 2
        gate.set()
        assert await asyncio.gather(*tasks) == [b"ok"] * 6
    assert server.connections == 2
    await t.aclose()


@pytest.mark.parametrize("kind", ["fast", "httpx"])
async def test_a_full_pool_is_its_own_bounded_wait(kind: str) -> None:
    """Past the pool's limit a caller waits up to ``pool_timeout`` (not the
    connect timeout) and gets ``UpstreamPoolTimeout``, not a connect error."""
    gate = asyncio.Event()
    server = RawServer(held_until(gate))
    t = make_transport(kind, limit=1, pool_timeout=0.2)
    slow_connect = Timeouts(connect=30.0, read=30.0)
    async with server as url:
        held = asyncio.ensure_future(post(t, url, slow_connect))
        await asyncio.sleep(0.1)
        with pytest.raises(UpstreamPoolTimeout, match="no free connection"):
            await post(t, url, slow_connect)
        assert not isinstance(UpstreamPoolTimeout("x"), UpstreamConnectError)
        stats = t.stats()
        assert stats["pool_timeouts"] == 1
        if kind == "fast":
            assert stats["waits"] == 1
            assert stats["open"] == 1
            assert stats["waiting"] == 0
        gate.set()
        resp = await held
        assert await resp.read() == b"ok"
    await t.aclose()


async def test_abandoned_response_closes_its_connection() -> None:
    server = RawServer(answers(PART, times=None))
    t = PoolTransport()
    async with server as url:
        for _ in range(2):
            resp = await post(t, url)
            await resp.aclose()  # body not read: the connection cannot be reused
    assert server.connections == 2
    assert t.stats()["open"] == 0
    await t.aclose()


async def test_stale_keepalive_connection_is_retried_once() -> None:
    # Keep-alive is implied, but the server closes the connection after one answer.
    server = RawServer(answers(OK))
    t = PoolTransport()
    async with server as url:
        for _ in range(3):
            resp = await post(t, url)
            assert await resp.read() == b"ok"
            await asyncio.sleep(0.05)
    assert server.connections == 3
    await t.aclose()


async def test_slow_consumer_pauses_the_socket() -> None:
    total = 64 << 20  # far more than loopback socket buffers hold
    sent = 0

    async def firehose(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal sent
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        piece = b"z" * 65536
        while sent < total:
            w.write(piece)
            await w.drain()
            sent += len(piece)

    t = PoolTransport()
    async with RawServer(firehose) as url:
        resp = await post(t, url)
        pieces = resp.iter_bytes()
        first = await pieces.__anext__()
        await asyncio.sleep(0.3)  # the consumer pauses; the server must be held back
        assert sent < total // 2
        got = len(first) + sum([len(p) async for p in pieces])
    assert got == total
    await t.aclose()


def test_make_transport_kinds() -> None:
    assert isinstance(make_transport("fast"), PoolTransport)
    assert isinstance(make_transport("httpx"), HttpxTransport)
    with pytest.raises(ValueError, match="unknown transport"):
        make_transport("carrier-pigeon")


async def test_a_closed_connection_is_freed_without_the_gc() -> None:
    t = PoolTransport()
    gc.disable()
    try:
        async with RawServer(answers(OK_THEN_CLOSE)) as url:
            resp = await post(t, url)
            conn = weakref.ref(resp._conn)  # type: ignore[attr-defined]
            assert await resp.read() == b"ok"
            del resp
            for _ in range(20):  # let the loop deliver connection_lost
                await asyncio.sleep(0.01)
                if conn() is None:
                    break
        assert conn() is None, "the connection stayed alive: a reference cycle"
    finally:
        gc.enable()
        await t.aclose()
