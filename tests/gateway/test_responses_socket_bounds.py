"""The Responses API's WebSocket mode at its bounds, through real ``flatgate
gateway`` processes on loopback in front of one ``flatgate stub`` (fbs,
100 ms between tokens: the stub echoes the last user input, so an answer of
N words streams for about N tenths of a second), spoken to with the raw
``websockets`` client.

- The upgrade refused with the status an HTTP request would get and
  OpenAI's body: a bad key (401), another path (404), ``websocket = false``
  (404), past ``websocket_max_per_caller`` (429 with ``Retry-After``); under
  RSGI the status alone.
- A message over ``websocket_max_message_bytes``, one that is not JSON, one
  of another ``type``: an error event, and the socket goes on.
- More than ``websocket_max_queued`` messages behind a response that does not
  end: closed 1008.
- Idle past ``websocket_idle_seconds``: closed 1000 "idle"; past
  ``websocket_max_seconds``: ``websocket_connection_limit_reached``, then
  closed.
- SIGTERM while a response streams: it completes, then the socket is closed
  1001 (both access-log lines written) and the gateway exits 0, whether the
  response ends within ``drain_grace_seconds`` or outlasts it (granian drops
  an open socket when its listener closes: the socket holds the stop,
  ``Drain.hold``, until it ends).
- The access log: a line per turn and one ``GET`` 101 line per socket; a
  tenant's ``[[limits]]`` charged per response (a second turn past a rule of
  one request is an error event 429 with ``headers.retry-after``).

Each socket speaks as its own tenant (a key of its own) where a count per
caller could otherwise leak from one test to the next.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect

from tests.lifecycle.test_graceful import wait_exit
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, write_stack

pytestmark = pytest.mark.integration

MODEL = "echo"
HANGS = "echo@hang:1"  # one delta, then silence
KEYS = {
    "sk-ws-main": "main",
    "sk-ws-crowd": "crowd",
    "sk-ws-big": "big",
    "sk-ws-bad": "bad",
    "sk-ws-queue": "queue",
    "sk-ws-log": "logged",
    "sk-ws-limited": "limited",
    "sk-ws-idle": "idle",
    "sk-ws-life": "life",
    "sk-ws-drain": "drain",
}
MAX_MESSAGE = 4096
MAX_QUEUED = 2
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")
WAIT = 20.0  # the longest any one exchange may take before the test fails


class Stack(NamedTuple):
    stub: Server
    main: Server  # ASGI, the bounds below, a JSON access log
    short: Server  # ASGI, idle 0.5 s, life 1 s
    rsgi: Server  # RSGI, one socket per caller
    off: Server  # websocket = false


def config(d: Path, name: str, stub: Server, **edge: Any) -> str:
    return write_stack(
        d / f"{name}.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends={"stub": {"url": stub.url, "read_timeout": 30.0}},
        routes={"*": "stub"},
        edge={"drain_grace_seconds": 0.5, "drain_seconds": 8.0, **edge},
        models={MODEL: "SelfHosted", HANGS: "SelfHosted"},
        keys=KEYS,
        limits=[{"tenant": "limited", "model": "*", "requests_per_minute": 1}],
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("socket-bounds")
    # Its own drain: none to speak of (a response left hanging must not hold its stop).
    stub_cfg = write_stack(
        d / "stub.toml",
        stub={"itl_ms": 100, "drain_grace_seconds": 0, "drain_seconds": 1},
        backends={"x": "http://127.0.0.1:1"},
        routes={"*": "x"},
    )
    stub = spawn("stub", ["--config", stub_cfg], d)
    gateways: list[Server] = []
    try:
        main = config(
            d,
            "main",
            stub,
            log_format="json",
            websocket_max_message_bytes=MAX_MESSAGE,
            websocket_max_queued=MAX_QUEUED,
            websocket_max_per_caller=2,
        )
        short = config(
            d, "short", stub, access_log=False, websocket_idle_seconds=0.5, websocket_max_seconds=1
        )
        rsgi = config(d, "rsgi", stub, access_log=False, websocket_max_per_caller=1)
        off = config(d, "off", stub, access_log=False, websocket=False)
        for cfg, extra in ((main, []), (short, []), (rsgi, ["--interface", "rsgi"]), (off, [])):
            gateways.append(spawn("gateway", ["--config", cfg, *extra], d))
        start_all([stub, *gateways])
        yield Stack(stub, *gateways)
    finally:
        stop_together([stub, *gateways])


def stop_together(servers: list[Server]) -> None:
    """SIGINT to every one at once, then SIGKILL to what is left after one grace."""
    for server in servers:
        server.interrupt()
    deadline = time.monotonic() + 10
    for server in servers:
        server.finish(deadline)


def ws_url(server: Server, path: str = "/v1/responses") -> str:
    return server.url.replace("http://", "ws://") + path


def opened(server: Server, key: str, path: str = "/v1/responses", **headers: str) -> Any:
    return connect(
        ws_url(server, path),
        additional_headers={"Authorization": f"Bearer {key}", **headers},
        open_timeout=WAIT,
    )


def create(text: str = "hi", model: str = MODEL, **fields: Any) -> str:
    return json.dumps({"type": "response.create", "model": model, "input": text, **fields})


async def receive(ws: ClientConnection) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    return event


async def answer(ws: ClientConnection) -> list[dict[str, Any]]:
    """Every event of one response, up to its terminal one."""
    events = [await receive(ws)]
    while events[-1]["type"] not in TERMINAL:
        events.append(await receive(ws))
    return events


async def closed_by_server(ws: ClientConnection) -> tuple[list[dict[str, Any]], Any]:
    """What the server sent before closing, and its close frame."""
    got: list[dict[str, Any]] = []
    with pytest.raises(websockets.ConnectionClosed) as info:
        while True:
            got.append(json.loads(await asyncio.wait_for(ws.recv(), WAIT)))
    return got, info.value.rcvd


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


async def refused(server: Server, key: str, path: str = "/v1/responses") -> Any:
    """The HTTP response an upgrade was refused with."""
    with pytest.raises(websockets.InvalidStatus) as info:
        async with opened(server, key, path):
            pass
    return info.value.response


def error_body(response: Any) -> dict[str, Any]:
    """The refusal's body, OpenAI's ``{"error": {...}}``: its detail."""
    assert response.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = json.loads(response.body)["error"]
    assert set(body) == {"message", "type", "param", "code"}, body
    return body


# -- the upgrade -------------------------------------------------------------------


async def test_a_turn_over_the_socket_completes(stack: Stack) -> None:
    async with opened(stack.main, "sk-ws-main") as ws:
        await ws.send(create("hello there"))
        events = await answer(ws)
    assert events[0]["type"] == "response.created"
    done = events[-1]
    assert done["type"] == "response.completed"
    assert done["response"]["output"][0]["content"][0]["text"] == "hello there"


async def test_a_bad_key_is_401_in_openais_shape(stack: Stack) -> None:
    response = await refused(stack.main, "sk-not-a-key")
    assert response.status_code == 401
    assert error_body(response)["code"] == "invalid_api_key"


async def test_another_path_is_404(stack: Stack) -> None:
    response = await refused(stack.main, "sk-ws-main", "/v1/chat/completions")
    assert response.status_code == 404
    detail = error_body(response)
    assert detail["code"] == "not_found"
    assert "/v1/chat/completions" in detail["message"]


async def test_websocket_false_is_404(stack: Stack) -> None:
    response = await refused(stack.off, "sk-ws-main")
    assert response.status_code == 404
    assert error_body(response)["code"] == "not_found"


async def test_past_the_callers_sockets_is_429_with_retry_after(stack: Stack) -> None:
    async with opened(stack.main, "sk-ws-crowd") as one, opened(stack.main, "sk-ws-crowd") as two:
        response = await refused(stack.main, "sk-ws-crowd")
        assert response.status_code == 429
        assert float(response.headers["Retry-After"]) > 0
        assert error_body(response)["code"] == "too_many_websockets"
        # The two held still serve.
        for ws in (one, two):
            await ws.send(create())
            assert (await answer(ws))[-1]["type"] == "response.completed"
        # Another caller is not counted against this one.
        async with opened(stack.main, "sk-ws-main") as other:
            await other.send(create())
            assert (await answer(other))[-1]["type"] == "response.completed"


async def test_under_rsgi_past_the_callers_sockets_is_429_status_only(stack: Stack) -> None:
    async with opened(stack.rsgi, "sk-ws-crowd") as one:
        response = await refused(stack.rsgi, "sk-ws-crowd")
        assert response.status_code == 429
        await one.send(create())
        assert (await answer(one))[-1]["type"] == "response.completed"


# -- messages ----------------------------------------------------------------------


async def test_a_message_over_the_limit_is_an_error_event_and_the_socket_goes_on(
    stack: Stack,
) -> None:
    async with opened(stack.main, "sk-ws-big") as ws:
        big = create("x " * MAX_MESSAGE)
        assert len(big) > MAX_MESSAGE
        await ws.send(big)
        event = await receive(ws)
        assert event["type"] == "error"
        assert event["status"] == 413
        assert event["error"]["code"] == "body_too_large"
        assert str(MAX_MESSAGE) in event["error"]["message"]
        await ws.send(create("still here"))
        done = (await answer(ws))[-1]
        assert done["type"] == "response.completed"
        assert done["response"]["output"][0]["content"][0]["text"] == "still here"


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        ("this is not json", "invalid_json"),
        ('["response.create"]', "invalid_json"),
        (json.dumps({"type": "response.cancel", "model": MODEL}), "invalid_request"),
        (json.dumps({"model": MODEL, "input": "hi"}), "invalid_request"),
    ],
)
async def test_not_a_create_message_is_an_error_event_naming_type(
    stack: Stack, sent: str, code: str
) -> None:
    async with opened(stack.main, "sk-ws-bad") as ws:
        await ws.send(sent)
        event = await receive(ws)
        assert event["type"] == "error"
        assert event["status"] == 400
        assert event["error"]["code"] == code
        assert "type" in event["error"]["message"]
        if code == "invalid_request":
            assert event["error"]["param"] == "type"
        await ws.send(create())
        assert (await answer(ws))[-1]["type"] == "response.completed"


async def test_http_only_fields_are_error_events_naming_them(stack: Stack) -> None:
    async with opened(stack.main, "sk-ws-bad") as ws:
        for fields, param in (
            ({"stream": False}, "stream"),
            ({"background": True}, "background"),
            ({"stream_id": "s1"}, "stream_id"),
        ):
            await ws.send(create(**fields))
            event = await receive(ws)
            assert (event["type"], event["status"]) == ("error", 400), event
            assert event["error"]["param"] == param
        await ws.send(create(stream=True))  # asks for what a socket does: taken
        assert (await answer(ws))[-1]["type"] == "response.completed"


async def test_more_queued_than_the_bound_closes_1008(stack: Stack) -> None:
    async with opened(stack.main, "sk-ws-queue") as ws:
        # The first never ends; behind it, more than the queue holds.
        for _ in range(MAX_QUEUED + 4):
            await ws.send(create("a b", model=HANGS))
        _, close = await closed_by_server(ws)
    assert close is not None
    assert close.code == 1008
    assert close.reason == f"more than {MAX_QUEUED} queued messages"


# -- the socket's end --------------------------------------------------------------


async def test_an_idle_socket_is_closed_1000_idle(stack: Stack) -> None:
    async with opened(stack.short, "sk-ws-idle") as ws:
        got, close = await closed_by_server(ws)
    assert got == []
    assert close is not None
    assert (close.code, close.reason) == (1000, "idle")


async def test_a_socket_past_its_life_gets_the_limit_event_then_closes(stack: Stack) -> None:
    async with opened(stack.short, "sk-ws-life") as ws:
        # Streams for about 2 s: past the socket's 1 s life, never idle meanwhile.
        await ws.send(create(words(20)))
        events = await answer(ws)
        assert events[-1]["type"] == "response.completed"  # the response in flight finishes
        got, close = await closed_by_server(ws)
    assert len(got) == 1, got
    assert got[0]["type"] == "error"
    assert got[0]["error"]["code"] == "websocket_connection_limit_reached"
    assert close is not None and close.code == 1000


# The response a drain finishes streams for about 1.5 s (15 words); the drain's
# grace (503 ``draining``, then the listener closes) either outlasts it or not:
# either way ``drain_seconds`` (8 s) does.
DRAIN_WORDS = 15


@pytest.mark.parametrize(
    "grace",
    [
        pytest.param(2.5, id="grace-outlasts-the-response"),
        pytest.param(0.5, id="response-outlasts-the-grace"),
    ],
)
def test_a_drain_finishes_the_response_then_closes_1001(
    tmp_path: Path, stack: Stack, grace: float
) -> None:
    cfg = config(tmp_path, "drain", stack.stub, log_format="json", drain_grace_seconds=grace)
    gateway = spawn("gateway", ["--config", cfg], tmp_path)
    try:
        start_all([gateway])
        events, close, code = asyncio.run(drained(gateway))
    finally:
        gateway.stop()
    assert events[0]["type"] == "response.created"
    done = events[-1]
    assert done["type"] == "response.completed", done
    assert done["response"]["output"][0]["content"][0]["text"] == words(DRAIN_WORDS)
    assert close is not None
    assert (close.code, close.reason) == (1001, "draining")
    assert code == 0
    # Both lines written before the exit: the turn's, and the socket's (ended by the drain).
    lines = access_lines(gateway.log, "drain")
    assert [(line["method"], line["status"]) for line in lines] == [("POST", 200), ("GET", 101)]
    assert lines[1]["error"] == "draining"


async def drained(gateway: Server) -> tuple[list[dict[str, Any]], Any, int | None]:
    """A slow response begun, SIGTERM to ``gateway``; what the socket got,
    its close frame, the gateway's exit status."""
    async with opened(gateway, "sk-ws-drain") as ws:
        await ws.send(create(words(DRAIN_WORDS)))
        events = [await receive(ws)]
        os.kill(gateway.proc.pid, signal.SIGTERM)
        while events[-1]["type"] not in TERMINAL:
            events.append(await receive(ws))
        after, close = await closed_by_server(ws)
    assert after == []
    code, _ = await asyncio.to_thread(wait_exit, gateway.proc, WAIT)
    return events, close, code


