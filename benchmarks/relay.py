"""Streaming relay throughput: frames per second through one proxy worker.

Run: ``.venv/bin/python -m benchmarks.relay [--frames N] [--rounds R]``

Starts the stub in canned mode with N delta frames (one 15 MB answer for the
default 200,000, written at once) and one proxy worker per granian interface
(RSGI, ASGI), all on free loopback ports, then asks each proxy for the stream
in both framings with a raw socket that reads as fast as it can. Reports frames
per second and the proxy's CPU per frame (utime + stime of its process tree,
from ``/proc``). It measures the relay when frames are already waiting: the
binary framing passes whole-frame pieces through; SSE re-frames every chunk.
Every server it starts runs in its own process group and is stopped at the
end. Loopback only; bounded by N and a 60 s socket timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FRAMES, SSE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _server(args: Sequence[str], port: int, log: Path) -> Iterator[int]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flatgate.proxy.gateway.cli", *args, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args[0]} did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its direct children (granian's workers)."""
    pids = [root]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == root:
                        pids.append(int(entry))
            except OSError:
                continue
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _fetch(port: int, accept: str) -> int:
    """One request with ``Connection: close``; the bytes of the whole answer."""
    body = build_request("relay", [("user", "x")])
    head = (
        "POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
        f"content-type: application/x-flatbuffers\r\naccept: {accept}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    received = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head + body)
        while data := s.recv(1 << 20):
            received += len(data)
    return received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    frames = opts.frames + 1  # the deltas and the final chunk
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        stub_port = _free_port()
        config = d / "relay.toml"
        config.write_text(
            f'[[backends]]\nname = "stub"\nurl = "http://127.0.0.1:{stub_port}"\n\n'
            '[[routes]]\nmodel = "*"\nbackends = ["stub"]\n'
        )
        stub = ["stub", "--canned", str(opts.frames), "--interface", "rsgi"]
        with contextlib.ExitStack() as stack:
            stack.enter_context(_server(stub, stub_port, d / "stub.log"))
            proxies = {}
            for iface in ("rsgi", "asgi"):
                port = _free_port()
                args = ["proxy", "--config", str(config), "--interface", iface]
                proxies[iface] = (
                    port,
                    stack.enter_context(_server(args, port, d / f"{iface}.log")),
                )
            print(f"{frames:,} frames per stream, best of {opts.rounds} rounds\n")
            print("| proxy | framing | bytes | frames/s | proxy CPU per frame |")
            print("|---|---|---:|---:|---:|")
            for iface, (port, pid) in proxies.items():
                for accept in (FRAMES, SSE):
                    best = (0.0, 0.0, 0)
                    for _ in range(opts.rounds):
                        cpu0, t0 = _tree_cpu(pid), time.perf_counter()
                        size = _fetch(port, accept)
                        dt, cpu = time.perf_counter() - t0, _tree_cpu(pid) - cpu0
                        if frames / dt > best[0]:
                            best = (frames / dt, cpu / frames, size)
                    rate, per_frame, size = best
                    print(
                        f"| {iface} | {accept} | {size:,} | {rate:,.0f} | "
                        f"{per_frame * 1e6:.2f} µs |"
                    )


if __name__ == "__main__":
    main()
