"""What the proxy's own code costs a request, in process, in five tables.

Run: ``.venv/bin/python -m benchmarks.cost_checks [--requests N] [--rounds R]
[--calls C] [--only TABLE]``

Every table drives ``ProxyServer.completions`` with ``benchmarks.inmemory``'s
exchange and transport (a one-frame answer at once); the fastest of
interleaved rounds is reported, so machine noise hits all rows alike.

- requests: CPU per request with the checks off ("all off": no-ops, here
  only), on (admission, the model-name cap, the ``x-request-id`` check, the
  caller watch's timer), and with the access log (to ``/dev/null``, batched),
  the caller's authentication, or OpenTelemetry's traces (a server span and
  an attempt's, exported by the SDK's batch processor from its thread,
  encoded as OTLP/HTTP protobuf and not sent: every thread's CPU counts),
  in a running event loop;
- allocations: every allocation of one request at 1 KB, 16 KB and 1 MB
  (``benchmarks.allocs``, memray; the request driven by hand, no loop),
  measured first, while the process is alone. The claim: the count does not
  grow with the prompt, as the body is read in place and forwarded as is;
- buffers: ``verify_request`` (bounded by ``max_body_bytes``) and
  ``reservation`` (the token estimate) by prompt size, both flat in bytes;
- intake: each step before the body is used: the body read with and without
  its timeouts, admission with and without the caller's and connection's
  shares, the edge's limits charged before the body; and the checks of
  hostile callers' third round: the strict Content-Length, a chain charged
  to the caller's share, a random response id, a stored response put within
  its tenant's share;
- sigv4: what signing a Bedrock request costs (issue 39), on a line of its
  own: a 2 KB Converse request signed by ``backends.bedrock.auth.sign``
  (awscrt, AWS's C signer: what the ``bedrock`` backend does per request)
  and, beside it, by botocore's ``SigV4Auth`` over an ``AWSRequest`` (what a
  boto3 client does, and what the issue quotes), each with a fresh request
  per call as a backend has, the body's SHA-256 included;
- google-token: what Google's access token costs a ``vertex`` backend
  (issue 40), reported apart (``benchmarks.google_token``): the held token
  read per request, and one fetch through google-auth (a service account's
  key made for the bench, its JWT assertion signed, a token endpoint on
  loopback), with its signature and its exchange alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import flatgate.proxy.service.app as app_module
from benchmarks.allocs import count_allocations
from benchmarks.google_token import google_token_checks, google_token_report
from benchmarks.harness.report import md_table
from benchmarks.inmemory import CONFIG, FakeExchange, FakeTransport, make_server, one_request
from benchmarks.payloads import make_request, to_flatbuffer
from flatgate.edge_translator.ids import new_id
from flatgate.edge_translator.settings import parse_edge_settings
from flatgate.edge_translator.tenancy import Tenancy
from flatgate.proxy.backends.bedrock.auth import SERVICE, sign
from flatgate.proxy.limits import MemoryStore
from flatgate.proxy.plumbing.accesslog import AccessLog
from flatgate.proxy.plumbing.admission import Admission, Hold
from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.plumbing.body import BodyPolicy
from flatgate.proxy.plumbing.otlp import encode_spans
from flatgate.proxy.plumbing.serve import AsgiExchange
from flatgate.proxy.plumbing.telemetry import TelemetrySection, Tracing
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import ProxySection, parse_config
from flatgate.proxy.transport.aws import AwsCredentials
from flatgate.proxy.wire.digits import read_decimal
from flatgate.proxy.wire.request.estimate import reservation
from flatgate.proxy.wire.request.verify import verify_request

__all__ = [
    "ALLOC_SIZES",
    "BUFFER_SIZES",
    "TABLES",
    "VARIANTS",
    "Variant",
    "alloc_report",
    "allocations",
    "buffer_checks",
    "buffer_report",
    "intake_checks",
    "intake_report",
    "main",
    "measure",
    "report",
    "sigv4_body",
    "sigv4_checks",
    "sigv4_report",
]

TOKEN = "bench-token"


class _NoAdmission:
    max_in_flight = max_bytes = in_flight = held = refused = 0

    def admit(self, nbytes: int, caller: str | None = None, connection: str = "") -> Hold:
        return Hold(0, caller, connection)

    def drop_body(self, hold: Hold) -> None:
        return None

    def done(self, hold: Hold) -> None:
        return None


class _NoWatch:
    def __init__(self, disconnected: Any) -> None:
        return None

    def start(self) -> None:
        return None

    def start_later(self, delay: float) -> None:
        return None

    def caught(self) -> bool:
        return False

    def stop(self) -> None:
        return None


class Variant:
    """One configuration: proxy settings, request headers, checks on or off."""

    def __init__(
        self,
        name: str,
        proxy: dict[str, Any],
        *,
        checks: bool = True,
        headers: dict[str, str] | None = None,
        sample: float | None = None,
    ) -> None:
        """``sample``: OpenTelemetry on at this ratio (None: off)."""
        self.name = name
        self.proxy = proxy
        self.checks = checks
        self.headers = headers or {}
        self.sample = sample


VARIANTS = [
    Variant("all off", {"access_log": False}, checks=False),
    Variant("checks on", {"access_log": False}),
    Variant("checks + access log (text)", {"access_log": True, "log_format": "text"}),
    Variant("checks + access log (json)", {"access_log": True, "log_format": "json"}),
    Variant(
        "checks + authentication",
        {"access_log": False, "auth_token_sha256": hash_key(TOKEN)},
        headers={"authorization": f"Bearer {TOKEN}"},
    ),
    Variant("checks + tracing (sample_ratio 1.0)", {"access_log": False}, sample=1.0),
    Variant(
        "checks + tracing (1.0, the caller's traceparent)",
        {"access_log": False},
        sample=1.0,
        headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    ),
    Variant("checks + tracing (sample_ratio 0.0)", {"access_log": False}, sample=0.0),
]


class _EncodeOnly(SpanExporter):
    """Encodes each batch as ``OtlpExporter`` does (``plumbing.otlp``), and
    sends nothing: the export's CPU without a collector's."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encode_spans(spans)
        return SpanExportResult.SUCCESS


