"""Starting real flatgate servers (granian, via the ``flatgate`` CLI) for tests.

Each server is a child process in its own process group on a free loopback
port, polled on ``/healthz`` until it answers, and stopped (SIGINT, then
SIGKILL) by that group: no granian worker outlives its test. The benches
start theirs the same way: the one implementation is
``benchmarks.harness.servers``; this module is its tests' API.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from benchmarks.harness.servers import (
    Server,
    closed_port,
    free_port,
    running,
    spawn,
    write_config,
)

__all__ = [
    "Server",
    "closed_port",
    "free_port",
    "running",
    "spawn",
    "tree_rss",
    "write_config",
]


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (granian's workers)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            for tid in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        total += int(m.group(1)) * 1024 if m else 0
    return total
