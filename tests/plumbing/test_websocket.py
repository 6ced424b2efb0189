"""``plumbing.websocket``'s ``Socket`` under granian 2.8's RSGI and ASGI, served
by real granian processes (``socket_app``) and driven by the ``websockets``
client (the one the openai SDK's Responses WebSocket helper uses).

Where the interfaces differ, each test pins what each gives:

- a refused upgrade: ASGI answers the status, headers and body given; RSGI the
  status alone, with an empty body and none of the headers;
- a server's close: ASGI sends the code and reason; RSGI sends a close frame
  with neither (the client reads 1005, "no status received").

What granian does beneath both (the brief's questions):

- backpressure: once a client stops reading, ``send`` waits after about 4 MB
  on loopback (the kernel's buffers both ways), under both interfaces;
- a client gone: RSGI's ``send`` raises at once; ASGI's keeps succeeding,
  and buffers, until a ``receive`` has seen the close: a session keeps one
  pending;
- pings are answered only while a ``receive`` is pending;
- a frame over tungstenite's 16 MiB, or a message over its 64 MiB: granian
  ends the connection with a close frame that has no code (1005), and the
  handler's ``receive`` gives ``None``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect

from tests.plumbing.socket_app import FLOOD_LIMIT, HOLD_SECONDS, REFUSAL
from tests.servers import Server, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
IFACES = ("asgi", "rsgi")


@contextlib.contextmanager
def socket_app(log_dir: Path, iface: str, handler: bool = True) -> Iterator[Server]:
    port = free_port()
    log = log_dir / f"socket-app-{iface}-{port}.log"
    env = {**os.environ, "SOCKETS": "1" if handler else "0"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.plumbing.socket_app", str(port), iface],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(f"socket-app-{iface}", proc, port, log)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=IFACES)
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    with socket_app(tmp_path_factory.mktemp("ws"), request.param) as server:
        server.name = request.param
        yield server


def ws_url(server: Server, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def report(server: Server) -> dict[str, Any]:
    with urllib.request.urlopen(server.url + "/report", timeout=5) as r:
        seen: dict[str, Any] = json.loads(r.read())
    return seen


def report_when(server: Server, key: str, field: str, seconds: float = 10.0) -> dict[str, Any]:
    """``report(server)[key]`` once it has ``field``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = report(server).get(key) or {}
        if field in seen:
            return dict(seen)
        time.sleep(0.05)
    raise AssertionError(f"no {field} for {key} in {seconds}s: {report(server)}")


async def closed_by_server(ws: ClientConnection) -> websockets.ConnectionClosed:
    try:
        await asyncio.wait_for(ws.recv(), 10)
    except websockets.ConnectionClosed as exc:
        return exc
    raise AssertionError("the server sent a message instead of closing")


async def test_text_and_bytes_are_echoed(app: Server) -> None:
    async with connect(ws_url(app, "/echo?echo"), additional_headers={"x-probe": "p1"}) as ws:
        await ws.send("hi")
        assert await ws.recv() == "text:hi"
        await ws.send(b"\x00\x01\x02")
        assert await ws.recv() == "bytes:3"  # seen as bytes, answered as text
        port = ws.local_address[1]
    seen = report(app)["echo"]
    assert seen["peer"] == f"127.0.0.1:{port}"
    assert seen["probe"] == "p1"


@pytest.mark.parametrize(("code", "reason"), [(1000, ""), (1001, ""), (1008, "policy says no")])
async def test_the_close_code_the_client_sees(app: Server, code: int, reason: str) -> None:
    """ASGI: the code and reason given. RSGI: a close frame without either
    (granian's RSGI ``close`` takes no code once accepted): 1005 whatever was asked."""
    key = f"close-{code}"
    async with connect(ws_url(app, f"/echo?{key}")) as ws:
        await ws.send(f"close {code} {reason}".rstrip())
        closed = await closed_by_server(ws)
    assert closed.rcvd is not None
    if app.name == "asgi":
        assert (closed.rcvd.code, closed.rcvd.reason) == (code, reason)
    else:
        assert (closed.rcvd.code, closed.rcvd.reason) == (1005, "")
    seen = report_when(app, key, "receive_after_server_close")
    assert seen["send_after_server_close"] == "ConnectionError"
    assert seen["receive_after_server_close"] is None


async def test_receive_gives_none_after_the_client_closes(app: Server) -> None:
    async with connect(ws_url(app, "/echo?client-close")) as ws:
        await ws.send("x")
        assert await ws.recv() == "text:x"
    seen = report_when(app, "client-close", "receive_after_close")
    assert seen["receive_after_close"] is None
    assert seen["send_after_client_close"] == "ConnectionError"