def _server(v: Variant, devnull: int) -> ProxyServer:
    server = ProxyServer(parse_config({**CONFIG, "proxy": v.proxy}), worker="bench")
    server._transport = FakeTransport()
    if v.proxy.get("access_log"):
        fmt = v.proxy.get("log_format", "text")
        server.access = AccessLog("proxy", fmt, write=_writer(devnull))
    if not v.checks:
        server.admission = _NoAdmission()  # type: ignore[assignment]
        server.max_model = 1 << 30
    if v.sample is not None:
        section = TelemetrySection(enabled=True, sample_ratio=v.sample)
        tracing = Tracing(section, "flatgate-bench", exporter=_EncodeOnly())
        server.tracing = server.dispatcher.tracing = tracing
    return server


def _writer(fd: int) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        os.write(fd, data)

    return write


async def _round(server: ProxyServer, body: bytes, v: Variant, n: int) -> float:
    """Seconds of CPU per request over ``n`` requests."""
    watch = getattr(app_module, "CallerWatch")  # noqa: B009
    if not v.checks:
        setattr(app_module, "CallerWatch", _NoWatch)  # noqa: B010
    try:
        exchanges = []
        for _ in range(n):
            ex = FakeExchange(body)
            ex._headers.update(v.headers)
            if not v.checks:
                del ex._headers["x-request-id"]
            exchanges.append(ex)
        start = time.process_time()
        for ex in exchanges:
            await server.completions(ex)
        if server.tracing is not None:
            # Its spans exported within the round: their CPU is this row's,
            # and no export thread runs during another row's.
            server.tracing.processor.force_flush()
        spent = time.process_time() - start
        assert all(ex.status == 200 for ex in exchanges)
        return spent / n
    finally:
        setattr(app_module, "CallerWatch", watch)  # noqa: B010


async def measure(requests: int, rounds: int) -> dict[str, float]:
    """Fastest round's CPU µs per request, per variant."""
    body = to_flatbuffer(make_request(1 << 10, seed=7))
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        servers = [(v, _server(v, devnull)) for v in VARIANTS]
        for v, server in servers:  # warm caches, pools and metric children
            await _round(server, body, v, 200)
        best = {v.name: float("inf") for v in VARIANTS}
        for _ in range(rounds):
            for v, server in servers:
                best[v.name] = min(best[v.name], await _round(server, body, v, requests))
        for _, server in servers:
            server.access.flush()
    finally:
        os.close(devnull)
    return {name: seconds * 1e6 for name, seconds in best.items()}


BUFFER_SIZES = {"1 KB": 1 << 10, "16 KB": 16 << 10, "128 KB": 128 << 10}


