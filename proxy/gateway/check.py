"""Every problem of a config file, found before anything starts.

Owns putting the checks together, for ``flatgate check`` and for the
start-up of each service (one code path, so a file ``check`` passes is one
the services start with), on the file read once:

- each service's own sections, for the scope (``gateway.document``);
- the edge's ``[[models]]`` against the proxy's ``[[routes]]``, when one file
  holds both: a model no route serves is an error (``unrouted_models``);
- for ``flatgate up``, the services it starts on one host: ports used twice,
  an edge pointed at another proxy.

Each problem is one ``key: what is wrong`` line. No I/O beyond reading the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from flatgate.proxy.gateway.document import GatewayDocument, Scope, as_document, side_problems
from flatgate.proxy.plumbing.config import ConfigError, read_document
from flatgate.proxy.service.settings import unrouted_models

__all__ = ["checked", "file_problems"]


def _up_problems(doc: GatewayDocument, split: bool) -> list[str]:
    """What clashes when one host runs every service of the file (the edge
    and the proxy apart with ``split``, else the one-process gateway)."""
    e, p, s = doc.edge, doc.proxy, doc.stub
    ports = [
        ("stub.port" if i == 0 else f"stub.up[{i}] (on stub.port + {i})", s.port + i)
        for i in range(len(s.up))
    ]
    ports += [("proxy.port", p.port), ("edge.port", e.port)] if split else [("edge.port", e.port)]
    problems = []
    owner: dict[int, str] = {}
    for key, port in ports:
        if port in owner:
            problems.append(f"{key}: port {port} is taken by {owner[port]}")
        owner.setdefault(port, key)
    if split and (urlsplit(e.proxy_url).port or 80) != p.port:
        problems.append(
            f"edge.proxy_url: flatgate up starts the proxy on port {p.port}, "
            f"but the edge would call {e.proxy_url}"
        )
    return problems


def checked(
    path: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None = None,
    scope: Scope = "all",
) -> tuple[GatewayDocument | None, list[str]]:
    """The config file (``None``: ``$FLATGATE_CONFIG`` or the embedded
    default), read once, with the ``FLATGATE_*`` variables of ``environ``
    laid over it, and every problem it has for ``scope``: one service's
    start-up, ``up``'s or ``split``'s (everything, and the clashes of one
    host for that layout) or ``all`` (everything: ``flatgate check``, and the
    one-process gateway). The document (``GatewayDocument``, the sections
    ``scope`` does not read at their defaults) when there are none."""
    env = os.environ if environ is None else environ
    try:
        data = read_document(path, env)
    except ConfigError as exc:
        return None, list(exc.problems)
    problems, edge = side_problems(data, env, scope)
    problems += edge
    if scope in ("edge", "up", "split", "all") and not edge:
        # The edge's models against the routes, once its own sections are good.
        models = [(m["name"], m["provider"]) for m in data.get("models", [])]
        problems += unrouted_models(data, models)
    # [state], [[limits]] and [[tenants]] are read by both services: once each.
    problems = list(dict.fromkeys(problems))
    if problems:
        return None, problems
    doc = as_document(data, env, scope)
    if scope in ("up", "split"):
        problems = _up_problems(doc, split=scope == "split")
    return (None if problems else doc), problems


def file_problems(
    path: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None = None,
    scope: Scope = "all",
) -> list[str]:
    """Every problem of a config file, as ``checked`` finds them; ``[]``: it starts."""
    return checked(path, environ, scope)[1]
