"""HTTPS backends: certificate verification on by default, a CA file added per
backend, SNI, keep-alive pooling, in both transports and through the proxy."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from flatgate.proxy.transport.base import Timeouts, Transport, Upstream, UpstreamConnectError
from flatgate.proxy.transport.factory import make_transport
from flatgate.proxy.wire.chunk.frames import FrameSplitter
from flatgate.proxy.wire.chunk.reader import read_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES
from tests.servers import free_port, running
from tests.stacks import write_stack

FAST = Timeouts(connect=2.0, read=2.0)
SSE_BODY = (
    b'data: {"model":"m","choices":[{"index":0,"delta":{"content":"over TLS"}}]}\n\n'
    b'data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class TLSServer:
    """An HTTPS server on loopback with a certificate for "localhost" signed by a
    test CA; answers every request with an OpenAI-style stream, keeps
    connections alive, and records the SNI names and connections it saw."""

    def __init__(self, ca: trustme.CA) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost").configure_cert(self.context)
        self.names: list[str | None] = []
        self.context.sni_callback = self._sni
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.base_events.Server | None = None

    def _sni(self, sock: object, name: str | None, ctx: object) -> None:
        self.names.append(name)

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await r.readexactly(length))
                w.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"content-length: %d\r\n\r\n" % len(SSE_BODY) + SSE_BODY
                )
                await w.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            w.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(params=["fast", "httpx"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    t = make_transport(request.param, limit=4)
    yield t
    await t.aclose()


@pytest.fixture
async def server(ca: trustme.CA) -> AsyncIterator[tuple[TLSServer, int]]:
    """A ``TLSServer`` on this test's loop, and its port."""
    s = TLSServer(ca)
    port = await s.start()
    yield s, port
    s.close()


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    """A client context that trusts the test CA (and verifies names)."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_verified_with_the_backends_ca_pooled_and_with_sni(
    ca: trustme.CA, transport: Transport, server: tuple[TLSServer, int]
) -> None:
    tls, port = server
    context = trusting(ca)  # one context: the pool keeps its connection
    for _ in range(3):
        resp = await transport.request(
            Upstream(
                "POST",
                f"https://localhost:{port}/v1/chat/completions",
                body=b"{}",
                headers=[("content-type", "application/json")],
                timeouts=FAST,
                tls=context,
            )
        )
        assert resp.status == 200
        assert await resp.read() == SSE_BODY
    assert tls.connections == 1  # kept alive across requests
    assert tls.names == ["localhost"]  # SNI
    assert tls.requests[0].lower().count(b"host: localhost:") == 1


async def test_an_unknown_ca_is_refused(
    transport: Transport, server: tuple[TLSServer, int]
) -> None:
    """Verification is on by default: the system store does not know the test CA."""
    _, port = server
    with pytest.raises(UpstreamConnectError, match=r"(?i)certificate"):
        await transport.request(
            Upstream("GET", f"https://localhost:{port}/", body=b"", headers=[], timeouts=FAST)
        )


async def test_a_name_the_certificate_does_not_cover_is_refused(
    ca: trustme.CA, transport: Transport, server: tuple[TLSServer, int]
) -> None:
    _, port = server
    with pytest.raises(UpstreamConnectError):
        url = f"https://127.0.0.1:{port}/"
        await transport.request(
            Upstream("GET", url, body=b"", headers=[], timeouts=FAST, tls=trusting(ca))
        )


@pytest.fixture(scope="module")
def tls_backend(ca: trustme.CA) -> Iterator[int]:
    """The TLS server on its own loop in a thread, for the proxy process to reach."""
    loop = asyncio.new_event_loop()
    server = TLSServer(ca)
    ready = threading.Event()
    port: list[int] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        port.append(loop.run_until_complete(server.start()))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    yield port[0]
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    server.close()
    assert server.server is not None
    loop.run_until_complete(server.server.wait_closed())
    loop.close()


def _proxy_config(path: Path, port: int, backend_port: int, ca_file: str) -> str:
    tls = {"url": f"https://localhost:{backend_port}/v1", "protocol": "openai"}
    return write_stack(
        path,
        proxy={"port": port, "cooldown_seconds": 0},
        backends={"tls": {**tls, "ca_file": ca_file} if ca_file else tls},
        routes={"*": "tls"},
    )


def _ask(url: str) -> httpx.Response:
    body = build_request("m", [("user", "hi")], provider="OpenAI")
    return httpx.post(
        f"{url}/v1/completions",
        content=body,
        headers={"content-type": FLATBUFFERS, "accept": FRAMES},
        timeout=10,
    )


@pytest.mark.integration
def test_proxy_streams_from_an_https_backend_with_its_ca_file(
    ca: trustme.CA, tls_backend: int, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    port = free_port()
    cfg = _proxy_config(tmp_path / "p.toml", port, tls_backend, str(ca_file))
    with running("proxy", ["--config", cfg], tmp_path, port=port) as proxy:
        r = _ask(proxy.url)
        assert r.status_code == 200
        chunks = [read_chunk(f) for f in FrameSplitter().feed(r.content)]
        assert "".join(c.content for c in chunks) == "over TLS"
        ready = httpx.get(f"{proxy.url}/readyz").json()
        assert ready["backends"] == {"tls": True}


@pytest.mark.integration
def test_proxy_refuses_an_https_backend_it_cannot_verify(tls_backend: int, tmp_path: Path) -> None:
    port = free_port()
    cfg = _proxy_config(tmp_path / "p.toml", port, tls_backend, "")
    with running("proxy", ["--config", cfg], tmp_path, port=port) as proxy:
        r = _ask(proxy.url)
        assert r.status_code == 502
        error = json.loads(r.content)["error"]
        assert error["code"] == "backend_unavailable"
        assert "certificate" in error["message"].lower()