def buffer_checks(requests: int, rounds: int) -> dict[str, dict[str, float]]:
    """Fastest round's CPU µs per request of each buffer check, per prompt size."""
    max_body = ProxySection().max_body_bytes
    checks: dict[str, Callable[[bytes], object]] = {
        "verify_request (max_bytes = max_body_bytes)": lambda b: verify_request(
            b, max_bytes=max_body
        ),
        "reservation (token estimate)": lambda b: reservation(b, 1024),
    }
    out: dict[str, dict[str, float]] = {name: {} for name in checks}
    for label, size in BUFFER_SIZES.items():
        body = to_flatbuffer(make_request(size, seed=7))
        for name, check in checks.items():
            best = float("inf")
            for _ in range(rounds):
                start = time.process_time()
                for _ in range(requests):
                    check(body)
                best = min(best, (time.process_time() - start) / requests)
            out[name][label] = best * 1e6
    return out


def buffer_report(results: dict[str, dict[str, float]]) -> str:
    head = ["check", *(f"CPU µs/request, {s}" for s in BUFFER_SIZES)]
    rows = [[name, *(f"{us:.2f}" for us in by.values())] for name, by in results.items()]
    return "\n".join(md_table(head, rows))


async def intake_checks(calls: int, rounds: int) -> dict[str, float]:
    """Fastest round's CPU µs per call of each step a request takes before its
    body is used (issue 18's checks), with the step it adds to."""
    max_body = ProxySection().max_body_bytes
    message = {"type": "http.request", "body": b"{}", "more_body": False}

    async def receive() -> dict[str, Any]:
        return message

    async def send(_: Any) -> None:
        return None

    scope = {"method": "POST", "path": "/", "headers": [], "client": ("127.0.0.1", 5000)}
    untimed = BodyPolicy(max_body)
    timed = BodyPolicy(max_body, idle_timeout=15.0, timeout=60.0)
    admission = Admission(10_000, 256 << 20, caller_bytes=64 << 20, connection_bytes=16 << 20)
    edge = parse_edge_settings(
        {
            "models": [{"name": "echo", "provider": "SelfHosted"}],
            "limits": [{"tenant": "*", "model": "*", "requests_per_minute": 10**9}],
        },
        environ={},
    )
    tenancy = Tenancy(edge)

    async def body(p: BodyPolicy) -> None:
        await AsgiExchange(scope, receive, send).body(p)

    async def admit(caller: str | None, connection: str) -> None:
        hold = admission.admit(1 << 10, caller, connection)
        assert isinstance(hold, Hold)
        admission.done(hold)

    async def early() -> None:
        tenancy.release_caller(await tenancy.admit_caller("acme"))

    # Issue 34's checks: a Content-Length read strictly, a chain's charge
    # (a hold grown within the shares), a random response id, a stored
    # response's half put within its tenant's share of a memory store.
    async def length() -> None:
        read_decimal("1048576")

    async def charge() -> None:
        hold = admission.admit(1 << 10, "acme", "127.0.0.1:5000")
        assert isinstance(hold, Hold)
        assert admission.grow(hold, 900 << 10) is None
        admission.done(hold)

    async def response_id() -> None:
        new_id("resp_")

    store = MemoryStore()
    blob = b"x" * 1024
    ids = iter(range(1 << 62))

    async def put() -> None:
        await store.put_blob(f"responses:{{acme}}:{next(ids)}:input", blob, 60.0, "acme")

    steps: dict[str, Callable[[], Awaitable[None]]] = {
        "body read (ASGI, one message), no timeouts": lambda: body(untimed),
        "body read, idle and whole-body timeouts": lambda: body(timed),
        "admission, the worker's bounds only": lambda: admit(None, ""),
        "admission, with the caller's and the connection's shares": lambda: admit(
            "acme", "127.0.0.1:5000"
        ),
        'limits before the body (a model = "*" rate, memory store)': early,
        "Content-Length read strictly (read_decimal)": length,
        "admission, a chain of 900 KB charged to the caller's share (grow)": charge,
        "a response id (128 random bits)": response_id,
        "a stored response's half (1 KB) put in its tenant's share (memory store)": put,
    }
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.process_time()
            for _ in range(calls):
                await step()
            best[name] = min(best[name], (time.process_time() - start) / calls)
    await tenancy.aclose()
    return {name: seconds * 1e6 for name, seconds in best.items()}


def intake_report(results: dict[str, float]) -> str:
    rows = [(name, f"{us:.2f}") for name, us in results.items()]
    return "\n".join(md_table(["step before the body", "CPU µs/call"], rows))


ALLOC_SIZES = {"1 KB": 1 << 10, "16 KB": 16 << 10, "1 MB": 1 << 20}


