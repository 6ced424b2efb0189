"""``[state] store``'s Redis URLs, parsed once for the config check and the
store alike. No I/O.

- ``redis://host[:port][/db]`` (``rediss://``: TLS): one Redis or Valkey.
- ``redis+cluster://host:port,host:port,...`` (``rediss+cluster://``): a
  Redis Cluster; the nodes are seeds (any of its nodes: the slot map names
  the rest). No database: a cluster has only database 0.
- ``redis+sentinel://host:port,host:port,.../service[/db]``
  (``rediss+sentinel://``: TLS to the sentinels and the data nodes alike):
  the primary the sentinels name for ``service``.

No password in a URL (``password_env``, ``sentinel_password_env``), and no
query: options are ``[state]`` keys.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["DEFAULT_PORT", "SENTINEL_PORT", "Kind", "StoreAddress", "parse_store_url"]

DEFAULT_PORT = 6379
SENTINEL_PORT = 26379


class Kind(enum.Enum):
    SINGLE = "redis"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"


_SCHEMES = {
    "redis": (Kind.SINGLE, False),
    "rediss": (Kind.SINGLE, True),
    "redis+cluster": (Kind.CLUSTER, False),
    "rediss+cluster": (Kind.CLUSTER, True),
    "redis+sentinel": (Kind.SENTINEL, False),
    "rediss+sentinel": (Kind.SENTINEL, True),
}

EXPECTED = (
    'expected "memory" or redis://host[:port][/db] (rediss:// for TLS), '
    "redis+cluster://host:port,host:port,... or "
    "redis+sentinel://host:port,host:port,.../service[/db] (rediss+... for TLS)"
)
_PASSWORD = (
    "the URL carries a password; name the environment variable holding it "
    "in state.password_env instead"
)


@dataclass(frozen=True, slots=True)
class StoreAddress:
    """Where a Redis store is: its kind, whether over TLS, its nodes (the
    server; a cluster's seeds; the sentinels), the database and, for
    Sentinel, the service name."""

    kind: Kind
    tls: bool
    nodes: tuple[tuple[str, int], ...]
    db: int = 0
    service: str = ""

    def node_url(self, host: str, port: int, db: int | None = None) -> str:
        """A ``redis://`` (``rediss://``) URL for one server, for redis-py."""
        scheme = "rediss" if self.tls else "redis"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}/{self.db if db is None else db}"


def _node(text: str, default_port: int, url: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        host, port = text, ""
    host = host.strip("[]")
    if not host or (port and not port.isdigit()):
        raise ValueError(f"not a host[:port]: {text!r} in {url!r}")
    number = int(port) if port else default_port
    if not 0 < number < 65536:
        raise ValueError(f"port out of range: {text!r} in {url!r}")
    return host, number


def parse_store_url(url: str) -> StoreAddress:
    """``url``'s parts; ``ValueError`` naming what is wrong (the message
    starts with what to write when the scheme is not one of ours)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise ValueError(f"{EXPECTED}, got {url!r}")
    kind, tls = _SCHEMES[scheme]
    netloc, _, path = rest.partition("/")
    if "?" in url or "#" in url:
        raise ValueError(f"options go in [state] keys, not the URL, got {url!r}")
    if kind is Kind.SINGLE:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  # raises on a bad port
        except ValueError as exc:
            raise ValueError(f"not a URL ({exc}): {url!r}") from None
        if parts.password is not None:
            raise ValueError(_PASSWORD)
        if not parts.hostname:
            raise ValueError(f"{EXPECTED}, got {url!r}")
        db = path.strip("/")
        if db and not db.isdigit():
            raise ValueError(f"the path must be a database number, got {'/' + path!r}")
        node = (parts.hostname, parts.port or DEFAULT_PORT)
        return StoreAddress(kind, tls, (node,), int(db or 0))
    if "@" in netloc:
        raise ValueError(f"{_PASSWORD} (no user either), got {url!r}")
    default = SENTINEL_PORT if kind is Kind.SENTINEL else DEFAULT_PORT
    nodes = tuple(_node(n.strip(), default, url) for n in netloc.split(",") if n.strip())
    if not nodes:
        raise ValueError(f"no host in {url!r}")
    segments = [s for s in path.split("/") if s]
    if kind is Kind.CLUSTER:
        if segments not in ([], ["0"]):
            raise ValueError(f"a cluster has database 0 only: no path, got {'/' + path!r}")
        return StoreAddress(kind, tls, nodes)
    if not segments or len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise ValueError(f"expected /service or /service/db after the sentinels, got {url!r}")
    number = int(segments[1]) if len(segments) == 2 else 0
    return StoreAddress(kind, tls, nodes, number, segments[0])
