"""The real gateway app (``onebox.create_app``, what granian runs for
``flatgate gateway``), driven in process through httpx's ASGI transport, as
a caller at a given address: no socket, no server process."""

from __future__ import annotations

import httpx
import pytest

from flatgate.proxy.gateway import onebox
from flatgate.proxy.plumbing.config import ENV_CONFIG
from flatgate.proxy.plumbing.serve import ServerApp

__all__ = ["caller", "gateway_app"]


def gateway_app(config: str) -> ServerApp:
    """The app ``flatgate gateway --config config`` serves, in this process."""
    patch = pytest.MonkeyPatch()
    patch.setenv(ENV_CONFIG, config)
    try:
        return onebox.create_app()
    finally:
        patch.undo()


def caller(
    app: ServerApp, host: str = "127.0.0.1", headers: dict[str, str] | None = None
) -> httpx.AsyncClient:
    """A client of ``app`` whose requests come from ``host``."""
    transport = httpx.ASGITransport(app=app, client=(host, 40000))
    return httpx.AsyncClient(
        transport=transport, base_url="http://gateway", headers=headers or {}, timeout=30
    )
