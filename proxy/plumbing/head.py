"""``RequestHead``: what a request's head says, as the apps read it: its
path, headers, query string and peer. An HTTP request's
(``plumbing.serve.Exchange``) and a WebSocket upgrade's
(``plumbing.websocket.Socket``) both have one. Also ``asgi_header``: a
header read from an ASGI scope, for both of granian's ASGI objects.
No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["RequestHead", "asgi_header"]


def asgi_header(scope: Mapping[str, Any], name: str, key: bytes | None = None) -> str | None:
    """An ASGI scope's header by lower-case ``name`` (``key``: its bytes, when
    the caller has them encoded already). A scan of the scope's (few) headers,
    no dict: whatever a request keeps alive while it waits on its backend
    counts toward the GC's young generation. ASGI servers give header names
    in lower case."""
    wanted = name.encode("latin-1") if key is None else key
    for k, v in scope["headers"]:
        if k == wanted:
            value: str = v.decode("latin-1")
            return value
    return None


class RequestHead(Protocol):
    path: str

    def header(self, name: str) -> str | None:
        """A request header by lower-case name."""
        ...

    @property
    def query(self) -> str:
        """The query string, undecoded ("" when none)."""
        ...

    @property
    def peer(self) -> str:
        """The client's ``host:port``: one HTTP/1.1 connection, or one HTTP/2
        connection's streams, share it."""
        ...
