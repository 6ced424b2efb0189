"""Choosing a transport by name (``transport = "fast" | "httpx"`` in the config)."""

from __future__ import annotations

from flatgate.proxy.transport.base import Transport

__all__ = ["make_transport"]


def make_transport(
    kind: str = "fast", *, limit: int = 4096, pool_timeout: float = 5.0
) -> Transport:
    """A new transport of ``kind`` ("fast" or "httpx"); make one per event loop."""
    if kind == "httpx":
        from flatgate.proxy.transport.reference import HttpxTransport

        return HttpxTransport(limit=limit, pool_timeout=pool_timeout)
    if kind == "fast":
        from flatgate.proxy.transport.fast import PoolTransport

        return PoolTransport(limit=limit, pool_timeout=pool_timeout)
    raise ValueError(f"unknown transport {kind!r}: expected 'fast' or 'httpx'")
