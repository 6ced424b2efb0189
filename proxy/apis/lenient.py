"""A request read with the edge's Structs as a lenient server reads it: the
stub's switch, for every OpenAI API (Chat Completions' and the Responses
API's ``decode_served``).

A request's Structs forbid unknown fields where the edge must judge them
(``openai_chat.members`` judges them, naming each); OpenAI's server, which
the stub plays, ignores them. Rather than a second, lenient set of Structs, the
stub decodes with the same ones and, when the decode fails on a member of
no name, drops every such member (``without_unknown``) and decodes again:
a body with none (what the adapter writes, what the SDKs send) is read in
one pass. ``at_path`` gives the value a validation message points at and
the type the Structs read it as (its bounds, its allowed values, a tagged
union's tags), so that the stub can say what it refuses in its own words.

Both walk the JSON as decoded to Python values beside the Structs' type
information (``msgspec.inspect``), choosing a union's member by the value's
JSON kind and a tagged Struct by its tag. A member kept raw
(``msgspec.Raw``: a hosted tool, ``tool_choice``) is not looked into. Pure:
no I/O; the type information is read once per Struct.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec
from msgspec import inspect as mi

__all__ = ["Tags", "at_path", "without_unknown"]

_MISSING: Any = object()


class Tags(tuple[str, ...]):
    """The tags a tagged union allows (what ``at_path`` gives for its tag field)."""


@cache
def _info(cls: type[msgspec.Struct]) -> mi.Type:
    return mi.type_info(cls)


def _structs(t: mi.Type) -> list[mi.StructType]:
    while isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.StructType):
        return [t]
    if isinstance(t, mi.UnionType):
        return [s for m in t.types for s in _structs(m)]
    return []


def _member(value: Any, t: mi.Type) -> mi.Type | None:
    """The type of ``t`` that reads ``value`` (``None``: none does)."""
    while isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        for m in t.types:
            got = _member(value, m)
            if got is not None:
                return got
        return None
    if isinstance(t, mi.NoneType):
        return t if value is None else None
    if isinstance(value, dict):
        if isinstance(t, mi.StructType):
            tag_field = t.tag_field
            return t if tag_field is None or value.get(tag_field) == t.tag else None
        return t if isinstance(t, mi.DictType) else None
    if isinstance(value, list):
        return t if isinstance(t, mi.ListType | mi.VarTupleType | mi.RawType) else None
    if isinstance(t, mi.StructType | mi.DictType | mi.ListType | mi.VarTupleType):
        return None
    return t


def _drop(value: Any, t: mi.Type) -> None:
    got = _member(value, t)
    if isinstance(got, mi.StructType):
        fields = {f.encode_name: f.type for f in got.fields}
        for key in list(value):
            inner = fields.get(key, _MISSING)
            if inner is _MISSING:
                if key != got.tag_field:
                    del value[key]
            else:
                _drop(value[key], inner)
    elif isinstance(got, mi.ListType | mi.VarTupleType):
        for item in value:
            _drop(item, got.item_type)
    elif isinstance(got, mi.DictType):
        for item in value.values():
            _drop(item, got.value_type)


def without_unknown(body: bytes | memoryview, cls: type[msgspec.Struct]) -> bytes:
    """``body`` (JSON) without the members ``cls`` (and every Struct it holds)
    has no field for; raises ``msgspec.DecodeError`` if it is not JSON."""
    value = msgspec.json.decode(body)
    _drop(value, _info(cls))
    return msgspec.json.encode(value)


def at_path(
    body: bytes, cls: type[msgspec.Struct], path: tuple[str | int | None, ...]
) -> tuple[Any, mi.Type | Tags | None]:
    """The value at ``path`` (``plumbing.validation.Validation.path``) in
    ``body``, and the type ``cls`` reads it as: a ``Tags`` for a tagged
    union's tag field, ``None`` when the path leads nowhere ``cls`` knows
    (or through a dict's value, which msgspec names no key of)."""
    value: Any = msgspec.json.decode(body)
    t: mi.Type | None = _info(cls)
    for step in path:
        if t is None or step is None:
            return None, None
        if isinstance(step, int):
            got = _member(value, t)
            if not isinstance(got, mi.ListType | mi.VarTupleType) or step >= len(value):
                return None, None
            value, t = value[step], got.item_type
            continue
        structs = _structs(t)
        got = _member(value, t)
        if not isinstance(value, dict) or step not in value:
            return None, None
        if not isinstance(got, mi.StructType):
            if structs and step == structs[0].tag_field:
                return value[step], Tags(str(s.tag) for s in structs)
            return None, None
        value, t = value[step], next((f.type for f in got.fields if f.encode_name == step), None)
    return value, None if t is None else _member(value, t)
