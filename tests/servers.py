"""Starting real flatgate servers (granian, via the ``flatgate`` CLI) for tests.

Each server is a child process in its own process group on a free loopback
port, polled on ``/healthz`` until it answers, and stopped (SIGINT, then
SIGKILL) by that group: no granian worker outlives its test. The benches
start theirs the same way: the one implementation is
``benchmarks.harness.servers``; this module is its tests' API.
"""

from __future__ import annotations

from benchmarks.harness.servers import (
    Server,
    closed_port,
    free_port,
    running,
    spawn,
    write_config,
)

__all__ = ["Server", "closed_port", "free_port", "running", "spawn", "write_config"]
