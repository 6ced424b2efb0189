"""The edge under hardening, through real servers on loopback (stub -> proxy ->
edge, each a ``flatgate`` subprocess started by the CLI), in front of the echo
stack (a stub answering at once): HTTPS on the public edge, a slow reader
holding the backend back, the ``/metrics`` token and the access log.

A client leaving before the first token and admission control need a slow
stub: they are ``test_edge_hardening_in_flight``. The stacks' config and the
client's helpers are ``hardening_stack``.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from flatgate.edge_translator.keys import hash_key
from tests.edge.hardening_stack import (
    COMPLETIONS,
    MODEL,
    Ports,
    sse_events,
    stack_toml,
    streamed_text,
    stub_stats,
    user,
    wait_for,
)
from tests.servers import Server, free_port, spawn, tree_rss
from tests.stacks import start_all, stop_all

pytestmark = pytest.mark.integration

KEY = "sk-edge-hardening-acme-5f1c"  # an edge API key of tenant "acme"
WRONG_KEY = "sk-edge-hardening-wrong-9d2e"
METRICS_TOKEN = "edge-metrics-token-0123456789"
# Distinctive words, so that finding them in a log is finding the prompt.
SECRET_PROMPT = "quokka-7731 zebra-4410 marmot-0095 heron-3321"
LOG_FIELDS = {
    "ts",
    "service",
    "api",
    "method",
    "path",
    "request_id",
    "tenant",
    "model",
    "provider",
    "backend",
    "status",
    "bytes_in",
    "bytes_out",
    "ttfb_ms",
    "duration_ms",
    "completion_tokens",
    "error",
}
# The slow-reader completion: N words of 16 KiB, 64 MiB of deltas.
BIG_WORDS = 4000
BIG_BODY_LIMIT = 80_000_000


# -- the echo stack: a stub answering at once ---------------------------------


@dataclass
class Echo:
    stub: Server
    proxy: Server
    edge: Server
    ports: Ports
    dir: Path


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Echo]:
    """Stub, proxy and a plain (ASGI) edge, their body limits raised for the
    slow reader's 64 MiB prompt."""
    d = tmp_path_factory.mktemp("edge-hardening")
    ports = Ports(free_port(), free_port(), free_port())
    config = d / "echo.toml"
    config.write_text(
        stack_toml(
            ports,
            proxy={"max_body_bytes": BIG_BODY_LIMIT},
            edge={"max_body_bytes": BIG_BODY_LIMIT, "interface": "asgi"},
        )
    )
    args = ["--config", str(config)]
    servers = [
        spawn("stub", args, d, port=ports.stub),
        spawn("proxy", args, d, port=ports.proxy),
        spawn("edge", args, d, port=ports.edge),
    ]
    start_all(servers)
    try:
        stub, proxy, edge = servers
        yield Echo(stub, proxy, edge, ports, d)
    finally:
        stop_all(servers)


