"""A guard that fails a test on any connection outside 127.0.0.0/8.

An audit hook (installed once, at import) sees every ``socket.connect`` and
every name lookup (``socket.getaddrinfo``) while a test that asks for
``loopback_only`` runs, and raises ``LeftLoopback`` before a socket reaches
outside loopback, so that no packet is sent; the fixture then fails the
test, naming what was tried. A cloud library's credential chain probes
metadata servers (AWS's instance metadata service, Google's metadata
server) when nothing else is configured: the tests point them at loopback
fakes or disable them, and this proves they did.
"""

from __future__ import annotations

import ipaddress
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "SEEN",
    "WATCHING",
    "LeftLoopback",
    "guard_env",
    "guard_log",
    "loopback_only",
    "outside",
]

# Every address a socket connected to, or a name looked up, while a test ran.
SEEN: list[str] = []
WATCHING = threading.Event()


class LeftLoopback(RuntimeError):
    """Raised by the audit hook before a socket reaches outside loopback."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not WATCHING.is_set():
        return
    host = None
    if event == "socket.connect" and isinstance(args[1], tuple):
        host = str(args[1][0])
    elif event == "socket.getaddrinfo":
        host = str(args[0])
    if host is None:
        return
    SEEN.append(host)
    if outside([host]):  # stopped before any packet is sent
        raise LeftLoopback(f"a connection to {host} outside 127.0.0.0/8")


sys.addaudithook(_audit)


def outside(seen: list[str]) -> list[str]:
    """The hosts of ``seen`` outside loopback (a name other than localhost:
    a lookup that may leave the host)."""
    out = []
    for host in seen:
        try:
            if not ipaddress.ip_address(host).is_loopback:
                out.append(host)
        except ValueError:
            if host != "localhost":
                out.append(host)
    return out


@pytest.fixture
def loopback_only() -> Iterator[list[str]]:
    """Fails the test if anything connects, or looks up a name, outside
    127.0.0.0/8 during it; yields what was connected to."""
    SEEN.clear()
    WATCHING.set()
    try:
        yield SEEN
    finally:
        WATCHING.clear()
    assert not outside(SEEN), f"connections outside loopback: {outside(SEEN)}"


# A server subprocess's guard (``loopback_site/sitecustomize.py``).
_SITE = Path(__file__).parent / "loopback_site"


def guard_env(log: Path) -> dict[str, str]:
    """The environment that installs the guard in a server subprocess,
    logging to ``log``."""
    return {"PYTHONPATH": str(_SITE), "LOOPBACK_GUARD_LOG": str(log)}


def guard_log(log: Path) -> list[str]:
    """The hosts a guarded subprocess connected to or looked up (a refused
    one ends in `` outside``)."""
    return log.read_text().splitlines() if log.exists() else []
