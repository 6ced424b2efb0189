"""``RequestHead``: what a request's head says, as the apps read it: its
path, headers, query string and peer. An HTTP request's (``plumbing.serve.Exchange``)
and a WebSocket upgrade's (``plumbing.websocket.Socket``) both have one.
No I/O."""

from __future__ import annotations

from typing import Protocol

__all__ = ["RequestHead"]


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
