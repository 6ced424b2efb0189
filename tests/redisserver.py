"""A real ``redis-server`` for tests, on a free loopback port.

Each server runs with no persistence (``--save '' --appendonly no``) in its
own temporary directory and process group, and is stopped at teardown;
``kill`` and ``start`` again on the same port stage an outage. Without
``redis-server`` on the machine the fixtures FAIL, never skip: ``make test``
installs it first (``tests/setup_redis.sh``).

Fixtures: ``redis_server`` (one per test: outages, restarts) and
``shared_redis`` (one per session: tests that keep to their own key prefix).
Import them into a ``conftest.py`` to use them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_port

__all__ = ["RedisServer", "find_redis_server", "redis_server", "shared_redis", "unique_prefix"]


def find_redis_server() -> str:
    """The ``redis-server`` binary; fails the test when there is none."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if found is None:
        pytest.fail(
            "redis-server is not installed: run `sh tests/setup_redis.sh` "
            "(`make test` does) or install it (apt-get install redis-server)",
            pytrace=False,
        )
    return found


def unique_prefix() -> str:
    """A key prefix no other test uses (for ``shared_redis``)."""
    return f"t{uuid.uuid4().hex[:12]}"


class RedisServer:
    """One ``redis-server`` process; ``url`` names it."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.binary = find_redis_server()
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = directory / f"redis-{self.port}.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *extra: str, seconds: float = 10.0) -> None:
        """Start it (again, on the same port) and wait until it answers PING."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.directory),
                    *extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited early:\n{self.log.read_text()[-2000:]}")
            if self._pings():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server not ready in {seconds}s:\n{self.log.read_text()[-2000:]}")

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                answer = s.recv(64)
        except OSError:
            return False
        return answer.startswith((b"+PONG", b"-NOAUTH"))

    def kill(self) -> None:
        """SIGKILL, as a crash would (nothing is saved)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()


@contextlib.contextmanager
def running_redis(directory: Path) -> Iterator[RedisServer]:
    """A started server (a second free port tried if the first was taken)."""
    server = RedisServer(directory)
    try:
        server.start()
    except RuntimeError:
        server = RedisServer(directory)
        server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own."""
    with running_redis(tmp_path) as server:
        yield server


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session; keep to a ``unique_prefix()``."""
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server
