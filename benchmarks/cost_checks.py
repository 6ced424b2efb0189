"""CPU per request of the proxy's access log and its admission, naming and
authentication checks: each on and off, in one run, in process.

Run: ``.venv/bin/python -m benchmarks.cost_checks [--requests N] [--rounds R]``

Drives ``ProxyServer.completions`` with ``benchmarks.alloc_proxy``'s in-memory
exchange and transport (a one-frame answer at once), inside a running event
loop so the caller watch's timer is real. Variants differ in one thing each;
rounds are interleaved (every variant once per round) and the fastest round
of each is reported, so machine noise hits all alike. The access log writes
to ``/dev/null`` through its own batching (one ``os.write`` per ~3.5 KB).

"the checks" are: admission control (``Admission.admit``/``drop_body``/
``done``), the model-name cap, the caller's ``x-request-id`` check and the
caller watch's timer (``CallerWatch.start_later``). "all off" replaces them
with no-ops (here, never in the product).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import flatgate.proxy.service.app as app_module
from benchmarks.alloc_proxy import CONFIG, FakeExchange, FakeTransport
from benchmarks.payloads import make_request, to_flatbuffer
from flatgate.proxy.plumbing.accesslog import AccessLog
from flatgate.proxy.plumbing.auth import hash_key
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import parse_config

TOKEN = "bench-token"


class _NoAdmission:
    max_in_flight = max_bytes = in_flight = held = refused = 0

    def admit(self, nbytes: int) -> bool:
        return True

    def drop_body(self, nbytes: int) -> None:
        return None

    def done(self) -> None:
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
    ) -> None:
        self.name = name
        self.proxy = proxy
        self.checks = checks
        self.headers = headers or {}


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
]


def _server(v: Variant, devnull: int) -> ProxyServer:
    server = ProxyServer(parse_config({**CONFIG, "proxy": v.proxy}), worker="bench")
    server._transport = FakeTransport()
    if v.proxy.get("access_log"):
        fmt = v.proxy.get("log_format", "text")
        server.access = AccessLog("proxy", fmt, write=_writer(devnull))
    if not v.checks:
        server.admission = _NoAdmission()  # type: ignore[assignment]
        server.max_model = 1 << 30
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


def report(results: dict[str, float]) -> str:
    base = results["all off"]
    lines = ["| variant | CPU µs/request | cost over all off (µs) |", "|---|---:|---:|"]
    for name, us in results.items():
        lines.append(f"| {name} | {us:.2f} | {us - base:+.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    print(report(asyncio.run(measure(opts.requests, opts.rounds))))


if __name__ == "__main__":
    main()