# -- 1. TLS on the public edge ----------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "edge-cert.pem", directory / "edge-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@dataclass
class TLSEdge:
    server: Server
    cert: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.port}"

    def trust(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


def wait_https(server: Server, trust: ssl.SSLContext, seconds: float = 30.0) -> None:
    """``Server.wait_healthy``, over https (it polls over http)."""
    deadline = time.monotonic() + seconds
    url = f"https://127.0.0.1:{server.port}/healthz"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"edge exited early:\n{server.log.read_text()[-3000:]}")
        try:
            if httpx.get(url, verify=trust, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"edge not healthy over https:\n{server.log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def tls_edge(echo: Echo) -> Iterator[TLSEdge]:
    cert, key = self_signed(echo.dir)
    port = free_port()
    config = echo.dir / "tls.toml"
    config.write_text(
        stack_toml(
            Ports(echo.ports.stub, echo.ports.proxy, port),
            edge={"tls_cert_file": str(cert), "tls_key_file": str(key)},
        )
    )
    server = spawn("edge", ["--config", str(config)], echo.dir, port=port)
    edge = TLSEdge(server, cert)
    start_all([server], lambda s: wait_https(s, edge.trust()))
    try:
        yield edge
    finally:
        server.stop()


def test_tls_edge_serves_the_sdk_with_its_certificate_trusted(tls_edge: TLSEdge) -> None:
    http = httpx2.Client(verify=tls_edge.trust(), timeout=30)
    client = openai.OpenAI(
        base_url=f"{tls_edge.url}/v1", api_key="unused", max_retries=0, http_client=http
    )
    try:
        done = client.chat.completions.create(model=MODEL, messages=user("over tls at last"))
        assert done.choices[0].message.content == "over tls at last"
        assert done.choices[0].finish_reason == "stop"
        stream = client.chat.completions.create(
            model=MODEL, messages=user("streamed over tls"), stream=True
        )
        chunks = list(stream)
        deltas = [c.choices[0].delta.content for c in chunks if c.choices]
        assert [d for d in deltas if d] == ["streamed ", "over ", "tls"]
        assert chunks[-1].choices[0].finish_reason == "stop"
    finally:
        client.close()
        http.close()


def test_tls_edge_is_refused_without_its_certificate_trusted(tls_edge: TLSEdge) -> None:
    http = httpx2.Client(timeout=10)  # the system's trust store only
    client = openai.OpenAI(
        base_url=f"{tls_edge.url}/v1", api_key="unused", max_retries=0, http_client=http
    )
    try:
        with pytest.raises(openai.APIConnectionError) as info:
            client.chat.completions.create(model=MODEL, messages=user("hello"))
    finally:
        client.close()
        http.close()
    causes = []
    exc: BaseException | None = info.value
    while exc is not None:
        causes.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert any(isinstance(c, ssl.SSLCertVerificationError) for c in causes), causes
    assert any("certificate verify failed" in str(c).lower() for c in causes), causes


def test_plain_http_to_the_tls_port_gets_no_answer(tls_edge: TLSEdge) -> None:
    url = f"http://127.0.0.1:{tls_edge.server.port}"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/healthz", timeout=5)
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{url}{COMPLETIONS}", json={"model": MODEL, "messages": user("x")}, timeout=5)
    # On the wire: no HTTP response, whatever comes back before the close.
    with socket.create_connection(("127.0.0.1", tls_edge.server.port), timeout=5) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        reply = b""
        while piece := conn.recv(4096):
            reply += piece
    assert not reply.startswith(b"HTTP/"), reply[:200]


# -- 2. A slow reader through the edge --------------------------------------


@dataclass
class SlowRead:
    """What one slow reader saw: the stub's frames sent while it paused, the
    edge's RSS (process tree) before the request, at the first SSE bytes and
    after the pause, and the text it got in the end."""

    words: str
    sent: int
    rss_before: int
    rss_first: int
    rss_paused: int
    events: list[str]


@pytest.fixture(scope="module")
def slow_read(echo: Echo) -> SlowRead:
    """One client streaming a 64 MiB completion from the (ASGI) edge: it reads
    the first bytes, pauses 1.5 s, then reads the rest."""
    words = " ".join(f"{i:06d}" + "x" * 16384 for i in range(BIG_WORDS))
    body = json.dumps({"model": MODEL, "stream": True, "messages": user(words)}).encode()
    frames_before = stub_stats(echo.stub)["frames"]
    edge_pid = echo.edge.proc.pid
    rss_before = tree_rss(edge_pid)
    with httpx.stream(
        "POST",
        f"{echo.edge.url}{COMPLETIONS}",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    ) as r:
        del body
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        pieces = r.iter_raw()
        got = [next(pieces)]
        rss_first = tree_rss(edge_pid)
        time.sleep(1.5)  # the client pauses
        sent = stub_stats(echo.stub)["frames"] - frames_before
        rss_paused = tree_rss(edge_pid)
        got += list(pieces)
    return SlowRead(words, sent, rss_before, rss_first, rss_paused, sse_events(b"".join(got)))


def test_slow_reader_holds_back_the_backend_through_the_edge(slow_read: SlowRead) -> None:
    """ASGI edge: a client that stops reading the SSE stops the edge reading
    from the proxy, and the proxy from the stub; the edge does not buffer the
    completion meanwhile; the whole text arrives once the client reads on."""
    # Socket buffers (loopback receive buffers autotune up to tcp_rmem's
    # maximum) and granian's channels hold some tens of MiB; not 64.
    assert slow_read.sent < BIG_WORDS * 3 // 4, (
        f"the stub was not held back: {slow_read.sent} of {BIG_WORDS} frames sent"
    )
    grown = slow_read.rss_paused - slow_read.rss_first
    assert grown < len(slow_read.words) // 4, (
        f"the edge grew by {grown >> 20} MiB while its client paused"
    )
    assert streamed_text(slow_read.events) == slow_read.words
    assert json.loads(slow_read.events[-2])["choices"][0]["finish_reason"] == "stop"


