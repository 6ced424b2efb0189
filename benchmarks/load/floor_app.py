"""The floor of a Python gateway on granian: what any gateway built as
flatgate is (granian RSGI in front, one pooled uvloop connection per
request behind) costs before it does any work of its own.

``create_app`` is a granian factory. Each ``POST`` body is written as it
came to ``$FLOOR_UPSTREAM`` (``host:port``) on a kept-alive connection, and
the upstream's ``content-length``-framed body is answered as it came, with
no parse of either, no route, no log, no limit and no timeout: nothing a
real gateway may leave out. ``GET /healthz`` answers 200. ``$FLOOR_BODY``
says what the bodies are, fixed for the server's life so that no request's
headers are read: ``json`` (the default: the OpenAI workload's) or ``fbs``
(a ``CompletionRequest`` FlatBuffer sent on with ``accept`` asking for
binary frames, the frames answered as such: the fbs workload's). The load
bench's ``floor`` rows (``benchmarks.load.openai_workload`` in front of the
OpenAI stub, ``benchmarks.load.rows`` in front of the ``.fbs`` stub) measure
it beside flatgate, so that flatgate's CPU and added latency are read
against the least a granian app in its place costs.

Must not: run outside the bench, or be taken for a gateway.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES

__all__ = ["TARGET", "create_app"]

# What granian serves (``benchmarks.harness.servers.ServerGroup.granian``).
TARGET = "benchmarks.load.floor_app:create_app"

_END = b"\r\n\r\n"
_LENGTH = b"content-length:"
# $FLOOR_BODY -> (the request's headers upstream, the answer's content type).
_BODIES = {
    "json": ("content-type: application/json\r\n", "application/json"),
    "fbs": (f"content-type: {FLATBUFFERS}\r\naccept: {FRAMES}\r\n", FRAMES),
}


class _Upstream(asyncio.Protocol):
    """One kept-alive connection; one answer at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[bytes] | None = None
        self._buf = bytearray()
        self._head = 0
        self._need = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if not self._need:
            end = buf.find(_END)
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            at = head.find(_LENGTH) + len(_LENGTH)
            self._head = end + len(_END)
            self._need = self._head + int(head[at : head.find(b"\r\n", at)])
        if len(buf) >= self._need and self.waiter is not None:
            body = bytes(buf[self._head : self._need])
            del buf[: self._need]
            self._need = 0
            waiter, self.waiter = self.waiter, None
            waiter.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # an idle one the upstream closed is not used again
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("upstream closed"))


class _Floor:
    def __init__(self, upstream: str, body: str = "json") -> None:
        host, _, port = upstream.rpartition(":")
        self._host, self._port = host, int(port)
        self._idle: list[_Upstream] = []
        request_headers, answer_type = _BODIES[body]
        self._line = f" HTTP/1.1\r\nhost: {upstream}\r\n{request_headers}"
        self._answer = [("content-type", answer_type)]

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        return None

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        return None

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.method != "POST":
            protocol.response_bytes(200, self._answer, b"{}")
            return
        body = await protocol()
        loop = asyncio.get_running_loop()
        idle = self._idle
        while idle and idle[-1].transport is None:
            idle.pop()
        if idle:
            conn = idle.pop()
        else:
            _, conn = await loop.create_connection(_Upstream, self._host, self._port)
        conn.waiter = loop.create_future()
        head = f"POST {scope.path}{self._line}content-length: {len(body)}\r\n\r\n"
        assert conn.transport is not None
        conn.transport.writelines((head.encode("latin-1"), body))
        answer = await conn.waiter
        self._idle.append(conn)
        protocol.response_bytes(200, self._answer, answer)


def create_app() -> _Floor:
    """granian factory: the upstream from ``$FLOOR_UPSTREAM``, the bodies'
    kind from ``$FLOOR_BODY`` (``json`` or ``fbs``; default ``json``)."""
    return _Floor(os.environ["FLOOR_UPSTREAM"], os.environ.get("FLOOR_BODY", "json"))
