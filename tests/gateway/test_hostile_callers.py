"""One key holder must not lock out every tenant: bodies that never arrive.

Against real ``flatgate gateway`` and ``flatgate proxy`` processes, attackers
announce large bodies and trickle them (HTTP/1.1), or open many HTTP/2 streams
that send headers only, while another tenant keeps calling. Before the body
timeouts, the per-caller and per-connection shares and the limits charged
before the body, the attack filled ``max_buffered_bytes`` and every other
tenant got 503 ``server_busy`` for as long as the connections stayed open.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import httpx
import pytest

from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.wire.request import build_request
from tests.servers import Server, running
from tests.stacks import write_stack

pytestmark = pytest.mark.integration

KEYS = {"attacker": "key-attacker", "victim": "key-victim", "limited": "key-limited"}
MIB = 1 << 20
PROXY_TOKEN = "proxy-caller-token"
# Small bounds, so that a few connections are an attack.
INTAKE = {
    "max_body_bytes": MIB,
    "max_buffered_bytes": 8 * MIB,
    "max_buffered_bytes_per_caller": 2 * MIB,
    "max_buffered_bytes_per_connection": 2 * MIB,
    "body_idle_timeout": 1.5,
    "body_timeout": 5.0,
}


@dataclass
class Stack:
    gateway: Server
    proxy: Server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("hostile")
    logged = {"access_log": True, "log_format": "json"}
    with running("stub", [], d) as fbs:
        cfg = write_stack(
            d / "g.toml",
            proxy={**logged, "auth_token_sha256": hash_key(PROXY_TOKEN), **INTAKE},
            backends={"fbs": fbs.url},
            routes={"echo": "fbs"},
            edge={**logged, **INTAKE},
            models={"echo": "SelfHosted"},
            keys={key: tenant for tenant, key in KEYS.items()},
            limits=[
                {"tenant": "limited", "model": "*", "requests_per_minute": 3, "max_concurrent": 1}
            ],
        )
        with (
            running("gateway", ["--config", cfg], d) as gateway,
            running("proxy", ["--config", cfg], d) as proxy,
        ):
            yield Stack(gateway, proxy)


def chat(body: str = "hi") -> bytes:
    return json.dumps({"model": "echo", "messages": [{"role": "user", "content": body}]}).encode()


def victim_ok(stack: Stack, n: int = 5) -> list[int]:
    """The victim tenant's statuses for ``n`` requests made now."""
    with httpx.Client(base_url=stack.gateway.url, timeout=10) as c:
        return [
            c.post(
                "/v1/chat/completions",
                content=chat(),
                headers={
                    "authorization": f"Bearer {KEYS['victim']}",
                    "content-type": "application/json",
                },
            ).status_code
            for _ in range(n)
        ]


