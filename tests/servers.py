"""Starting real flatgate servers (granian, via the ``flatgate`` CLI) for tests.

Each server is a child process in its own process group on a free loopback
port, polled on ``/healthz`` until it answers, and stopped (SIGINT, then
SIGKILL) by that group: no granian worker outlives its test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

__all__ = ["Server", "closed_port", "free_port", "running", "spawn", "write_config"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the block
    runs: bound, never listening, so no server started meanwhile (by this
    test or another) can take it, as it could a ``free_port``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        yield port


class Server:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.log = log
        self.url = f"http://127.0.0.1:{port}"

    def wait_healthy(self, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(
            f"{self.name} not healthy in {seconds}s:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        """SIGINT to the server's process group (granian and its workers), then SIGKILL."""
        pgid = self.proc.pid  # started with start_new_session: its own group
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def spawn(
    service: str,
    args: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Server:
    """Start ``flatgate <service> --port P <args>``; not yet healthy."""
    port = port or free_port()
    log = log_dir / f"{service}-{port}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLATGATE_")}
    full_env.update(env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flatgate.proxy.gateway.cli",
                service,
                "--port",
                str(port),
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    return Server(service, proc, port, log)


@contextmanager
def running(
    service: str,
    args: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Iterator[Server]:
    """Run ``flatgate <service> --port P <args>`` until the block ends."""
    server = spawn(service, args, log_dir, env, port)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def write_config(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)
