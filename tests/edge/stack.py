"""A real flatgate stack (stub, proxy, edges) for the edge's integration tests.

Thin over ``tests.servers``: each service runs through the ``flatgate`` CLI in
its own process group on a free loopback port.
"""

from __future__ import annotations

from pathlib import Path

from tests.servers import Server, free_port, spawn

__all__ = ["Service", "free_port", "start"]

Service = Server


def start(service: str, config: Path, port: int, log_dir: Path) -> Service:
    """``flatgate <service> --config <config> --port <port>``, not yet healthy."""
    return spawn(service, ["--config", str(config)], log_dir, port=port)
