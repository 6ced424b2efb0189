"""The loopback guard for a server the tests start as a subprocess.

Put this directory first on ``PYTHONPATH`` and name a file in
``LOOPBACK_GUARD_LOG``: every process of the server (its workers too, which
inherit the environment) then installs an audit hook that appends each host
it connects to or looks up to that file, one a line, and refuses (an
``OSError``, before any packet is sent) a connection or a lookup outside
127.0.0.0/8, marking that line ``outside``. A test reads the file
(``tests.loopback.guard_log``). Without the variable, nothing is installed.
Self-contained: the server's processes do not import the tests.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

_LOG = os.environ.get("LOOPBACK_GUARD_LOG", "")


def _outside(host: str) -> bool:
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def _audit(event: str, args: tuple[Any, ...]) -> None:
    host = None
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1]:
        host = str(args[1][0])
    elif event == "socket.getaddrinfo":
        host = str(args[0])
    if host is None:
        return
    out = _outside(host)
    with open(_LOG, "a") as f:
        f.write(f"{host} outside\n" if out else f"{host}\n")
    if out:
        raise OSError(f"loopback guard: a connection to {host} outside 127.0.0.0/8")


if _LOG:
    sys.addaudithook(_audit)