def allocations(calls: int) -> dict[str, tuple[int, float, float]]:
    """Per prompt size: body bytes, allocations and bytes allocated per request."""
    out = {}
    for label, size in ALLOC_SIZES.items():
        body = to_flatbuffer(make_request(size, seed=7))
        server, transport = make_server()
        for _ in range(50):  # warm caches, pools, metric children
            one_request((server, body))
        assert transport.last_body is body, "the forwarded body must be the received object"
        found = count_allocations(one_request, (server, body), calls)
        out[label] = (len(body), found.allocs, found.bytes)
    return out


def alloc_report(results: dict[str, tuple[int, float, float]]) -> str:
    head = ["prompt", "body bytes", "allocations/request", "bytes allocated/request"]
    rows = [(k, size, f"{a:.1f}", f"{b:.0f}") for k, (size, a, b) in results.items()]
    return "\n".join(md_table(head, rows))


# A 2 KB Converse request as the bedrock backend sends it (sigv4_checks).
_SIGV4_URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-pro-v1%3A0/converse"
_SIGV4_HEADERS = [
    ("content-type", "application/json"),
    ("accept", "application/json"),
    ("x-request-id", "chatcmpl-5f0c8a1e9d3b4c7a2e6f1d08"),
]


def sigv4_body(size: int = 2048) -> bytes:
    """A Converse body of ``size`` bytes (a user message padded to it)."""
    text = "the gateway signs each request it sends to Bedrock " * (size // 50 + 1)
    head = b'{"messages":[{"role":"user","content":[{"text":"'
    tail = b'"}]}],"inferenceConfig":{"maxTokens":512}}'
    return head + text.encode()[: size - len(head) - len(tail)] + tail


def sigv4_checks(calls: int, rounds: int) -> dict[str, float]:
    """Fastest round's CPU µs per signature of a 2 KB Converse request:
    flatgate's signer (awscrt) and botocore's over an ``AWSRequest``."""

    body = sigv4_body()
    creds = AwsCredentials("AKIDFLATGATEBENCH", "flatgate-bench-secret", None)
    boto = Credentials(creds.access_key, creds.secret_key)

    def crt() -> None:
        sign("POST", _SIGV4_URL, _SIGV4_HEADERS, body, creds=creds, region="us-east-1")

    def botocore() -> None:
        request = AWSRequest("POST", _SIGV4_URL, dict(_SIGV4_HEADERS), body)
        SigV4Auth(boto, SERVICE, "us-east-1").add_auth(request)

    signers = {
        f"flatgate: backends.bedrock.auth.sign (awscrt), {len(body)} B body": crt,
        f"botocore: SigV4Auth.add_auth over an AWSRequest, {len(body)} B body": botocore,
    }
    for signer in signers.values():  # imports, caches
        for _ in range(50):
            signer()
    best = dict.fromkeys(signers, float("inf"))
    for _ in range(rounds):
        for name, signer in signers.items():
            start = time.process_time()
            for _ in range(calls):
                signer()
            best[name] = min(best[name], (time.process_time() - start) / calls)
    return {name: seconds * 1e6 for name, seconds in best.items()}


def sigv4_report(results: dict[str, float]) -> str:
    rows = [(name, f"{us:.1f}") for name, us in results.items()]
    return "\n".join(md_table(["SigV4 signature of a Bedrock request", "CPU µs/request"], rows))


def report(results: dict[str, float]) -> str:
    base = results["all off"]
    rows = [(name, f"{us:.2f}", f"{us - base:+.2f}") for name, us in results.items()]
    return "\n".join(md_table(["variant", "CPU µs/request", "cost over all off (µs)"], rows))


TABLES = ("requests", "allocations", "buffers", "intake", "sigv4", "google-token")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost_checks", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000, help="requests tracked by memray")
    parser.add_argument("--only", choices=TABLES, help="one of the tables (default: all)")
    opts = parser.parse_args(argv)
    wanted = [opts.only] if opts.only else list(TABLES)
    # Allocations first: memray wants the process alone (no loop, no thread yet).
    if "allocations" in wanted:
        print(alloc_report(allocations(opts.calls)))
    if "requests" in wanted:
        print(report(asyncio.run(measure(opts.requests, opts.rounds))))
    if "buffers" in wanted:
        print(buffer_report(buffer_checks(max(opts.requests // 4, 1), opts.rounds)))
    if "intake" in wanted:
        print(intake_report(asyncio.run(intake_checks(opts.requests, opts.rounds))))
    if "sigv4" in wanted:
        print(sigv4_report(sigv4_checks(max(opts.requests // 4, 1), opts.rounds)))
    if "google-token" in wanted:
        # A fetch is about a millisecond: a hundredth of the requests a round.
        fetches = max(opts.requests // 100, 1)
        print(google_token_report(google_token_checks(fetches, opts.rounds)))


if __name__ == "__main__":
    main()
