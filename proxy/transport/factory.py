"""Choosing a transport by name (``transport = "fast" | "httpx"`` in the config)."""

from __future__ import annotations

from flatgate.proxy.transport.base import Transport

__all__ = ["make_transport"]


def make_transport(kind: str = "fast", *, limit: int = 256) -> Transport:
    """A new transport of ``kind`` ("fast" or "httpx"); make one per event loop."""
    if kind == "httpx":
        from flatgate.proxy.transport.reference import HttpxTransport

        return HttpxTransport(limit=limit)
    if kind == "fast":
        from flatgate.proxy.transport.pool import PoolTransport

        return PoolTransport(limit=limit)
    raise ValueError(f"unknown transport {kind!r}: expected 'fast' or 'httpx'")