# -- the gateway's rules -----------------------------------------------------------


def access_lines(log: Path, tenant: str) -> list[dict[str, Any]]:
    lines = []
    for text in log.read_text(errors="replace").splitlines():
        if text.startswith("{"):
            line = json.loads(text)
            if line.get("tenant") == tenant and "status" in line:
                lines.append(line)
    return lines


async def test_the_access_log_has_a_line_per_turn_and_one_per_socket(stack: Stack) -> None:
    async with opened(stack.main, "sk-ws-log", **{"x-request-id": "socket-log-1"}) as ws:
        for text in ("one", "two", "three"):
            await ws.send(create(text))
            assert (await answer(ws))[-1]["type"] == "response.completed"
    # The socket's line is written once it has ended: wait for it.
    deadline = time.monotonic() + WAIT
    lines = access_lines(stack.main.log, "logged")
    while not any(line["method"] == "GET" for line in lines) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        lines = access_lines(stack.main.log, "logged")
    sockets = [line for line in lines if line["method"] == "GET"]
    turns = [line for line in lines if line["method"] == "POST"]
    assert len(sockets) == 1, lines
    assert sockets[0]["status"] == 101
    assert sockets[0]["path"] == "/v1/responses"
    assert sockets[0]["request_id"] == "socket-log-1"
    assert len(turns) == 3, lines
    for line in turns:
        assert line["path"] == "/v1/responses"
        assert line["status"] == 200
        assert line["backend"] == "stub"
    # Each turn has its own request id, not the socket's.
    assert len({line["request_id"] for line in turns} | {"socket-log-1"}) == 4


async def test_a_tenants_limit_is_charged_per_response(stack: Stack) -> None:
    async with opened(stack.main, "sk-ws-limited") as ws:
        await ws.send(create("first"))
        assert (await answer(ws))[-1]["type"] == "response.completed"
        await ws.send(create("second"))
        event = await receive(ws)
        assert event["type"] == "error"
        assert event["status"] == 429
        assert event["error"]["code"] == "tenant_rate_limited"
        assert float(event["headers"]["retry-after"]) > 0
        assert event["headers"]["x-ratelimit-limit-requests"] == "1"
