"""Streaming relay throughput: frames per second through one proxy worker.

Run: ``.venv/bin/python -m benchmarks.relay [--frames N] [--rounds R]``

Starts the stub in canned mode with N delta frames (one 15 MB answer for the
default 200,000, written at once) and one proxy worker per granian interface
(RSGI, ASGI), all on free loopback ports (``benchmarks.harness.servers``), then asks
each proxy for the stream in both framings with a raw socket that reads as
fast as it can. Reports frames per second and the proxy's CPU per frame
(utime + stime of its process tree, from ``/proc``). It measures the relay
when frames are already waiting: the binary framing passes whole-frame pieces
through; SSE re-frames every chunk. Every server it starts is stopped at the
end. Loopback only; bounded by N and a 60 s socket timeout.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.report import md_table
from benchmarks.harness.sampling import cpu_seconds, tree_pids
from benchmarks.harness.servers import HOST, Server, ServerGroup, gateway_config
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FRAMES, SSE

__all__ = ["main"]


def _fetch(port: int, accept: str) -> int:
    """One request with ``Connection: close``; the bytes of the whole answer."""
    body = build_request("relay", [("user", "x")])
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n"
        f"content-type: application/x-flatbuffers\r\naccept: {accept}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    received = 0
    with socket.create_connection((HOST, port), timeout=60) as s:
        s.sendall(head + body)
        while data := s.recv(1 << 20):
            received += len(data)
    return received


def _best(proxy: Server, accept: str, frames: int, rounds: int) -> tuple[float, float, int]:
    """``(frames/s, CPU seconds per frame, bytes)`` of the fastest of ``rounds``."""
    best = (0.0, 0.0, 0)
    for _ in range(rounds):
        pids = tree_pids(proxy.proc.pid)
        cpu0, t0 = cpu_seconds(pids), time.perf_counter()
        size = _fetch(proxy.port, accept)
        dt, cpu = time.perf_counter() - t0, cpu_seconds(pids) - cpu0
        if frames / dt > best[0]:
            best = (frames / dt, cpu / frames, size)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args(argv)
    frames = opts.frames + 1  # the deltas and the final chunk
    with tempfile.TemporaryDirectory(prefix="flatgate-relay-") as tmp:
        group = ServerGroup(Path(tmp))
        try:
            stub = group.flatgate(
                "stub", "stub", ["--canned", str(opts.frames), "--interface", "rsgi"]
            )
            config = group.workdir / "relay.toml"
            config.write_text(gateway_config({"stub": (stub.url, "fbs")}, {"*": ["stub"]}))
            for iface in ("rsgi", "asgi"):
                group.flatgate(iface, "proxy", ["--config", str(config), "--interface", iface])
            failed = group.wait_healthy()
            if failed:
                raise RuntimeError(f"servers did not start: {failed}")
            print(f"{frames:,} frames per stream, best of {opts.rounds} rounds\n")
            rows = []
            for iface in ("rsgi", "asgi"):
                for accept in (FRAMES, SSE):
                    rate, cpu, size = _best(group.servers[iface], accept, frames, opts.rounds)
                    rows.append((iface, accept, f"{size:,}", f"{rate:,.0f}", f"{cpu * 1e6:.2f} µs"))
            head = ["proxy", "framing", "bytes", "frames/s", "proxy CPU per frame"]
            print("\n".join(md_table(head, rows, left=2)))
        finally:
            group.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
