"""The gateway in memory: ``flatgate gateway``'s handler without a server or a socket.

Owns the in-memory equivalent of ``benchmarks.inmemory`` for the one-process
gateway's real path: the edge app (``gateway.onebox``'s build: the edge over
the proxy's router in process) serving OpenAI Chat Completions to a backend of
the ``openai`` protocol, whose transport (``OpenAITransport``) answers the
adapter's request at once from bytes built once: the built-in stub's canned
answer of ``TOKENS`` deltas (``OpenAIWire.canned``, what ``flatgate stub
--protocol openai --canned 32`` serves to the load bench), whole as one
``chat.completion`` document, streamed as one piece per SSE event (as a model
server sends them, a token at a time). ``GatewayExchange`` is just enough of
``plumbing.serve.Exchange`` for one request, whole or streamed.

``make_gateway`` builds one (its access log, on by default, written to a
file descriptor the caller gives: ``/dev/null`` in the bench);
``serve_gateway`` runs one request to its end with ``inmemory.drive``: every
await completes at once. The edge's keep-alive timer and the caller watch need
a running loop, so call it from a coroutine (the loop's own work, such as
dropping cancelled timers, is the caller's to let run between batches).

Measures nothing: ``benchmarks.request_cost`` does.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from benchmarks.harness.servers import gateway_config
from benchmarks.inmemory import FakeTransport, drive
from benchmarks.load.openai_bodies import BODY_BYTES, chat_body
from flatgate.edge_translator.app import EdgeApp
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.gateway.document import load_document
from flatgate.proxy.gateway.onebox import _build
from flatgate.proxy.plumbing.accesslog import AccessLog
from flatgate.proxy.plumbing.body import BodyPolicy
from flatgate.proxy.transport.base import Response, Upstream

__all__ = [
    "MODEL",
    "TOKENS",
    "GatewayExchange",
    "OpenAITransport",
    "PiecesAnswer",
    "Sink",
    "answers",
    "build_gateway",
    "gateway_request",
    "log_writer",
    "make_gateway",
    "serve_gateway",
]

MODEL = "bench-openai"
TOKENS = 32
CONFIG = gateway_config(
    {"stub": ("http://127.0.0.1:9/v1", "openai")}, {MODEL: ["stub"]}, {MODEL: "OpenAI"}
)


def answers(tokens: int = TOKENS) -> tuple[list[bytes], list[bytes]]:
    """The backend's whole answer (one piece) and its streamed one (one
    piece per SSE event): the stub's canned bytes, built once."""
    canned = OpenAIWire().canned(tokens)
    whole = canned(b"{}", lambda name: None).body
    streamed = canned(b'{"stream":true}', lambda name: None).body
    events = [event + b"\n\n" for event in streamed.split(b"\n\n") if event]
    return [whole], events


def gateway_request(stream: bool, size: int = BODY_BYTES) -> bytes:
    """The load bench's 2 KB chat request for ``MODEL``, whole or streamed."""
    return chat_body(size, MODEL, stream=stream)


_JSON: Mapping[str, str] = {"content-type": "application/json"}


class PiecesAnswer:
    """A backend answer whose pieces are all here (``headers``: JSON's by default)."""

    status = 200

    def __init__(self, pieces: list[bytes], headers: Mapping[str, str] = _JSON) -> None:
        self._pieces = pieces
        self.headers = headers

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece

    async def read(self) -> bytes:
        return b"".join(self._pieces)

    def ready(self) -> bool:
        return True

    def begun(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class OpenAITransport(FakeTransport):
    """Answers the openai adapter's request at once: ``whole`` when it asks
    for a whole answer, ``streamed`` when it asks for a stream; keeps the
    last request body."""

    def __init__(self, whole: list[bytes], streamed: list[bytes]) -> None:
        super().__init__(b"".join(whole))
        self._whole = whole
        self._streamed = streamed

    async def request(self, req: Upstream) -> Response:
        self.last_body = req.body
        self.last_headers = req.headers
        streamed = b'"stream":true' in req.body
        return PiecesAnswer(self._streamed if streamed else self._whole)


class Sink:
    """A streamed response's body, kept as it is sent."""

    __slots__ = ("_out",)

    def __init__(self, out: list[bytes]) -> None:
        self._out = out

    async def send(self, data: bytes) -> None:
        self._out.append(data)

    async def close(self) -> None:
        return None


class GatewayExchange:
    """Just enough of ``plumbing.serve.Exchange`` for one chat completion,
    whole or streamed; the caller never leaves. ``request_id``: the
    caller's ``x-request-id`` (``None``: none sent, the gateway makes one)."""

    method = "POST"
    path = "/v1/chat/completions"
    query = ""
    peer = "127.0.0.1:40000"

    def __init__(self, body: bytes, request_id: str | None = "bench-1") -> None:
        self._body = body
        self._headers = {
            "content-type": "application/json",
            "content-length": str(len(body)),
            "host": "gateway",
        }
        if request_id is not None:
            self._headers["x-request-id"] = request_id
        self.status = 0
        self.out: list[bytes] = []

    def header(self, name: str) -> str | None:
        return self._headers.get(name)

    async def body(self, policy: BodyPolicy) -> bytes:
        return self._body

    async def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.out.append(body)

    async def stream(self, status: int, headers: list[tuple[str, str]]) -> Sink:
        self.status = status
        return Sink(self.out)

    async def disconnected(self) -> None:
        # Never: the bench's caller stays (a watch started on it is cancelled).
        await asyncio.get_running_loop().create_future()


def log_writer(fd: int) -> Callable[[bytes], None]:
    """An access log's ``write``: each batch to the file descriptor ``fd``."""

    def write(data: bytes) -> None:
        os.write(fd, data)

    return write


def build_gateway(config: str, transport: FakeTransport) -> EdgeApp:
    """``gateway.onebox``'s handler (the edge over the router, in process)
    built from ``config`` (a gateway TOML document), every backend answered
    by ``transport``."""
    with tempfile.TemporaryDirectory(prefix="flatgate-bench-") as d:
        path = Path(d) / "gateway.toml"
        path.write_text(config)
        edge, proxy = _build(load_document(str(path)))
    proxy._transport = transport
    return edge


def make_gateway(log_fd: int) -> tuple[EdgeApp, OpenAITransport]:
    """The gateway's handler over an ``openai`` backend answering from
    memory; its access log written to ``log_fd``."""
    transport = OpenAITransport(*answers())
    edge = build_gateway(CONFIG, transport)
    edge.access = AccessLog("edge", edge.settings.edge.log_format, write=log_writer(log_fd))
    return edge, transport


def serve_gateway(edge: EdgeApp, body: bytes) -> GatewayExchange:
    """One request through the gateway's code, run to its end by hand."""
    ex = GatewayExchange(body)
    drive(edge(ex))
    return ex
