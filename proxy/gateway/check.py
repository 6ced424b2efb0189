"""Every problem of a config file, found before anything starts.

Owns putting the services' own checks together, for ``flatgate check`` and for
the start-up of each service (one code path, so a file ``check`` passes is one
the services start with):

- the proxy's and the stub's sections (``service.settings.config_problems``);
- the edge's (``edge_translator.config.edge_problems``);
- the edge's ``[[models]]`` against the proxy's ``[[routes]]``, when one file
  holds both: a model no route serves is an error (``unrouted_models``);
- for ``flatgate up``, the services it starts on one host: ports used twice,
  an edge pointed at another proxy.

Each problem is one ``key: what is wrong`` line. No I/O beyond reading the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from flatgate.edge_translator.settings import (
    edge_problems,
    load_edge_settings,
    parse_edge_settings,
)
from flatgate.proxy.plumbing.config import ConfigError, read_document
from flatgate.proxy.service.settings import (
    config_problems,
    load_config,
    unrouted_models,
)

__all__ = ["Scope", "file_problems"]

# What a start-up needs checked: one service's sections, or all of them.
Scope = Literal["proxy", "stub", "edge", "up", "split", "all"]


def _edge_problems(data: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    problems = edge_problems(data, environ=environ)
    if problems:
        return problems
    models = parse_edge_settings(data, environ=environ).models
    return unrouted_models(data, [(m.name, m.provider) for m in models])


def _up_problems(path: str | None, environ: Mapping[str, str], split: bool) -> list[str]:
    """What clashes when one host runs every service of the file (the edge
    and the proxy apart with ``split``, else the one-process gateway)."""
    config = load_config(path, environ)
    e, p, s = load_edge_settings(path, environ=environ).edge, config.proxy, config.stub
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


def file_problems(
    path: str | os.PathLike[str] | None,
    environ: Mapping[str, str] | None = None,
    scope: Scope = "all",
) -> list[str]:
    """Every problem of a config file (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default) with the ``FLATGATE_*`` variables of ``environ`` laid
    over it, for ``scope``: one service's start-up, ``up``'s or ``split``'s
    (everything, and the clashes of one host for that layout) or ``all``
    (everything: ``flatgate check``, and the one-process gateway).
    ``[]``: it starts."""
    env = os.environ if environ is None else environ
    try:
        data = read_document(path, env)
    except ConfigError as exc:
        return list(exc.problems)
    problems = []
    if scope != "edge":
        problems += config_problems(data, env)
    if scope in ("edge", "up", "split", "all"):
        problems += _edge_problems(data, env)
    if scope in ("up", "split") and not problems:
        where = None if path is None else os.fspath(path)
        problems += _up_problems(where, env, split=scope == "split")
    # [state], [[limits]] and [[tenants]] are read by both services: once each.
    return list(dict.fromkeys(problems))
