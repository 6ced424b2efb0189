"""The proxy in memory: ``service.app.ProxyServer`` without a server, a socket or a loop.

Owns the in-memory exchange (``FakeExchange``: just enough of
``plumbing.serve.Exchange`` for one unstreamed request) and backend
(``FakeTransport``, answering at once with ``FakeAnswer``), ``make_server``
(a proxy whose one backend is that transport) and ``serve_one`` (one request
through accept, route read, route lookup, backend choice, forward, relay of
a one-frame answer and metrics), run to its end by ``drive``: every await
completes at once, so the coroutine is driven by hand and nothing but the
proxy's code runs. ``benchmarks.cost_checks`` measures with it (CPU and
allocations per request), and the proxy's unit tests use it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from benchmarks.codecs.stock_chunk import build_chunk
from flatgate.proxy.plumbing.body import BodyPolicy
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Response, Upstream
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.schema import FinishReason

__all__ = [
    "ANSWER",
    "CONFIG",
    "HEADERS",
    "FakeAnswer",
    "FakeExchange",
    "FakeTransport",
    "drive",
    "make_server",
    "one_request",
    "serve_one",
]

T = TypeVar("T")

CONFIG = {
    "proxy": {"access_log": False},
    "backends": [{"name": "stub", "url": "http://127.0.0.1:9"}],
    "routes": [{"model": "*", "backends": ["stub"]}],
}
ANSWER = build_chunk(BuilderPool(), content="done", finish_reason=FinishReason.STOP)
HEADERS = {
    "content-type": "application/x-flatbuffers",
    "accept": "application/x-flatbuffers-stream",
    "x-request-id": "bench-1",
}


class FakeExchange:
    """Just enough of ``plumbing.serve.Exchange`` for one unstreamed request."""

    method = "POST"
    path = "/v1/completions"
    query = ""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._headers = {**HEADERS, "content-length": str(len(body))}
        self.status = 0
        self.body_out = b""
        self.headers_out: list[tuple[str, str]] = []

    peer = "127.0.0.1:40000"

    def header(self, name: str) -> str | None:
        return self._headers.get(name)

    async def body(self, policy: BodyPolicy) -> bytes:
        return self._body

    async def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.body_out, self.headers_out = status, body, headers

    async def stream(self, status: int, headers: list[tuple[str, str]]) -> Any:
        raise AssertionError("a one-piece answer is not streamed")

    async def disconnected(self) -> None:
        raise AssertionError("not watched: the answer is ready")


class FakeAnswer:
    """A backend response whose whole body (``data``) is already here."""

    status = 200
    headers: Mapping[str, str] = {}

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.closed = False

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        yield self.data

    async def read(self) -> bytes:
        return self.data

    def ready(self) -> bool:
        return True

    def begun(self) -> None:
        return None

    async def aclose(self) -> None:
        self.closed = True


class FakeTransport:
    """Answers every request at once with ``data``; keeps the last body and answer."""

    def __init__(self, data: bytes = ANSWER) -> None:
        self.data = data
        self.last_body = b""
        self.last_headers: Sequence[tuple[str, str]] = ()
        self.last_answer: FakeAnswer | None = None

    async def request(self, req: Upstream) -> Response:
        self.last_body = req.body
        self.last_headers = req.headers
        self.last_answer = FakeAnswer(self.data)
        return self.last_answer

    def stats(self) -> dict[str, int]:
        return {"open": 0, "idle": 0, "waiting": 0, "waits": 0, "pool_timeouts": 0}

    async def aclose(self) -> None:
        return None


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end; its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    raise AssertionError("the coroutine suspended: something waited")


def make_server(answer: bytes = ANSWER) -> tuple[ProxyServer, FakeTransport]:
    """A proxy whose one backend answers ``answer`` at once."""
    server = ProxyServer(parse_config(CONFIG), worker="bench")
    transport = FakeTransport(answer)
    server._transport = transport
    return server, transport


def serve_one(server: ProxyServer, body: bytes) -> FakeExchange:
    """One request through the proxy's code, run to its end without a loop."""
    ex = FakeExchange(body)
    drive(server.completions(ex))
    return ex


def one_request(args: tuple[ProxyServer, bytes]) -> int:
    """One request through the proxy's code; its HTTP status."""
    return serve_one(*args).status
