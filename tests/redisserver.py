"""A real ``redis-server`` for tests, on a free loopback port.

Each server runs with no persistence (``--save '' --appendonly no``) in its
own temporary directory and process group, and is stopped at teardown;
``kill`` and ``start`` again on the same port stage an outage. Without
``redis-server`` on the machine the fixtures FAIL, never skip: ``make test``
installs it first (``tests/setup_tools.sh``).

Fixtures: ``redis_server`` (one per test: outages, restarts) and
``shared_redis`` (one per session: tests that keep to their own key prefix).
Import them into a ``conftest.py`` to use them. Also what a test that
drives servers needs: ``connect``, ``command`` and ``server_info`` (one each,
on a connection of its own), ``wait_for`` (poll up to a deadline, and say
what was seen when it passes), ``stop_all``; ``tests.redistopology`` uses them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from tests.servers import free_port
from tests.tools import needed

__all__ = [
    "RedisServer",
    "command",
    "connect",
    "find_redis_server",
    "redis_server",
    "server_info",
    "shared_redis",
    "stop_all",
    "unique_prefix",
    "wait_for",
]

HOST = "127.0.0.1"
T = TypeVar("T")


def find_redis_server() -> str:
    """The ``redis-server`` binary; fails the test when there is none."""
    return needed("redis-server")


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

    def argv(self, *extra: str) -> list[str]:
        """The command line ``start`` runs."""
        return [
            *(self.binary, "--port", str(self.port), "--bind", HOST),
            *("--save", "", "--appendonly", "no", "--dir", str(self.directory), *extra),
        ]

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"

    def start(self, *extra: str, seconds: float = 10.0) -> None:
        """Start it (again, on the same port) and wait until it answers PING."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv(*extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
            )
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited early:\n{self.log_tail()}")
            if self._pings():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{self.binary} not ready in {seconds}s:\n{self.log_tail()}")

    def _pings(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5) as s:
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


def stop_all(servers: list[RedisServer]) -> None:
    """SIGTERM to every server at once, then wait for each (SIGKILL after 5 s)."""
    for server in servers:
        if server.proc is not None and server.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.proc.pid, signal.SIGTERM)
    for server in servers:
        server.stop()


def connect(port: int, password: str | None = None) -> redis.Redis:
    """A client of one server (text replies, 2 s timeouts); close it."""
    return redis.Redis(
        host=HOST,
        port=port,
        password=password,
        decode_responses=True,
        socket_timeout=2,
        socket_connect_timeout=2,
    )


def command(port: int, *args: str | int, password: str | None = None) -> object:
    """One command to one server, on a connection of its own, closed after."""
    with connect(port, password) as client:
        return client.execute_command(*args)


def server_info(port: int, section: str, password: str | None = None) -> dict[str, Any]:
    """``INFO section``, parsed by redis-py (``slave0`` is a dict)."""
    with connect(port, password) as client:
        parsed: dict[str, Any] = client.info(section)
        return parsed


def wait_for(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` (errors count as "not yet") until it returns something
    other than None or False; fail with the last error after ``timeout``,
    and with ``explain()`` (the state of things) when given."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = check()
        except (redis.RedisError, OSError) as exc:
            last, result = exc, None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise TimeoutError(f"{what}: not within {timeout}s (last error: {last!r}){detail}")
        time.sleep(0.05)


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