def test_slow_reader_costs_the_edge_far_less_than_the_completion(slow_read: SlowRead) -> None:
    """While its client is paused the edge holds far less than the completion,
    counted from before the request (the echo's prompt is as big as its
    completion: what the edge keeps of the request counts too)."""
    held = slow_read.rss_paused - slow_read.rss_before
    assert held < len(slow_read.words) // 4, (
        f"the edge holds {held >> 20} MiB more than before the request while its client "
        f"is paused (the completion is {len(slow_read.words) >> 20} MiB)"
    )


# -- the logged edge: keys, a /metrics token, a JSON access log -----------------


@pytest.fixture(scope="module")
def logged_edge(echo: Echo) -> Iterator[Server]:
    port = free_port()
    config = echo.dir / "logged.toml"
    config.write_text(
        stack_toml(
            Ports(echo.ports.stub, echo.ports.proxy, port),
            access_log=True,
            edge={"log_format": "json", "metrics_token_sha256": hash_key(METRICS_TOKEN)},
            keys={KEY: "acme"},
        )
    )
    server = spawn("edge", ["--config", str(config)], echo.dir, port=port)
    start_all([server])
    try:
        yield server
    finally:
        server.stop()


# -- 5. The edge's /metrics token ------------------------------------------------


def test_edge_metrics_need_the_token(logged_edge: Server) -> None:
    url = f"{logged_edge.url}/metrics"
    r = httpx.get(url)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"
    wrong = httpx.get(url, headers={"authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
    # An API key of the edge is not the metrics token.
    assert httpx.get(url, headers={"authorization": f"Bearer {KEY}"}).status_code == 401
    r = httpx.get(url, headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    assert r.status_code == 200
    assert "flatgate_edge_in_flight" in r.text


# -- 6. The edge's access log ----------------------------------------------------


@dataclass
class Logged:
    """Four completion requests to the logged edge and the lines they left:
    one answered whole, one streamed, one with a wrong key, one for a model the
    edge does not serve, each with its own ``x-request-id``."""

    whole_body: bytes
    whole: bytes
    stream_body: bytes
    streamed: bytes
    unknown_body: bytes
    lines: list[dict[str, Any]]
    text: str


@pytest.fixture(scope="module")
def logged(logged_edge: Server) -> Logged:
    start = logged_edge.log.stat().st_size
    url = f"{logged_edge.url}{COMPLETIONS}"
    auth = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}

    whole_body = json.dumps({"model": MODEL, "messages": user(SECRET_PROMPT)}).encode()
    whole = httpx.post(url, content=whole_body, headers={**auth, "x-request-id": "edge-log-1"})
    assert whole.status_code == 200
    assert whole.json()["choices"][0]["message"]["content"] == SECRET_PROMPT

    stream_body = json.dumps(
        {"model": MODEL, "stream": True, "messages": user(SECRET_PROMPT)}
    ).encode()
    with httpx.stream(
        "POST", url, content=stream_body, headers={**auth, "x-request-id": "edge-log-2"}
    ) as r:
        assert r.status_code == 200
        streamed = b"".join(r.iter_raw())
    assert streamed_text(sse_events(streamed)) == SECRET_PROMPT

    denied = httpx.post(
        url,
        content=whole_body,
        headers={**auth, "authorization": f"Bearer {WRONG_KEY}", "x-request-id": "edge-log-3"},
    )
    assert denied.status_code == 401
    unknown_body = json.dumps({"model": "gpt-nope", "messages": user(SECRET_PROMPT)}).encode()
    unknown = httpx.post(url, content=unknown_body, headers={**auth, "x-request-id": "edge-log-4"})
    assert unknown.status_code == 404

    def lines() -> list[dict[str, Any]]:
        with open(logged_edge.log, "rb") as f:
            f.seek(start)
            text = f.read().decode()
        return [json.loads(line) for line in text.splitlines() if line.startswith('{"ts"')]

    assert wait_for(lambda: len(lines()) >= 4), logged_edge.log.read_text()[-3000:]
    time.sleep(0.6)  # a flush interval more: a second line for any of them would be out
    return Logged(
        whole_body,
        whole.content,
        stream_body,
        streamed,
        unknown_body,
        lines(),
        logged_edge.log.read_text(),
    )


def test_edge_access_log_has_one_json_line_per_completion(logged: Logged) -> None:
    assert len(logged.lines) == 4, logged.lines
    for line in logged.lines:
        assert set(line) == LOG_FIELDS, line
        assert line["service"] == "edge" and line["method"] == "POST"
        assert isinstance(line["duration_ms"], float | int) and line["duration_ms"] >= 0
    ok, ok_stream, bad_key, no_model = logged.lines

    assert ok["request_id"] == "edge-log-1" and ok["status"] == 200 and ok["error"] is None
    assert ok["tenant"] == "acme" and ok["model"] == MODEL
    assert ok["bytes_in"] == len(logged.whole_body) and ok["bytes_out"] == len(logged.whole)
    assert ok["completion_tokens"] == len(SECRET_PROMPT.split())
    assert isinstance(ok["ttfb_ms"], float | int) and 0 <= ok["ttfb_ms"] <= ok["duration_ms"]

    assert ok_stream["request_id"] == "edge-log-2" and ok_stream["status"] == 200
    assert ok_stream["tenant"] == "acme" and ok_stream["model"] == MODEL
    assert ok_stream["error"] is None
    assert ok_stream["bytes_in"] == len(logged.stream_body)
    assert ok_stream["bytes_out"] == len(logged.streamed)
    assert ok_stream["completion_tokens"] == len(SECRET_PROMPT.split())
    assert isinstance(ok_stream["ttfb_ms"], float | int)
    assert 0 <= ok_stream["ttfb_ms"] <= ok_stream["duration_ms"]

    assert bad_key["status"] == 401 and bad_key["error"] == "invalid_api_key"
    assert bad_key["tenant"] is None and bad_key["completion_tokens"] is None

    assert no_model["status"] == 404 and no_model["error"] == "model_not_found"
    assert no_model["tenant"] == "acme" and no_model["model"] == "gpt-nope"
    assert no_model["bytes_in"] == len(logged.unknown_body)


def test_edge_log_never_carries_the_prompt_or_a_key(logged: Logged) -> None:
    for secret in (KEY, WRONG_KEY, *SECRET_PROMPT.split()):
        assert secret not in logged.text, f"{secret!r} is in the edge's log"


def test_edge_log_lines_of_refused_requests_carry_the_callers_request_id(
    logged: Logged,
) -> None:
    _, _, bad_key, no_model = logged.lines
    assert bad_key["request_id"] == "edge-log-3"
    assert no_model["request_id"] == "edge-log-4"
