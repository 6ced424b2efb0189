"""docs/configuration.md's reference against the config document: every key
of ``proxy.document``'s tree (a protocol's own ``[[backends]]`` keys from its
folder) has a row, every row is a key, and a row shows the key's default
unless the key has none (required, or absent by default) or its comment says
the value is an example (``EXAMPLES``)."""

from __future__ import annotations

import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.document.root import GatewayDocument

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# Rows whose value is an example, not the default, as their comment says.
EXAMPLES = frozenset({"auth.jwt.jwks_url"})
# An alternative a row's comment names ("or jwks_file = ..."): a key shown
# without a value.
_ALTERNATIVE = re.compile(r"# .*?\bor (\w+) =")
_SHOWN_ONLY = object()


def _struct_of(kind: Any) -> type[msgspec.Struct] | None:
    """The Struct a field holds (itself, a list or tuple of it, or it or None)."""
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return kind
    if typing.get_origin(kind) in (list, tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(kind):
            found = _struct_of(arg)
            if found is not None:
                return found
    return None


def fields() -> dict[str, msgspec.structs.FieldInfo]:
    """Every key of the file, ``section.key`` (``auth.jwt.issuer``), with its field."""
    out: dict[str, msgspec.structs.FieldInfo] = {}

    def walk(kind: type[msgspec.Struct], where: str) -> None:
        for f in msgspec.structs.fields(kind):
            inner = _struct_of(f.type)
            if inner is not None and where:
                walk(inner, f"{where}.{f.name}")
            elif inner is not None:
                walk(inner, f.name)
            else:
                out[f"{where}.{f.name}"] = f

    walk(GatewayDocument, "")
    for protocol in PROTOCOLS.values():
        for f in msgspec.structs.fields(protocol.config):
            out.setdefault(f"backends.{f.name}", f)
    return out


def rows() -> list[tuple[str, Any]]:
    """Each ``section.key = value`` row of the page's TOML blocks, in order
    (a commented-out row, a protocol's own key, too)."""
    found: list[tuple[str, Any]] = []
    text = PAGE.read_text()
    for block in re.findall(r"^```toml\n(.*?)^```", text, re.M | re.S):
        section = ""
        for line in block.splitlines():
            header = re.match(r"\[\[?([\w.]+)\]\]?", line)
            if header:
                section = header.group(1)
                continue
            row = re.match(r"(?:#\s*)?(\w+\s*=.*)", line.strip())
            if row and section:
                parsed = tomllib.loads(row.group(1))
                ((key, value),) = parsed.items()
                found.append((f"{section}.{key}", value))
            found += [(f"{section}.{k}", _SHOWN_ONLY) for k in _ALTERNATIVE.findall(line)]
    return found


def _default(f: msgspec.structs.FieldInfo) -> Any:
    if f.default_factory is not msgspec.NODEFAULT:
        return f.default_factory()
    return f.default


def _same(shown: Any, default: Any) -> bool:
    builtin = msgspec.to_builtins(default)
    if isinstance(builtin, (list, tuple)):
        return list(shown) == list(builtin)
    return bool(shown == builtin)


def test_every_key_has_a_row_and_every_row_is_a_key() -> None:
    keys = fields()
    shown = {key for key, _ in rows()}
    assert sorted(set(keys) - shown) == []
    assert sorted(shown - set(keys)) == []


@pytest.mark.parametrize(("key", "value"), rows(), ids=lambda x: x if isinstance(x, str) else "")
def test_a_row_shows_its_default(key: str, value: Any) -> None:
    f = fields()[key]
    default = _default(f)
    if f.required or default is None or key in EXAMPLES or value is _SHOWN_ONLY:
        return  # an example: the key has no default to show
    assert _same(value, default), f"{key}: the page shows {value!r}, the default is {default!r}"