class Trickle:
    """``n`` HTTP/1.1 connections that announce ``length`` bytes of body and
    send one byte every ``every`` seconds until the server answers."""

    def __init__(self, port: int, head: bytes, n: int, every: float) -> None:
        self.socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(head)
            s.setblocking(False)
            self.socks.append(s)
        self.answers: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every: float) -> None:
        sent = time.monotonic()
        while not self._stop.wait(0.1):
            due = time.monotonic() - sent >= every
            if due:
                sent = time.monotonic()
            for i, s in enumerate(self.socks):
                if i in self.answers:
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    data = None
                except OSError:
                    data = b""
                if data is not None:
                    self.answers[i] = data
                    continue
                if due:
                    try:
                        s.send(b"x")
                    except OSError:
                        self.answers[i] = b""

    def statuses(self) -> list[int]:
        return [int(a.split(b" ", 2)[1]) for a in self.answers.values() if a]

    def wait_all(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while len(self.answers) < len(self.socks) and time.monotonic() < deadline:
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self.socks:
            s.close()


def head(
    path: str, authorization: str | None, length: int, ctype: str = "application/json"
) -> bytes:
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        f"Content-Type: {ctype}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_trickled_bodies_of_one_tenant_do_not_lock_out_another(stack: Stack) -> None:
    # 16 connections x 1 MiB announced: twice the worker's 8 MiB budget.
    attack = Trickle(
        stack.gateway.port,
        head("/v1/chat/completions", f"Bearer {KEYS['attacker']}", MIB),
        16,
        every=0.5,
    )
    try:
        time.sleep(0.5)
        assert victim_ok(stack) == [200] * 5
        attack.wait_all(15)
        statuses = attack.statuses()
        # Past its 2 MiB share the attacker is told to wait; what it got in
        # is cut off by the whole body's timeout, whatever it trickles.
        assert statuses.count(429) == 14
        assert statuses.count(408) == 2
        assert len(statuses) == 16
    finally:
        attack.close()
    answer = attack.answers[min(i for i, a in attack.answers.items() if b" 429 " in a[:16])]
    assert b"caller_busy" in answer and b"retry-after: 1" in answer.lower()
    assert victim_ok(stack, 1) == [200]


def test_a_body_that_stops_arriving_is_a_408(stack: Stack) -> None:
    attack = Trickle(
        stack.gateway.port,
        head("/v1/chat/completions", f"Bearer {KEYS['attacker']}", 100) + b"{",
        1,
        every=30,  # never within the test: the idle timeout ends it
    )
    try:
        attack.wait_all(10)
    finally:
        attack.close()
    answer = attack.answers[0]
    assert answer.startswith(b"HTTP/1.1 408 ")
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "body_timeout"
    assert "no byte of the request body within 1.5 s" in body["error"]["message"]


def h2_streams(port: int, n: int, headers: list[tuple[str, str]], seconds: float) -> list[int]:
    """Open ``n`` HTTP/2 streams on one connection with ``headers`` and no
    body; the statuses they are answered with within ``seconds``."""
    sock = socket.create_connection(("127.0.0.1", port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    ids = []
    for _ in range(n):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers, end_stream=False)
        ids.append(sid)
    sock.sendall(conn.data_to_send())
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    sock.settimeout(0.5)
    try:
        while len(statuses) < n and time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    statuses[event.stream_id] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    return [statuses[i] for i in ids if i in statuses]


def test_headers_only_http2_streams_do_not_lock_out_another_tenant(stack: Stack) -> None:
    headers = [
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":scheme", "http"),
        (":authority", "127.0.0.1"),
        ("authorization", f"Bearer {KEYS['attacker']}"),
        ("content-type", "application/json"),
        ("content-length", str(MIB)),
    ]
    got: list[int] = []
    attacker = threading.Thread(
        target=lambda: got.extend(h2_streams(stack.gateway.port, 40, headers, 15))
    )
    attacker.start()
    try:
        time.sleep(0.5)
        assert victim_ok(stack) == [200] * 5
    finally:
        attacker.join(20)
    # One connection holds at most its 2 MiB share; the rest wait, and what
    # got in times out without a body byte.
    assert sorted(got) == [408] * 2 + [429] * 38


def test_a_limited_tenants_stream_slot_is_charged_before_its_body(stack: Stack) -> None:
    limited = f"Bearer {KEYS['limited']}"
    first = Trickle(stack.gateway.port, head("/v1/chat/completions", limited, 200), 1, every=30)
    try:
        time.sleep(0.5)
        with httpx.Client(base_url=stack.gateway.url, timeout=10) as c:
            second = c.post(
                "/v1/chat/completions",
                content=chat(),
                headers={"authorization": limited, "content-type": "application/json"},
            )
            # max_concurrent = 1: the first holds the slot with no body at all.
            assert second.status_code == 429
            assert second.json()["error"]["code"] == "tenant_rate_limited"
            assert "max_concurrent" in second.json()["error"]["message"]
            first.wait_all(10)
            assert first.statuses() == [408]
            # Its body failed: its slot came back, its request charge stayed.
            # Of 3 a minute, the trickle took one (a refusal takes none).
            after = [
                c.post(
                    "/v1/chat/completions",
                    content=chat(),
                    headers={"authorization": limited, "content-type": "application/json"},
                )
                for _ in range(3)
            ]
            assert [r.status_code for r in after] == [200, 200, 429]
            assert "requests_per_minute" in after[2].json()["error"]["message"]
    finally:
        first.close()


def fbs_ok(stack: Stack, n: int = 5) -> list[int]:
    body = build_request("echo", [("user", "hi")], request_id="victim")
    with httpx.Client(base_url=stack.proxy.url, timeout=10) as c:
        return [
            c.post(
                "/v1/completions",
                content=body,
                headers={
                    "authorization": f"Bearer {PROXY_TOKEN}",
                    "content-type": "application/x-flatbuffers",
                },
            ).status_code
            for _ in range(n)
        ]


def test_the_proxy_is_not_locked_out_by_anonymous_trickles(stack: Stack) -> None:
    attack = Trickle(
        stack.proxy.port,
        head("/v1/completions", None, MIB, "application/x-flatbuffers"),
        16,
        every=0.5,
    )
    try:
        time.sleep(0.5)
        # The token's holder is not held to the anonymous address's share.
        assert fbs_ok(stack) == [200] * 5
        attack.wait_all(15)
        statuses = attack.statuses()
        assert statuses.count(429) == 14 and statuses.count(408) == 2
    finally:
        attack.close()


def test_a_wrong_proxy_token_setting_a_tenant_is_a_401(stack: Stack) -> None:
    body = build_request("echo", [("user", "hi")], tenant="acme")
    r = httpx.post(
        f"{stack.proxy.url}/v1/completions",
        content=body,
        headers={"authorization": "Bearer wrong", "content-type": "application/x-flatbuffers"},
    )
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


def raw(port: int, data: bytes, seconds: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(seconds)
        with contextlib.suppress(OSError):  # the server may answer before it is all sent
            s.sendall(data)
        out = b""
        try:
            while b"\r\n\r\n" not in out or not out.endswith(b"}"):
                piece = s.recv(65536)
                if not piece:
                    break
                out += piece
        except TimeoutError:
            pass
        return out


CHUNKED = (
    f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    f"Authorization: Bearer {KEYS['victim']}\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n"
).encode()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"3\r\nabcdef\r\n0\r\n\r\n", id="chunk-longer-than-its-size"),
        pytest.param(b"3\r\nabc0\r\n\r\n", id="no-crlf-after-data"),
        pytest.param(
            b"3\r\nabc\r\n0\r\n" + b"".join(b"X-T%d: v\r\n" % i for i in range(5000)) + b"\r\n",
            id="5000-trailers",
        ),
        pytest.param(b"1\r\n{\r\n" * 200_000 + b"0\r\n\r\n", id="200000-one-byte-chunks"),
    ],
)
def test_malformed_chunked_bodies_get_a_400_in_the_callers_shape(stack: Stack, body: bytes) -> None:
    answer = raw(stack.gateway.port, CHUNKED + body)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "malformed_body"
    assert error["type"] == "invalid_request_error"
    # The access log says what the caller was told.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        logged = [
            json.loads(line)
            for line in Path(stack.gateway.log).read_text().splitlines()
            if line.startswith("{") and '"malformed_body"' in line
        ]
        if logged:
            break
        time.sleep(0.2)
    assert logged and all(e["status"] == 400 for e in logged)
    assert "Traceback" not in Path(stack.gateway.log).read_text()
