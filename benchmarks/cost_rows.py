"""The rows of the per-request cost table: each a request served in memory, and its floor.

Owns ``Row`` (a name, what it serves, and ``serve``: one request through it,
run to its end by hand, its status returned) and ``build_rows``: the proxy's
``.fbs`` hop (a 2 KB ``CompletionRequest``, answered with SSE frames and with
binary frames: ``benchmarks.inmemory``'s proxy, its one backend answering
``TOKENS`` chunk frames in one read), the gateway's real path (a 2 KB Chat
Completions request through the edge and the ``openai`` adapter, whole and
streamed: ``benchmarks.inprocess_gateway``) and, for each, its floor: the
least a Python server does for the same exchange, through the same fake
exchange and transport: read the body, send it upstream as is, and write the
canned answer back (whole, or piece by piece for a stream), parsing nothing.

Every row is served the same way (``inmemory.drive``, inside a running loop:
the gateway's timers need one), so a row's figures differ from its floor's
only by what the product does. Measures nothing: ``benchmarks.request_cost``
does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.inmemory import FakeExchange, FakeTransport, drive, make_server
from benchmarks.inprocess_gateway import (
    GatewayExchange,
    OpenAITransport,
    answers,
    gateway_request,
    log_writer,
    make_gateway,
    serve_gateway,
)
from benchmarks.payloads import make_request, to_flatbuffer
from flatgate.proxy.plumbing.accesslog import AccessLog
from flatgate.proxy.plumbing.body import BodyPolicy
from flatgate.proxy.transport.base import Timeouts, Upstream
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["FBS_ANSWER", "REQUEST_BYTES", "TOKENS", "Row", "build_rows", "fbs_request"]

REQUEST_BYTES = 2048
TOKENS = 32
# The .fbs backend's answer: 31 one-word chunks and a last with the finish,
# in one read (so the proxy answers it as one plain response).
FBS_ANSWER = b"".join(
    [write_chunk(content="tok ") for _ in range(TOKENS - 1)]
    + [write_chunk(content="tok ", finish_reason=FinishReason.STOP)]
)
SSE = "text/event-stream"
_POLICY = BodyPolicy(8 << 20)
_UPSTREAM_HEADERS = [("content-type", "application/json")]
_TIMEOUTS = Timeouts()
_FLOOR_URL = "http://127.0.0.1:9/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Row:
    """One row: ``serve`` runs one request to its end and returns its status;
    ``floor``: the name of the row it stands beside (``""`` for a floor)."""

    name: str
    what: str
    serve: Callable[[], int]
    floor: str = ""


def fbs_request(size: int = REQUEST_BYTES) -> bytes:
    """The proxy's request: a seeded chat of about ``size`` bytes as a
    ``CompletionRequest``."""
    return to_flatbuffer(make_request(size, seed=7))


async def _floor_whole(ex: FakeExchange | GatewayExchange, transport: FakeTransport) -> None:
    body = await ex.body(_POLICY)
    upstream = Upstream("POST", _FLOOR_URL, body, _UPSTREAM_HEADERS, _TIMEOUTS)
    resp = await transport.request(upstream)
    data = await resp.read()
    await resp.aclose()
    await ex.respond(200, [("content-type", SSE)], data)


async def _floor_stream(ex: GatewayExchange, transport: FakeTransport) -> None:
    body = await ex.body(_POLICY)
    upstream = Upstream("POST", _FLOOR_URL, body, _UPSTREAM_HEADERS, _TIMEOUTS)
    resp = await transport.request(upstream)
    sink = await ex.stream(200, [("content-type", SSE)])
    async for piece in resp.iter_bytes():
        await sink.send(piece)
    await sink.close()
    await resp.aclose()


def _proxy_row(name: str, accept: str, body: bytes, log_fd: int) -> Row:
    server, _ = make_server(FBS_ANSWER)
    # The access log on (its default), written to log_fd.
    server.access = AccessLog("proxy", server.config.proxy.log_format, write=log_writer(log_fd))

    def serve() -> int:
        ex = FakeExchange(body)
        ex._headers["accept"] = accept
        drive(server.completions(ex))
        return ex.status

    what = f"proxy, {len(body)} B .fbs request, {TOKENS} frames answered as {accept}"
    return Row(name, what, serve, floor="floor: .fbs hop")


def build_rows(log_fd: int) -> list[Row]:
    """Every row, each floor after the rows it stands beside; access logs to ``log_fd``."""
    fbs = fbs_request()
    floor_transport = FakeTransport(FBS_ANSWER)

    def fbs_floor() -> int:
        ex = FakeExchange(fbs)
        drive(_floor_whole(ex, floor_transport))
        return ex.status

    edge, _ = make_gateway(log_fd)
    chat_transport = OpenAITransport(*answers(TOKENS))
    bodies = {stream: gateway_request(stream, REQUEST_BYTES) for stream in (False, True)}

    def gateway(stream: bool) -> Callable[[], int]:
        body = bodies[stream]
        return lambda: serve_gateway(edge, body).status

    def chat_floor(stream: bool) -> Callable[[], int]:
        body = bodies[stream]
        run = _floor_stream if stream else _floor_whole

        def serve() -> int:
            ex = GatewayExchange(body)
            drive(run(ex, chat_transport))
            return ex.status

        return serve

    chat = f"gateway, {REQUEST_BYTES} B Chat Completions request, openai adapter, {TOKENS} tokens"
    return [
        _proxy_row("proxy .fbs, SSE frames", SSE, fbs, log_fd),
        _proxy_row("proxy .fbs, binary frames", "application/x-flatbuffers-stream", fbs, log_fd),
        Row(
            "floor: .fbs hop",
            "read the body, send it upstream as is, write the frames back",
            fbs_floor,
        ),
        Row("gateway chat, whole", f"{chat}, whole", gateway(False), "floor: chat, whole"),
        Row(
            "floor: chat, whole",
            "read the body, send it upstream as is, write the JSON answer back",
            chat_floor(False),
        ),
        Row(
            "gateway chat, streamed",
            f"{chat}, streamed (one SSE event a read)",
            gateway(True),
            "floor: chat, streamed",
        ),
        Row(
            "floor: chat, streamed",
            "read the body, send it upstream as is, write each SSE event back as it comes",
            chat_floor(True),
        ),
    ]
