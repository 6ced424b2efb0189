"""A request's members of no name, and where a field is, for the OpenAI
APIs' requests (Chat Completions here, and the Responses API, whose edge
shares these).

A request's nested Structs forbid unknown fields, so that a body with a
member of no name fails the edge's one pass. ``decode_scrubbed`` is the
second pass: it reads the body's members beside the Structs' type
information (``struct_info``, ``msgspec.inspect``), takes out those that
ask for nothing (null, empty) and refuses any other, naming its path
(``unrecognized``: ``messages.[1].content.[0].cache_control``), and decodes
what is left; it keeps every other member's bytes as the client wrote them.
(A server of the API, the stub, drops every such member instead:
``apis.lenient``.) ``param_from_error`` names a
field as OpenAI's ``param`` does, from msgspec's validation message.

Pure: no I/O. The decoders are built once at import.
"""

from __future__ import annotations

from typing import TypeAlias, TypeVar

import msgspec
import msgspec.inspect

from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.plumbing.validation import read_validation

__all__ = [
    "Fields",
    "decode_scrubbed",
    "param_from_error",
    "scrub",
    "scrub_members",
    "struct_info",
    "unrecognized",
]

R = TypeVar("R")
_encode = msgspec.json.encode
_UNKNOWN = "Object contains unknown field"

Fields = dict[str, msgspec.Raw]
_members = msgspec.json.Decoder(Fields).decode
_items = msgspec.json.Decoder(list[msgspec.Raw]).decode
_tag = msgspec.json.Decoder(str).decode
# Values that ask for nothing, whatever the key.
_EMPTY = frozenset({b"null", b"[]", b"{}", b'""'})
_Info: TypeAlias = msgspec.inspect.Type


def unrecognized(param: str) -> InvalidRequest:
    """The 400 for a member flatgate has no way to carry, naming it."""
    return InvalidRequest(
        f"Unrecognized request argument supplied: {param} (flatgate cannot carry it; "
        "leave it out, or send null)",
        param=param,
    )


def _struct_of(raw: bytes, info: _Info) -> msgspec.inspect.StructType | None:
    """The struct of ``info`` (a struct, or a union holding structs) that the
    object ``raw`` decodes as: by its tag when tagged."""
    if isinstance(info, msgspec.inspect.StructType):
        return info
    if not isinstance(info, msgspec.inspect.UnionType):
        return None
    structs = [t for t in info.types if isinstance(t, msgspec.inspect.StructType)]
    if len(structs) == 1 or not structs or structs[0].tag_field is None:
        return structs[0] if structs else None
    try:
        tag = _tag(_members(raw)[structs[0].tag_field])
    except (KeyError, msgspec.ValidationError, msgspec.DecodeError):
        return None
    return next((t for t in structs if t.tag == tag), None)


def _list_of(info: _Info) -> msgspec.inspect.ListType | None:
    if isinstance(info, msgspec.inspect.ListType):
        return info
    if isinstance(info, msgspec.inspect.UnionType):
        return next((t for t in info.types if isinstance(t, msgspec.inspect.ListType)), None)
    return None


def struct_info(cls: type[msgspec.Struct]) -> msgspec.inspect.StructType:
    """``cls``'s type information, for ``scrub_members``."""
    info = msgspec.inspect.type_info(cls)
    if not isinstance(info, msgspec.inspect.StructType):
        raise TypeError(f"{cls.__name__} is not a struct")
    return info


def scrub(raw: msgspec.Raw, info: _Info, where: str) -> msgspec.Raw | None:
    """``raw`` (JSON of type ``info``, at ``where``) with the members that
    ask for nothing (null, empty) taken out of its structs that forbid unknown
    fields; ``None`` when nothing was. Any other unknown member is refused
    naming it (``unrecognized``). JSON of
    another shape is left as it is: the strict decode says what is wrong
    with it."""
    data = bytes(raw).lstrip()
    if data[:1] == b"[":
        of = _list_of(info)
        if of is None:
            return None
        try:
            items = _items(data)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        changed = False
        for i, item in enumerate(items):
            new = scrub(item, of.item_type, f"{where}.[{i}]")
            if new is not None:
                items[i] = new
                changed = True
        return msgspec.Raw(_encode(items)) if changed else None
    if data[:1] != b"{":
        return None
    struct = _struct_of(data, info)
    if struct is None:
        return None
    try:
        members = _members(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    changed = scrub_members(members, struct, where)
    return msgspec.Raw(_encode(members)) if changed else None


def scrub_members(members: Fields, struct: msgspec.inspect.StructType, where: str) -> bool:
    """``scrub`` over an object's ``members`` (changed in place), read as
    ``struct``; whether any changed. Its own unknown members are judged only
    if it forbids them (a lenient struct's are the caller's)."""
    fields = {f.encode_name: f for f in struct.fields}
    changed = False
    for key in list(members):
        at = f"{where}.{key}" if where else key
        field = fields.get(key)
        if field is None:
            if key == struct.tag_field or not struct.forbid_unknown_fields:
                continue
            if bytes(members[key]).strip() not in _EMPTY:
                raise unrecognized(at)
            del members[key]
            changed = True
            continue
        new = scrub(members[key], field.type, at)
        if new is not None:
            members[key] = new
            changed = True
    return changed


def param_from_error(message: str) -> str | None:
    """OpenAI's ``param`` for a msgspec validation message.

    msgspec names the JSON path (``$.messages[0].role``); OpenAI writes it as
    ``messages.[0].role``. A missing field is named by the field itself; a
    dict value's path has no key in it (``$.metadata[...]``): the dict is named.
    """
    v = read_validation(message)
    return v.where(index=".[{}]", value="", field=v.missing) or None


def decode_scrubbed(
    decoder: msgspec.json.Decoder[R], struct: msgspec.inspect.StructType, body: bytes | memoryview
) -> tuple[R, Fields]:
    """A body with a member of no name in it, read by ``decoder`` (the
    lenient decoder of the request ``struct`` describes): the request (its
    nested members that ask for nothing taken out, any other refused naming
    it: ``scrub_members``) and its top-level fields' JSON. The Chat
    Completions and Responses edges' second pass."""
    fields = _members(body)
    try:
        return decoder.decode(body), fields
    except msgspec.ValidationError as exc:
        if not str(exc).startswith(_UNKNOWN):
            raise
    members = dict(fields)
    scrub_members(members, struct, "")
    return decoder.decode(_encode(members)), fields
