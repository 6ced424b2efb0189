"""A small app with the whole drain wired in, served by the gateway's
``DrainingServer`` in real granian processes (the lifecycle tests' subject,
independent of the proxy's and the edge's own handlers).

What an app does with a ``Drain`` (what the proxy and the edge do too):

- ``/healthz`` stays 200 (alive); while draining, everything else, ``/readyz``
  included, is 503 ``draining`` with ``Connection: close`` and ``Retry-After``;
- ``/stream`` sends ``x-chunks`` lines ``x-interval-ms`` apart, then ``done``;
  it is tracked, and when the drain's deadline ends it, it sends one
  ``error: draining`` line and ends.

Run: ``python -m tests.lifecycle.drain_app PORT GRACE SECONDS asgi|rsgi``.
"""

from __future__ import annotations

import asyncio
import os
import sys

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import error_body
from flatgate.proxy.plumbing.drain import Drain
from flatgate.proxy.plumbing.serve import Exchange, ServerApp

DRAINING_HEADERS = [
    ("content-type", "application/json"),
    ("connection", "close"),
    ("retry-after", "1"),
]


class DrainDemo:
    def __init__(self, drain: Drain) -> None:
        self.drain = drain

    async def __call__(self, ex: Exchange) -> None:
        if ex.path == "/healthz":
            await ex.respond(200, [("content-type", "text/plain")], b"ok\n")
        elif self.drain.draining:
            body = error_body(codes.DRAINING, codes.DRAINING.meaning)
            await ex.respond(codes.DRAINING.status, DRAINING_HEADERS, body)
        elif ex.path == "/readyz":
            await ex.respond(200, [("content-type", "text/plain")], b"ready\n")
        elif ex.path == "/stream":
            await self.stream(ex)
        else:
            await ex.respond(404, [("content-type", "text/plain")], b"no\n")

    async def stream(self, ex: Exchange) -> None:
        chunks = int(ex.header("x-chunks") or "3")
        interval = int(ex.header("x-interval-ms") or "100") / 1000
        ended = asyncio.Event()
        untrack = self.drain.track(ended.set)
        sink = await ex.stream(200, [("content-type", "text/plain")])
        try:
            for i in range(chunks):
                await sink.send(f"chunk {i}\n".encode())
                try:
                    await asyncio.wait_for(ended.wait(), interval)
                except TimeoutError:
                    continue
                await sink.send(f"error: {codes.DRAINING}\n".encode())
                return
            await sink.send(b"done\n")
        finally:
            untrack()
            await sink.close()


def create_app() -> ServerApp:
    drain = Drain(
        grace=float(os.environ["DRAIN_GRACE"]), seconds=float(os.environ["DRAIN_SECONDS"])
    )
    return ServerApp(DrainDemo(drain), drain)


def main(argv: list[str]) -> None:
    from granian.constants import Interfaces

    from flatgate.proxy.gateway.server import DrainingServer

    port, grace, seconds, iface = argv
    os.environ["DRAIN_GRACE"], os.environ["DRAIN_SECONDS"] = grace, seconds
    DrainingServer(
        "tests.lifecycle.drain_app:create_app",
        grace=float(grace),
        seconds=float(seconds),
        address="127.0.0.1",
        port=int(port),
        workers=2,
        interface=Interfaces.RSGI if iface == "rsgi" else Interfaces.ASGI,
        factory=True,
        log_level="info",
    ).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