async def test_a_refused_upgrade(app: Server) -> None:
    """ASGI: the status, headers and body given (the denial extension). RSGI:
    the status alone, with an empty body and none of the headers."""
    with pytest.raises(websockets.InvalidStatus) as caught:
        async with connect(ws_url(app, "/refuse")):
            pass
    answer = caught.value.response
    assert answer.status_code == 401
    if app.name == "asgi":
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.headers["retry-after"] == "3"
        assert answer.body == REFUSAL
    else:
        assert "www-authenticate" not in answer.headers
        assert "retry-after" not in answer.headers
        assert answer.body == b""


@pytest.mark.parametrize("iface", IFACES)
async def test_without_a_socket_handler_an_upgrade_is_refused_404(
    iface: str, tmp_path: Path
) -> None:
    with (
        socket_app(tmp_path, iface, handler=False) as server,
        pytest.raises(websockets.InvalidStatus) as caught,
    ):
        async with connect(ws_url(server, "/echo")):
            pass
    assert caught.value.response.status_code == 404


async def test_pings_are_answered_only_while_a_receive_is_pending(app: Server) -> None:
    async with connect(ws_url(app, "/echo?ping")) as ws:
        pong = await ws.ping()
        await asyncio.wait_for(pong, 5)  # the handler is in receive()
        await ws.send("hold")  # the handler stops receiving for HOLD_SECONDS
        pong = await ws.ping()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(pong), HOLD_SECONDS / 3)
        assert await asyncio.wait_for(ws.recv(), 10) == "held"
        await asyncio.wait_for(pong, 5)  # answered once it receives again


async def test_a_frame_over_16_mib_ends_the_connection(app: Server) -> None:
    """tungstenite's default ``max_frame_size`` (granian sets no other)."""
    async with connect(ws_url(app, "/echo?big"), max_size=None) as ws:
        try:
            await ws.send(b"y" * ((16 << 20) + 1))
        except websockets.ConnectionClosed as exc:  # closed while it was sending
            closed = exc
        else:
            closed = await closed_by_server(ws)
    assert closed.rcvd is not None and closed.rcvd.code == 1005
    assert report_when(app, "big", "receive_after_close")["receive_after_close"] is None


@pytest.mark.parametrize(("frames", "taken"), [(3, True), (5, False)])
async def test_a_message_over_64_mib_ends_the_connection(
    app: Server, frames: int, taken: bool
) -> None:
    """tungstenite's default ``max_message_size``: 39 MiB in three 13 MiB
    frames is taken whole; 65 MiB in five ends the connection (1005)."""
    piece = b"z" * (13 << 20)
    key = f"message-{frames}"
    async with connect(ws_url(app, f"/echo?{key}"), max_size=None) as ws:
        try:
            await ws.send([piece] * frames)
            answer = await asyncio.wait_for(ws.recv(), 20)
        except websockets.ConnectionClosed as exc:
            assert not taken
            assert exc.rcvd is not None and exc.rcvd.code == 1005
        else:
            assert taken
            assert answer == f"bytes:{frames * len(piece)}"
    assert report_when(app, key, "receive_after_close")["receive_after_close"] is None


# -- a client that stops reading --------------------------------------------------


def upgrade_and_stop_reading(server: Server, path: str) -> socket.socket:
    """A raw client: the upgrade, its 101, then never another read."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    assert raw.recv(12) == b"HTTP/1.1 101"
    return raw


def flood_stalls(server: Server, seconds: float = 20.0, still: float = 1.0) -> int:
    """The bytes the flood had sent once its count stayed put for ``still`` seconds."""
    deadline = time.monotonic() + seconds
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        sent = int(report(server).get("flood", 0))
        if sent != last:
            last, since = sent, time.monotonic()
        elif time.monotonic() - since >= still:
            return sent
        time.sleep(0.05)
    raise AssertionError(f"the flood did not stall in {seconds}s: {report(server)}")


def flood_end(server: Server, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = report(server)
        if "flood_ended" in seen:
            return str(seen["flood_ended"])
        time.sleep(0.05)
    raise AssertionError(f"the flood did not end in {seconds}s: {report(server)}")


@pytest.mark.parametrize("query", ["?receive", ""])
def test_send_waits_for_a_client_that_stopped_reading(app: Server, query: str) -> None:
    """``send`` waits once the kernel's buffers are full (about 4 MB on
    loopback). When the client then goes: with a ``receive`` pending, the next
    ``send`` raises ``ConnectionError`` under both interfaces; without one,
    RSGI's still does, but ASGI's ``send`` keeps succeeding (granian buffers
    what it is given) until the flood stops itself at ``FLOOD_LIMIT``."""
    raw = upgrade_and_stop_reading(app, f"/flood{query}")
    try:
        sent = flood_stalls(app)
    finally:
        raw.close()
    assert 0 < sent < 32 << 20, sent
    ended = flood_end(app)
    if app.name == "asgi" and not query:
        assert ended == "limit", FLOOD_LIMIT
    else:
        assert ended == "ConnectionError"
