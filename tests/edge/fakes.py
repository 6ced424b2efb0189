"""Fake granian RSGI protocol objects and a fake proxy transport for app tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from flatgate.proxy.transport.base import Timeouts, Upstream


class Scope:
    proto = "http"
    client = "127.0.0.1:50000"
    query_string = ""  # granian's: the query, undecoded

    def __init__(self, method: str, path: str, headers: Mapping[str, str] | None = None) -> None:
        self.method = method
        self.path = path
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}


class Stream:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)


class Protocol:
    """Records the one response the app gives."""

    def __init__(self, body: bytes = b"", *, pieces: Sequence[bytes] | None = None) -> None:
        self.body = body
        self.pieces = pieces
        self.gone = asyncio.Event()
        self.status: int | None = None
        self.headers: list[tuple[str, str]] = []
        self.payload = b""
        self.stream: Stream | None = None

    async def __call__(self) -> bytes:
        return self.body

    async def _iter(self) -> AsyncIterator[bytes]:
        for piece in self.pieces or [self.body]:
            yield piece

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def client_disconnect(self) -> None:
        await self.gone.wait()

    def _head(self, status: int, headers: list[tuple[str, str]]) -> None:
        assert self.status is None, "two responses"
        self.status, self.headers = status, headers

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self._head(status, headers)
        self.payload = body

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> Stream:
        self._head(status, headers)
        self.stream = Stream()
        return self.stream

    def header(self, name: str) -> str | None:
        return dict(self.headers).get(name)

    def json(self) -> Any:
        return json.loads(self.payload)

    @property
    def streamed(self) -> bytes:
        assert self.stream is not None
        return b"".join(self.stream.sent)


class Response:
    def __init__(
        self,
        status: int = 200,
        pieces: Sequence[bytes] = (),
        *,
        stall_after: int | None = None,
        error_after: tuple[int, Exception] | None = None,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        self.delay = delay
        self.began = False
        self.status = status
        self.headers: Mapping[str, str] = dict(headers or {})
        self.pieces = list(pieces)
        self.stall_after = stall_after
        self.error_after = error_after
        self.closed = False
        self.stalled = asyncio.Event()

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        if self.delay:
            await asyncio.sleep(self.delay)  # a backend thinking before its first token
        for i, piece in enumerate(self.pieces):
            if self.error_after and i == self.error_after[0]:
                raise self.error_after[1]
            if self.stall_after is not None and i == self.stall_after:
                self.stalled.set()
                await asyncio.Event().wait()
            yield piece
        if self.error_after and self.error_after[0] >= len(self.pieces):
            raise self.error_after[1]
        if self.stall_after is not None and self.stall_after >= len(self.pieces):
            self.stalled.set()
            await asyncio.Event().wait()

    async def read(self) -> bytes:
        return b"".join(self.pieces)

    def ready(self) -> bool:
        return False

    def begun(self) -> None:
        self.began = True

    async def aclose(self) -> None:
        self.closed = True


class Sent:
    def __init__(
        self,
        method: str,
        url: str,
        body: bytes,
        headers: Sequence[tuple[str, str]],
        timeouts: Timeouts,
    ) -> None:
        self.method, self.url, self.body, self.timeouts = method, url, body, timeouts
        self.headers = dict(headers)


class Transport:
    """Answers each request with ``handler(sent)`` (a Response, or raises)."""

    def __init__(self, handler: Callable[[Sent], Response]) -> None:
        self.handler = handler
        self.sent: list[Sent] = []
        self.responses: list[Response] = []
        self.closed = False

    async def request(self, req: Upstream) -> Response:
        sent = Sent(req.method, req.url, req.body, req.headers, req.timeouts)
        self.sent.append(sent)
        resp = self.handler(sent)
        self.responses.append(resp)
        return resp

    def stats(self) -> dict[str, int]:
        return {"open": 0, "idle": 0, "waiting": 0, "waits": 0, "pool_timeouts": 0}

    async def aclose(self) -> None:
        self.closed = True
