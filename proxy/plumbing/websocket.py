"""The WebSocket boundary: granian's RSGI and ASGI WebSockets behind one ``Socket``.

Owns every touch of granian's WebSocket objects, as ``plumbing.serve`` owns its
HTTP ones; knows nothing of what the messages mean, nor of routing. One socket:
``accept`` or ``refuse`` the upgrade, then ``receive`` and ``send`` messages
until one side closes. What granian 2.8 does underneath (the tests in
``tests/plumbing/test_websocket.py`` pin each):

- ``refuse``: ASGI answers with the status, headers and body given (the
  ASGI denial extension); RSGI's ``close(status)``
  answers with the status alone, an empty body and none of the headers.
- ``close``: ASGI sends the code and reason given; RSGI has no way to give one,
  and its close frame carries none (the client reads 1005, "no status").
- ``send`` waits once the kernel's buffers toward a client that stopped reading
  are full (about 4 MB on loopback, under both interfaces): a slow reader
  slows its sender.
- A client gone: RSGI's ``send`` raises at once; ASGI's keeps succeeding (and
  granian buffers what it is given) until a ``receive`` has seen the close. A
  session keeps one ``receive`` pending, and lets it run between sends (an
  ASGI ``send`` that completes at once does not yield to the loop).
- Pings are answered by granian (tungstenite) while a ``receive`` is pending,
  not between them.
- A frame over 16 MiB or a message over 64 MiB (tungstenite's defaults)
  ends the connection: the client reads 1005, ``receive`` gives ``None``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from granian._granian import RSGIProtocolClosed, RSGIProtocolError

from flatgate.proxy.plumbing.head import RequestHead, asgi_header

__all__ = ["AsgiSocket", "RsgiSocket", "Socket", "SocketHandler"]

Headers = list[tuple[str, str]]

# granian's RSGI close message kind (``granian.rsgi.WebsocketMessageType``).
_RSGI_CLOSE = 0


class Socket(RequestHead, Protocol):
    """A WebSocket: its upgrade request's head (``RequestHead``), then its messages."""

    async def accept(self) -> None:
        """Complete the upgrade (101). ``ConnectionError`` if the client left first."""
        ...

    async def refuse(self, status: int, headers: Headers, body: bytes) -> None:
        """Before ``accept``: answer the upgrade with an HTTP response instead.
        RSGI sends the status only (no headers, an empty body)."""
        ...

    async def receive(self) -> str | bytes | None:
        """One message, text as ``str`` and binary as ``bytes``; ``None`` once
        the client has closed or gone (and on every call after)."""
        ...

    async def send(self, text: bytes) -> None:
        """One text message of ``text`` (UTF-8 JSON); ``ConnectionError`` once
        the socket is closed. Waits while the client is not reading."""
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the socket (idempotent; after the client's close, a no-op).
        RSGI sends no code or reason."""
        ...


SocketHandler = Callable[[Socket], Awaitable[None]]


class RsgiSocket:
    __slots__ = ("_closed", "_proto", "_scope", "_transport", "path")

    def __init__(self, scope: Any, proto: Any) -> None:
        self._scope = scope
        self._proto = proto
        self._transport: Any = None
        self._closed = False
        self.path: str = scope.path

    def header(self, name: str) -> str | None:
        value: str | None = self._scope.headers.get(name)
        return value

    @property
    def query(self) -> str:
        return str(self._scope.query_string or "")

    @property
    def peer(self) -> str:
        client: str = self._scope.client
        return client

    async def accept(self) -> None:
        try:
            self._transport = await self._proto.accept()
        except (RSGIProtocolError, RSGIProtocolClosed) as exc:
            self._closed = True
            raise ConnectionError("the client left before the upgrade completed") from exc

    async def refuse(self, status: int, headers: Headers, body: bytes) -> None:
        # granian's RSGI answers an upgrade it was not asked to accept with
        # ``close``'s status and an empty body: it has no slot for the rest.
        if not self._closed:
            self._closed = True
            self._proto.close(status)

    async def receive(self) -> str | bytes | None:
        if self._closed or self._transport is None:
            return None
        try:
            message = await self._transport.receive()
        except (RSGIProtocolError, RSGIProtocolClosed):
            self._closed = True
            return None
        if message.kind == _RSGI_CLOSE:
            self._closed = True
            return None
        data: str | bytes = message.data  # bytes for a binary message, str for text
        return data

    async def send(self, text: bytes) -> None:
        if self._closed or self._transport is None:
            raise ConnectionError("the socket is closed")
        try:
            await self._transport.send_str(text.decode())
        except (RSGIProtocolError, RSGIProtocolClosed) as exc:
            self._closed = True
            raise ConnectionError("the socket is closed") from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self._closed:
            self._closed = True
            # Before ``accept`` granian reads the number as an HTTP status.
            self._proto.close(code if self._transport is not None else 403)
        self._transport = None


AsgiReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
AsgiSend = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _asgi_headers(headers: Headers) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


class AsgiSocket:
    __slots__ = ("_accepted", "_closed", "_receive", "_scope", "_send", "path")

    def __init__(self, scope: MutableMapping[str, Any], receive: AsgiReceive, send: AsgiSend):
        self._scope = scope
        self._receive = receive
        self._send = send
        self._accepted = False
        self._closed = False
        self.path: str = scope["path"]

    def header(self, name: str) -> str | None:
        return asgi_header(self._scope, name)

    @property
    def query(self) -> str:
        return bytes(self._scope.get("query_string") or b"").decode("latin-1")

    @property
    def peer(self) -> str:
        client = self._scope.get("client")
        return f"{client[0]}:{client[1]}" if client else ""

    async def accept(self) -> None:
        message = await self._receive()  # websocket.connect, or the client already gone
        if message["type"] != "websocket.connect":
            self._closed = True
            raise ConnectionError("the client left before the upgrade completed")
        try:
            await self._send({"type": "websocket.accept"})
        except RuntimeError as exc:  # granian's ASGI flow errors
            self._closed = True
            raise ConnectionError("the client left before the upgrade completed") from exc
        self._accepted = True

    async def refuse(self, status: int, headers: Headers, body: bytes) -> None:
        if self._closed:
            return
        self._closed = True
        start = {"status": status, "headers": _asgi_headers(headers)}
        with contextlib.suppress(RuntimeError):  # the client did not wait for the answer
            await self._send({"type": "websocket.http.response.start", **start})
            await self._send({"type": "websocket.http.response.body", "body": body})

    async def receive(self) -> str | bytes | None:
        if self._closed or not self._accepted:
            return None
        try:
            message = await self._receive()
        except RuntimeError:
            self._closed = True
            return None
        if message["type"] != "websocket.receive":
            self._closed = True
            return None
        text: str | None = message.get("text")
        if text is not None:
            return text
        data: bytes = message.get("bytes") or b""
        return data

    async def send(self, text: bytes) -> None:
        if self._closed or not self._accepted:
            raise ConnectionError("the socket is closed")
        try:
            await self._send({"type": "websocket.send", "text": text.decode()})
        except RuntimeError as exc:
            self._closed = True
            raise ConnectionError("the socket is closed") from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(RuntimeError):  # already gone
            await self._send({"type": "websocket.close", "code": code, "reason": reason})
