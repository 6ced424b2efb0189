"""Allocations per request in the proxy's own code, at 1 KB and 1 MB prompts.

Run: ``.venv/bin/python -m benchmarks.alloc_proxy [--calls N]``

Drives ``proxy.app.ProxyServer`` (accept, route read, route lookup, backend
choice, forward, relay of a one-frame answer, metrics) with an in-memory
exchange and an in-memory transport that answers at once, so that nothing but
the proxy's code runs: no server, no socket, no event loop (every await
completes at once; the coroutine is driven by hand). Allocations are counted
with ``benchmarks.allocs`` (memray, every allocation in the loop, transient
ones included, loop overhead and profiler artefacts subtracted). The claim
under test: the count is the same whatever the prompt size, because the body
is read in place and forwarded as the same object.
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any

from benchmarks.allocs import count_allocations
from benchmarks.codecs.stock_chunk import build_chunk
from benchmarks.payloads import make_request, to_flatbuffer
from flatgate.proxy.plumbing.serve import BodyPolicy
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.transport.base import Response, Timeouts
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.schema import FinishReason

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
    """Just enough of ``proxy.serve.Exchange`` for one unstreamed request."""

    method = "POST"
    path = "/v1/completions"

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
        self.last_body = body
        self.last_headers = headers
        self.last_answer = FakeAnswer(self.data)
        return self.last_answer

    def stats(self) -> dict[str, int]:
        return {"open": 0, "idle": 0, "waiting": 0, "waits": 0, "pool_timeouts": 0}

    async def aclose(self) -> None:
        return None


def _drive(coro: Coroutine[Any, Any, None]) -> None:
    try:
        coro.send(None)
    except StopIteration:
        return
    raise AssertionError("the request suspended: something waited")


def make_server(answer: bytes = ANSWER) -> tuple[ProxyServer, FakeTransport]:
    """A proxy whose one backend answers ``answer`` at once."""
    server = ProxyServer(parse_config(CONFIG), worker="bench")
    transport = FakeTransport(answer)
    server._transport = transport
    return server, transport


def serve_one(server: ProxyServer, body: bytes) -> FakeExchange:
    """One request through the proxy's code, run to its end without a loop."""
    ex = FakeExchange(body)
    _drive(server.completions(ex))
    return ex


def one_request(args: tuple[ProxyServer, bytes]) -> int:
    """One request through the proxy's code; its HTTP status."""
    return serve_one(*args).status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()
    print("| prompt | body bytes | allocations/request | bytes allocated/request |")
    print("|---|---:|---:|---:|")
    for label, size in (("1 KB", 1 << 10), ("16 KB", 16 << 10), ("1 MB", 1 << 20)):
        body = to_flatbuffer(make_request(size, seed=7))
        server, transport = make_server()
        for _ in range(50):  # warm caches, pools, metric children
            one_request((server, body))
        assert transport.last_body is body, "the forwarded body must be the received object"
        result = count_allocations(one_request, (server, body), opts.calls)
        print(f"| {label} | {len(body)} | {result.allocs:.1f} | {result.bytes:.0f} |")


if __name__ == "__main__":
    main()
