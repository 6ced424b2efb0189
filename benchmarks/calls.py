"""Function calls per request on the one-process gateway's path, in process.

``python -m benchmarks.calls`` builds the gateway ``flatgate gateway`` serves
(``gateway.onebox``: the edge over the router, in one process) from a small
config, gives the router a backend that answers at once from memory (the
``fbs`` protocol's chunk frames, ``benchmarks.inmemory.FakeTransport``'s
way), and drives the edge's handler with an in-memory exchange: an OpenAI
chat completion whose whole answer is 2 KB of text (``whole``), and one
streamed as 32 chunks (``stream``). Every Python call (``call``) and every
call into C (``c_call``) made while the requests run is counted with
``sys.setprofile`` (the event loop's own included: nothing waits on I/O, so
the count is the same run to run), and printed per request: the issue-38
figure for the in-process seam, before and after.

``--requests N`` (default 200) requests of each kind, after 20 unmeasured
ones; ``--json`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from types import FrameType
from typing import Any

from benchmarks.inmemory import FakeTransport
from benchmarks.inprocess_gateway import GatewayExchange, PiecesAnswer, build_gateway
from flatgate.edge_translator.app import EdgeApp
from flatgate.proxy.transport.base import Response, Upstream
from flatgate.proxy.wire.chunk.writer import write_chunk
from flatgate.proxy.wire.schema import FinishReason

__all__ = ["main", "measure"]

CONFIG = """\
[proxy]
access_log = false

[[backends]]
name = "stub"
url = "http://127.0.0.1:9"

[[routes]]
model = "echo"
backends = ["stub"]

[edge]
access_log = false

[[models]]
name = "echo"
provider = "SelfHosted"
"""

# The backend's answers: 2 KB of text in one chunk, and 32 chunks of a word.
WHOLE = write_chunk(content="x" * 2048, finish_reason=FinishReason.STOP)
STREAM = [write_chunk(content=f"w{i} ") for i in range(31)] + [
    write_chunk(content="end", finish_reason=FinishReason.STOP)
]
ASK = {"model": "echo", "messages": [{"role": "user", "content": "hello"}]}


class _Backend(FakeTransport):
    """Answers every request at once with ``pieces`` (no headers, as the
    ``fbs`` protocol's backends answer)."""

    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__(b"".join(pieces))
        self._pieces = pieces

    async def request(self, req: Upstream) -> Response:
        return PiecesAnswer(self._pieces, headers={})


async def _run(edge: EdgeApp, body: bytes, n: int) -> int:
    for _ in range(n):
        ex = GatewayExchange(body, request_id=None)
        await edge(ex)
        if ex.status != 200 or not ex.out:
            raise AssertionError(f"the gateway answered {ex.status}: {b''.join(ex.out)[:300]!r}")
    return n


def measure(kind: str, n: int) -> dict[str, float]:
    """Calls per request for ``kind`` (``whole`` or ``stream``), over ``n`` requests."""
    stream = kind == "stream"
    edge = build_gateway(CONFIG, _Backend(STREAM if stream else [WHOLE]))
    body = json.dumps({**ASK, "stream": stream}).encode()
    counts = {"call": 0, "c_call": 0}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event in counts:
            counts[event] += 1

    async def go() -> None:
        await _run(edge, body, 20)
        sys.setprofile(profile)
        try:
            await _run(edge, body, n)
        finally:
            sys.setprofile(None)
        await edge.aclose()

    asyncio.run(go())
    return {
        "python_calls": counts["call"] / n,
        "c_calls": counts["c_call"] / n,
        "calls": (counts["call"] + counts["c_call"]) / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calls", description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = {kind: measure(kind, args.requests) for kind in ("whole", "stream")}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{'request':<8} {'calls':>9} {'python':>9} {'C':>9}  (per request)")
    for kind, f in figures.items():
        print(f"{kind:<8} {f['calls']:>9.1f} {f['python_calls']:>9.1f} {f['c_calls']:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
