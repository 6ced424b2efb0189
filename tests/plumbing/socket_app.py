"""A small app over ``plumbing.websocket``'s ``Socket``, served by real granian
processes (one worker) for ``test_websocket.py``, under either interface.

Sockets, by path:

- ``/echo``: accepted; answers each text message ``t`` with ``text:t`` and
  each binary one with ``bytes:<length>``, except the commands
  ``close <code> [reason]`` (it closes so, then tries to send) and ``hold``
  (it stops receiving for ``HOLD_SECONDS``, then echoes again);
- ``/refuse``: refused 401 with ``www-authenticate`` and ``retry-after``
  headers and a JSON body;
- ``/flood``: accepted; sends 64 KiB text messages until ``send`` fails or
  ``FLOOD_LIMIT`` bytes went, counting the bytes it handed to ``send``; with
  the query ``receive``, a ``receive`` stays pending meanwhile.

What each echo socket saw (its peer and ``x-probe`` header; ``receive``
giving ``None`` and a ``send`` raising ``ConnectionError`` after a close), under
its query string, and the flood's count, are served as JSON by
``GET /report``; ``/healthz`` answers 200. ``SOCKETS=0`` serves no socket
handler (every upgrade refused 404).

Run: ``python -m tests.plumbing.socket_app PORT asgi|rsgi``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from flatgate.proxy.plumbing.serve import Exchange, ServerApp
from flatgate.proxy.plumbing.websocket import Socket

HOLD_SECONDS = 3.0
FLOOD_PIECE = b"x" * (64 << 10)
# Past this the flood stops by itself (granian's ASGI send does not fail once
# the client is gone: see test_websocket.py).
FLOOD_LIMIT = 64 << 20
REFUSAL = b'{"error": {"message": "no key", "type": "invalid_request_error"}}'

report: dict[str, object] = {}


async def http(ex: Exchange) -> None:
    if ex.path == "/report":
        await ex.respond(200, [("content-type", "application/json")], json.dumps(report).encode())
    else:
        await ex.respond(200, [("content-type", "text/plain")], b"ok\n")


async def sockets(socket: Socket) -> None:
    if socket.path == "/refuse":
        headers = [("www-authenticate", "Bearer"), ("retry-after", "3")]
        await socket.refuse(401, headers, REFUSAL)
    elif socket.path == "/flood":
        await flood(socket)
    else:
        await echo(socket)


async def echo(socket: Socket) -> None:
    seen: dict[str, object] = {"peer": socket.peer, "probe": socket.header("x-probe")}
    report[socket.query] = seen
    await socket.accept()
    while True:
        message = await socket.receive()
        if message is None:
            seen["receive_after_close"] = None
            seen["send_after_client_close"] = await send_fails(socket)
            return
        if isinstance(message, bytes):
            await socket.send(f"bytes:{len(message)}".encode())
        elif message.startswith("close "):
            code, _, reason = message[6:].partition(" ")
            await socket.close(int(code), reason)
            await socket.close(int(code), reason)  # idempotent
            seen["send_after_server_close"] = await send_fails(socket)
            seen["receive_after_server_close"] = await socket.receive()
            return
        elif message == "hold":
            await asyncio.sleep(HOLD_SECONDS)
            await socket.send(b"held")
        else:
            await socket.send(f"text:{message}".encode())


async def send_fails(socket: Socket) -> str:
    try:
        await socket.send(b"late")
    except ConnectionError:
        return "ConnectionError"
    return "sent"


async def flood(socket: Socket) -> None:
    await socket.accept()
    # With ``?receive``, a receive stays pending while it sends, as a session's does.
    reader = asyncio.ensure_future(socket.receive()) if socket.query == "receive" else None
    sent = 0
    report["flood"] = sent
    report.pop("flood_ended", None)
    try:
        while True:
            await socket.send(FLOOD_PIECE)
            sent += len(FLOOD_PIECE)
            report["flood"] = sent
            await asyncio.sleep(0)  # a finished send does not yield: let the reader run
            if sent >= FLOOD_LIMIT:
                report["flood_ended"] = "limit"
                return
    except ConnectionError:
        report["flood_ended"] = "ConnectionError"
    finally:
        if reader is not None:
            reader.cancel()


def create_app() -> ServerApp:
    return ServerApp(http, sockets=sockets if os.environ.get("SOCKETS", "1") == "1" else None)


def main(argv: list[str]) -> None:
    from granian import Granian
    from granian.constants import Interfaces
    from granian.log import LogLevels

    port, iface = argv
    Granian(
        "tests.plumbing.socket_app:create_app",
        address="127.0.0.1",
        port=int(port),
        workers=1,
        interface=Interfaces.RSGI if iface == "rsgi" else Interfaces.ASGI,
        factory=True,
        log_level=LogLevels.warning,
    ).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
