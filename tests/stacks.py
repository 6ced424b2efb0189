"""The stacks the integration tests start (gateway, proxy, edge, stub): their
config files, written from a few parameters so that a test says what its
stack holds and not the TOML around it, and starting and stopping their
servers together.

``stack_config`` builds the document (what ``tomllib`` reads back from the
file), ``toml`` writes a document as TOML, and ``write_stack`` does both into a
file and returns its path for ``--config``. The short forms: a backend is a
URL or its fields, a route names its backend(s) or gives its fields, a model
is its provider or its fields, and a key is given in clear (the file holds its
SHA-256) with its tenant or its fields. Tables the short forms do not cover
(``[state]``, ``[[limits]]``, ``[auth.jwt]`` ...) are passed by name.
``start_all`` and ``stop_all`` take the servers ``tests.servers.spawn`` began.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flatgate.edge_translator.keys import hash_key
from tests.servers import Server, write_config

__all__ = [
    "QUIET",
    "Fields",
    "loopback",
    "stack_config",
    "start_all",
    "stop_all",
    "toml",
    "write_stack",
    "write_stub",
]

Fields = Mapping[str, Any]
# The [proxy] or [edge] of a stack that keeps no access log.
QUIET: Fields = {"access_log": False}


def loopback(port: int) -> str:
    """The URL of a server on ``port`` of this host."""
    return f"http://127.0.0.1:{port}"


def stack_config(
    *,
    proxy: Fields | None = None,
    stub: Fields | None = None,
    backends: Mapping[str, str | Fields] | None = None,
    routes: Mapping[str, str | Sequence[str] | Fields] | None = None,
    edge: Fields | None = None,
    models: Mapping[str, str | Fields] | None = None,
    keys: Mapping[str, str | Fields] | None = None,
    **tables: Fields | Sequence[Fields],
) -> dict[str, Any]:
    """The document: the tables given (``None`` leaves one out), in this order.

    ``backends``: name -> URL, or name -> fields (``url`` among them).
    ``routes``: model -> a backend's name, a list of names, or fields.
    ``models``: name -> provider, or name -> fields.
    ``keys``: the key in clear -> its tenant, or -> fields (``tenant`` among them).
    ``tables``: any other table (a mapping) or array of tables (a list).
    """
    doc: dict[str, Any] = {}
    if proxy is not None:
        doc["proxy"] = dict(proxy)
    if stub is not None:
        doc["stub"] = dict(stub)
    if backends:
        doc["backends"] = [{"name": n, **_fields(b, "url")} for n, b in backends.items()]
    if routes:
        doc["routes"] = [{"model": m, **_route(r)} for m, r in routes.items()]
    if edge is not None:
        doc["edge"] = dict(edge)
    if models:
        doc["models"] = [{"name": n, **_fields(m, "provider")} for n, m in models.items()]
    if keys:
        doc["keys"] = [_key(k, v) for k, v in keys.items()]
    for name, table in tables.items():
        doc[name] = dict(table) if isinstance(table, Mapping) else [dict(t) for t in table]
    return doc


def write_stack(path: Path, **config: Any) -> str:
    """``stack_config(**config)`` written to ``path``; the path, for ``--config``."""
    return write_config(path, toml(stack_config(**config)))


def write_stub(path: Path, **stub: Any) -> str:
    """A stub's config: ``stub`` its ``[stub]`` table, beside the route every
    config must hold (to a backend nothing serves)."""
    return write_stack(path, stub=stub, backends={"s": "http://127.0.0.1:9"}, routes={"*": "s"})


def _fields(value: str | Fields, short: str) -> dict[str, Any]:
    return {short: value} if isinstance(value, str) else dict(value)


def _route(value: str | Sequence[str] | Fields) -> dict[str, Any]:
    if isinstance(value, str):
        return {"backends": [value]}
    if isinstance(value, Mapping):
        return dict(value)
    return {"backends": list(value)}


def _key(key: str, value: str | Fields) -> dict[str, Any]:
    fields = _fields(value, "tenant")
    return {"tenant": fields.pop("tenant"), "sha256": hash_key(key), **fields}


# -- TOML ------------------------------------------------------------------------


def toml(doc: Fields) -> str:
    """``doc`` as TOML: each mapping a ``[table]`` (a mapping in it a
    ``[table.sub]``), each list of mappings an array of ``[[tables]]``."""
    out: list[str] = []
    for name, value in doc.items():
        if isinstance(value, Mapping):
            _table(out, name, value, array=False)
        elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            for row in value:
                _table(out, name, row, array=True)
        else:
            raise TypeError(f"{name}: a top-level value must be a table or a list of tables")
    return "\n".join(out)


def _table(out: list[str], name: str, fields: Fields, *, array: bool) -> None:
    out.append(f"[[{name}]]" if array else f"[{name}]")
    subtables = {k: v for k, v in fields.items() if isinstance(v, Mapping)}
    out += [f"{_key_name(k)} = {_value(v)}" for k, v in fields.items() if k not in subtables]
    out.append("")
    for key, sub in subtables.items():
        _table(out, f"{name}.{key}", sub, array=False)


def _key_name(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        # A JSON string is a TOML basic string, its non-ASCII left as it is.
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key_name(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r}")


# -- starting a stack ------------------------------------------------------------


def start_all(servers: Sequence[Server], wait: Callable[[Server], None] | None = None) -> None:
    """Wait for each to be healthy (``wait``: how); stop them all if one is not."""
    try:
        for s in servers:
            (wait or Server.wait_healthy)(s)
    except BaseException:
        stop_all(servers)
        raise


def stop_all(servers: Sequence[Server]) -> None:
    """Stop each, the last started first."""
    for s in reversed(servers):
        s.stop()
